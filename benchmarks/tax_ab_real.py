"""The real side of the emulator-fidelity A/B (issue 33): how much each compute kernel
class of the committed real 2xH200 domino traces slows down beside real NCCL.

Torch-free, plain ``json``: reads ``tests/data/h200_llama3_3b_2layers_tp2/domino`` (llama3-3b,
2 layers, seq 1024, mbs 2, splits 2, tp 2, NCCL 2.28.9 ``RING_LL``), and per compute kernel
class (kernel name + grid + block) writes its alone durations and its samples beside NCCL.

* **Overlap fraction** f of a compute kernel: the share of its duration inside the union
  of its rank's NCCL kernels.
* **Polling for a late peer**: the i-th NCCL kernel of each rank is the same collective
  (domino issues the same sequence on both ranks; checked: equal message sizes). On the
  rank that started it first, the part before the other rank's kernel started is
  polling, not transfer (clocks aligned by the median difference of the kernels' ends:
  a ring ends on both ranks together). A compute sample overlapping any polling part is
  left out of the "beside real" population and counted as ``n_polling``.
* **Order**: ``comm_first`` when the NCCL kernel it overlaps most started before it,
  else ``compute_first``.
* alone: f == 0. A class needs >= 2 alone samples to have a baseline (median).
* The polling samples are kept apart (``polling``, with f = the share under polling): a
  waiting NCCL kernel holds its SMs and moves almost nothing, which is what the
  stand-in does between its paced slices, so they check its SM occupancy on its own.

Usage: ``python benchmarks/tax_ab_real.py [--out reports/emulator-fidelity/tax_ab_real.json]``
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "tests/data/h200_llama3_3b_2layers_tp2/domino"


def _ops_of_launches(events: list[dict], *, raw: bool = False) -> dict[int, str]:
    """correlation -> the innermost ``record_function`` range (user_annotation) of the
    launching thread around the launch call (runtime or driver API), its numbers written
    N unless ``raw`` (the trace engine's ``op`` column, docs/METRICS.md)."""
    ann: dict[int, list[tuple[float, float, str]]] = {}
    for e in events:
        if e.get("cat") == "user_annotation" and e.get("ph") == "X":
            ann.setdefault(e["tid"], []).append((float(e["ts"]), float(e["ts"]) + float(e["dur"]),
                                                 e["name"]))  # fmt: skip
    out: dict[int, str] = {}
    for e in events:
        if e.get("cat") not in ("cuda_runtime", "cuda_driver") or "correlation" not in e.get(
                "args", {}):  # fmt: skip
            continue
        ts = float(e["ts"])
        best = None
        for s, t, name in ann.get(e["tid"], ()):
            if s <= ts <= t and (best is None or t - s < best[1] - best[0]):
                best = (s, t, name)
        if best is not None:
            out[e["args"]["correlation"]] = best[2] if raw else re.sub(r"\d+", "N", best[2])
    return out


def _kernels(path: Path) -> list[dict]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    ops = _ops_of_launches(doc["traceEvents"])
    out = []
    for e in doc["traceEvents"]:
        if e.get("cat") != "kernel":
            continue
        a = e.get("args", {})
        out.append({
            "name": e["name"], "start": float(e["ts"]) * 1e3, "dur": float(e["dur"]) * 1e3,
            "grid": tuple(a.get("grid") or ()), "block": tuple(a.get("block") or ()),
            "nccl": e["name"].startswith("ncclDevKernel"), "nelems": a.get("In msg nelems"),
            "op": ops.get(a.get("correlation"), ""),
        })  # fmt: skip
    out.sort(key=lambda k: k["start"])
    return out


def class_key(k: dict) -> str:
    """Kernel name + grid + block + launching op: the shape, as far as a trace without
    recorded input shapes tells it (this fixture has none)."""
    g = "x".join(map(str, k["grid"]))
    b = "x".join(map(str, k["block"]))
    return f"{k['name']} [grid {g}] [block {b}] @ {k['op']}"


def _inter(a0: float, a1: float, ivs: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(a1, b1) - max(a0, b0)) for b0, b1 in ivs)


def analyse(fixture: Path = FIXTURE) -> dict:
    ranks = [_kernels(p) for p in sorted(fixture.glob("rank*.pt.trace.json.gz"))]
    assert len(ranks) == 2, f"{fixture}: expected 2 rank traces"
    comms = [[k for k in ks if k["nccl"]] for ks in ranks]
    assert len(comms[0]) == len(comms[1])
    assert all(a["nelems"] == b["nelems"] for a, b in zip(*comms)), "sequences differ"
    off = statistics.median((b["start"] + b["dur"]) - (a["start"] + a["dur"])
                            for a, b in zip(*comms))  # rank 1 clock - rank 0 clock
    shift = [0.0, -off]  # add to a rank's times to put them on rank 0's clock
    classes: dict[str, dict] = {}
    for r, ks in enumerate(ranks):
        peer = 1 - r
        comm_iv, poll_iv = [], []
        for a, b in zip(comms[r], comms[peer]):
            s_me = a["start"] + shift[r]
            s_peer = b["start"] + shift[peer]
            comm_iv.append((a["start"], a["start"] + a["dur"]))
            if s_peer > s_me:  # this rank waited for its peer from its start
                poll_iv.append((a["start"], a["start"] + (s_peer - s_me)))
        for k in ks:
            if k["nccl"] or k["dur"] <= 0:
                continue
            s, e = k["start"], k["start"] + k["dur"]
            ov = _inter(s, e, comm_iv)
            c = classes.setdefault(class_key(k), {"alone_ns": [], "beside": [], "polling": [],
                                                  "n_polling": 0})  # fmt: skip
            if ov <= 0:
                c["alone_ns"].append(k["dur"])
                continue
            pov = _inter(s, e, poll_iv)
            if pov > 0:  # beside a kernel waiting for its peer: SMs held, no traffic
                c["n_polling"] += 1
                c["polling"].append({"dur_ns": k["dur"], "f": pov / k["dur"], "rank": r,
                                     "f_comm": ov / k["dur"]})  # fmt: skip
                continue
            best = max(comm_iv, key=lambda iv: max(0.0, min(e, iv[1]) - max(s, iv[0])))
            c["beside"].append({"dur_ns": k["dur"], "f": ov / k["dur"], "rank": r,
                                "order": "comm_first" if best[0] <= s else "compute_first",
                                "offset_ns": s - best[0]})  # fmt: skip
    out = {}
    for key, c in sorted(classes.items()):
        if not c["beside"] and not c["n_polling"]:
            continue
        base = statistics.median(c["alone_ns"]) if len(c["alone_ns"]) >= 2 else None
        out[key] = {"n_alone": len(c["alone_ns"]), "alone_ns": c["alone_ns"],
                    "alone_median_ns": base, "n_polling": c["n_polling"],
                    "beside": c["beside"], "polling": c["polling"]}  # fmt: skip
    return {"fixture": str(fixture.relative_to(fixture.parents[3])), "clock_offset_ns": off,
            "classes": out}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    res = analyse()
    for key, c in res["classes"].items():
        full = [b for b in c["beside"] if b["f"] >= 0.9]
        base = c["alone_median_ns"]
        sl = (statistics.median(b["dur_ns"] for b in full) / base) if (full and base) else None
        print(f"{key[:100]:100s} alone {c['n_alone']:2d} beside {len(c['beside']):2d} "
              f"(f>=0.9 {len(full):2d}) polling {c['n_polling']:2d} "
              f"slowdown {'n/a' if sl is None else f'{sl:.3f}'}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(res, indent=1) + "\n")
        tmp.replace(args.out)


if __name__ == "__main__":
    main()
