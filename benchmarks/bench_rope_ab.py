"""The rotary embedding's kernel, A/B in one process: aten's complex multiply against
rope_kernel.py's Triton launch (``units.set_rope``), eager steps of the same runners
alternating step by step (ABAB), so the host's speed, which on the lent GPU hosts
changes about 2x within a run (reports/emulated-h100-2026-12-07d), is the same for the
two halves of each pair.

    python benchmarks/bench_rope_ab.py                       # headline, emulated TP 8
    python benchmarks/bench_rope_ab.py --modes domino-sp --pairs 30 --json out.json

Per mode: the median over pairs of each half's wall time (synchronised), host issue
time and the main thread's CPU time, and the per-pair ratios triton / aten (min /
median / max) of each; the aten ops one step dispatches (TorchDispatchMode, one step
per kind); and the two kinds' rotations compared on the mode's own shapes (largest
difference, in units of the output dtype's epsilon). Every TP >= 2 figure is of
emulated collectives (``--comm emulate``): the header says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _headline import (  # noqa: E402
    abab,
    add_shape_args,
    device_name,
    headline_device,
    ratio_rows,
    run_config,
    shape_json,
    shape_text,
)


def _ops(run) -> int:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    with Count() as c:
        run()
    return c.n


def _rope_check(torch, units, device, dims, seq: int, theta: float) -> dict:
    """Both kinds on one [1, S, heads, D] bf16 input with the runner's table: the largest
    difference, in bf16 epsilons of the output's magnitude (1 ulp: one rounding apart)."""
    from domino_prof.reference_model.model import rope_tables

    cs = units.rope_table(rope_tables(dims.head_dim, seq, theta, device))
    g = torch.Generator(device=device).manual_seed(0)
    n = dims.heads + 2 * dims.kv_heads
    x = torch.randn(1, seq, n, dims.head_dim, device=device, generator=g).bfloat16()
    xs = x[:, :, : dims.heads + dims.kv_heads]
    out = {}
    for kind in ("aten", "triton"):
        units.set_rope(kind)
        out[kind] = units.rope_rotate(xs, cs).float()
    units.set_rope("auto")
    diff = (out["aten"] - out["triton"]).abs()
    ulp = out["aten"].abs().clamp_min(1e-30) * 2.0**-7
    return {"max_abs": float(diff.max()), "max_ulps": float((diff / ulp).max()),
            "equal_frac": float((diff == 0).float().mean())}  # fmt: skip


def _kernel_us(torch, units, device, shapes: str, reps: int = 50) -> dict:
    """µs per rotation, aten against Triton, of [B, S, H, D=128] bf16 heads sliced out of
    a qkv-like buffer (H + H/4 more heads beside them), CUDA events around ``reps``
    back-to-back calls after 5 of warm-up. Device time only where the host issues a call
    faster than the kernel runs: on the lent H100 host it did not (36-42 µs a Triton call
    at every shape, reports/emulated-h100-2026-12-07f), and then this times the issue."""
    from domino_prof.reference_model.model import rope_tables

    out = {}
    for spec in shapes.split(","):
        B, S, H = (int(v) for v in spec.split("x"))
        cs = units.rope_table(rope_tables(128, S, 500000.0, device))
        buf = torch.randn(B, S, H + max(1, H // 4), 128, device=device).bfloat16()
        x = buf[:, :, :H]
        row = {}
        for kind in ("aten", "triton"):
            units.set_rope(kind)
            for _ in range(5):
                units.rope_rotate(x, cs)
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            for _ in range(reps):
                units.rope_rotate(x, cs)
            t1.record()
            torch.cuda.synchronize()
            row[kind] = t0.elapsed_time(t1) * 1e3 / reps
        units.set_rope("auto")
        out[spec] = row
        print(f"rotation {spec}x128 bf16: aten {row['aten']:.1f} us, triton {row['triton']:.1f} us")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_shape_args(ap)  # --device cpu: a dry run under TRITON_INTERPRET=1
    ap.add_argument("--modes", default="domino,domino-sp")
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--json", default="")
    ap.add_argument(
        "--kernel-shapes",
        default="2x1024x32,1x1024x32,1x4096x4,2x4096x4",
        help="BxSxH of the rotation-alone timings (CUDA; '' skips them)",
    )
    a = ap.parse_args(argv)

    import torch

    from domino_prof.reference_model import units
    from domino_prof.reference_model.train import ModeRun

    device = headline_device(a)
    cuda = device.type == "cuda"

    cfg = run_config(a, tuple(a.modes.split(",")))
    units.attention_kernel(device, torch.bfloat16)
    units.set_rope("triton")
    if units.rope_kernel(device) != "triton":
        print("the Triton rotation does not run here (no Triton?): nothing to compare")
        return 1
    print(f"{shape_text(cfg)}, eager; {device_name(device)}")
    kernel = _kernel_us(torch, units, device, a.kernel_shapes) if cuda and a.kernel_shapes else {}
    report = {"kernel_us": kernel, "config": shape_json(cfg), "device": device_name(device),
              "modes": {}}  # fmt: skip
    for mode in cfg.modes:
        mr = ModeRun(cfg, mode, device=device)
        kinds = ("aten", "triton")
        for kind in kinds:  # warm-up: the Triton kernel's compile, the allocator, cuDNN plans
            units.set_rope(kind)
            for _ in range(2):
                mr.one_step()
        res = abab(mr, {k: lambda k=k: units.set_rope(k) for k in kinds}, a.pairs)
        ops = {}
        for kind in kinds:
            units.set_rope(kind)
            ops[kind] = _ops(mr.one_step)
        units.set_rope("auto")
        check = _rope_check(torch, units, device, mr.runner.dims, cfg.seq, cfg.model.rope_theta)
        row = {"ops_per_step": ops, "rope_check": check}
        print(
            f"\n{mode}: aten ops per step {ops['aten']} -> {ops['triton']}; rotation "
            f"check max {check['max_ulps']:.2f} bf16 ulp, {check['equal_frac']:.4f} equal"
        )
        row.update(ratio_rows(res, "aten", "triton"))
        report["modes"][mode] = row
        del mr
        if cuda:
            torch.cuda.empty_cache()
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
