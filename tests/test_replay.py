"""The replay model (analysis/replay.py): exact replays, critical paths and what-if
predictions on hand-built traces; the unedited replay reproduces every committed trace;
nocomm predicted from a real CPU gloo tp 2 trace of the same run.

Builder times are µs; expected values are ns or ms as named.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_switches import load
from tracegen import TraceBuilder

from domino_prof.analysis import replay
from domino_prof.analysis.config import AnalysisConfig
from domino_prof.analysis.replay import cpu_profiled_step
from domino_prof.analysis.results import notes_about
from domino_prof.engine import analyze
from domino_prof.trace import load_trace

DATA = Path(__file__).parent / "data"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def gains(out) -> dict:
    return {s["name"]: s["gain_ms"] for s in out["whatif"]["scenarios"]}


def cp(out, rank: int) -> dict:
    return next(r for r in out["whatif"]["critical_path"] if r["rank"] == rank)


def sync_starves_rank() -> TraceBuilder:
    """k1 [5, 25] launched at 0; the host syncs at 2 until 26 (1 µs after k1 ends),
    works 4 µs, launches k2 at 30; k2 [35, 45]. The device idles 10 µs for the sync."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("gemm_k1", stream=7, start=5, dur=20, launch=0)
    b.runtime("cudaStreamSynchronize", 2, 24)
    b.kernel("gemm_k2", stream=7, start=35, dur=10, launch=30)
    return b


def test_a_sync_that_starves_the_device_gets_its_exact_gain(tmp_path):
    trace, iv = load(tmp_path, sync_starves_rank())
    out = analyze(trace, AnalysisConfig()).overheads
    w = out["whatif"]
    assert w["explained"] is True and w["profiled_step_ms"] == pytest.approx(0.040)
    # without the sync the host reaches k2's launch at 2 + 4 = 6 µs; k2 keeps its 5 µs
    # launch latency (ready 11) and follows k1 after the stream delay (no queued kernel
    # in the trace: the 1 µs default) -> k2 [26, 36]: wall 31 µs, gain 9 µs
    assert gains(out)["no_syncs"] == pytest.approx(0.009)
    f = next(f for f in out["findings"] if f["id"] == "blocking_sync")
    assert f["est_gain_ms_per_step"] == pytest.approx(0.009)
    assert f["value"] == pytest.approx(0.024)  # the host's wait is the value, not the gain
    # critical path: k2 10 compute; its launch latency 5 + the host's 4 µs gap: host 9;
    # the sync follows k1: 1 µs wake-up idle, k1 20 compute -> 30 / 9 / 1 of 40 µs
    p = cp(out, 0)
    assert (p["length_ns"], p["compute_ns"], p["host_ns"], p["idle_ns"],
            p["exposed_comm_ns"]) == (40_000, 30_000, 9_000, 1_000, 0)  # fmt: skip


def test_a_sync_while_the_device_is_busy_gains_nothing(tmp_path):
    """The committed fixture's case: the host waits while the device works."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("gemm_k1", stream=7, start=5, dur=40, launch=0)
    b.kernel("gemm_k2", stream=7, start=46, dur=10, launch=1)  # queued: no idle
    b.runtime("cudaStreamSynchronize", 2, 55)  # returns at 57, after k2
    trace, iv = load(tmp_path, b)
    out = analyze(trace, AnalysisConfig()).overheads
    assert gains(out)["no_syncs"] == 0.0


def coupled_rank(rank: int) -> TraceBuilder:
    """Two ranks, one stream each: k [5, 25] (rank 0) / [5, 45] (rank 1), an all-reduce
    queued behind it ([26, 60] / [46, 60]: rank 0 waits for rank 1), then k2 [61, 71].
    Every launch is early (0, 1, 2 µs): the device is never host-bound."""
    b = TraceBuilder(rank=rank, world_size=2)
    b.step(1, 0, 200)
    end_k = 25 if rank == 0 else 45
    b.kernel("gemm_k", stream=7, start=5, dur=end_k - 5, launch=0)
    b.kernel(NCCL, stream=7, start=end_k + 1, dur=60 - end_k - 1, launch=1,
             **{"Process Group Name": "0", "Collective name": "allreduce", "Seq": 1})  # fmt: skip
    b.kernel("gemm_k2", stream=7, start=61, dur=10, launch=2)
    return b


def test_collectives_wait_for_their_peers(tmp_path):
    trace, iv = load(tmp_path, coupled_rank(0), coupled_rank(1))
    out = analyze(trace, AnalysisConfig()).overheads
    w = out["whatif"]
    assert w["explained"] is True and w["n_coupled"] == 2
    assert w["profiled_step_ms"] == pytest.approx(0.066)  # both walls 5 -> 71
    g = gains(out)
    # transfer = 60 - latest arrival 46 = 14 µs; queued kernels follow after 1 µs
    # comm removed: r0 k [5,25], ar [26,26], k2 [27,37]: 32; r1 k [5,45], k2 [47,57]: 52
    assert g["no_comm"] == pytest.approx(0.014)
    assert g["comm_hidden"] == pytest.approx(0.014)
    # comm x 2: transfer 28 from the latest arrival 46 -> 74; k2 [75, 85]: wall 80
    assert g["comm_x2"] == pytest.approx(-0.014)
    # no skew: r0's all-reduce takes 14 from 26 -> 40, k2 [41, 51]; r1 unchanged (66)
    assert g["no_skew"] == pytest.approx(0.0)
    # launches are early: a graph saves only the in-graph gaps: the slowest rank's path
    # holds two queued 1 us kernel-to-kernel gaps, each shrunk to GRAPH_KERNEL_GAP_NS
    assert g["cuda_graphs"] == pytest.approx(2 * (1_000 - replay.GRAPH_KERNEL_GAP_NS) / 1e6)
    # critical paths: r0 k2 10 + 1 idle + ar 34 (exposed comm, waiting for r1) + 1 + k 20
    p0, p1 = cp(out, 0), cp(out, 1)
    assert (p0["compute_ns"], p0["exposed_comm_ns"], p0["idle_ns"], p0["host_ns"]) == (
        30_000, 34_000, 2_000, 0)  # fmt: skip
    assert (p1["compute_ns"], p1["exposed_comm_ns"], p1["idle_ns"]) == (50_000, 14_000, 2_000)
    assert p0["exposed_comm_share"] == pytest.approx(34 / 66)


@pytest.mark.parametrize(
    "path",
    ["h200_llama3_3b_2layers_tp2/domino", "h200_llama3_3b_2layers_tp2/tp", "h200_two_stream",
     "cpu_gloo_tp2/tp", "cpu_gloo_tp2/domino"],
)  # fmt: skip
def test_the_unedited_replay_reproduces_every_committed_trace(path):
    a = analyze(load_trace(DATA / path))
    w = a.overheads.whatif
    assert w["computed"] and w["explained"], w.get("reason")
    # the profiled step of the slowest rank, replayed within 1% (here: to the ns)
    assert w["error_pct"] <= 1.0
    walls = a.by_iteration.groupby("iteration")["wall_ns"].max().mean() / 1e6
    assert w["profiled_step_ms"] == pytest.approx(walls)


def test_committed_fixture_blocking_sync_gain_is_the_device_idle():
    """Issue 21: the aten::item sync at the step's end while both devices were busy."""
    a = analyze(load_trace(DATA / "h200_llama3_3b_2layers_tp2/domino"))
    f = next(f for f in a.overheads.findings if f.id == "blocking_sync")
    assert f.value == pytest.approx(9.6036565)  # the host's wait
    assert 0.0 <= f.est_gain_ms_per_step <= 0.5
    # no annotation holds the syncs: the site is named by the aten:: op around them
    assert f.where.op in ("aten::item", "aten::to")
    ids = [f.id for f in a.overheads.findings]
    # rank 0's wait in collectives and rank 1's host-bound launches: one lost interval
    assert "rank_skew" not in ids and "host_bound_launches" in ids
    w = a.overheads.whatif
    assert w["gains_add"] in (True, False) and w["combined_gain_ms"] is not None


# measured run-to-run spread (max - min over 7 runs) of the nocomm profiled step of
# `domino-prof run` on CPU, tp 2, tiny preset, on the shared 2-core machine:
# tests/data/cpu_gloo_tp2/README.md
NOCOMM_SPREAD_MS = 55.78


def test_nocomm_predicted_from_the_tp_trace_of_the_same_run():
    tp = analyze(load_trace(DATA / "cpu_gloo_tp2/tp"))
    w = tp.overheads.whatif
    pred = next(s["step_ms"] for s in w["scenarios"] if s["name"] == "no_comm")
    measured_ns, _ = cpu_profiled_step(load_trace(DATA / "cpu_gloo_tp2/nocomm").events)
    measured = measured_ns / 1e6
    assert abs(pred - measured) <= NOCOMM_SPREAD_MS
    # the sign: removing comm makes the step shorter, predicted and measured
    assert pred < w["profiled_step_ms"] and measured < w["profiled_step_ms"]


def test_cpu_findings_speak_of_threads_and_cores():
    a = analyze(load_trace(DATA / "cpu_gloo_tp2/domino"))
    for f in a.overheads.findings:
        assert "GPU" not in f.fix and "link" not in f.fix
    skew = [f for f in a.overheads.findings if f.id == "rank_skew"]
    assert not skew or "cores" in skew[0].fix


def test_busy_threads_sweep_and_cores():
    import pandas as pd

    from domino_prof.analysis.cpu_threads import busy_threads, why_text

    # thread 1 busy [0, 10) (two nested ops), gloo thread 2 [5, 15): both in step 1
    iv = pd.DataFrame({
        "rank": [0, 0, 0], "device": [9, 9, 9], "stream": [1, 1, 2],
        "start": [0, 2, 5], "end": [10, 4, 15], "iteration": [1, 1, 1],
        "kind": ["compute", "compute", "comm"],
    })  # fmt: skip
    b = busy_threads(iv, cpu_count=1)
    # busy thread-time 10 + 10 over a 15 ns span; two at once over [5, 10)
    assert (b["n_threads"], b["n_comm_threads"], b["peak_busy"]) == (2, 1, 2)
    assert b["mean_busy"] == pytest.approx(20 / 15)
    assert b["over_cores_share"] == pytest.approx(5 / 15)
    assert "1 cores" in why_text(b, None) and "33% of the time" in why_text(b, None)


def test_cpu_report_says_why_from_the_trace():
    from domino_prof.report.figures import whatif_sections

    a = analyze(load_trace(DATA / "cpu_gloo_tp2/domino"))
    secs = {s.key: s for s in whatif_sections(a, run={"cpu_count": 2})}
    assert list(secs) == ["whatif", "critical_path", "cpu_threads"]
    (text,) = secs["cpu_threads"].body.rows[0]
    assert "on a host with 2 cores" in text and "gloo runloop threads" in text


def test_check_gates_on_exposed_comm_on_the_critical_path(tmp_path):
    from typer.testing import CliRunner

    from domino_prof.cli import app

    d = tmp_path / "t"
    d.mkdir()
    for r in (0, 1):
        coupled_rank(r).write(d / f"rank{r}.json")
    run = CliRunner()
    # exposed comm on the critical paths: rank 0 34 µs, rank 1 14 µs (above)
    ok = run.invoke(app, ["check", str(d), "--max-critical-comm", "0.034"])
    assert ok.exit_code == 0, ok.output
    assert "0.034 ms" in ok.output and "0.014 ms" in ok.output
    bad = run.invoke(app, ["check", str(d), "--max-critical-comm", "0.02"])
    assert bad.exit_code == 1 and "FAIL: 1 of 2 checks failed" in bad.output
    neg = run.invoke(app, ["check", str(d), "--max-critical-comm", "-1"])
    assert neg.exit_code == 2 and "--max-critical-comm -1.0 must be >= 0" in neg.output


def test_a_graph_too_large_is_not_replayed_and_says_so(tmp_path, monkeypatch):
    from domino_prof.analysis import replay

    monkeypatch.setattr(replay, "REPLAY_MAX_NODES", 4)  # the trace has 5 nodes
    trace, iv = load(tmp_path, sync_starves_rank())
    out = analyze(trace, AnalysisConfig()).overheads
    assert out["whatif"]["computed"] is False and "exceed the 4" in out["whatif"]["reason"]
    f = next(f for f in out["findings"] if f["id"] == "blocking_sync")
    assert f["est_gain_ms_per_step"] is None and "no gain estimate" in f["detail"]


def gloo_rank() -> TraceBuilder:
    """CPU: the compute thread runs aten::mm [0, 10], enqueues an all-reduce
    (c10d::allreduce_ [10, 11]), blocks (no op) until the gloo thread's gloo:all_reduce
    [12, 30] ends, resumes 1 µs later with aten::add [31, 36]."""
    b = TraceBuilder(rank=0, backend="gloo")
    b.step(1, 0, 40)
    b.cpu("aten::mm", 0, 10)
    b.cpu("c10d::allreduce_", 10, 1)
    b.cpu("gloo:all_reduce", 12, 18, cat="user_annotation", tid=77)
    b.cpu("aten::add", 31, 5)
    return b


def test_cpu_gloo_replay_threads_as_streams(tmp_path):
    trace, iv = load(tmp_path, gloo_rank())
    out = analyze(trace, AnalysisConfig()).overheads
    w = out["whatif"]
    assert w["explained"] is True and w["profiled_step_ms"] == pytest.approx(0.036)
    g = gains(out)
    # the compute thread's gaps: 0 (mm -> c10d) and 20 (c10d -> add): median 10 µs.
    # comm removed: c10d [10, 10], gloo [12, 12] (its 2 µs enqueue latency), add starts
    # at max(10 + 10 (the median gap), 12 + 1 (the wake-up)) = 20: wall 25 -> 0.011
    assert g["no_comm"] == pytest.approx(0.011)
    # comm x 2: gloo [12, 48], add at max(11 + 10, 48 + 1) = 49 -> wall 54: -0.018
    assert g["comm_x2"] == pytest.approx(-0.018)
    assert "cuda_graphs" not in g and "no_syncs" not in g  # GPU-only scenarios
    # critical path: add 5 compute, 1 idle (wake-up), gloo 18 exposed comm, 2 host
    # (enqueue latency from the c10d op's start), mm 10 compute
    p = cp(out, 0)
    assert (p["compute_ns"], p["exposed_comm_ns"], p["host_ns"], p["idle_ns"]) == (
        15_000, 18_000, 2_000, 1_000)  # fmt: skip


def test_fixture_stream_switch_and_report(tmp_path):
    """Issue 21: the fixture's stream-switch idle is the NCCL kernel's late launch on the
    NCCL stream, which stalls no compute: free waits gain nothing, so (issue 35) it is no
    finding, while its figure stays in the stream-switch section; the page shows the
    what-if table and the critical path."""
    from domino_prof.report.page import write_report

    a = analyze(load_trace(DATA / "h200_llama3_3b_2layers_tp2/domino"))
    assert a.overheads["stream_switches"]["switch_gap_ms_per_step"] == pytest.approx(2.557306)
    assert gains(a.overheads)["free_waits"] == 0.0
    assert "stream_switch_gap" not in [f.id for f in a.overheads.findings]
    assert [f.id for f in a.overheads.findings] == [
        "host_bound_launches", "blocking_sync", "tiny_kernels"]  # fmt: skip
    html = write_report(a, tmp_path / "r.html").read_text()
    assert "What if" in html and "Critical path" in html
    assert "launches at CUDA-graph replay cost" in html


def test_a_trace_without_runtime_calls_says_why_not_an_index_error(tmp_path):
    """Device events only (no launch calls to join): the graph builds; with no launch,
    no kernel belongs to a ProfilerStep (METRICS.md: a device event's iteration is its
    launch's), so the what-if says that, not an IndexError."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("gemm_k1", stream=7, start=5, dur=20)
    b.kernel("gemm_k2", stream=7, start=30, dur=10)
    trace, iv = load(tmp_path, b)
    out = analyze(trace, AnalysisConfig()).overheads
    notes = " ".join(str(n) for n in out["notes"])
    assert "IndexError" not in notes and "not built" not in notes
    # the what-if's own note (topic replay) says why it has no step
    (note,) = notes_about(out["notes"], "replay")
    assert note == "what if: no device node inside a ProfilerStep#N"
    assert out["whatif"]["reason"] == "no device node inside a ProfilerStep#N"


def event_sync_of_an_old_event() -> TraceBuilder:
    """A host that keeps launches in flight (the executor's graph throttle): it syncs on
    the event recorded after the collective c1 [5, 35] while k2 [35, 45] and k3 [45, 50]
    are queued behind it; the sync (3 µs) returns at 36, 1 µs after c1 ends, not after
    k3; the host then launches k4 at 40: k4 [50, 60]."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel(NCCL, stream=7, start=5, dur=30, launch=0)
    b.kernel("gemm_k2", stream=7, start=35, dur=10, launch=1)
    b.kernel("gemm_k3", stream=7, start=45, dur=5, launch=2)
    b.runtime("cudaEventSynchronize", 3, 33)
    b.kernel("gemm_k4", stream=7, start=50, dur=10, launch=40)
    return b


def test_an_event_sync_waits_for_its_event_not_the_streams_last_launch(tmp_path):
    trace, iv = load(tmp_path, event_sync_of_an_old_event())
    out = analyze(trace, AnalysisConfig()).overheads
    w = out["whatif"]
    assert w["explained"] is True and w["profiled_step_ms"] == pytest.approx(0.055)
    assert w["n_dropped_edges"] == 0  # k3 (ends 50) as its target broke causality
    # comm removed: c1 [5, 5] and its 1 µs launch call gone, so every later host call is
    # 1 µs earlier: k2's launch at 0 + 5 µs latency: k2 [5, 15], k3 [15, 20]; the sync
    # returns 1 µs after c1, at 6; the host's 4 µs to k4's launch (10) + 5: ready 15;
    # k4 after k3 [20, 30]: wall 25 µs, gain 30 µs. (With the sync pinned at its
    # measured 33 µs, as before, k4 was launched at 39 and the gain was 5 µs.)
    assert gains(out)["no_comm"] == pytest.approx(0.030)
