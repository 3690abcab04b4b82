"""The tagged decode (issue 23 item 3): events decoded by phase into structs that hold
only what that phase needs, and a row's columns read in a few C-level passes. Checked
against a per-row reading of the same events done in plain Python, and against the
untagged decode it falls back to."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from domino_prof.trace import decode
from domino_prof.trace.decode import _Event, _events_to_part, _first_decode, _grid_column

ARG_KEYS = {  # JSON key -> column
    "correlation": "correlation", "External id": "external_id", "stream": "stream",
    "device": "device", "wait_on_stream": "wait_on_stream",
    "wait_on_cuda_event_record_corr_id": "wait_on_corr", "In msg nelems": "msg_nelems",
    "Group size": "group_size", "Seq": "seq", "fromDevice": "from_device",
    "toDevice": "to_device",
}  # fmt: skip
STR_ARGS = {"Collective name": "coll_name", "Process Group Name": "pg_name"}


def random_events(seed: int) -> list[dict]:
    rng = random.Random(seed)
    names = ["gemm", "nccl:all_reduce", "aten::mm", "cudaLaunchKernel", "ε-kernel"]
    evs = []
    for i in range(rng.randint(0, 300)):
        ph = rng.choice("XXXXXsfiMC")
        ev: dict = {"ph": ph, "ts": 5136598139223.635 + i * rng.choice([0.001, 1.5, 7.125])}
        if rng.random() < 0.9:
            ev["pid"] = rng.choice([0, 1, 4000, -3, "Spans", "12"])
        if rng.random() < 0.9:
            ev["tid"] = rng.choice([7, 8, 4000, "PyTorch Profiler"])
        if ph == "M":
            ev["name"] = rng.choice(["thread_name", "process_name"])
            ev["args"] = {"name": rng.choice(["stream 7", "python"])}
        elif ph == "X":
            ev["cat"] = rng.choice(["kernel", "cpu_op", "cuda_runtime", ""])
            ev["name"] = rng.choice(names)
            ev["dur"] = rng.choice([0, 1.5, 3.001, 120.25])
            args = {k: rng.randint(-2, 1 << 40) for k in ARG_KEYS if rng.random() < 0.3}
            args.update({k: rng.choice(["0", "tp", ""]) for k in STR_ARGS if rng.random() < 0.2})
            if rng.random() < 0.4:
                args["grid"] = rng.choice([[4, 1, 1], [132, 2, 1], [0, 1, 1], [2, 3], "x"])
            if rng.random() < 0.3:
                args["Input Dims"] = [[4, 4], []]  # not read
            if args or rng.random() < 0.5:
                ev["args"] = args
        else:
            ev.update(cat="ac2g", name="ac2g", id=i)
        evs.append(ev)
    return evs


def rows_by_hand(evs: list[dict]) -> dict[str, list]:
    """Each X event's columns, read field by field (what the decode must give)."""
    out: dict[str, list] = {c: [] for c in ("cat", "name", "pid", "tid", "ts", "dur", "grid",
                                            *ARG_KEYS.values(), *STR_ARGS.values())}  # fmt: skip
    for ev in evs:
        if ev["ph"] != "X":
            continue
        args = ev.get("args", {})
        out["cat"].append(ev.get("cat", ""))
        out["name"].append(ev.get("name", ""))
        out["pid"].append(ev.get("pid", 0))
        out["tid"].append(ev.get("tid", 0))
        out["ts"].append(int(decode._us_to_ns(np.array([float(ev["ts"])]))[0]))
        out["dur"].append(int(decode._us_to_ns(np.array([float(ev["dur"])]))[0]))
        g = args.get("grid")
        out["grid"].append(
            int(np.prod(g)) if isinstance(g, list) and g and all(v > 0 for v in g) else -1
        )
        for k, c in ARG_KEYS.items():
            out[c].append(args.get(k, -1))
        for k, c in STR_ARGS.items():
            out[c].append(args.get(k, ""))
    return out


def part_rows(part) -> dict[str, list]:
    """The part's columns back as per-row values (string ids put back in place)."""
    out = {c: v.tolist() for c, v in part.ints.items()}
    for c, (codes, cats) in part.cats.items():
        out[c] = [cats[i] for i in codes.tolist()]
    for c, (rows, strs) in part.str_rows.items():
        for r, s in zip(rows.tolist(), strs):
            out[c][r] = s
    return out


@pytest.mark.parametrize("seed", range(30))
def test_columns_equal_a_per_row_reading(seed):
    evs = random_events(seed)
    data = json.dumps(evs).encode()
    events = _first_decode(decode._EVENTS, data)
    assert not events or type(events[0]) is not _Event  # the tagged decode took it
    part = _events_to_part(events, None, data, "t.json")
    want = rows_by_hand(evs)
    assert part.n == len(want["ts"])
    assert part_rows(part) == want
    # string ids of the rows: listed with their rows, the column holding 0 there
    for c in ("pid", "tid"):
        strs = [i for i, v in enumerate(want[c]) if isinstance(v, str)]
        assert part.str_rows.get(c, (np.empty(0), []))[0].tolist() == strs
        assert all(part.ints[c][i] == 0 for i in strs)
    # categories in order of first appearance over the rows (as _factorize numbers them)
    for c in ("cat", "name", "coll_name", "pg_name"):
        assert part.cats[c][1] == list(dict.fromkeys(want[c]))
    metas = [(e["name"], e.get("pid", 0), e.get("tid", 0), e["args"]["name"])
             for e in evs if e["ph"] == "M"]  # fmt: skip
    assert part.meta_events == metas


@pytest.mark.parametrize("seed", range(10))
def test_the_untagged_decode_gives_the_same_columns(seed, monkeypatch):
    """An event whose phase the tagged union does not list (or without ``ph``) makes
    the decode fall back to the untagged struct: the same columns, that event skipped."""
    evs = random_events(seed)
    data = json.dumps(evs).encode()
    tagged = _events_to_part(_first_decode(decode._EVENTS, data), None, data, "t.json")
    odd = [*evs[:3], {"ph": "Z", "ts": 1}, {"name": "no phase"}, *evs[3:]]
    odd_data = json.dumps(odd).encode()
    events = _first_decode(decode._EVENTS, odd_data)
    assert type(events[0]) is _Event
    untagged = _events_to_part(events, None, odd_data, "t.json")
    assert part_rows(untagged) == part_rows(tagged)
    assert untagged.meta_events == tagged.meta_events
    assert {c: u for c, (_, u) in untagged.cats.items()} == {
        c: u for c, (_, u) in tagged.cats.items()
    }


def test_every_chrome_phase_is_read_and_only_x_b_e_m_are_kept():
    phases = decode._SKIPPED_PHASES + "XBEM"
    evs = [{"ph": p, "name": f"ev-{p}", "cat": "c", "pid": 1, "tid": 2, "ts": 10 + i, "dur": 2,
            "args": {"name": "label"}} for i, p in enumerate(phases)]  # fmt: skip
    data = json.dumps(evs).encode()
    events = _first_decode(decode._EVENTS, data)
    assert [decode._PHASE_OF_TYPE[type(e)] for e in events] == list(phases)
    part = _events_to_part(events, None, data, "t.json")
    # rows: X and B (the B's dur is set from its E when the file is finished: 0 here)
    assert [part.cats["name"][1][c] for c in part.cats["name"][0]] == ["ev-X", "ev-B"]
    n_skip = len(decode._SKIPPED_PHASES)
    assert part.ints["ts"].tolist() == [(10 + n_skip) * 1000, (11 + n_skip) * 1000]
    assert part.ints["dur"].tolist() == [2000, 0]
    assert part.ends is not None and part.ends.ts.tolist() == [(12 + n_skip) * 1000]
    assert part.meta_events == [("ev-M", 1, 2, "label")]


def test_grid_column_fast_and_slow_paths():
    # all [x, y, z] of ints: the vectorised path
    assert _grid_column([[4, 1, 1], None, [132, 2, 1], [0, 1, 1], [3, -1, 2]], 5).tolist() == [
        4, -1, 264, -1, -1,
    ]  # fmt: skip
    # anything else, row by row: bools and floats are not ints, other lengths multiply
    grids = [[True, 1, 1], [1.0, 2, 3], [5], [2, 3], [1, 2, 3, 4], "1,2,3", {}, [], None]
    assert _grid_column(grids, len(grids)).tolist() == [-1, -1, 5, 6, 24, -1, -1, -1, -1]
    # large factors: exact products; one that does not fit an int64 is no grid (it raised
    # OverflowError, a traceback, before)
    big = [[1 << 20, 1 << 30, 1], [1 << 22, 1 << 22, 1 << 18], [1 << 40, 1 << 30, 1]]
    assert _grid_column(big, 3).tolist() == [1 << 50, 1 << 62, -1]
    assert _grid_column([[2**70, 1, 1]], 1).tolist() == [-1]
    assert _grid_column([], 0).tolist() == []
