"""Trace-side user mistakes (issue 22, part B): each one a clear line, or a note.

Hand-built traces (``tracegen.TraceBuilder``: times in µs relative to the trace start,
expected values in ns). Notes are selected by topic, never by wording; a note's text is
only checked for what it must name (a file, the numbers).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tracegen import TraceBuilder
from typer.testing import CliRunner

from domino_prof.analysis.config import AnalysisConfig
from domino_prof.analysis.results import notes_about
from domino_prof.cli import app
from domino_prof.engine import analyse_path, analyze
from domino_prof.errors import TraceError
from domino_prof.trace import load_trace

US = 1000
ROOT = Path(__file__).resolve().parent.parent
S = ROOT / "tests" / "data" / "h200_llama3_3b_2layers_tp2"
runner = CliRunner()
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def gpu_rank(rank: int = 0, *, world_size: int = 2, comm: bool = True) -> TraceBuilder:
    """compute s7 [10,50), comm s13 [30,70) -> C 40, H 20."""
    b = TraceBuilder(rank=rank, world_size=world_size)
    b.step(1, 0, 100)
    b.kernel("sm90_gemm_bf16", stream=7, start=10, dur=40, launch=1)
    if comm:
        b.kernel(NCCL, stream=13, start=30, dur=40, launch=2)
    return b


def cpu_rank(rank: int = 1, *, world_size: int = 2) -> TraceBuilder:
    """A CPU gloo rank: aten::mm [20,40) on the main thread, gloo:all_reduce [30,80)."""
    b = TraceBuilder(rank=rank, world_size=world_size, backend="gloo")
    b.thread_name(7, "thread 7 (pt_gloo_runloop)")
    b.step(1, 0, 100, tid=1)
    b.cpu("c10d::allreduce_", 10, 2, tid=1)
    b.cpu("aten::mm", 20, 20, tid=1)
    b.annotation("gloo:all_reduce", 30, 50, tid=7)
    return b


def one_line_error(res) -> str:
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.stderr
    return lines[0]


# --------------------------------------------------------------------------- item 8
def test_a_directory_mixing_a_gpu_rank_and_a_cpu_gloo_rank_is_one_line(tmp_path):
    d = tmp_path / "mixed"
    d.mkdir()
    gpu_rank(0).write(d / "rank0.json")
    cpu_rank(1).write(d / "rank1.json")
    line = one_line_error(runner.invoke(app, ["analyze", str(d)]))
    # names the files of each kind, GPU first
    m = re.search(r"GPU rank files? \(([^)]*)\).*CPU[^(]*\(([^)]*)\)", line)
    assert m, line
    assert "rank0.json" in m.group(1) and "rank1.json" not in m.group(1)
    assert "rank1.json" in m.group(2) and "rank0.json" not in m.group(2)
    # the library says the same, through the engine and through a loaded trace
    with pytest.raises(TraceError, match="rank1.json"):
        analyse_path(d, AnalysisConfig(), workers=1)
    with pytest.raises(TraceError, match="rank1.json"):
        analyze(load_trace(d, workers=1))


def test_a_gpu_rank_without_device_work_is_still_fine(tmp_path):
    """A GPU rank whose file holds no device work (and no gloo) is not a CPU rank: it is
    analysed in the trace's GPU mode, as before."""
    d = tmp_path / "run"
    d.mkdir()
    gpu_rank(0).write(d / "rank0.json")
    b = TraceBuilder(rank=1, world_size=2)
    b.step(1, 0, 100)
    b.cpu("aten::mm", 10, 5)
    b.write(d / "rank1.json")
    a = analyse_path(d, AnalysisConfig(), workers=1)
    assert a.mode == "gpu" and a.ranks == [0, 1]
    assert a.totals["comm_ns"] == 40 * US and a.totals["hidden_ns"] == 20 * US


# --------------------------------------------------------------------------- item 9
def test_readme_says_what_a_trace_without_comm_kernels_gives(tmp_path):
    """No comm kernels is not bad input: `analyze` says n/a (exit 0), `check` exits 2."""
    p = gpu_rank(0, world_size=1, comm=False).write(tmp_path / "rank0.json")
    res = runner.invoke(app, ["analyze", str(p)])
    assert res.exit_code == 0, res.output
    assert "hidden comm n/a" in res.stdout
    assert runner.invoke(app, ["check", str(p), "--min-hidden", "50"]).exit_code == 2
    text = (ROOT / "docs" / "GUIDE.md").read_text()
    bad = text.split("* Bad input (", 1)[1].split(")", 1)[0]
    assert "comm" not in bad  # the exit-2 list does not name it
    para = " ".join(text.split("* Bad input (", 1)[1].split("\n* ", 1)[0].split())
    assert "without comm kernels" in para and "n/a" in para and "`check` exits 2" in para


# --------------------------------------------------------------------------- item 13
def test_a_file_name_whose_rank_is_not_the_trace_s_is_a_note(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    gpu_rank(0, world_size=1).write(d / "rank1.json")
    res = runner.invoke(app, ["analyze", str(d)])
    assert res.exit_code == 0, res.output
    a = analyze(load_trace(d, workers=1))
    (n,) = notes_about(a.notes, "rank_metadata")
    assert "rank1.json" in n and re.search(r"\b1\b", n) and "rank 0" in n
    # the CLI prints it (rich folds it at 80 columns, inside the tmp path when that is long)
    assert "".join(n.split()) in "".join(res.stdout.split())
    assert notes_about(analyse_path(d, AnalysisConfig(), workers=1).notes, "rank_metadata") == [n]


def test_a_rank_beyond_the_world_size_is_a_note(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    gpu_rank(0, world_size=2).write(d / "rank0.json")
    gpu_rank(3, world_size=2).write(d / "rank3.json")
    a = analyse_path(d, AnalysisConfig(), workers=1)
    assert a.ranks == [0, 3]
    (n,) = notes_about(a.notes, "rank_metadata")
    assert "rank3.json" in n and "rank 3" in n and "world size 2" in n
    assert "rank0.json" not in n


def test_consistent_rank_metadata_has_no_note(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    for r in (0, 1):
        gpu_rank(r, world_size=2).write(d / f"rank{r}.json")
    assert notes_about(analyse_path(d, AnalysisConfig(), workers=1).notes, "rank_metadata") == []


# --------------------------------------------------------------------------- item 14
def test_zero_length_step_windows_are_named_as_such(tmp_path):
    b = gpu_rank(0, world_size=1)
    b.step(2, 100, 200)
    for e in b.events:
        if "dur" in e:
            e["dur"] = 0
    a = analyze(load_trace(b.write(tmp_path / "rank0.json")))
    assert a.totals["n_iterations"] == 0
    (n,) = notes_about(a.notes, "zero_length_steps")
    assert "2 of 2" in n  # both ProfilerStep#N windows have zero length
    # with real durations there is no such note
    a = analyze(load_trace(gpu_rank(0, world_size=1).write(tmp_path / "rank0_ok.json")))
    assert notes_about(a.notes, "zero_length_steps") == []


# --------------------------------------------------------------------------- item 15
def test_kernels_of_one_stream_that_overlap_are_a_note(tmp_path):
    """All kernels on stream 7 but still overlapping: gemm [10,50), nccl [30,70) ->
    one kernel overlaps an earlier one of its stream by 20 µs. The figures stay those
    of the trace (C 40, H 20); the note says the trace's streams or clocks are wrong."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("sm90_gemm_bf16", stream=7, start=10, dur=40, launch=1)
    b.kernel(NCCL, stream=7, start=30, dur=40, launch=2)
    b.kernel("sm90_gemm_bf16", stream=7, start=80, dur=5, launch=3)  # after both: fine
    a = analyze(load_trace(b.write(tmp_path / "rank0.json")))
    assert (a.totals["comm_ns"], a.totals["hidden_ns"]) == (40 * US, 20 * US)
    (n,) = notes_about(a.notes, "stream_overlap")
    assert n.startswith("1 kernel") and "0.020 ms" in n


def test_no_stream_overlap_note_on_a_real_trace():
    a = analyse_path(S / "domino", AnalysisConfig(), workers=1, keep_intervals=False)
    assert notes_about(a.notes, "stream_overlap") == []


# --------------------------------------------------------------------------- item 18
def mtia_trace() -> dict:
    """An MTIA trace laid out as HTA's public test data (tests/data/mtia_*_trace):
    host ops on pid 865, runtime calls ``mtia_runtime`` (args: correlation, device,
    stream_id), device events ``mtia_ccp_events`` on pid 17 (the device; args: stream,
    correlation when launched, no ``device``), ``ac2g`` flow events s/f between them,
    ``dma_request`` memory events without a correlation, event_record / event_wait.

    device 17: fc [10,50) stream 108 (launched at 5), hccl all-reduce [30,70) stream 109
    (launched at 6), dma_request [60,65) s108; event_wait [50,80) s108 waits on s109;
    -> C 40, H 20; memory 1 interval; event_* are stream bookkeeping, not work.
    """
    base = 1_767_189_312_000_000_000

    def x(cat, name, pid, tid, ts, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                "ts": ts, "dur": dur, "args": args}  # fmt: skip

    ev = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": 17, "tid": 0,
         "args": {"name": "MTIA 17"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": 17, "tid": 3774,
         "args": {"name": "Stream 108"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": 17, "tid": 3775,
         "args": {"name": "Stream 109"}},
        x("user_annotation", "ProfilerStep#1", 865, 1457, 0.0, 100.0, **{"External id": 1}),
        x("user_annotation", "fwd.fc", 865, 1457, 1.0, 10.0, **{"External id": 2}),
        x("mtia_runtime", "runFunction - job_prep_and_submit_for_execution", 865, 1457,
          5.0, 0.5, correlation=21600001),
        {"ph": "s", "id": 21600001, "pid": 865, "tid": 1457, "ts": 5.0, "cat": "ac2g",
         "name": "ac2g"},
        x("mtia_ccp_events", "fc-dtype_Float", 17, 3774, 10.0, 40.0, correlation=21600001,
          stream=108, packet_ptr=1, row=0, column=0),
        {"ph": "f", "id": 21600001, "pid": 17, "tid": 3774, "ts": 10.0, "cat": "ac2g",
         "name": "ac2g", "bp": "e"},
        x("mtia_runtime", "runFunction - job_prep_and_submit_for_execution", 865, 1457,
          6.0, 0.5, correlation=21600002),
        x("mtia_ccp_events", "hcclAllReduce_bf16", 17, 3775, 30.0, 40.0,
          correlation=21600002, stream=109),
        x("mtia_ccp_events", "dma_request", 17, 3774, 60.0, 5.0, stream=108, direction=1,
          size=4096, sqid=11, packet_ptr=2, k_work_ptr=3),
        x("mtia_runtime", "recordEvent", 865, 1457, 7.0, 0.2, correlation=21600003,
          device=17, stream_id="109", cmd_name="Event#1"),
        x("mtia_ccp_events", "event_record", 17, 3775, 70.0, 0.152, correlation=21600003,
          stream=109, seq_num=1, sqid=11, host_ctx=1),
        x("mtia_ccp_events", "event_wait", 17, 3774, 50.0, 30.0, stream=108,
          wait_on_stream=109, seq_num=2, sqid=11, host_ctx=1),
    ]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 17, "name": "ARTEMIS"}],
            "distributedInfo": {"backend": "mtia:hccl", "rank": 0, "world_size": 1},
            "baseTimeNanoseconds": base, "displayTimeUnit": "ms", "traceEvents": ev}  # fmt: skip


def test_an_mtia_trace_is_analysed_as_a_device_trace(tmp_path):
    p = tmp_path / "mtia_rank_0.json"
    p.write_text(json.dumps(mtia_trace()))
    a = analyze(load_trace(p))
    assert a.mode == "gpu"
    t = a.totals
    assert (t["comm_ns"], t["hidden_ns"], t["exposed_ns"]) == (40 * US, 20 * US, 20 * US)
    assert t["intervals_by_kind"] == {"compute": 1, "comm": 1, "memory": 1}
    iv = a.intervals.set_index("name")
    assert iv.loc["fc-dtype_Float", "device"] == 17 and iv.loc["fc-dtype_Float", "stream"] == 108
    assert iv.loc["fc-dtype_Float", "op"] == "fwd.fc" and iv.loc["fc-dtype_Float", "iteration"] == 1
    assert iv.loc["hcclAllReduce_bf16", "launch_start"] >= 0  # joined to its mtia_runtime call
    assert t["n_iterations"] == 1 and t["exposed_ms_per_step"] == pytest.approx(0.020)
    res = runner.invoke(app, ["analyze", str(p)])
    assert res.exit_code == 0, res.output
    assert "hidden comm 50.0" in res.stdout
