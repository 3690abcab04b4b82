"""One attribution core (analysis.attribution): the overlap analysis and the overheads
put every launch in the same step under the same op name, whether ``ProfilerStep#N``
is a ``user_annotation`` (today's Kineto) or a ``cpu_op`` (2021-era traces).

The trace (rank 0; µs): steps #3 [0, 100) and #4 [100, 200), numbered from 3 so an
off-by-one or a default -1 shows.

    step 3: fwd.a [1, 9): gemm k1 stream 7 [10, 30) launched at 2,
                          record at 3 on 7, wait of stream 13 at 4, nccl c1 stream 13
                          [35, 45) launched at 5 (a switch edge, consumer c1)
            fwd.sync_op [50, 90): cudaStreamSynchronize [60, 70) (blocking, 10 µs)
            on another process with the same tid: other.op [55, 80), not this thread
    step 4: fwd.b [101, 109): gemm k2 stream 7 [110, 130) launched at 102,
                              nccl c2 stream 13 [120, 140) launched at 103
    outside any step: gemm k0 stream 7 [250, 260) launched at 240
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tracegen import MAIN_TID, TraceBuilder

from domino_prof.analysis.attribution import context, iteration_at, step_windows
from domino_prof.engine import analyze
from domino_prof.trace import load_trace

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def build(step_cat: str, *, both: bool = False) -> TraceBuilder:
    b = TraceBuilder(rank=0)
    for n, t0 in ((3, 0.0), (4, 100.0)):
        b.cpu(f"ProfilerStep#{n}", t0, 100, cat=step_cat)
        if both:  # the same step also written in the other category, a bit later
            other = "cpu_op" if step_cat == "user_annotation" else "user_annotation"
            b.cpu(f"ProfilerStep#{n}", t0 + 0.5, 99, cat=other)
    b.annotation("fwd.a", 1, 8)
    b.kernel("gemm_k1", stream=7, start=10, dur=20, launch=2)
    rec = b.runtime("cudaEventRecord", 3, 0.5)
    wait = b.runtime("cudaStreamWaitEvent", 4, 0.5)
    b.stream_wait(stream=13, at=4, wait_on_stream=7, record_corr=rec, corr=wait)
    b.kernel(NCCL, stream=13, start=35, dur=10, launch=5)
    b.annotation("fwd.sync_op", 50, 40)
    b.cpu("other.op", 55, 25, cat="user_annotation", pid=999, tid=MAIN_TID)
    b.runtime("cudaStreamSynchronize", 60, 10)
    b.annotation("fwd.b", 101, 8)
    b.kernel("gemm_k2", stream=7, start=110, dur=20, launch=102)
    b.kernel(NCCL, stream=13, start=120, dur=20, launch=103)
    b.kernel("gemm_k0", stream=7, start=250, dur=10, launch=240)
    return b


def figures(tmp_path, step_cat: str, **kw) -> dict:
    a = analyze(load_trace(build(step_cat, **kw).write(tmp_path / f"{step_cat}.json")))
    iv = a.intervals.assign(name=a.intervals["name"].astype(str))
    ov = a.overheads
    blk = ov["stream_switches"]["blocking_syncs"]
    return {
        "intervals": sorted(zip(iv["name"], iv["iteration"], iv["op"].astype(str))),
        "by_iteration": a.by_iteration["iteration"].tolist(),
        "launches": [r["iteration"] for r in ov["launches"]["per_iteration"]],
        "switches": [
            (r["iteration"], r["n_switches"]) for r in ov["stream_switches"]["per_iteration"]
        ],
        "blocking": [(r["op"], r["in_steps"], r["total_ns"]) for r in blk],
        "n_iterations": a.totals["n_iterations"],
    }


EXPECTED = {
    "intervals": [
        ("gemm_k0", -1, "(none)"), ("gemm_k1", 3, "fwd.a"), ("gemm_k2", 4, "fwd.b"),
        (NCCL, 3, "fwd.a"), (NCCL, 4, "fwd.b"),
    ],
    "by_iteration": [-1, 3, 4],
    "launches": [3, 4],
    "switches": [(3, 1), (4, 0)],
    # the sync's op is the innermost annotation on its own thread (rank, pid, tid):
    # other.op has the same tid on another process and does not hold it
    "blocking": [("fwd.sync_op", 1, 10_000)],
    "n_iterations": 2,
}  # fmt: skip


@pytest.mark.parametrize("step_cat", ["user_annotation", "cpu_op"])
def test_overlap_and_overheads_agree_on_steps_and_ops(tmp_path, step_cat):
    assert figures(tmp_path, step_cat) == EXPECTED


def test_a_step_written_in_both_categories_is_one_window(tmp_path):
    assert figures(tmp_path, "user_annotation", both=True) == EXPECTED
    assert figures(tmp_path, "cpu_op", both=True) == EXPECTED


def test_step_windows_and_iteration_at():
    ev = load_trace_events(build("cpu_op", both=True))
    w = step_windows(ev)
    base = TraceBuilder().base_ns
    assert w["iteration"].tolist() == [3, 4]
    assert (w["start"] - base).tolist() == [0, 100_000]  # the first window of each step
    assert (w["end"] - base).tolist() == [100_000, 200_000]
    t = base + np.array([0, 99_999, 100_000, 199_999, 200_000, -1])
    assert iteration_at(w, np.zeros(6, np.int64), t).tolist() == [3, 3, 4, 4, -1, -1]
    # another rank has no windows: nothing is guessed
    assert iteration_at(w, np.ones(6, np.int64), t).tolist() == [-1] * 6
    ctx = context(ev)
    pid = np.array([4242, 4242, 999])
    tid = np.full(3, 4242)
    at = base + np.array([5_000, 60_000, 60_000])
    assert ctx.op_at(np.zeros(3, np.int64), pid, tid, at).tolist() == [
        "fwd.a", "fwd.sync_op", "other.op"]  # fmt: skip


def load_trace_events(b: TraceBuilder) -> pd.DataFrame:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        return load_trace(b.write(Path(d) / "rank0.json")).events
