"""Kernel time per step by coarse class (GEMM, attention, norm, comm, other), per mode of
run directories: where domino's overlap tax sits (issue 34).

    python3 benchmarks/kernel_classes.py reports/emulated-h200-2026-12-04b/graphs-cublas-2 ...

Reads each mode's ``rank0.pt.trace.json.gz`` (or ``.json``) straight from the Kineto
JSON (no analysis): the sum of ``kernel`` events' durations by class over the profiled
steps, divided by their count (the run's ``config.profile_steps`` in run.json, or
``--steps``; the trace's ``ProfilerStep#`` ranges are no count: a whole-step CUDA graph
gives several per step). The classes go
by kernel name: ``emulated`` comm stand-ins and ``nccl`` kernels are comm; cuBLAS
(``nvjet``, ``gemm``, ``cutlass``) and the Triton tile (``mm_kernel``) are GEMMs; cuDNN /
flash SDPA kernels are attention; names with ``norm`` are norms; the rest is other.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
from pathlib import Path

CLASSES = ("gemm", "attn", "norm", "comm", "other")


def kernel_class(name: str) -> str:
    n = name.lower()
    if "emulated" in n or "nccl" in n:
        return "comm"
    if any(k in n for k in ("nvjet", "gemm", "cutlass", "mm_kernel")):
        return "gemm"
    if any(k in n for k in ("cudnn", "flash", "fmha", "attn")):
        return "attn"
    if "norm" in n:
        return "norm"
    return "other"


def _trace(d: Path) -> dict | None:
    for name in ("rank0.pt.trace.json.gz", "rank0.pt.trace.json"):
        p = d / name
        if p.exists():
            opener = gzip.open if p.suffix == ".gz" else open
            with opener(p, "rt", encoding="utf-8") as f:
                return json.load(f)
    return None


def classes(trace: dict, steps: int) -> dict[str, float]:
    """ms per profiled step by class (``steps`` profiled steps in the trace)."""
    ev = trace.get("traceEvents", [])
    n = steps
    c: collections.Counter = collections.Counter()
    for e in ev:
        if e.get("cat") == "kernel":
            c[kernel_class(str(e.get("name", "")))] += float(e.get("dur", 0.0))
    return {k: c[k] / 1e3 / n for k in CLASSES}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories (one per mode inside)")
    ap.add_argument("--steps", type=int, default=None,
                    help="profiled steps per trace (default: run.json's config.profile_steps)")
    a = ap.parse_args()
    print(f"{'run':28} {'mode':14} " + " ".join(f"{k:>7}" for k in CLASSES) + "   (ms / step)")
    for run in a.runs:
        steps = a.steps
        if steps is None:
            try:
                cfg = json.loads((run / "run.json").read_text(encoding="utf-8"))["config"]
                steps = int(cfg["profile_steps"])
            except (OSError, KeyError, ValueError, TypeError):
                raise SystemExit(f"{run}: no run.json with config.profile_steps; pass --steps N")
        for d in sorted(p for p in run.iterdir() if p.is_dir()):
            t = _trace(d)
            if t is None:
                continue
            c = classes(t, steps)
            print(f"{run.name:28} {d.name:14} " + " ".join(f"{c[k]:7.2f}" for k in CLASSES))


if __name__ == "__main__":
    main()
