"""How long the copy-engine stand-in's calls took in a trace, against the model (issue 34,
``--comm-engine ce``). Torch-free: reads rank trace files (.json / .json.gz) of a run with
``--comm-engine ce``; prints, per kind of call (its count of emulated kernels), the calls'
median and spread, and for the all-reduces of one size the median and p90 lateness of each
wait against its modelled time (emulation/ce.py), so a late copy, a late reduction or a
chain held behind other work shows where it starts.

    python3 benchmarks/ce_calls.py RUN_DIR/domino/rank0.pt.trace.json.gz [--numel N]
        [--ranks 8] [--pace copy|phase] [--json OUT]

``--numel``: the all-reduce size whose waits are matched (default 4096 x 3072, the
headline's [T, d] at mbs 1); ``--pace``: the waits the run had (run.json's comm.ce.pace,
DOMINO_PROF_CE_PACE; default the shipped one).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from domino_prof.emulation import ce  # noqa: E402


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def calls(events: list[dict]) -> list[list[dict]]:
    """The stand-in's kernels grouped by call: a call opens at its ``*_ce_start`` kernel
    and holds the ``*_ce_*`` kernels until the next start (its calls run one at a time)."""
    ks = sorted((e for e in events if e.get("cat") == "kernel" and "_ce_" in e.get("name", "")
                 and e["name"].startswith("emulated_")), key=lambda e: e["ts"])  # fmt: skip
    out: list[list[dict]] = []
    for e in ks:
        if e["name"].endswith("_ce_start"):
            out.append([e])
        elif out:
            out[-1].append(e)
    return out


def modelled_waits(numel: int, ranks: int, pace: str) -> list[float]:
    """The due times (µs from the call's start) of an all-reduce's waits, in issue order."""
    rs, ag = ce.plan("all_reduce", ranks=ranks, rank=0, numel_in=numel, numel_out=numel,
                     elem_bytes=2)  # fmt: skip
    out: list[float] = []
    for ph in (rs, ag):
        if pace == "copy":
            out += [s.due_ns / 1e3 for s in ph.steps]
        out.append(ph.end_ns / 1e3)
        if ph.reduce_end_ns is not None:
            out.append(ph.reduce_end_ns / 1e3)
    return out


def _pct(v: list[float], q: float) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", type=Path)
    ap.add_argument("--numel", type=int, default=4096 * 3072)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--pace", choices=ce.PACES, default=ce.PACE)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    cs = calls(_events(a.trace))
    by: dict[int, list[float]] = defaultdict(list)
    for c in cs:
        by[len(c)].append(c[-1]["ts"] + c[-1]["dur"] - c[0]["ts"])
    doc: dict = {"trace": str(a.trace), "kinds": {}}
    for n, v in sorted(by.items()):
        row = {"calls": len(v), "median_us": statistics.median(v), "min_us": min(v),
               "p90_us": _pct(v, 0.9), "max_us": max(v)}  # fmt: skip
        doc["kinds"][n] = row
        print(f"{n:3d} kernels a call: {len(v):5d} calls, median {row['median_us']:.1f} µs, "
              f"min {row['min_us']:.1f}, p90 {row['p90_us']:.1f}, max {row['max_us']:.1f}")
    dues = modelled_waits(a.numel, a.ranks, a.pace)
    model = ce.total_ns(ce.plan("all_reduce", ranks=a.ranks, rank=0, numel_in=a.numel,
                                numel_out=a.numel, elem_bytes=2)) / 1e3  # fmt: skip
    # the all-reduces of this size: as many waits as the model has, and at least its length
    def waits(c: list[dict]) -> list[dict]:
        return [k for k in c if k["name"].endswith("_ce_wait")]

    ars = [c for c in cs if len(waits(c)) == len(dues) and c[0]["name"].startswith("emulated_allreduce")
           and c[-1]["ts"] + c[-1]["dur"] - c[0]["ts"] >= 0.9 * model]  # fmt: skip
    doc["all_reduce"] = {"numel": a.numel, "model_us": model, "calls": len(ars)}
    print(f"all-reduce of {a.numel} elements: model {model:.1f} µs, {len(ars)} calls matched")
    if ars:
        late = [[w["ts"] + w["dur"] - c[0]["ts"] - d for c in ars for w in [waits(c)[i]]]
                for i, d in enumerate(dues)]  # fmt: skip
        med = [statistics.median(x) for x in late]
        p90 = [_pct(x, 0.9) for x in late]
        durs = [c[-1]["ts"] + c[-1]["dur"] - c[0]["ts"] for c in ars]
        doc["all_reduce"].update({"median_us": statistics.median(durs), "p90_us": _pct(durs, 0.9),
                                  "late_median_us": med, "late_p90_us": p90})  # fmt: skip
        print(f"  took median {statistics.median(durs):.1f} µs, p90 {_pct(durs, 0.9):.1f}")
        print("  lateness per wait, median µs:", " ".join(f"{x:.1f}" for x in med))
        print("  lateness per wait, p90 µs:   ", " ".join(f"{x:.1f}" for x in p90))
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
