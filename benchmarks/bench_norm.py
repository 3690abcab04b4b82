"""The residual add and norm: aten's add, ``_fused_rms_norm`` and copy into a joint
buffer's rows, against norm_kernel.py's one Triton launch (``units.set_norm``), side by
side. What reports/emulated-h100-2026-12-08 (call 2) measured before the kernel became
the CUDA default.

    python benchmarks/bench_norm.py                       # CUDA: llama3-3b's d = 3072
    python benchmarks/bench_norm.py --rows 512,2048 --dim 4096 --steps tp,domino
    TRITON_INTERPRET=1 python benchmarks/bench_norm.py --device cpu   # a dry run

Printed, per [T, d] block: microseconds per call of each (CUDA: ``--calls`` calls captured
in one CUDA graph and replayed, so the host's issue time is out; CPU: eager, under
Triton's interpreter, which times nothing useful) and the ratio kernel / aten. Then, per
schedule, one training step of the model cut to ``--layers`` layers (tp 1, mbs 2) with
each: the losses and the largest gradient difference relative to the gradient's largest
element (bf16 on CUDA: the norm's last bit differs in places, and the step rounds
differently from there; fp32 on CPU: fp32 rounding). The self-check's verdict first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def time_blocks(torch, units, device, rows, dim: int, calls: int) -> dict:
    """{T: {"aten": us, "triton": us}} for add + norm (+ the copy into rows of a buffer)."""
    out = {}
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    for T in rows:
        g = torch.Generator(device=device).manual_seed(T)
        h, y = (torch.randn(T, dim, device=device, generator=g).to(dtype) for _ in range(2))
        w = torch.randn(dim, device=device, generator=g).to(dtype)
        buf = torch.empty(2 * T, dim, device=device, dtype=dtype)
        row = {}
        for kind in ("aten", "triton"):
            units.set_norm(kind)
            for _ in range(3):  # compile, allocator
                units.add_norm(h, y, w, 1e-5, out=buf[T:])
            if device.type == "cuda":
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for _ in range(calls):
                        units.add_norm(h, y, w, 1e-5, out=buf[T:])
                graph.replay()
                torch.cuda.synchronize()
                t0, t1 = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                t0.record()
                for _ in range(4):
                    graph.replay()
                t1.record()
                torch.cuda.synchronize()
                row[kind] = t0.elapsed_time(t1) * 1e3 / (4 * calls)
            else:
                import time

                t = time.perf_counter()
                for _ in range(calls):
                    units.add_norm(h, y, w, 1e-5, out=buf[T:])
                row[kind] = (time.perf_counter() - t) * 1e6 / calls
        out[T] = row
    return out


def step_check(torch, units, device, model: str, layers: int, seq: int, schedules) -> dict:
    """{schedule: {"loss_aten", "loss_triton", "grad_max_rel"}}: one step each way of the
    model cut to ``layers`` layers, tp 1 (one rank: no collective), mbs 2."""
    from domino_prof.reference_model.comm import ProcessGroupComm
    from domino_prof.reference_model.config import preset
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    cfg = preset(model, layers=layers)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    inp, tgt = batch(cfg, mbs=2, seq=seq, seed=1, device=device)
    out = {}
    for sch in schedules:
        comm = ProcessGroupComm()
        net = shard_model(cfg, comm, seed=1, device=device, dtype=dtype)
        runner = StepRunner(net, comm, schedule=sch, splits=2 if sch.startswith("domino") else 1)
        res = {}
        for kind in ("aten", "triton"):
            units.set_norm(kind)
            for p in net.parameters():
                p.grad = None
            loss = float(runner.step(inp, tgt))
            res[kind] = (loss, {n: p.grad.float().clone() for n, p in net.named_parameters()})
        worst = max(float((res["triton"][1][n] - g).abs().max() / g.abs().max().clamp_min(1e-12))
                    for n, g in res["aten"][1].items())  # fmt: skip
        out[sch] = {"loss_aten": res["aten"][0], "loss_triton": res["triton"][0],
                    "grad_max_rel": worst}  # fmt: skip
        del net, runner
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda, or cpu: a dry run (TRITON_INTERPRET=1)")
    ap.add_argument("--rows", default="512,1024,2048,4096", help="T of each [T, d] block")
    ap.add_argument("--dim", type=int, default=3072, help="d (llama3-3b's by default)")
    ap.add_argument("--calls", type=int, default=50, help="calls per timing")
    ap.add_argument("--model", default="llama3-3b", help="the step check's preset")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", default="tp,domino,sp,domino-sp", help="schedules ('' skips)")
    ap.add_argument("--json", default="", help="write the figures here")
    a = ap.parse_args(argv)

    import torch

    from domino_prof.reference_model import norm_kernel as NK
    from domino_prof.reference_model import units

    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("bench_norm: no CUDA device here; --device cpu runs a dry run under "
              "TRITON_INTERPRET=1", file=sys.stderr)  # fmt: skip
        return 2
    if not NK.available():
        print("bench_norm: Triton does not import here: nothing to compare", file=sys.stderr)
        return 2
    if not cuda and os.environ.get("TRITON_INTERPRET") != "1":
        print("bench_norm: --device cpu needs TRITON_INTERPRET=1 (Triton's interpreter)",
              file=sys.stderr)  # fmt: skip
        return 2
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    check = NK.self_check(device, None if cuda else torch.float32)
    name = torch.cuda.get_device_name(device) if cuda else "CPU (interpreted: no timing)"
    print(f"{name}: the norm kernel's self-check: {check or 'passed'}")
    try:
        blocks = time_blocks(torch, units, device, [int(r) for r in a.rows.split(",") if r],
                             a.dim, a.calls)  # fmt: skip
        for T, row in blocks.items():
            print(f"  add + norm + copy [{T}, {a.dim}]: aten {row['aten']:8.2f} us, kernel "
                  f"{row['triton']:8.2f} us, kernel / aten {row['triton'] / row['aten']:.3f}")
        steps = step_check(torch, units, device, a.model, a.layers, a.seq,
                           [s for s in a.steps.split(",") if s])  # fmt: skip
        for sch, r in steps.items():
            print(f"  {sch:9s} step: loss aten {r['loss_aten']:.6f}, kernel "
                  f"{r['loss_triton']:.6f}; largest gradient difference "
                  f"{r['grad_max_rel']:.2e} of the gradient's largest element")
    finally:
        units.set_norm(None)
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"device": name, "dim": a.dim, "self_check": check, "blocks_us": blocks,
                       "steps": steps}, fh, separators=(",", ":"))  # fmt: skip
        os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
