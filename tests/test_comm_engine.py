"""--comm-engine ce (issue 34): the copy-engine collectives' plan (emulation/ce.py, hand-worked
times and offsets), the run options' refusals, the trace mark, and the analyzer's rule that the
copies on the emulated comm's stream are comm (docs/METRICS.md "Device activity").
Builder times are µs, expected ns. CPU only: the GPU side is measured by the benchmarks."""

from __future__ import annotations

import pytest
from tracegen import TraceBuilder

from domino_prof.emulation import ce
from domino_prof.emulation.marker import comm_marker
from domino_prof.engine import analyze
from domino_prof.errors import ConfigError
from domino_prof.reference_model.config import RunConfig
from domino_prof.trace import load_trace

US = 1000
# n = 330,000 bf16 = 660,000 B: 2000 ns on the wire at 330 GB/s, + 2000 ns copy alpha
N = 330_000
P = ce.CeParams(bw_gbps=330.0, copy_alpha_us=2.0, barrier_us=5.0)


def test_all_gather_plan_is_hand_worked():
    (ph,) = ce.plan("all_gather", ranks=4, rank=1, numel_in=N, numel_out=4 * N, elem_bytes=2,
                    params=P)  # fmt: skip
    # barrier 5000; own chunk +2000; three remote copies +4000 each; closing barrier +5000
    assert [s.due_ns for s in ph.steps] == [7000, 11000, 15000, 19000]
    assert ph.end_ns == 24000 and ph.reduce_to is None
    # torch's order: step s pulls peer (rank - s) mod R into out's slot of that peer
    assert [(s.src, s.src_off, s.dst, s.dst_off, s.count) for s in ph.steps] == [
        ("t", 0, "out", 1 * N, N), ("t", 0, "out", 0, N),
        ("t", 0, "out", 3 * N, N), ("t", 0, "out", 2 * N, N)]  # fmt: skip


def test_reduce_scatter_plan_pushes_every_chunk_then_reduces():
    (ph,) = ce.plan("reduce_scatter", ranks=4, rank=2, numel_in=4 * N, numel_out=N,
                    elem_bytes=2, params=P)  # fmt: skip
    assert [(s.src_off, s.dst, s.dst_off) for s in ph.steps] == [
        (2 * N, "ws", 2 * N), (1 * N, "ws", 1 * N), (0, "ws", 0), (3 * N, "ws", 3 * N)]
    assert ph.reduce_to == "out" and ph.end_ns == 24000


def test_all_reduce_is_a_reduce_scatter_then_a_gather_each_on_its_own_clock():
    rs, ag = ce.plan("all_reduce", ranks=4, rank=0, numel_in=4 * N, numel_out=4 * N,
                     elem_bytes=2, params=P)  # fmt: skip
    assert rs.reduce_to == "red" and ag.reduce_to is None
    assert [s.due_ns for s in ag.steps] == [7000, 11000, 15000, 19000]
    assert {s.src for s in ag.steps} == {"red"} and {s.dst for s in ag.steps} == {"t"}
    assert ce.total_ns((rs, ag)) == 48000
    with pytest.raises(ConfigError, match="does not split into 4 equal chunks"):
        ce.plan("all_reduce", ranks=4, rank=0, numel_in=4 * N + 1, numel_out=4 * N + 1,
                elem_bytes=2)  # fmt: skip


def test_bandwidth_override_and_its_refusal(monkeypatch):
    monkeypatch.setenv("DOMINO_PROF_CE_GBPS", "165")
    p = ce.CeParams.from_env()
    (ph,) = ce.plan("all_gather", ranks=2, rank=0, numel_in=N, numel_out=2 * N, elem_bytes=2,
                    params=p)  # fmt: skip
    # own 2000 after the 5000 barrier, then 2000 + 660000 B / 165 GB/s = 6000
    assert [s.due_ns for s in ph.steps] == [7000, 13000]
    monkeypatch.setenv("DOMINO_PROF_CE_GBPS", "fast")
    with pytest.raises(ConfigError, match="DOMINO_PROF_CE_GBPS='fast'"):
        ce.CeParams.from_env()


def _cfg(**kw):
    base = {"model": "tiny", "tp": 2, "device": "cpu", "comm": "gloo"}
    base.update(kw)
    return RunConfig.from_options(**base)


def test_run_options_refuse_what_is_not_built():
    with pytest.raises(ConfigError, match="--comm-engine must be one of sm, ce"):
        _cfg(comm_engine="dma")
    with pytest.raises(ConfigError, match="--comm-engine ce is emulated only"):
        _cfg(comm_engine="ce")
    with pytest.raises(ConfigError, match="drop one of them"):
        _cfg(comm_engine="ce", comm_ctas=8)
    assert _cfg().comm_engine == "sm"


def test_the_mark_names_the_engine_only_when_it_is_not_the_default():
    assert "engine" not in comm_marker("h200-nvlink-tp8", ranks=8, engine="sm")
    assert comm_marker("h200-nvlink-tp8", ranks=8, engine="ce")["engine"] == "ce"


GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"


def _ce_rank(comm_kernel: str) -> TraceBuilder:
    """compute stream 7: GEMM [0,100), a graph copy kernel [100,103), a copy [105,108);
    comm stream 20: start [10,11), copy [11,14), wait [14,30), graph copy kernel [30,33),
    wait [33,50): the copy-engine stand-in's shape."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 120)
    b.kernel(GEMM, stream=7, start=0, dur=100, launch=0)
    b.kernel(f"{comm_kernel}_start", stream=20, start=10, dur=1, launch=1)
    b.memcpy(stream=20, start=11, dur=3, launch=2)
    b.kernel(f"{comm_kernel}_wait", stream=20, start=14, dur=16, launch=3)
    b.kernel("memcpy128", stream=20, start=30, dur=3, launch=4)
    b.kernel(f"{comm_kernel}_wait", stream=20, start=33, dur=17, launch=5)
    b.kernel("memcpy128", stream=7, start=100, dur=3, launch=6)
    b.memcpy(stream=7, start=105, dur=3, launch=7)
    return b


def test_copies_on_the_emulated_comm_stream_are_comm(tmp_path):
    t = analyze(load_trace(_ce_rank("emulated_allgather_ce").write(tmp_path / "r.json"))).totals
    # comm [10,50) whole (start, copy, wait, copy kernel, wait), all under the GEMM
    assert (t["comm_ns"], t["hidden_ns"], t["exposed_ns"]) == (40 * US, 40 * US, 0)
    assert t["intervals_by_kind"] == {"compute": 2, "comm": 5, "memory": 1}
    assert [(s["source"], s["n_intervals"], s["busy_ns"]) for s in t["comm_sources"]] == [
        ("emulated", 5, 40 * US)]


def test_copies_beside_other_comm_stay_what_they_were(tmp_path):
    # the same shape with NCCL's kernel names: no emulated kernel, so the copy on the comm
    # stream is memory and the graph copy kernel compute, as for any trace
    nccl = "ncclDevKernel_AllGather_RING_LL"
    t = analyze(load_trace(_ce_rank(nccl).write(tmp_path / "r.json"))).totals
    assert t["intervals_by_kind"] == {"compute": 3, "comm": 3, "memory": 2}
    assert t["comm_ns"] == (1 + 16 + 17) * US
