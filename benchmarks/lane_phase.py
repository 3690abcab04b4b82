"""How far apart the two micro-batch lanes issue their collectives (``--mb-streams 2`` with
``DOMINO_PROF_LANE_COMM=own``, where each lane's calls start on a comm stream of its own):
for each pair of consecutive calls on different comm streams, the time from one's start to
the other's, by direction. Where one direction's gap is shorter than a call (196 µs
modelled for the headline's micro-batch all-reduce), the second call queues behind the
first on the shared link while both lanes wait: the lanes run in phase. One stream keeps
the calls a segment apart (2026-12-06, H100: 316 and 600 µs; lanes with their own comm
streams: 121 and 568). Torch-free; reads the start kernels of the emulated copy-engine calls
(``emulated_<coll>_ce_start*``) of one profiled trace, read and classified as the analyzer
does (``load_trace``, ``classify``: its steps are the profiler's iterations).

    python3 benchmarks/lane_phase.py RUN/domino/rank0.pt.trace.json.gz [--from 0.37]

Within each profiled step, calls that start after ``--from`` of the step's device span
count (a whole-step CUDA graph's kernels carry no phase: the backward of an all-reduce TP
step starts about a third in, as in exposed_by_part.py). Prints the calls per comm stream
and, per direction (stream a -> stream b), the median, 10th and 90th percentile of the gaps
in µs over the steps.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def starts(iv):
    """The ce start kernels among ``classify``'s intervals (profiled steps only)."""
    names = iv["name"].astype(str)
    return iv[names.str.contains("_ce_start", regex=False) & (iv["iteration"] >= 0)]


def gaps(iv, *, frm: float = 0.37) -> dict[tuple, list[float]]:
    """(stream a, stream b) -> the gaps (µs) from a call's start on stream a to the next
    call's on stream b, within each step after ``frm`` of its device span."""
    out: dict[tuple, list[float]] = {}
    st = starts(iv)
    for it, g in iv[iv["iteration"] >= 0].groupby("iteration", sort=True):
        t0, t1 = g["start"].min(), g["end"].max()
        calls = st[(st["iteration"] == it) & (st["start"] > t0 + (t1 - t0) * frm)]
        seq = sorted(zip(calls["start"].tolist(), calls["stream"].tolist()))
        for (ta, sa), (tb, sb) in zip(seq, seq[1:]):
            if sa != sb:
                out.setdefault((sa, sb), []).append((tb - ta) / 1e3)
    return out


def _pct(v: list[float], q: float) -> float:
    return sorted(v)[int(q * (len(v) - 1))]


def main(argv: list[str] | None = None) -> int:
    from domino_prof.analysis import AnalysisConfig
    from domino_prof.analysis.classify import classify
    from domino_prof.errors import DominoProfError
    from domino_prof.trace import load_trace

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path, help="one rank's trace file (.json / .json.gz)")
    ap.add_argument("--from", dest="frm", type=float, default=0.37)
    a = ap.parse_args(argv)
    try:
        iv = classify(load_trace(a.trace, progress=False), AnalysisConfig()).intervals
    except DominoProfError as e:
        print(e, file=sys.stderr)
        return 2
    print(starts(iv).groupby("stream").size().to_dict())
    found = gaps(iv, frm=a.frm)
    if not found:
        print("no calls on two comm streams (a run without DOMINO_PROF_LANE_COMM=own?)")
        return 1
    for (sa, sb), v in sorted(found.items()):
        print(f"stream {sa} -> {sb}: median {statistics.median(v):.0f} us, p10 "
              f"{_pct(v, 0.1):.0f}, p90 {_pct(v, 0.9):.0f}, n {len(v)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
