"""Builders and checks shared by the tests of the trace modules (tests/test_trace_*.py):
a small trace, the frame's schema, rows of columns, a verbatim-JSON trace, a generated
big trace."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tracegen import MAIN_PID, MAIN_TID, TraceBuilder

from domino_prof.trace.schema import EVENT_COLUMNS, INT_COLUMNS, empty_events

BASE = 1_790_000_000_000_000_000  # tracegen's default baseTimeNanoseconds
REPO = Path(__file__).resolve().parents[1]


def small_trace(rank: int = 0, world_size: int = 2, **kw) -> TraceBuilder:
    """Step 0..100 µs; an annotation; a gemm (stream 7) and an nccl kernel (stream 13)."""
    b = TraceBuilder(rank=rank, world_size=world_size, **kw)
    b.step(1, 0, 100)  # ts 0, dur 100 µs
    b.annotation("fwd.layer_attn_0_batch_0", 1, 50)  # ts 1 µs, dur 50 µs
    b.kernel("sm90_gemm", stream=7, start=10.001, dur=20.0005, launch=2)  # corr 1001
    b.kernel(
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
        stream=13,
        start=15,
        dur=10,
        launch=3,
        **{
            "Collective name": "allreduce",
            "In msg nelems": 4096,
            "Group size": 2,
            "Seq": 7,
            "Process Group Name": "0",
        },
    )  # corr 1002; fmt: skip
    b.thread_name(MAIN_TID, "thread 4242 (python)")
    b.events.append({"ph": "M", "name": "process_name", "pid": MAIN_PID, "tid": 0, "ts": 0,
                     "args": {"name": "python"}})  # fmt: skip
    return b


def assert_schema(df: pd.DataFrame) -> None:
    assert tuple(df.columns) == EVENT_COLUMNS
    ref = empty_events()
    for col in EVENT_COLUMNS:
        if col in INT_COLUMNS:
            assert df[col].dtype == np.dtype(INT_COLUMNS[col]), col
        else:
            assert isinstance(df[col].dtype, pd.CategoricalDtype), col
            assert df[col].cat.categories.dtype == ref[col].cat.categories.dtype, col
    order = np.lexsort((df["ts"].to_numpy(), df["rank"].to_numpy()))
    assert (order == np.arange(len(df))).all(), "rows not sorted by (rank, ts)"


def rows(df: pd.DataFrame, *cols: str) -> list[tuple]:
    return [tuple(r) for r in df[list(cols)].astype(object).itertuples(index=False)]


def _raw_trace(path: Path, events: list[str], *, base: int | None, rank: int = 0) -> Path:
    """A trace whose event JSON is written verbatim (exact decimal text)."""
    head = f'{{"distributedInfo": {{"rank": {rank}, "world_size": 1}}, '
    if base is not None:
        head += f'"baseTimeNanoseconds": {base}, '
    path.write_text(head + '"traceEvents": [' + ", ".join(events) + "]}")
    return path


def _x(name: str, ts: str, dur: str = "1") -> str:
    return f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": 1, "ts": {ts}, "dur": {dur}}}'


def _assert_same(a, b) -> None:
    pd.testing.assert_frame_equal(a.events, b.events)
    assert a.ranks == b.ranks


def _gen(tmp_path: Path, name: str, events: int):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from gen_trace import write_trace
    finally:
        sys.path.pop(0)
    return write_trace(tmp_path / name, events=events, rank=1)


def _bad(tmp_path: Path, kind: str) -> Path:
    good = json.dumps(small_trace().to_dict()).encode()
    p = tmp_path / ("rank0.json.gz" if kind == "truncated_gz" else "rank0.json")
    if kind == "truncated_gz":
        p.write_bytes(gzip.compress(good)[:-40])
    elif kind == "invalid_json":
        # '{"schemaVersion": 1, ' is 21 bytes: the '@' lands at byte 21
        assert good.index(b'"deviceProperties"') == 21
        p.write_bytes(good[:21] + b"@" + good[21:])
    elif kind == "truncated_json":
        p.write_bytes(good[: len(good) // 2])
    elif kind == "empty":
        p.write_bytes(b"")
    elif kind == "no_trace_events":
        p.write_text('{"schemaVersion": 1, "distributedInfo": {"rank": 0}}')
    elif kind == "not_a_trace":
        p.write_text('"just a string"')
    elif kind == "our_analysis":  # `analyze -o x.json` output passed where a trace goes
        p.write_text('{"schema": "domino-prof/analysis", "version": 2, "by_rank": {}}')
    return p
