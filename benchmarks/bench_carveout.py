"""What ``--sm-carveout`` does to the headline step's GEMMs, alone and beside the emulated
all-reduce (issue 34; reference_model/carveout.py). Needs torch with CUDA.

Per GEMM shape of rank 0's shard of llama3-3b at TP 8 (one micro-batch of 4096 tokens
and the whole batch of 8192: qkv, wo, w13, w2 forward and the input gradients of w13 and
w2, as ``x @ W^T`` / ``dy @ W``, and the weight gradients of w13 and w2, ``dyᵀ @ x``) and per BLAS setting (``cublas``: torch's default path;
``cublaslt``: the Lt path, no carveout; ``lt-carve N``: the Lt path with torch's SM
carveout of N), the GEMM's time

* ``alone``: repetitions, one at a time (the GPU idle between them);
* ``beside``: each repetition launched right after the step's all-reduce ([4096, 3072]
  bf16) of the emulated profile started on its own stream (the comm kernel first, the
  GEMM ~0 µs later: the order Domino's schedule issues them), so the GEMM runs beside it;
  the all-reduce's own time is kept too (what the GEMM takes from the collective).

``--timing kernel`` (the default since 2026-12-03 evening): the GEMM kernels' own
durations, from a profiler trace of the repetitions (median over them), and for
``beside`` the share of each GEMM kernel's time inside the comm kernel's span (1.0: it
ran beside it throughout). ``--timing events``: CUDA events around each repetition's
launch, the first method: on an idle GPU that span includes the host's dispatch of the
GEMM (for the cuBLASLt path its heuristic query too), tens of µs at these sizes, so
its "alone" times and the ratios of the Lt path were biased up (the committed
reports/emulated-h200-2026-12-03b/bench_carveout.json is of that method).

And, profiled once per setting alone, the kernel's name and grid (Kineto's args): does
the carveout change the grid? Prints a table of the ratios to the cublas alone time;
``--out DIR`` writes ``bench_carveout.json``. Every comm figure is of the emulated
collective (docs/EMULATION.md), not NCCL.

    python3 benchmarks/bench_carveout.py --out DIR [--reps 30] [--carveouts 24,16,8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import kernel_events


def shapes(tokens: int) -> dict[str, tuple[tuple[int, int], tuple[int, int], bool]]:
    """name -> (x shape, W shape, transpose W): llama3-3b at TP 8 (dim 3072, ffn 8192,
    24 heads / 8 kv heads of 128: a rank holds 3 + 2 x 1 heads)."""
    d, f, qkv = 3072, 8192 // 8, (3 + 2) * 128
    return {
        "qkv": ((tokens, d), (qkv, d), True),
        "wo": ((tokens, 3 * 128), (d, 3 * 128), True),
        "w13": ((tokens, d), (2 * f, d), True),
        "w2": ((tokens, f), (d, f), True),
        "w13.dgrad": ((tokens, 2 * f), (2 * f, d), False),
        "w2.dgrad": ((tokens, d), (d, f), False),
        # the weight gradients dW = dyᵀ x over every micro-batch's rows (W(u) in backward)
        "w13.wgrad": ((2 * f, tokens), (tokens, d), False),
        "w2.wgrad": ((d, tokens), (tokens, f), False),
    }


def main() -> int:
    import torch

    from domino_prof.reference_model.carveout import TorchBlas
    from domino_prof.reference_model.emulate import EmulatedComm

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--carveouts", default="24,16,8")
    ap.add_argument("--profile", default="h200-nvlink-tp8")
    ap.add_argument("--timing", choices=("kernel", "events"), default="kernel")
    ap.add_argument("--tokens", default="4096,8192")
    ap.add_argument(
        "--triton",
        action="store_true",
        help="also inductor's Triton GEMM (max-autotune, Triton backend only)",
    )
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    blas = TorchBlas()
    settings = [("cublas", None, None), ("cublaslt", "cublaslt", None)]
    settings += [(f"lt-carve{n}", "cublaslt", int(n)) for n in a.carveouts.split(",") if n]
    if a.triton:  # inductor's Triton GEMM templates (max-autotune, Triton only)
        settings.append(("triton", "triton", None))
    comm = EmulatedComm(a.profile, size=8, device=dev)
    buf = torch.randn(4096, 3072, device=dev, dtype=torch.bfloat16)
    cs = comm.stream
    res: dict = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
                 "profile": a.profile, "emulated": True, "kernel": comm.kernel_facts(),
                 "sms": torch.cuda.get_device_properties(dev).multi_processor_count,
                 "timing": a.timing, "rows": []}  # fmt: skip
    comm_names = {k["name"] for k in comm.kernel_facts()} | {"emulated_allreduce_paced"}

    def timed(fn, beside: bool):
        ts, cts = [], []
        for _ in range(a.reps):
            torch.cuda.synchronize()
            c0 = torch.cuda.Event(enable_timing=True)
            c1 = torch.cuda.Event(enable_timing=True)
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            if beside:  # the comm stream waits for this one (idle), then the kernel
                c0.record(cs)
                work = comm.all_reduce(buf, async_op=True)
                c1.record(cs)
            e0.record()
            fn()
            e1.record()
            if beside:
                work.wait()
            torch.cuda.synchronize()
            ts.append(e0.elapsed_time(e1) * 1e3)
            if beside:
                cts.append(c0.elapsed_time(c1) * 1e3)
        return statistics.median(ts), (statistics.median(cts) if cts else None)

    def kernel_timed(fn, beside: bool):
        """(GEMM kernel µs, comm kernel µs, share of the GEMM inside the comm's span):
        medians over the repetitions, from a profiler trace (no host time in them)."""
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(a.reps):
                torch.cuda.synchronize()
                work = comm.all_reduce(buf, async_op=True) if beside else None
                fn()
                if work is not None:
                    work.wait()
                torch.cuda.synchronize()
        ev = kernel_events(p)
        comms = [e for e in ev if _is_comm(e["name"], comm_names)]
        gemms = [e for e in ev if not _is_comm(e["name"], comm_names)]
        per = _per_rep(gemms, a.reps)
        inside = []
        for g in gemms:
            lo, hi = g["ts"], g["ts"] + g["dur"]
            cov = sum(max(0.0, min(hi, c["ts"] + c["dur"]) - max(lo, c["ts"])) for c in comms)
            inside.append(cov / g["dur"] if g["dur"] else 0.0)
        c_us = statistics.median(c["dur"] for c in comms) if comms else None
        return statistics.median(per), c_us, (statistics.median(inside) if beside else None)

    for tokens in [int(t) for t in a.tokens.split(",")]:
        for name, (xs, ws, tr) in shapes(tokens).items():
            x = torch.randn(*xs, device=dev, dtype=torch.bfloat16)
            w = torch.randn(*ws, device=dev, dtype=torch.bfloat16)

            def mm(x, w, tr=tr):
                return x @ (w.t() if tr else w)

            base = None
            for label, lib, sms in settings:
                blas.set(sms)  # None: torch's own library, no carveout
                if lib == "cublaslt" and sms is None:  # the Lt path alone
                    torch.backends.cuda.preferred_blas_library("cublaslt")
                call = _triton(mm) if lib == "triton" else mm

                def fn(x=x, w=w, call=call):
                    return call(x, w)

                try:
                    for _ in range(3):
                        fn()
                except Exception as e:  # noqa: BLE001 - a probe: record and go on
                    res["rows"].append({"tokens": tokens, "shape": name, "setting": label,
                                        "error": f"{type(e).__name__}: {str(e)[:200]}"})  # fmt: skip
                    print(f"{tokens:5d} {name:10s} {label:11s} failed: {e}", flush=True)
                    continue
                share = None
                if a.timing == "kernel":
                    alone, _, _ = kernel_timed(fn, False)
                    beside, comm_us, share = kernel_timed(fn, True)
                else:
                    alone, _ = timed(fn, False)
                    beside, comm_us = timed(fn, True)
                grid, kname = _kernel(fn)
                base = base or alone
                row = {
                    "tokens": tokens,
                    "shape": name,
                    "setting": label,
                    "alone_us": alone,
                    "beside_us": beside,
                    "comm_us": comm_us,
                    "kernel": kname,
                    "grid": grid,
                    "alone_vs_cublas": alone / base,
                    "beside_vs_cublas_alone": beside / base,
                    "beside_share_inside_comm": share,
                }
                res["rows"].append(row)  # fmt: skip
                print(f"{tokens:5d} {name:10s} {label:11s} alone {alone:7.1f} us beside "
                      f"{beside:7.1f} us ({beside / base:4.2f}x cublas alone) comm "
                      f"{comm_us:6.1f} us  grid {grid} {kname[:40]}", flush=True)  # fmt: skip
            blas.set(None)
    tmp = out / "bench_carveout.json.tmp"
    tmp.write_text(json.dumps(res, indent=1))
    os.replace(tmp, out / "bench_carveout.json")
    return 0


def _triton(fn):
    """``fn`` compiled by inductor with max-autotune over its Triton GEMM templates only
    (non-persistent: a grid of one CTA per output tile, no thread-block clusters)."""
    import torch
    import torch._inductor.config as ic

    ic.max_autotune_gemm_backends = "TRITON"
    return torch.compile(fn, mode="max-autotune-no-cudagraphs", dynamic=False)


def _is_comm(name: str, comm_names: set) -> bool:
    return name in comm_names or name.startswith("emulated_")


def _per_rep(kernels: list[dict], reps: int) -> list[float]:
    """Per repetition µs: each kernel's duration when there is one a repetition, else
    the repetitions' mean (a GEMM of several kernels: their total / reps)."""
    if len(kernels) == reps:
        return [k["dur"] for k in kernels]
    return [sum(k["dur"] for k in kernels) / reps]


def _kernel(fn) -> tuple[list | None, str]:
    """The longest kernel of one profiled call: (grid, name)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn()
        torch.cuda.synchronize()
    ev = kernel_events(p)
    if not ev:
        return None, "?"
    k = max(ev, key=lambda e: e.get("dur", 0))
    return k.get("args", {}).get("grid"), k["name"]


if __name__ == "__main__":
    raise SystemExit(main())
