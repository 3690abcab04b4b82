"""Compute beside compute (docs/METRICS.md, "Extension: overlap tax":
``compute_concurrent_ms_per_step``) on real traces: the analysis against plain loops over
the Kineto JSON. tests/data/h100_emulated_tp8_lanes holds domino-nocomm of the headline
shape with the micro-batch lanes (two streams at once) and on one stream; the committed
emulated seq-4096 headline trace is one stream too."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from domino_prof.analysis.overlap_tax import overlap_tax, tax_part

ROOT = Path(__file__).resolve().parents[1]
LANES = ROOT / "tests" / "data" / "h100_emulated_tp8_lanes"
HEADLINE = (ROOT / "reports" / "emulated-h200-full-2026-12-02" / "graphs-tp8-seq4096"
            / "domino" / "rank0.pt.trace.json.gz")  # fmt: skip


def _plain(path: Path) -> tuple[float, int]:
    """(ms a step, steps) by plain loops: the kernels (not the emulated or NCCL comm ones,
    duration > 0) whose launch (runtime or driver call of the same correlation) lies in a
    host ProfilerStep#N range; per device, Σ dur − the length of their union."""
    ev = json.load(gzip.open(path))["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    launch = {e["args"]["correlation"]: e["ts"] for e in ev
              if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}  # fmt: skip
    per: dict[int, list] = {}
    for e in ev:
        if e.get("cat") != "kernel" or e.get("dur", 0) <= 0:
            continue
        if e["name"].startswith(("emulated_", "nccl")):
            continue
        t = launch.get(e["args"]["correlation"])
        if t is not None and any(a <= t < b for a, b in steps):
            per.setdefault(e["args"]["device"], []).append((e["ts"], e["ts"] + e["dur"]))
    total_us = 0.0
    for iv in per.values():
        iv.sort()
        union, lo, hi = 0.0, iv[0][0], iv[0][1]
        for a, b in iv[1:]:
            if a > hi:
                union, lo, hi = union + (hi - lo), a, b
            else:
                hi = max(hi, b)
        total_us += sum(b - a for a, b in iv) - (union + hi - lo)
    return total_us / len(steps) / 1e3, len(steps)


def _analysed(path: Path) -> dict:
    from domino_prof.analysis.classify import classify
    from domino_prof.analysis.config import AnalysisConfig
    from domino_prof.trace import load_trace

    cl = classify(load_trace(path, progress=False), AnalysisConfig(), mode="gpu")
    n = cl.intervals.loc[cl.intervals["iteration"] >= 0, "iteration"].nunique()
    return overlap_tax([tax_part(cl.intervals, mode="gpu", reference=cl.reference)],
                       n_rank_steps=int(n), hidden_ns=None)  # fmt: skip


@pytest.mark.parametrize("path, lo, hi", [
    (LANES / "lanes" / "rank0.pt.trace.json.gz", 25.0, 40.0),
    (LANES / "one_stream" / "rank0.pt.trace.json.gz", 0.0, 0.01),
    (HEADLINE, 0.0, 0.01),
], ids=["lanes", "one-stream", "headline"])  # fmt: skip
def test_compute_beside_compute_agrees_with_plain_loops(path, lo, hi):
    want, steps = _plain(path)
    doc = _analysed(path)
    assert doc["n_rank_steps"] == steps == 2
    # the loader keeps integer ns, the loops float µs: a few ns apart over a step
    assert doc["compute_concurrent_ms_per_step"] == pytest.approx(want, abs=1e-4)
    assert lo <= want <= hi
