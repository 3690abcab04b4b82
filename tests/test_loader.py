"""domino_prof.trace.load_trace: format variants, directories, exact ns, bad input.

Expected values are worked by hand from the tiny traces built here (arithmetic in
comments) or computed independently with the stdlib ``json`` + ``Decimal``.
"""

from __future__ import annotations

import gzip
import json
import sys
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from gloo_job import run_job
from tracegen import MAIN_PID, MAIN_TID, TraceBuilder

from domino_prof.errors import ConfigError, TraceError
from domino_prof.trace import load_trace
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


# --------------------------------------------------------------------------- #
# One file: values, dtypes, metadata                                           #
# --------------------------------------------------------------------------- #


def test_single_file_exact_rows(tmp_path):
    path = small_trace().write(tmp_path / "rank0.json")
    t = load_trace(path)
    df = t.events
    assert_schema(df)
    assert t.rank_ids == [0]
    # 6 X events: step, annotation, 2 launches, 2 kernels (the 2 M events are not rows)
    assert len(df) == 6 and t.ranks[0].n_events == 6
    # ts = BASE + round(ts_us * 1000): 0, 1000, 2000 (launch 1), 3000 (launch 2),
    # 10001 (gemm at 10.001 µs), 15000 (nccl at 15 µs); durations likewise:
    # 100 µs -> 100000, 50 -> 50000, launches 1 µs -> 1000, gemm 20.0005 ->
    # round(20000.5) = 20000 (half to even), nccl 10 µs -> 10000
    assert rows(df, "name", "ts", "dur") == [
        ("ProfilerStep#1", BASE + 0, 100_000),
        ("fwd.layer_attn_0_batch_0", BASE + 1_000, 50_000),
        ("cudaLaunchKernel", BASE + 2_000, 1_000),
        ("cudaLaunchKernel", BASE + 3_000, 1_000),
        ("sm90_gemm", BASE + 10_001, 20_000),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", BASE + 15_000, 10_000),
    ]
    assert rows(df, "cat", "pid", "tid", "correlation", "stream", "device") == [
        ("user_annotation", MAIN_PID, MAIN_TID, -1, -1, -1),
        ("user_annotation", MAIN_PID, MAIN_TID, -1, -1, -1),
        ("cuda_runtime", MAIN_PID, MAIN_TID, 1001, -1, -1),
        ("cuda_runtime", MAIN_PID, MAIN_TID, 1002, -1, -1),
        ("kernel", 0, 7, 1001, 7, 0),
        ("kernel", 0, 13, 1002, 13, 0),
    ]
    # External id: tracegen numbers cpu events from 2 (step) and 3 (annotation)
    assert df["external_id"].tolist() == [2, 3, -1, -1, -1, -1]
    nccl = df.iloc[5]
    assert (nccl.coll_name, nccl.pg_name) == ("allreduce", "0")
    assert (nccl.msg_nelems, nccl.group_size, nccl.seq) == (4096, 2, 7)
    gemm = df.iloc[4]
    assert (gemm.coll_name, gemm.pg_name, gemm.msg_nelems, gemm.group_size, gemm.seq) == (
        "", "", -1, -1, -1,
    )  # fmt: skip
    meta = t.ranks[0]
    assert meta.thread_names == {(MAIN_PID, MAIN_TID): "thread 4242 (python)"}
    assert meta.process_names == {MAIN_PID: "python"}
    assert (meta.world_size, meta.backend, meta.base_time_ns) == (2, "nccl", BASE)
    assert meta.pg_config == [{"pg_name": "0", "pg_desc": "default_pg",
                               "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [0, 1]}]  # fmt: skip
    assert meta.path == str(path) and t.source == str(path) and t.skipped == []


def test_gz_equals_json_and_indented_dist_info(tmp_path):
    a = load_trace(small_trace().write(tmp_path / "rank0.json"))
    b = load_trace(small_trace().write(tmp_path / "rank0.json.gz", indent=2))
    pd.testing.assert_frame_equal(a.events, b.events)
    assert b.ranks[0].world_size == 2 and b.ranks[0].pg_config == a.ranks[0].pg_config


def test_indented_distributed_info_is_parsed_as_json(tmp_path):
    # distributedInfo pretty-printed over many lines, rank 5 of 8: found by JSON, not regex
    b = small_trace(rank=5, world_size=8)
    p = b.write(tmp_path / "trace.json", indent=4)
    assert '"rank": 5' in p.read_text() and "\n" in p.read_text()
    t = load_trace(p)
    assert t.rank_ids == [5] and t.ranks[5].world_size == 8
    assert set(t.events["rank"]) == {5}


def test_events_without_dur_get_zero(tmp_path):
    b = TraceBuilder()
    b.kernel("k", stream=7, start=5, dur=None)
    t = load_trace(b.write(tmp_path / "r.json"))
    assert rows(t.events, "name", "ts", "dur") == [("k", BASE + 5_000, 0)]


def test_string_pids_and_negative_tids(tmp_path):
    b = TraceBuilder()
    b.cpu("aten::mm", 1, 2, tid=-7)  # negative tid kept as is
    b.events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
                     "tid": "PyTorch Profiler", "ts": 0.5, "dur": 3, "args": {"Op count": 0}})  # fmt: skip
    b.events.append({"ph": "M", "name": "process_name", "pid": "Spans", "tid": 0, "ts": 0,
                     "args": {"name": "Spans"}})  # fmt: skip
    b.thread_name(-7, "thread -7 (neg)")
    t = load_trace(b.write(tmp_path / "r.json"))
    # sorted by ts: Spans event at 0.5 µs, then aten::mm at 1 µs. String ids go
    # below every real id: pids are >= 0 so "Spans" -> -1; the lowest real tid
    # is -7, so "PyTorch Profiler" -> -8 (never mistaken for thread -7 or -1)
    assert rows(t.events, "name", "pid", "tid", "ts", "dur") == [
        ("PyTorch Profiler (0)", -1, -8, BASE + 500, 3_000),
        ("aten::mm", MAIN_PID, -7, BASE + 1_000, 2_000),
    ]
    meta = t.ranks[0]
    assert meta.pid_labels == {-1: "Spans"}
    assert meta.process_names == {-1: "Spans"}
    assert meta.thread_names == {(MAIN_PID, -7): "thread -7 (neg)", (-1, -8): "PyTorch Profiler"}


def test_flow_instant_and_counter_events_are_not_rows(tmp_path):
    b = small_trace()
    n_x = len([e for e in b.events if e["ph"] == "X"])
    for cat in ("async_cpu_to_gpu", "ac2g"):  # old and new names of the launch flows
        b.events.append({"ph": "s", "id": 1001, "pid": MAIN_PID, "tid": MAIN_TID, "ts": 2,
                         "cat": cat, "name": cat})  # fmt: skip
        b.events.append({"ph": "f", "id": 1001, "pid": 0, "tid": 7, "ts": 10.001, "cat": cat,
                         "name": cat, "bp": "e"})  # fmt: skip
    b.events.append({"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "",
                     "ts": 200})  # fmt: skip
    b.events.append({"ph": "C", "name": "mem", "pid": MAIN_PID, "ts": 3, "args": {"value": 1}})
    t = load_trace(b.write(tmp_path / "r.json"))
    assert len(t.events) == n_x == 6
    assert not {"async_cpu_to_gpu", "ac2g", "mem"} & set(t.events["cat"].astype(str))


def test_cuda_sync_stream_wait_args(tmp_path):
    b = TraceBuilder()
    b.stream_wait(stream=13, at=4, wait_on_stream=7, record_corr=555, corr=556)
    t = load_trace(b.write(tmp_path / "r.json"))
    assert rows(t.events, "cat", "name", "correlation", "stream", "wait_on_stream",
                "wait_on_corr", "ts", "dur") == [
        ("cuda_sync", "Stream Wait Event", 556, 13, 7, 555, BASE + 4_000, 0)
    ]  # fmt: skip


# --------------------------------------------------------------------------- #
# Timestamps: nanoseconds exactly                                              #
# --------------------------------------------------------------------------- #


def _raw_trace(path: Path, events: list[str], *, base: int | None, rank: int = 0) -> Path:
    """A trace whose event JSON is written verbatim (exact decimal text)."""
    head = f'{{"distributedInfo": {{"rank": {rank}, "world_size": 1}}, '
    if base is not None:
        head += f'"baseTimeNanoseconds": {base}, '
    path.write_text(head + '"traceEvents": [' + ", ".join(events) + "]}")
    return path


def _x(name: str, ts: str, dur: str = "1") -> str:
    return f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": 1, "ts": {ts}, "dur": {dur}}}'


def test_absolute_ts_without_base_ns_exact(tmp_path):
    # older traces: absolute µs, no baseTimeNanoseconds. 1790000000123.456 µs is
    # 1790000000123456 ns; .0005 µs durations round half to even (0.5 ns -> 0, 1.5 -> 2).
    p = _raw_trace(
        tmp_path / "r.json",
        [_x("a", "1790000000123.456", "0.0005"), _x("b", "1790000000123.457", "0.0015")],
        base=None,
    )
    t = load_trace(p)
    assert rows(t.events, "name", "ts", "dur") == [
        ("a", 1_790_000_000_123_456, 0),
        ("b", 1_790_000_000_123_457, 2),
    ]
    assert t.ranks[0].base_time_ns == 0


def test_epoch_microsecond_ts_exact_via_decimals(tmp_path):
    # ~1.79e15 µs (epoch µs): a float64 has only 0.25 µs steps there; the loader
    # re-reads ts as decimals. 1790000000000123.456 µs = 1790000000000123456 ns.
    p = _raw_trace(
        tmp_path / "r.json",
        [_x("a", "1790000000000123.456", "2.5"), _x("b", "1790000000000123.457"),
         _x("c", "1790000000000124")],
        base=None,
    )  # fmt: skip
    t = load_trace(p)
    assert rows(t.events, "name", "ts", "dur") == [
        ("a", 1_790_000_000_000_123_456, 2_500),
        ("b", 1_790_000_000_000_123_457, 1_000),
        ("c", 1_790_000_000_000_124_000, 1_000),
    ]


def test_relative_ts_of_real_magnitude_exact(tmp_path):
    # Real Kineto "relative" ts are ~5e12 µs. For 4429418809648.405 µs a plain
    # rint(ts * 1000.0) gives ...648406 (the product rounds up first); exact is
    # 4429418809648405 ns. Likewise 4424387781912.905 -> ...912905 (naive ...906).
    base = 1_790_857_026_000_000_000
    p = _raw_trace(
        tmp_path / "r.json",
        [_x("a", "4429418809648.405"), _x("b", "4424387781912.905")],
        base=base,
    )
    assert np.rint(4429418809648.405 * 1000.0) == 4429418809648406  # the trap
    t = load_trace(p)
    assert rows(t.events, "name", "ts") == [
        ("b", base + 4_424_387_781_912_905),
        ("a", base + 4_429_418_809_648_405),
    ]


def test_random_ts_match_decimal_reference(tmp_path):
    # independent reference: Decimal(text) * 1000, rounded half-even, for 5000
    # random 3-decimal timestamps across the magnitudes seen in real traces
    rng = np.random.default_rng(3)
    vals = np.concatenate([
        rng.integers(0, 10**12, 2000), rng.integers(4 * 10**15, 8_700 * 10**12, 2000),
        rng.integers(10**18, 2 * 10**18, 1000),
    ])  # fmt: skip
    texts = [f"{v // 1000}.{v % 1000:03d}" for v in vals.tolist()]
    evs = [_x(f"e{i}", s, s) for i, s in enumerate(texts)]
    t = load_trace(_raw_trace(tmp_path / "r.json", evs, base=None))
    got = dict(zip(t.events["name"].astype(str), t.events["ts"].tolist()))
    for i, s in enumerate(texts):
        want = int((Decimal(s) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
        assert got[f"e{i}"] == want, s


# --------------------------------------------------------------------------- #
# Directories and ranks                                                        #
# --------------------------------------------------------------------------- #


def test_directory_of_ranks_json_and_gz(tmp_path):
    small_trace(rank=0).write(tmp_path / "rank0.pt.trace.json")
    b1 = small_trace(rank=1)
    b1.kernel("late_kernel", stream=7, start=5, dur=1)  # sorts before the gemm on rank 1
    b1.write(tmp_path / "rank1.pt.trace.json.gz")
    t = load_trace(tmp_path)
    assert_schema(t.events)
    assert t.rank_ids == [0, 1]
    assert t.events["rank"].tolist() == [0] * 6 + [1] * 7
    r1 = t.events[t.events["rank"] == 1]
    # rank 1 order by ts (µs): step 0, annot 1, launch 2, launch 3, late_kernel 5, gemm 10.001, nccl 15
    assert r1["name"].astype(str).tolist() == [
        "ProfilerStep#1", "fwd.layer_attn_0_batch_0", "cudaLaunchKernel", "cudaLaunchKernel",
        "late_kernel", "sm90_gemm", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
    ]  # fmt: skip
    assert t.ranks[1].path.endswith("rank1.pt.trace.json.gz")
    # categories are the union over ranks
    assert "late_kernel" in t.events["name"].cat.categories


def test_pool_matches_in_process(tmp_path):
    for r in range(3):
        small_trace(rank=r, world_size=3).write(tmp_path / f"rank{r}.json")
    serial = load_trace(tmp_path, workers=1)
    pooled = load_trace(tmp_path, workers=2)
    pd.testing.assert_frame_equal(serial.events, pooled.events)
    assert serial.ranks == pooled.ranks


def test_nested_run_directory_duplicate_ranks_then_one_mode(tmp_path):
    run = tmp_path / "run"
    for mode in ("tp", "domino"):
        (run / mode).mkdir(parents=True)
        for r in range(2):
            small_trace(rank=r).write(run / mode / f"rank{r}.pt.trace.json.gz")
    (run / "run.json").write_text('{"schema": "domino-prof/run"}')
    (run / "tp" / "analysis.json").write_text('{"schema": "domino-prof/analysis"}')
    with pytest.raises(TraceError) as e:
        load_trace(run)
    msg = str(e.value)
    assert "two files claim rank 0" in msg
    assert str(run / "domino" / "rank0.pt.trace.json.gz") in msg
    assert str(run / "tp" / "rank0.pt.trace.json.gz") in msg
    assert "subdirectory" in msg
    t = load_trace(run / "tp")  # analysis.json beside the traces is not a trace
    assert t.rank_ids == [0, 1] and t.skipped == []


def test_plain_json_directory_skips_own_outputs(tmp_path):
    small_trace(rank=0).write(tmp_path / "r0.json")
    (tmp_path / "deep" / "er").mkdir(parents=True)
    small_trace(rank=1).write(tmp_path / "deep" / "er" / "r1.json.gz")
    (tmp_path / "analysis.json").write_text("{}")
    (tmp_path / "run.json").write_text("{}")
    assert load_trace(tmp_path).rank_ids == [0, 1]


@pytest.mark.parametrize("name,rank", [("rank3.json", 3), ("trace_rank-3.json", 3),
                                       ("worker.rank_12.pt.trace.json", 12)])  # fmt: skip
def test_rank_from_file_name(tmp_path, name, rank):
    small_trace(include_dist_info=False).write(tmp_path / name)
    t = load_trace(tmp_path / name)
    assert t.rank_ids == [rank] and set(t.events["rank"]) == {rank}


def test_rank_argument_for_single_file(tmp_path):
    p = small_trace(include_dist_info=False).write(tmp_path / "trace.json")
    assert load_trace(p, rank=4).rank_ids == [4]
    # the file's own rank must agree with the argument
    q = small_trace(rank=1).write(tmp_path / "other.json")
    with pytest.raises(TraceError, match="distributedInfo.rank is 1 but rank=2"):
        load_trace(q, rank=2)
    assert load_trace(q, rank=1).rank_ids == [1]
    with pytest.raises(ConfigError, match="single trace file"):
        load_trace(tmp_path, rank=1)


@pytest.mark.parametrize("name", ["trace.json", "rank1_rank2.json", "ranking.json"])
def test_missing_rank_is_an_error(tmp_path, name):
    p = small_trace(include_dist_info=False).write(tmp_path / name)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    msg = str(e.value)
    assert str(p) in msg and "no distributedInfo.rank" in msg and "rank=N" in msg


# --------------------------------------------------------------------------- #
# Bad input                                                                    #
# --------------------------------------------------------------------------- #


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


BAD = {
    # kind: (words in the problem, words in the fix)
    "truncated_gz": ("truncated gzip", "re-copy the file or re-export"),
    "invalid_json": ("invalid JSON at byte 21 (line 1)", "re-export it"),
    "truncated_json": ("ends early (truncated)", "re-export"),
    "empty": ("empty file", "re-export"),
    "no_trace_events": ("no 'traceEvents' list", "export_chrome_trace"),
    "not_a_trace": ("not an object", "Chrome trace"),
    "our_analysis": ("a domino-prof analysis document, not a profiler trace", "run directory"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_file(tmp_path, kind):
    p = _bad(tmp_path, kind)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    problem, fix = BAD[kind]
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and problem in msg and fix in msg, msg
    assert "\n" not in msg
    assert e.value.path == str(p)


def test_nonexistent_path(tmp_path):
    with pytest.raises(TraceError, match=r"nope\.json: no such file or directory; check the path"):
        load_trace(tmp_path / "nope.json")


def test_unreadable_file(tmp_path, monkeypatch):
    p = small_trace().write(tmp_path / "rank0.json")

    def denied(self):
        raise PermissionError(13, "Permission denied")

    # chmod 000 does not stop root (CI containers), so deny the read itself
    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}: permission denied; make the file readable (chmod +r)"


def test_directory_without_traces(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "analysis.json").write_text("{}")
    with pytest.raises(TraceError) as e:
        load_trace(tmp_path)
    assert str(tmp_path) in str(e.value) and "no trace files" in str(e.value)


def test_bad_file_in_directory_names_it_and_suggests_skip_bad(tmp_path):
    small_trace(rank=1).write(tmp_path / "rank1.json")
    bad = _bad(tmp_path, "truncated_gz")
    with pytest.raises(TraceError) as e:
        load_trace(tmp_path)
    assert str(e.value).startswith(f"{bad}: truncated gzip") and "--skip-bad" in str(e.value)


def test_skip_bad_keeps_good_ranks(tmp_path):
    small_trace(rank=1).write(tmp_path / "rank1.json")
    bad = _bad(tmp_path, "invalid_json")
    empty = tmp_path / "rank2.json"
    empty.write_bytes(b"")
    t = load_trace(tmp_path, skip_bad=True)
    assert t.rank_ids == [1] and len(t.events) == 6
    assert sorted(t.skipped) == sorted([
        (str(bad), "invalid JSON at byte 21 (line 1): object keys must be strings"),
        (str(empty), "empty file"),
    ])  # fmt: skip


def test_skip_bad_with_nothing_good_left(tmp_path):
    _bad(tmp_path, "empty")
    with pytest.raises(TraceError, match="no loadable trace file .1 bad; first: .*empty file"):
        load_trace(tmp_path, skip_bad=True)


def test_duplicate_ranks_not_skipped(tmp_path):
    small_trace(rank=0).write(tmp_path / "a.json")
    small_trace(rank=0).write(tmp_path / "b.json")
    with pytest.raises(TraceError, match="two files claim rank 0: .*a.json and .*b.json"):
        load_trace(tmp_path, skip_bad=True)


def test_wrongly_typed_values_are_coerced_or_dropped(tmp_path):
    b = small_trace()
    b.events[0]["args"]["External id"] = "12"  # string number -> 12
    b.events[5]["args"]["Seq"] = [
        1
    ]  # (the nccl kernel) nonsense -> absent (-1) instead of a failed load
    t = load_trace(b.write(tmp_path / "r.json"))
    step = t.events[t.events["name"] == "ProfilerStep#1"].iloc[0]
    assert step.external_id == 12
    assert t.events["seq"].tolist() == [-1] * 6
    b.events[0]["ts"] = "soon"
    with pytest.raises(TraceError, match=r"traceEvents\[0\]\.ts is 'soon', not a number"):
        load_trace(b.write(tmp_path / "r.json"), rank=0)


def test_bare_event_array_format(tmp_path):
    p = tmp_path / "rank2.json"
    p.write_text(json.dumps([{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1,
                              "ts": 1.5, "dur": 2}]))  # fmt: skip
    t = load_trace(p)  # rank 2 from the name; absolute ts
    assert rows(t.events, "rank", "name", "ts", "dur") == [(2, "a", 1_500, 2_000)]


def test_progress_off_prints_nothing_and_on_works(tmp_path, capfd):
    p = small_trace().write(tmp_path / "rank0.json")
    load_trace(p, progress=False)
    load_trace(p)  # small: silent by default
    assert capfd.readouterr().err == ""
    assert len(load_trace(p, progress=True).events) == 6


# --------------------------------------------------------------------------- #
# Against an independent decode: the benchmark generator's realistic trace     #
# --------------------------------------------------------------------------- #


ARG_KEYS = {
    "correlation": "correlation", "external_id": "External id", "stream": "stream",
    "device": "device", "wait_on_stream": "wait_on_stream",
    "wait_on_corr": "wait_on_cuda_event_record_corr_id", "msg_nelems": "In msg nelems",
    "group_size": "Group size", "seq": "Seq",
}  # fmt: skip
ROW_COLS = ["ts", "cat", "name", "pid", "tid", "dur", *ARG_KEYS, "coll_name", "pg_name"]


def stdlib_rows(path: Path) -> tuple[dict, list[tuple], list[str]]:
    """Independent reference: stdlib json with exact decimals -> (doc, sorted rows of
    the X events with int pid/tid, names of the X events with a string pid/tid)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    base = doc.get("baseTimeNanoseconds", 0)

    def ns(v) -> int:
        return int((Decimal(v) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))

    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    rows_ = sorted(
        (
            base + ns(e["ts"]), e["cat"], e["name"], e["pid"], e["tid"], ns(e.get("dur", 0)),
            *(int(e.get("args", {}).get(k, -1)) for k in ARG_KEYS.values()),
            e.get("args", {}).get("Collective name", ""),
            e.get("args", {}).get("Process Group Name", ""),
        )
        for e in xs
        if not isinstance(e["pid"], str) and not isinstance(e["tid"], str)
    )  # fmt: skip
    named = sorted(e["name"] for e in xs if isinstance(e["pid"], str) or isinstance(e["tid"], str))
    return doc, rows_, named


def assert_matches_stdlib(t, path: Path, rank: int) -> dict:
    doc, want, named = stdlib_rows(path)
    df = t.events[t.events["rank"] == rank]
    labels = t.ranks[rank].pid_labels
    str_rows = df["pid"].isin(list(labels))
    assert sorted(df.loc[str_rows, "name"].astype(str)) == named
    assert sorted(rows(df.loc[~str_rows], *ROW_COLS)) == want
    return doc


def test_generated_trace_matches_stdlib_json(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from gen_trace import write_trace
    finally:
        sys.path.pop(0)
    p = write_trace(tmp_path / "rank3.pt.trace.json.gz", events=3000, rank=3)
    t = load_trace(p)
    assert_schema(t.events)
    doc = assert_matches_stdlib(t, p, 3)
    assert len(doc["traceEvents"]) >= 3000 > len(t.events) > 1500
    assert set(t.events["rank"]) == {3} and t.ranks[3].world_size == 8
    assert len(t.ranks[3].pg_config) == 2
    assert t.ranks[3].thread_names[(1234567, 1234567)] == "thread 1234567 (python)"


def test_real_h200_nccl_traces_match_stdlib_json():
    # committed real Kineto traces from H200 GPUs (2 ranks, NCCL): every X event's
    # columns equal an independent stdlib-json + Decimal decode
    d = REPO / "tests" / "data" / "h200_two_stream"
    if not d.is_dir():
        pytest.skip("fixture not present")
    t = load_trace(d)
    assert_schema(t.events)
    assert t.rank_ids == [0, 1]
    for r in (0, 1):
        doc = assert_matches_stdlib(t, d / f"rank{r}.pt.trace.json.gz", r)
        assert t.ranks[r].base_time_ns == doc["baseTimeNanoseconds"]
        assert t.ranks[r].world_size == doc["distributedInfo"]["world_size"] == 2
        assert t.ranks[r].pid_labels  # real traces carry the "Spans" pid


# --------------------------------------------------------------------------- #
# A real 2-process gloo trace                                                  #
# --------------------------------------------------------------------------- #

GLOO_SCRIPT = """
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function, schedule

def work(rank, out):
    dist.init_process_group("gloo", init_method="file://" + os.path.join(out, "init"),
                            rank=rank, world_size=2)
    x = torch.randn(64, 64)
    def ready(p):
        p.export_chrome_trace(os.path.join(out, "traces", f"rank{rank}.pt.trace.json"))
    with profile(activities=[ProfilerActivity.CPU], on_trace_ready=ready,
                 schedule=schedule(wait=0, warmup=1, active=2)) as prof:
        for _ in range(3):
            with record_function("fwd.layer_0"):
                y = x @ x
                dist.all_reduce(y)
            prof.step()
    clean_shutdown()

if __name__ == "__main__":
    os.makedirs(os.path.join(sys.argv[1], "traces"), exist_ok=True)
    mp.spawn(work, args=(sys.argv[1],), nprocs=2)
"""


@pytest.mark.slow
def test_real_gloo_trace(tmp_path):
    pytest.importorskip("torch")
    run_job(tmp_path / "gen.py", GLOO_SCRIPT, str(tmp_path))
    t = load_trace(tmp_path / "traces")
    assert_schema(t.events)
    assert t.rank_ids == [0, 1]
    for r in (0, 1):
        meta = t.ranks[r]
        assert (meta.world_size, meta.backend) == (2, "gloo")
        assert meta.base_time_ns > 0 and meta.pg_config[0]["ranks"] == [0, 1]
        ev = t.events[t.events["rank"] == r]
        gloo = ev[ev["name"].astype(str).str.startswith("gloo:")]
        # 2 active steps, one all_reduce each; they run on gloo runloop threads
        assert (gloo["name"] == "gloo:all_reduce").sum() == 2
        assert (gloo["cat"] == "user_annotation").all()
        for pid, tid in zip(gloo["pid"], gloo["tid"]):
            assert "pt_gloo_runloop" in meta.thread_names[(pid, tid)]
        launch = ev[ev["name"] == "c10d::allreduce_"]
        assert len(launch) == 2 and (launch["cat"] == "cpu_op").all()
        main = (int(launch["pid"].iloc[0]), int(launch["tid"].iloc[0]))
        assert "pt_gloo_runloop" not in meta.thread_names[main]
        steps = ev[ev["name"].astype(str).str.startswith("ProfilerStep#")]
        assert len(steps) == 2 and set(steps["tid"]) == {main[1]}
        # the Spans row ("Spans" pid) is interned as a negative pid
        assert "Spans" in meta.pid_labels.values()
        assert (ev["ts"] > meta.base_time_ns).all()


@pytest.mark.parametrize("order", [("python", "pt_gloo_runloop"), ("pt_gloo_runloop", "python")])
def test_thread_named_twice_prefers_specific_name(tmp_path, order):
    # real gloo traces name a runloop thread both "(python)" and "(pt_gloo_runloop)",
    # in either order; the inherited process name "python" loses
    b = TraceBuilder()
    b.cpu("gloo:all_reduce", 1, 2, cat="user_annotation", tid=77)
    for label in order:
        b.thread_name(77, f"thread 77 ({label})")
    b.thread_name(MAIN_TID, "thread 4242 (python)")
    b.thread_name(88, "thread 88 (a)")
    b.thread_name(88, "thread 88 (b)")
    meta = load_trace(b.write(tmp_path / "r.json")).ranks[0]
    assert meta.thread_names == {
        (MAIN_PID, 77): "thread 77 (pt_gloo_runloop)",
        (MAIN_PID, MAIN_TID): "thread 4242 (python)",
        (MAIN_PID, 88): "thread 88 (a)",  # two specific names: the first
    }


# --------------------------------------------------------------------------- #
# One file split across processes                                              #
# --------------------------------------------------------------------------- #


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


@pytest.mark.parametrize("name", ["rank1.pt.trace.json", "rank1.pt.trace.json.gz"])
def test_split_file_matches_one_process(tmp_path, name):
    from domino_prof.trace import chunked

    p = _gen(tmp_path, name, 4000)
    serial = load_trace(p, workers=1)
    for k in (2, 3):
        _assert_same(serial, load_trace(p, workers=k))
    # the split path really ran (it returns None when it falls back)
    for k in (1, 3):
        parsed = chunked._parse_in_chunks(str(p), None, k)
        assert parsed is not None and parsed.n == len(serial.events)


def test_chunked_serial_decode_matches_whole_decode(tmp_path, monkeypatch):
    # big files are decoded chunk by chunk in one process: force ~2 kB chunks
    from domino_prof.trace import chunked, parse

    p = _gen(tmp_path, "rank1.pt.trace.json", 4000)
    whole = load_trace(p)  # small file: decoded whole
    monkeypatch.setattr(parse, "_STREAM_BYTES", 0)
    monkeypatch.setattr(chunked, "_CHUNK_TARGET", 2000)
    bounds = chunked._chunk_bounds(*_span(chunked, p), 5000)
    assert len(bounds) > 100  # really many chunks
    _assert_same(whole, load_trace(p, workers=1))
    _assert_same(whole, load_trace(tmp_path, workers=1))


def _span(chunked, p):
    buf = p.read_bytes()
    return (buf, *chunked._events_span(buf))


def test_split_file_with_string_ids_metadata_and_exact_ts(tmp_path):
    # metadata, string pids/tids and decimal-exact absolute ts spread over chunks
    from domino_prof.trace import chunked

    evs = [_x(f"e{i}", f"17900000000{i:05d}.{i % 1000:03d}") for i in range(300)]
    evs.insert(
        150, '{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "t1"}}'
    )
    evs.insert(
        250, '{"ph": "X", "cat": "Trace", "name": "s", "pid": "Spans", "tid": "PT", "ts": 1.5}'
    )
    p = _raw_trace(tmp_path / "r.json", evs, base=None)
    serial = load_trace(p, workers=1)
    assert serial.ranks[0].thread_names == {(1, 1): "t1", (-1, -1): "PT"}
    # e7 at 1790000000000007.007 µs (a 1.79e15 µs absolute ts: decimal path)
    e7 = serial.events[serial.events["name"] == "e7"]
    assert e7["ts"].tolist() == [1_790_000_000_000_007_007]
    assert chunked._parse_in_chunks(str(p), None, 3) is not None
    _assert_same(serial, load_trace(p, workers=3))


def test_split_falls_back_when_events_hold_object_lists(tmp_path):
    # '}, {"' also occurs inside these events' args: a split there cannot decode,
    # and the loader must fall back to one process with the same result
    b = small_trace()
    for i in range(200):
        b.cpu(f"op{i}", 20 + i, 1, extra=[{"a": i}, {"b": i}])
    p = b.write(tmp_path / "rank0.json")
    _assert_same(load_trace(p, workers=1), load_trace(p, workers=4))


def test_wrong_type_then_broken_json_is_still_a_clean_error(tmp_path):
    # the strict decoder stops at the odd type first; the lax one then finds the
    # syntax error: still one TraceError, not a traceback. ",," starts at byte 60;
    # the second ',' (byte 61) is where a key was expected
    p = tmp_path / "rank0.json"
    p.write_text('{"traceEvents": [{"ph": "X", "ts": [1]}, {"ph": "X", "ts": 2,,}]}')
    with pytest.raises(TraceError, match=r"rank0\.json: invalid JSON at byte 61 \(line 1\)"):
        load_trace(p)


def test_chunked_decode_falls_back_on_a_nested_trace_events_key(tmp_path, monkeypatch):
    # the first '"traceEvents": [' is inside another key: the chunk path must not
    # take it for the real array (it falls back to a whole decode)
    from domino_prof.trace import chunked, parse

    monkeypatch.setattr(parse, "_STREAM_BYTES", 0)
    monkeypatch.setattr(chunked, "_CHUNK_TARGET", 50)
    p = tmp_path / "rank0.json"
    p.write_text(
        '{"meta": {"traceEvents": [' + _x("decoy", "1") + "]}, "
        '"distributedInfo": {"rank": 0}, "traceEvents": ['
        + ", ".join(_x(f"e{i}", str(10 + i)) for i in range(5))
        + "]}"
    )
    assert chunked._parse_in_chunks(str(p), None, 1) is None
    t = load_trace(p)
    assert t.events["name"].astype(str).tolist() == ["e0", "e1", "e2", "e3", "e4"]


def test_other_json_beside_kineto_files_is_named_not_silently_dropped(tmp_path):
    from tracegen import TraceBuilder

    from domino_prof.trace import load_trace

    TraceBuilder(rank=0, world_size=1).write(tmp_path / "rank0.pt.trace.json")
    (tmp_path / "notes.json").write_text("{}")
    (tmp_path / "run.json").write_text("{}")  # our own output: not a trace, not reported
    t = load_trace(tmp_path, progress=False)
    assert t.rank_ids == [0]
    assert t.skipped == [
        (str(tmp_path / "notes.json"),
         "not read: only *.pt.trace.json(.gz) files are taken when any exist")]  # fmt: skip
