"""Where in the step the exposed comm lies: per profiled step, the comm time no compute
overlaps (docs/METRICS.md: comm outside the union of the device's compute, the hidden %'s
complement) in each of PARTS equal slices of the step's device span. The analysis counts
it per phase; a whole-step CUDA graph's kernels have no phase (METRICS.md, "Extension:
phase"), so for those runs the position in the step says forward (the first third or so of
an all-reduce TP step) from backward. Torch-free; the classification is the analyzer's.

    python3 benchmarks/exposed_by_part.py RUN/domino/rank0.pt.trace.json.gz [--parts 10]

Prints one line per profiled step: the step's device span, the exposed comm per slice and
their sum (per step; the analyzer's ``exposed_ms_per_step`` is its mean over the steps).

``--phases``: instead of slices, the step cut in two at the start of its *last* kernel whose
name matches ``--boundary`` (default :data:`LOSS_KERNEL`, the reference model's loss: the
max reduction of its cross-entropy, one per micro-batch; the last is the last micro-batch's,
after every micro-batch's forward, the lanes' too, and before any backward: the first
backward block waits for both lanes' forward; give your own program's loss kernel), and per
part: its span, the union of comm and of compute, the comm
no compute overlaps, the device's idle time (neither), and the comm span (first comm start
to last comm end in the part). A part whose comm span is its span while compute idles is
comm-bound: the collectives back to back set its length, whatever the compute does.
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


LOSS_KERNEL = "MaxNanF"  # the reference model's loss: its max reduction (reduce_kernel)


def phase_totals(comm: tuple, compute: tuple, span: tuple, cut: float) -> dict[str, dict]:
    """Per part of ``span`` cut at ``cut`` ("fwd" before, "bwd" from it): ``span``,
    ``comm`` and ``compute`` (their unions' length in the part), ``exposed`` (comm outside
    compute), ``idle`` (neither) and ``comm_span`` (first comm start to last comm end,
    clipped to the part; 0 without comm). Same unit as the inputs."""
    cs, ce_ = _union(*comm)
    ks, ke = _union(*compute)
    bs, be = _union(np.concatenate([comm[0], compute[0]]), np.concatenate([comm[1], compute[1]]))
    out = {}
    for name, a, b in (("fwd", span[0], cut), ("bwd", cut, span[1])):
        c, k, both = _covered(cs, ce_, a, b), _covered(ks, ke, a, b), _covered(bs, be, a, b)
        inside = (np.minimum(ce_, b) > np.maximum(cs, a))
        cspan = float(min(ce_[inside].max(), b) - max(cs[inside].min(), a)) if inside.any() else 0.0
        out[name] = {"span": b - a, "comm": c, "compute": k, "exposed": both - k,
                     "idle": (b - a) - both, "comm_span": cspan}  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    from domino_prof.analysis import AnalysisConfig
    from domino_prof.analysis.classify import classify
    from domino_prof.trace import load_trace

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("trace", type=Path, help="one rank's trace file (.json / .json.gz)")
    ap.add_argument("--parts", type=int, default=10, help="slices per step (default 10)")
    ap.add_argument("--phases", action="store_true",
                    help="forward and backward instead of slices (cut at --boundary)")
    ap.add_argument("--boundary", default=LOSS_KERNEL,
                    help=f"regex of the kernel that starts the backward part (default "
                         f"{LOSS_KERNEL!r}: the reference model's loss)")  # fmt: skip
    a = ap.parse_args(argv)
    iv = classify(load_trace(a.trace, progress=False), AnalysisConfig()).intervals
    iv = iv[iv["iteration"].to_numpy() >= 0]
    if iv.empty:
        print(f"{a.trace}: no device work inside a profiler step (ProfilerStep#N); profile "
              f"with a schedule that records steps", file=sys.stderr)  # fmt: skip
        return 2
    for it, g in iv.groupby("iteration", sort=True):
        st, en = g["start"].to_numpy(np.float64), g["end"].to_numpy(np.float64)
        comm = g["kind"].to_numpy() == "comm"
        comp = g["kind"].to_numpy() == "compute"
        if a.phases:
            hit = g["name"].astype(str).str.contains(a.boundary, regex=True).to_numpy()
            if not hit.any():
                print(f"{a.trace}: step {it}: no kernel matches --boundary {a.boundary!r}; "
                      f"give your program's loss kernel", file=sys.stderr)  # fmt: skip
                return 2
            ph = phase_totals((st[comm], en[comm]), (st[comp], en[comp]),
                              (st.min(), en.max()), float(st[hit].max()))  # fmt: skip
            print(f"step {it}: " + " | ".join(
                f"{n} span {v['span'] / 1e6:.2f} ms: comm {v['comm'] / 1e6:.2f} (span "
                f"{v['comm_span'] / 1e6:.2f}), compute {v['compute'] / 1e6:.2f}, exposed "
                f"{v['exposed'] / 1e6:.2f}, idle {v['idle'] / 1e6:.2f}" for n, v in ph.items()))
            continue
        row = exposed_by_part((st[comm], en[comm]), (st[comp], en[comp]),
                              (st.min(), en.max()), a.parts)  # fmt: skip
        print(f"step {it}: {(en.max() - st.min()) / 1e6:.2f} ms, exposed comm per "
              f"{a.parts}th (ms): {' '.join(f'{x / 1e6:.2f}' for x in row)}; "
              f"sum {sum(row) / 1e6:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    try:
        rc = main()
        sys.stdout.flush()  # here, not at exit, so a closed pipe is caught below
    except BrokenPipeError:  # `... | head`: the reader is gone; no traceback for that
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        rc = 1
    sys.exit(rc)
