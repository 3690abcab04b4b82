"""Benchmark inputs made from the committed real H200 trace: tiled in time and in ranks.

    python benchmarks/tile_trace.py --tiles 100 --ranks 2 --out /tmp/tiled-100x2
    python benchmarks/tile_trace.py --tiles 10 --ranks 256 --out /tmp/scale-256 --gzip

The fixture ``tests/data/h200_llama3_3b_2layers_tp2/domino`` holds one profiled step of
llama3-3b at tp 2 on 2xH200 (6,120 events a rank, cpu_op-heavy like real traces). Each
output rank ``r`` is fixture rank ``r % 2`` with its events repeated ``--tiles`` times as
consecutive steps: tile ``k`` is shifted by ``k`` times the step's span (plus 100 µs),
its ``ProfilerStep#N`` renumbered, and its correlation, External id and flow ids offset
so that they stay unique. Ranks ``2p`` and ``2p + 1`` form TP group ``p`` (their
process group is renamed ``p``), so collectives match within each pair, as in a job of
``W / 2`` TP groups. Deterministic; written atomically.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "data" / "h200_llama3_3b_2layers_tp2" / "domino"
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_ID_ARGS = ("correlation", "External id", "wait_on_cuda_event_record_corr_id")


def _timed(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") != "M" and "ts" in e]


def _period(docs: list[dict]) -> float:
    """One shift for every rank (so that their steps stay aligned): the span of the
    ranks' events together, plus 100 µs."""
    timed = [e for d in docs for e in _timed(d)]
    t0 = min(float(e["ts"]) for e in timed)
    t1 = max(float(e["ts"]) + float(e.get("dur", 0) or 0) for e in timed)
    return round(t1 - t0 + 100.0, 3)


def _tiled_events(doc: dict, tiles: int, period: float) -> list[dict]:
    ev = doc["traceEvents"]
    timed = _timed(doc)
    meta = [e for e in ev if e.get("ph") == "M" or "ts" not in e]
    id_span = 1 + max(
        [int((e.get("args") or {}).get(k, 0) or 0) for e in timed for k in _ID_ARGS]
        + [int(e.get("id", 0) or 0) for e in timed if isinstance(e.get("id"), int)]
    )
    out = list(meta)
    for k in range(tiles):
        shift = k * period
        for e in timed:
            e2 = dict(e)
            e2["ts"] = round(float(e["ts"]) + shift, 3)
            m = _STEP.match(str(e.get("name", "")))
            if m:
                e2["name"] = f"ProfilerStep#{int(m.group(1)) + k}"
            if isinstance(e.get("id"), int):
                e2["id"] = e["id"] + k * id_span
            args = e.get("args")
            if args:
                a2 = dict(args)
                for key in _ID_ARGS:
                    v = a2.get(key)
                    if isinstance(v, int) and v >= 0:
                        a2[key] = v + k * id_span
                e2["args"] = a2
            out.append(e2)
    return out


def _encode_events(events: list[dict]) -> str:
    return ",\n".join(json.dumps(e, separators=(",", ":")) for e in events)


def write_ranks(out: Path, *, tiles: int, ranks: int, gz: bool) -> list[Path]:
    """Write ``ranks`` rank files of ``tiles`` steps each under ``out``; returns them."""
    out.mkdir(parents=True, exist_ok=True)
    docs = {}
    for src in (0, 1):
        with gzip.open(FIXTURE / f"rank{src}.pt.trace.json.gz", "rt") as f:
            docs[src] = json.load(f)
    period = _period(list(docs.values()))
    bodies = {src: _encode_events(_tiled_events(d, tiles, period)) for src, d in docs.items()}
    headers = {src: {k: v for k, v in d.items() if k != "traceEvents"} for src, d in docs.items()}
    paths = []
    for r in range(ranks):
        src, pair = r % 2, r // 2
        head = json.loads(json.dumps(headers[src]))
        info = head["distributedInfo"]
        info.update(rank=r, world_size=ranks)
        for pg in info.get("pg_config") or []:
            pg["pg_name"] = str(pair)
            pg["ranks"] = [2 * pair, 2 * pair + 1]
        head["traceName"] = f"rank{r}.pt.trace.json"
        body = bodies[src].replace('"Process Group Name":"0"', f'"Process Group Name":"{pair}"')
        body = body.replace('"Process Group Ranks":"[0, 1]"',
                            f'"Process Group Ranks":"[{2 * pair}, {2 * pair + 1}]"')  # fmt: skip
        text = json.dumps(head)[:-1] + ', "traceEvents": [\n' + body + "\n]}\n"
        path = out / (f"rank{r}.pt.trace.json" + (".gz" if gz else ""))
        tmp = path.with_name(path.name + ".tmp")
        if gz:
            with gzip.open(tmp, "wt", compresslevel=1) as f:
                f.write(text)
        else:
            tmp.write_text(text)
        os.replace(tmp, path)
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiles", type=int, default=100, help="steps per rank (copies of the one)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--gzip", action="store_true", help="write .json.gz (level 1)")
    a = ap.parse_args()
    paths = write_ranks(Path(a.out), tiles=a.tiles, ranks=a.ranks, gz=a.gzip)
    print(f"wrote {len(paths)} rank files to {a.out}")


if __name__ == "__main__":
    main()
