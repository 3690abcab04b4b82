"""Decoding one file (domino_prof.trace.decode): values, dtypes, metadata, exact ns
timestamps, odd values, and agreement with an independent stdlib ``json`` + ``Decimal``
decode on generated and real traces.

Expected values are worked by hand from the tiny traces built here (arithmetic in
comments) or computed independently with the stdlib ``json`` + ``Decimal`` (moved from
tests/test_loader.py, unchanged).
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
from gloo_job import run_ranks
from trace_checks import (
    BASE,
    REPO,
    _raw_trace,
    _x,
    assert_schema,
    rows,
    small_trace,
)
from tracegen import MAIN_PID, MAIN_TID, TraceBuilder

from domino_prof.errors import TraceError
from domino_prof.trace import load_trace


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


GLOO_SCRIPT = """
import os
import torch, torch.distributed as dist
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
"""


@pytest.mark.slow
def test_real_gloo_trace(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "traces").mkdir()
    run_ranks(GLOO_SCRIPT, "work", 2, str(tmp_path))  # work(rank, out) on 2 ranks
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


def test_wrong_type_then_broken_json_is_still_a_clean_error(tmp_path):
    # the strict decoder stops at the odd type first; the lax one then finds the
    # syntax error: still one TraceError, not a traceback. ",," starts at byte 60;
    # the second ',' (byte 61) is where a key was expected
    p = tmp_path / "rank0.json"
    p.write_text('{"traceEvents": [{"ph": "X", "ts": [1]}, {"ph": "X", "ts": 2,,}]}')
    with pytest.raises(TraceError, match=r"rank0\.json: invalid JSON at byte 61 \(line 1\)"):
        load_trace(p)
