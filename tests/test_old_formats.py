"""Traces in older Kineto formats (2021-era PyTorch 1.8/1.9, the tb-profiler samples):
categories ``Kernel``, ``Memcpy``, ``Memset``, ``Runtime``, ``Operator``, absolute µs
timestamps without ``baseTimeNanoseconds``, string stream tids ("stream 7").

The trace is written here by hand; expected values are exact (µs in the layout, ns in
the assertions).
"""

from __future__ import annotations

import json

import pytest

from domino_prof.analysis.results import notes_about
from domino_prof.engine import analyze
from domino_prof.trace import load_trace

T0 = 1_620_000_000_000_000  # absolute µs (May 2021)

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


def _ev(cat, name, ts, dur, *, pid=1, tid=100, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
            "ts": T0 + ts, "dur": dur, "args": args}  # fmt: skip


def old_trace() -> dict:
    """Step 5 [0, 100). (launch) -> device on streams 7 and 13:

    cudaLaunchKernel (1, 2)  -> volta_sgemm on 7        [5, 45)
    cudaLaunchKernel (3, 1)  -> ncclKernel on 13        [30, 60)  comm; hidden [30, 45)
    cudaMemcpyAsync  (50, 2) -> Memcpy HtoD on 7        [55, 57)  memory
    cudaMemsetAsync  (60, 1) -> Memset on 7             [62, 63)  memory
    comm 30, hidden 15, exposed 15: 50 %; 4 launched intervals.
    """
    evs = [_ev("Operator", "ProfilerStep#5", 0, 100), _ev("Operator", "aten::mm", 1, 3)]
    for corr, (api, ls, ld, cat, name, stream, s, d) in enumerate(
        [
            ("cudaLaunchKernel", 1, 2, "Kernel", "volta_sgemm_128x64_nn", 7, 5, 40),
            ("cudaLaunchKernel", 3, 1, "Kernel", NCCL, 13, 30, 30),
            ("cudaMemcpyAsync", 50, 2, "Memcpy", "Memcpy HtoD (Pageable -> Device)", 7, 55, 2),
            ("cudaMemsetAsync", 60, 1, "Memset", "Memset (Device)", 7, 62, 1),
        ],
        start=11,
    ):
        evs.append(_ev("Runtime", api, ls, ld, correlation=corr, **{"external id": 5}))
        evs.append(_ev(cat, name, s, d, pid=0, tid=f"stream {stream}", device=0,
                       context=1, stream=stream, correlation=corr))  # fmt: skip
    return {"schemaVersion": 1, "traceEvents": evs}


def test_old_categories_are_read_as_todays(tmp_path):
    (tmp_path / "worker0.pt.trace.json").write_text(json.dumps(old_trace()))
    t = load_trace(tmp_path / "worker0.pt.trace.json", rank=0)
    cats = t.events["cat"].value_counts().to_dict()
    assert {k: v for k, v in cats.items() if v} == {
        "cpu_op": 2, "cuda_runtime": 4, "kernel": 2, "gpu_memcpy": 1, "gpu_memset": 1,
    }  # fmt: skip
    assert t.ranks[0].renamed_categories == {
        "Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset",
        "Operator": "cpu_op", "Runtime": "cuda_runtime",
    }  # fmt: skip


def test_old_format_trace_is_analysed_exactly(tmp_path):
    (tmp_path / "worker0.pt.trace.json").write_text(json.dumps(old_trace()))
    a = analyze(load_trace(tmp_path / "worker0.pt.trace.json", rank=0))
    t = a.totals
    assert (t["comm_ns"], t["hidden_ns"], t["exposed_ns"]) == (30_000, 15_000, 15_000)
    assert t["hidden_pct"] == pytest.approx(50.0)
    assert t["intervals_by_kind"] == {"compute": 1, "comm": 1, "memory": 2}
    # the step is an Operator (cpu_op) in these traces: iteration 5, wall 5..63
    assert t["n_iterations"] == 1 and t["step_ms"] == pytest.approx(0.058)
    assert sorted(a.by_stream["stream"].tolist()) == [7, 13]  # args.stream, not "stream 7"
    la = a.overheads["launches"]
    assert la["computed"] and la["n_launched"] == 4
    (note,) = notes_about(a.notes, "format")
    assert note.startswith("older Kineto trace format") and "Kernel -> kernel" in note
