"""Host cost of one emulated collective, the fast launch against the plain one and against
c10d's NCCL all-reduce (issue 20). Needs torch with CUDA and Triton; one GPU.

What a call costs the host is what an eager step of a small shard pays per collective
(at emulated tp 8 the step is host-bound: reports/emulated-h200-table-2026-12-02/README.md). Timed here, per
call, on the host only (``time.perf_counter`` around N async launches + their waits;
the GPU is synchronised between repeats and never the bound: the kernels are small):

* ``plain``: ``EmulatedComm(fast=False)``: a plan per call, Triton's JIT launch under
  ``torch.cuda.stream``, ``wait_stream``, a new Event per call (the code before this
  change);
* ``fast``: ``EmulatedComm()``: the prepared launch through Triton's compiled kernel on
  the comm stream's handle, ring events;
* ``c10d_nccl_world1``: ``dist.all_reduce(t, async_op=True).wait()`` in a one-rank NCCL
  group (the host path of c10d and ProcessGroupNCCL; a one-rank group is what one GPU
  allows, so NCCL's own kernel may do less than a real ring's, the host path is the same).

Also, for the fast path to be trusted: its outputs equal the plain path's (all_gather,
reduce_scatter), its kernels last at least the modelled time (profiler), and a CUDA
graph captured with it replays. Writes $OUT/emulate_host.json (or --out).

    python benchmarks/bench_emulate_host.py --out "$OUT/emulate_host.json"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_emulate import kernel_durations


def per_call_us(fn, *, n: int, reps: int) -> dict:
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return {"median_us": statistics.median(samples), "min_us": min(samples),
            "max_us": max(samples), "n_calls": n, "reps": reps}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "emulate_host.json"))
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--tp", type=int, default=8)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    import triton

    from domino_prof.reference_model.emulate import EmulatedComm

    dev = torch.device("cuda", 0)
    R = args.tp
    prof = f"h200-nvlink-tp{R}"
    res: dict = {"torch": torch.__version__, "triton": triton.__version__,
                 "gpu": torch.cuda.get_device_name(dev), "tp": R, "profile": prof}  # fmt: skip
    fast = EmulatedComm(prof, size=R, device=dev)
    plain = EmulatedComm(prof, size=R, device=dev, fast=False)
    # llama3-8b at tp 8, one micro-batch of seq 4096: the all-reduce is [4096, 4096] bf16;
    # host cost does not depend on the size, the GPU time does: a small tensor keeps the
    # GPU ahead of the host so the timing is the host's
    small = torch.randn(64 * 1024, device=dev, dtype=torch.bfloat16)

    def ar(comm, t):
        return lambda: comm.all_reduce(t, async_op=True).wait()

    host = {}
    order = ["plain", "fast", "plain", "fast"]  # ABAB: drift shows as a plain/plain spread
    runs: dict[str, list] = {"plain": [], "fast": []}
    for name in order:
        runs[name].append(per_call_us(ar(fast if name == "fast" else plain, small),
                                      n=args.calls, reps=args.reps))  # fmt: skip
    for name, rs in runs.items():
        host[name] = {"median_us": statistics.median(r["median_us"] for r in rs),
                      "runs": rs}  # fmt: skip
    # sync all_reduce (async_op=False), as tp's schedule issues it
    host["fast_sync"] = per_call_us(lambda: fast.all_reduce(small, async_op=False),
                                    n=args.calls, reps=args.reps)  # fmt: skip
    host["plain_sync"] = per_call_us(lambda: plain.all_reduce(small, async_op=False),
                                     n=args.calls, reps=args.reps)  # fmt: skip
    out_g = torch.empty(R * small.numel(), device=dev, dtype=small.dtype)
    host["fast_all_gather"] = per_call_us(
        lambda: fast.all_gather(out_g, small, async_op=True).wait(), n=args.calls, reps=args.reps)
    try:
        store = dist.HashStore()
        dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=dev)
        host["c10d_nccl_world1"] = per_call_us(
            lambda: dist.all_reduce(small, async_op=True).wait(), n=args.calls, reps=args.reps)
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 — a missing reference is reported, not fatal
        host["c10d_nccl_world1"] = {"error": f"{type(e).__name__}: {e}"}
    res["host_per_call"] = host
    res["launch_path"] = fast.launch_path
    res["refused"] = fast.refused
    res["speedup_plain_over_fast"] = host["plain"]["median_us"] / host["fast"]["median_us"]

    # -- the fast path's outputs and durations equal the plain path's
    checks = {}
    t = torch.randn(R * 4096, device=dev, dtype=torch.bfloat16)
    for coll in ("all_gather", "reduce_scatter"):
        outs = []
        for comm in (fast, plain):
            if coll == "all_gather":
                o = torch.full((R * t.numel(),), -1.0, device=dev, dtype=t.dtype)
                comm.all_gather(o, t, async_op=False)
            else:
                o = torch.full((t.numel() // R,), -1.0, device=dev, dtype=t.dtype)
                comm.reduce_scatter(o, t, async_op=False)
            torch.cuda.synchronize()
            outs.append(o)
        checks[f"{coll}_equal"] = bool(torch.equal(outs[0], outs[1]))
    big = torch.randn(4096 * 4096, device=dev, dtype=torch.bfloat16)
    key = ("all_reduce", big.numel(), big.numel(), big.dtype, big.data_ptr() % 16, big.data_ptr() % 16)
    fast.all_reduce(big, async_op=False)
    model_us = fast._prepared[key].launch.dur_ns / 1e3
    for name, comm in (("fast", fast), ("plain", plain)):
        d = kernel_durations(lambda comm=comm: comm.all_reduce(big, async_op=False), 20)
        checks[f"{name}_kernel_us"] = {"n": len(d), "min": min(d), "median": statistics.median(d),
                                       "max": max(d)}  # fmt: skip
    checks["model_us_16.8M_bf16"] = model_us
    checks["fast_never_shorter_than_model"] = checks["fast_kernel_us"]["min"] >= model_us * 0.999
    # -- a CUDA graph captured with the fast path replays
    g = torch.cuda.CUDAGraph()
    x = torch.randn(4096 * 4096, device=dev, dtype=torch.bfloat16)
    s = torch.cuda.Stream(dev)
    s.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(s):
        for _ in range(2):
            y = x * 2
            fast.all_reduce(y, async_op=True).wait()
    torch.cuda.current_stream(dev).wait_stream(s)
    with torch.cuda.graph(g):
        y = x * 2
        w = fast.all_reduce(y, async_op=True)
        z = y + 1
        w.wait()
    d = kernel_durations(g.replay, 5)
    checks["graph_replay_kernels"] = len(d)
    checks["graph_replay_kernel_min_us"] = min(d) if d else None
    checks["graph_result_ok"] = bool(torch.equal(z, x * 2 + 1))
    res["checks"] = checks
    res["launch_path_after"] = fast.launch_path
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != "host_per_call"}, indent=1))
    print("host per call (us):", {k: round(v.get("median_us", float("nan")), 1)
                                  for k, v in host.items() if "median_us" in v})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
