"""Where in the step the exposed comm lies: per profiled step, the comm time no compute
overlaps (docs/METRICS.md: comm outside the union of the device's compute, the hidden %'s
complement) in each of PARTS equal slices of the step's device span. The analysis counts
it per phase; a whole-step CUDA graph's kernels have no phase (METRICS.md, "Extension:
phase"), so for those runs the position in the step says forward (the first third or so of
an all-reduce TP step) from backward. Torch-free; the classification is the analyzer's.

    python3 benchmarks/exposed_by_part.py RUN/domino/rank0.pt.trace.json.gz [--parts 10]

Prints one line per profiled step: the step's device span, the exposed comm per slice and
their sum (per step; the analyzer's ``exposed_ms_per_step`` is its mean over the steps).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint, sorted intervals covering [start, end)."""
    if len(start) == 0:
        return start, end
    o = np.argsort(start, kind="stable")
    s, e = start[o], end[o]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.append(reach[idx[1:] - 1], reach[-1])


def _covered(s: np.ndarray, e: np.ndarray, a: float, b: float) -> float:
    """Length of [a, b) covered by disjoint sorted intervals (s, e)."""
    return float(np.clip(np.minimum(e, b) - np.maximum(s, a), 0, None).sum())


def exposed_by_part(comm: tuple, compute: tuple, span: tuple, parts: int) -> list[float]:
    """Exposed comm (same unit as the inputs) in each of ``parts`` equal slices of ``span``:
    the union of ``comm`` intervals minus its intersection with the union of ``compute``."""
    cs, ce_ = _union(*comm)
    ks, ke = _union(*compute)
    # the comm union cut by the compute union: comm ∩ compute, as disjoint intervals
    lo = np.maximum(cs[:, None], ks[None, :]) if len(cs) and len(ks) else np.empty((0, 0))
    hi = np.minimum(ce_[:, None], ke[None, :]) if len(cs) and len(ks) else np.empty((0, 0))
    keep = hi > lo
    hs, he = lo[keep], hi[keep]
    o = np.argsort(hs, kind="stable")
    hs, he = hs[o], he[o]
    a0, a1 = span
    w = (a1 - a0) / parts
    out = []
    for k in range(parts):
        a, b = a0 + k * w, a0 + (k + 1) * w
        out.append(_covered(cs, ce_, a, b) - _covered(hs, he, a, b))
    return out


def main(argv: list[str] | None = None) -> int:
    from domino_prof.analysis import AnalysisConfig
    from domino_prof.analysis.classify import classify
    from domino_prof.trace import load_trace

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("trace", type=Path, help="one rank's trace file (.json / .json.gz)")
    ap.add_argument("--parts", type=int, default=10, help="slices per step (default 10)")
    a = ap.parse_args(argv)
    iv = classify(load_trace(a.trace, progress=False), AnalysisConfig()).intervals
    iv = iv[iv["iteration"].to_numpy() >= 0]
    for it, g in iv.groupby("iteration", sort=True):
        st, en = g["start"].to_numpy(np.float64), g["end"].to_numpy(np.float64)
        comm = g["kind"].to_numpy() == "comm"
        comp = g["kind"].to_numpy() == "compute"
        row = exposed_by_part((st[comm], en[comm]), (st[comp], en[comp]),
                              (st.min(), en.max()), a.parts)  # fmt: skip
        print(f"step {it}: {(en.max() - st.min()) / 1e6:.2f} ms, exposed comm per "
              f"{a.parts}th (ms): {' '.join(f'{x / 1e6:.2f}' for x in row)}; "
              f"sum {sum(row) / 1e6:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
