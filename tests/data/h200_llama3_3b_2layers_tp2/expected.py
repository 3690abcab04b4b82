"""Independent expected overlap numbers for the real 2xH200 NCCL traces beside this file.

Plain Python (json, gzip, decimal); no numpy, no domino_prof code. Follows
docs/METRICS.md "Device activity" and "Overlap":

- time: absolute ns = baseTimeNanoseconds + round(ts * 1000), end = start +
  round(dur * 1000); ts/dur are parsed as ``Decimal`` so nothing is lost to floats;
- device intervals: ``cat`` kernel / gpu_memcpy / gpu_memset (pid = device, tid = stream);
  a kernel whose name starts with nccl (any case) is comm, other kernels are compute,
  memcpy/memset are memory (neither comm nor compute);
- C = |U comm|, H = |(U comm) n (U compute)|, E = C - H, hidden % = 100 H / C;
- op name of a comm kernel = innermost CPU ``user_annotation`` on the thread of its
  launch call (cuda_runtime/cuda_driver with the same ``args.correlation``, first one)
  whose [start, end) holds the launch start, ignoring ``ProfilerStep#*`` and
  ``nccl:*``/``rccl:*``/``hccl:*``/``gloo:*`` wrappers; per op: C and H of the union
  of that op's comm kernels;
- per stream: C and H of the comm kernels on that stream.

Run ``python expected.py`` to (re)write ``expected.json``.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = ("domino", "tp")
RANKS = (0, 1)
WRAPPERS = ("ProfilerStep#", "nccl:", "rccl:", "hccl:", "gloo:")


def to_ns(us: Decimal) -> int:
    """round(us * 1000) half-to-even, exact (Decimal)."""
    return int((us * 1000).to_integral_value())


def union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sort and sweep: merged, disjoint, sorted intervals."""
    out: list[list[int]] = []
    for s, e in sorted(iv):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(iv: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in iv)


def intersect_len(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """|a n b| of two merged sorted lists (two-pointer sweep)."""
    i = j = 0
    tot = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if hi > lo:
            tot += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tot


def figures(comm: list[tuple[int, int]], compute_u: list[tuple[int, int]]) -> dict:
    cu = union(comm)
    c = length(cu)
    h = intersect_len(cu, compute_u)
    return {"comm_ns": c, "hidden_ns": h, "exposed_ns": c - h,
            "hidden_pct": (100.0 * h / c) if c else None}  # fmt: skip


def op_name(launch: dict | None, annotations: dict) -> str:
    if launch is None:
        return "(none)"
    t = launch["start"]
    best = None
    for a in annotations.get((launch["pid"], launch["tid"]), ()):
        if a["start"] <= t < a["end"] and (
            best is None
            or a["start"] > best["start"]
            or (a["start"] == best["start"] and a["end"] < best["end"])
        ):
            # properly nested: the latest-starting (then shortest) holder is innermost
            best = a
    return best["name"] if best else "(none)"


def rank_expected(path: Path) -> dict:
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    launches: dict[int, dict] = {}
    annotations: dict[tuple, list] = {}
    comm: list[dict] = []
    compute: list[tuple[int, int]] = []
    for ev in doc["traceEvents"]:
        if ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        start = base + to_ns(Decimal(ev["ts"]))
        end = start + to_ns(Decimal(ev.get("dur", 0)))
        name = ev.get("name", "")
        if cat in ("cuda_runtime", "cuda_driver"):
            corr = ev.get("args", {}).get("correlation")
            if corr is not None and corr not in launches:
                launches[corr] = {"start": start, "pid": ev["pid"], "tid": ev["tid"]}
        elif cat == "user_annotation":
            if end > start and not name.startswith(WRAPPERS):
                annotations.setdefault((ev["pid"], ev["tid"]), []).append(
                    {"start": start, "end": end, "name": name}
                )
        elif cat == "kernel":
            if name.lower().startswith("nccl"):
                comm.append({"start": start, "end": end, "stream": ev["tid"],
                             "corr": ev.get("args", {}).get("correlation")})  # fmt: skip
            else:
                compute.append((start, end))
    compute_u = union(compute)
    out = figures([(k["start"], k["end"]) for k in comm], compute_u)
    out["n_comm_kernels"] = len(comm)
    by_op: dict[str, list] = {}
    by_stream: dict[int, list] = {}
    for k in comm:
        k["op"] = op_name(launches.get(k["corr"]), annotations)
        by_op.setdefault(k["op"], []).append((k["start"], k["end"]))
        by_stream.setdefault(k["stream"], []).append((k["start"], k["end"]))
    out["by_op"] = {op: figures(v, compute_u) for op, v in sorted(by_op.items())
                    if op.startswith(("fwd.", "bwd."))}  # fmt: skip
    out["by_stream"] = {str(s): figures(v, compute_u) for s, v in sorted(by_stream.items())}
    # the stream carrying most compute time (the main compute stream)
    per_stream: dict[int, int] = {}
    for ev in doc["traceEvents"]:
        is_kernel = ev.get("ph") == "X" and ev.get("cat") == "kernel"
        if is_kernel and not ev.get("name", "").lower().startswith("nccl"):
            per_stream[ev["tid"]] = per_stream.get(ev["tid"], 0) + to_ns(Decimal(ev.get("dur", 0)))
    out["main_compute_stream"] = max(per_stream, key=per_stream.get) if per_stream else None
    return out


def main() -> dict:
    res = {m: {str(r): rank_expected(HERE / m / f"rank{r}.pt.trace.json.gz") for r in RANKS}
           for m in MODES}  # fmt: skip
    (HERE / "expected.json").write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    return res


if __name__ == "__main__":
    for mode, ranks in main().items():
        for r, v in ranks.items():
            print(mode, r, v["comm_ns"], v["hidden_ns"], v["exposed_ns"],
                  f"{v['hidden_pct']:.2f}%", v["n_comm_kernels"], "ops:", len(v["by_op"]))  # fmt: skip
