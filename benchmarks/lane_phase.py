"""How far apart the two micro-batch lanes issue their collectives (``--mb-streams 2`` with
``DOMINO_PROF_LANE_COMM=own``, where each lane's calls start on a comm stream of its own):
for each pair of consecutive calls on different comm streams, the time from one's start to
the other's, by direction. Where one direction's gap is shorter than a call (196 µs
modelled for the headline's micro-batch all-reduce), the second call queues behind the
first on the shared link while both lanes wait: the lanes run in phase. One stream keeps
the calls a segment apart (2026-12-06, H100: 315 and 600 µs; lanes with their own comm
streams: 119 and 568). Torch-free; reads the start kernels of the emulated copy-engine calls
(``emulated_<coll>_ce_start*``) of one profiled trace.

    python3 benchmarks/lane_phase.py RUN/domino/rank0.pt.trace.json.gz [--steps 2] [--from 0.37]

The trace's kernel span is cut into ``--steps`` equal steps; within the first, calls that
start after ``--from`` of it count (a whole-step CUDA graph's kernels carry no phase: the
backward of an all-reduce TP step starts about a third in, as in exposed_by_part.py).
Prints the calls per comm stream and, per direction (stream a -> stream b), the median,
10th and 90th percentile of the gaps in µs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from pathlib import Path


def start_times(events: list[dict]) -> dict[int, list[float]]:
    """The ce start kernels' start times (µs) by stream."""
    out: dict[int, list[float]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and "_ce_start" in e.get("name", ""):
            out.setdefault(e["args"]["stream"], []).append(float(e["ts"]))
    return out


def gaps(events: list[dict], *, steps: int = 2, frm: float = 0.37) -> dict[tuple, list[float]]:
    """(stream a, stream b) -> the gaps from a call's start on a to the next call's on b."""
    ks = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    t0 = min(e["ts"] for e in ks)
    t1 = max(e["ts"] + e["dur"] for e in ks)
    step = (t1 - t0) / steps
    lo, hi = t0 + step * frm, t0 + step
    seq = sorted((t, s) for s, ts in start_times(events).items() for t in ts if lo < t < hi)
    out: dict[tuple, list[float]] = {}
    for (ta, sa), (tb, sb) in zip(seq, seq[1:]):
        if sa != sb:
            out.setdefault((sa, sb), []).append(tb - ta)
    return out


def _pct(v: list[float], q: float) -> float:
    return sorted(v)[int(q * (len(v) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--from", dest="frm", type=float, default=0.37)
    a = ap.parse_args()
    opener = gzip.open if a.trace.suffix == ".gz" else open
    try:
        with opener(a.trace, "rt") as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        print(f"{a.trace}: not a readable Kineto trace ({e}); give a rank's trace.json[.gz]",
              file=sys.stderr)
        return 2
    print({s: len(v) for s, v in start_times(events).items()})
    found = gaps(events, steps=a.steps, frm=a.frm)
    if not found:
        print("no calls on two comm streams (a run without DOMINO_PROF_LANE_COMM=own?)")
        return 1
    for (sa, sb), v in sorted(found.items()):
        print(f"stream {sa} -> {sb}: median {statistics.median(v):.0f} us, p10 "
              f"{_pct(v, 0.1):.0f}, p90 {_pct(v, 0.9):.0f}, n {len(v)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
