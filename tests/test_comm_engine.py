"""--comm-engine ce (issue 34): the copy-engine collectives' plan (emulation/ce.py, hand-worked
times and offsets), the run options' refusals, the trace mark, and the analyzer's rule that the
copies on the emulated comm's stream are comm (docs/METRICS.md "Device activity").
Builder times are µs, expected ns. CPU only: the GPU side is measured by the benchmarks."""

from __future__ import annotations

import shutil
import subprocess
from types import SimpleNamespace

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
# the reduction of R = 4 chunks: 5 n B = 3,300,000 B at 1650 GB/s = 2000 ns, + 2000 ns alpha
P = ce.CeParams(bw_gbps=330.0, copy_alpha_us=2.0, barrier_us=5.0, reduce_gbps=1650.0,
                reduce_alpha_us=2.0)  # fmt: skip


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
    # the reduction is modelled after the closing barrier: + 4000
    assert ph.reduce_end_ns == 28000 and ce.total_ns((ph,)) == 28000


def test_all_reduce_is_a_reduce_scatter_then_a_gather_on_the_call_s_one_clock():
    rs, ag = ce.plan("all_reduce", ranks=4, rank=0, numel_in=4 * N, numel_out=4 * N,
                     elem_bytes=2, params=P)  # fmt: skip
    assert rs.reduce_to == "red" and ag.reduce_to is None
    assert [s.due_ns for s in rs.steps] == [7000, 11000, 15000, 19000]
    assert (rs.end_ns, rs.reduce_end_ns) == (24000, 28000)
    # the gather is due after the reduce-scatter's reduction: 28000 + barrier 5000 + ...
    assert [s.due_ns for s in ag.steps] == [35000, 39000, 43000, 47000]
    assert ag.end_ns == 52000 and ag.reduce_end_ns is None
    assert {s.src for s in ag.steps} == {"red"} and {s.dst for s in ag.steps} == {"t"}
    assert ce.total_ns((rs, ag)) == 52000
    # the shipped parameters, a [4096, 3072] bf16 all-reduce at TP 8: a phase is 5 + 2 us,
    # 7 x (2 us + 1,572,864 x 2 B / 330 GB/s), 5 us; the reduction 2 us + 9 chunks / 3678 GB/s
    phase = 5000 + 2000 + 7 * (2000 + 1_572_864 * 2 / 330) + 5000
    reduction = 2000 + 9 * 1_572_864 * 2 / 3678
    full = ce.plan("all_reduce", ranks=8, rank=0, numel_in=4096 * 3072, numel_out=4096 * 3072,
                   elem_bytes=2)  # fmt: skip
    assert full[0].reduce_end_ns == round(round(phase) + reduction)  # 102,426
    assert ce.total_ns(full) == round(round(round(phase) + reduction) + phase)  # 195,154, was 185,456
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


@pytest.mark.parametrize(
    "var, field, default, other, bad, message",
    [
        ("DOMINO_PROF_CE_PACE", "pace", "phase", "copy", "step",
         "DOMINO_PROF_CE_PACE='step': one of copy, phase"),
        ("DOMINO_PROF_CE_COPY", "copier", "torch", "driver", "dma",
         "DOMINO_PROF_CE_COPY='dma': one of torch, driver; unset it for torch"),
    ],
)  # fmt: skip
def test_choice_overrides_and_their_refusal(monkeypatch, var, field, default, other, bad,
                                            message):  # fmt: skip
    monkeypatch.delenv(var, raising=False)
    assert getattr(ce.CeParams.from_env(), field) == default
    monkeypatch.setenv(var, other)
    assert getattr(ce.CeParams.from_env(), field) == other
    monkeypatch.setenv(var, bad)
    with pytest.raises(ConfigError, match=message):
        ce.CeParams.from_env()


def test_the_reduction_kernel_is_chosen_by_dtype_and_alignment(monkeypatch):
    from domino_prof.reference_model import _ce_kernel as ck
    from domino_prof.reference_model import _paced_kernel as pk

    monkeypatch.setattr(ck, "_func", lambda name: name)  # no CUDA here: the name is the func
    monkeypatch.setattr(pk, "_libcuda", lambda: None)
    kw = {"ws_ptr": 4096, "out_ptr": 8192, "ranks": 8}
    r = ck.reduce("all_reduce", "bfloat16", numel=1_572_864, **kw)
    # 16-byte vectors: 196,608 of them, 768 CTAs of 256 threads
    assert (r._func, r._args[2].value, r._grid, r._threads) == (
        "emulated_allreduce_ce_reduce_bf16x8", 196_608, 768, 256)
    assert ck.reduce("reduce_scatter", "bfloat16", numel=1_572_864, ws_ptr=4096, out_ptr=8194,
                     ranks=8)._func == "emulated_reducescatter_ce_reduce_bf16"  # fmt: skip
    assert ck.reduce("all_reduce", "bfloat16", numel=12, **kw)._func.endswith("_bf16")
    big = ck.reduce("all_reduce", "float32", numel=10**8, **kw)
    assert (big._func, big._grid) == ("emulated_allreduce_ce_reduce_f32", ck.REDUCE_MAX_CTAS)
    assert ck.reduce("all_reduce", "float16", numel=1024, **kw) is None  # torch reduces it
    r.set_pointer(1, 12288)
    assert r._args[1].value == 12288


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


def test_only_the_copies_inside_a_stand_in_call_are_comm(tmp_path):
    """comm stream 20 (a whole-step graph may put compute there too): call A start [10,11),
    copy [11,14), wait [14,30); a copy [32,35) between calls; call B start [40,41), graph copy
    kernel [41,44), wait [44,60); a copy [62,65) before a GEMM [66,90) on the same stream."""
    cc = "emulated_allreduce_ce"
    b = TraceBuilder(rank=0)
    b.step(1, 0, 120)
    b.kernel(GEMM, stream=7, start=0, dur=100, launch=0)
    b.kernel(f"{cc}_start", stream=20, start=10, dur=1, launch=1)
    b.memcpy(stream=20, start=11, dur=3, launch=2)
    b.kernel(f"{cc}_wait", stream=20, start=14, dur=16, launch=3)
    b.memcpy(stream=20, start=32, dur=3, launch=4)
    b.kernel(f"{cc}_start", stream=20, start=40, dur=1, launch=5)
    b.kernel("memcpy128", stream=20, start=41, dur=3, launch=6)
    b.kernel(f"{cc}_wait", stream=20, start=44, dur=16, launch=7)
    b.memcpy(stream=20, start=62, dur=3, launch=8)
    b.kernel(GEMM, stream=20, start=66, dur=24, launch=9)
    t = analyze(load_trace(b.write(tmp_path / "r.json"))).totals
    assert t["intervals_by_kind"] == {"compute": 2, "comm": 6, "memory": 2}
    # comm [10,30) and [40,60), both under the GEMM of stream 7
    assert (t["comm_ns"], t["hidden_ns"]) == (40 * US, 40 * US)


def test_a_ce_run_outside_a_step_graph_gets_a_note():
    from dataclasses import replace

    from domino_prof.reference_model.config import config_notes, preset

    c = RunConfig(model=preset("llama3-3b"), tp=8, seq=4096, device="cuda", dtype="bfloat16",
                  comm="emulate", comm_engine="ce", cuda_graphs=True).validate()  # fmt: skip
    assert c.graph_scope == "step" and config_notes(c) == []
    (note,) = config_notes(replace(c, cuda_graphs=False))
    assert note.startswith("--comm-engine ce outside a whole-step CUDA graph") and \
        "add --cuda-graphs" in note
    assert len(config_notes(replace(c, graph_scope="segment"))) == 1
    assert config_notes(replace(c, comm_engine="sm", cuda_graphs=False)) == []


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (a CUDA toolkit)")
def test_the_ce_kernels_compile_where_nvcc_is(tmp_path):
    """The stand-in's CUDA source (compiled by NVRTC at run time, on the GPU only) compiles
    for sm_90 and holds every kernel _ce_kernel launches, the shared link's two included
    (EmulatedComm.lane_sibling): a syntax slip shows here, not in a GPU session."""
    from domino_prof.reference_model import _ce_kernel as ck

    src = tmp_path / "ce.cu"
    src.write_text(ck.SOURCE)
    out = tmp_path / "ce.cubin"
    r = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(out), str(src)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    blob = out.read_bytes()
    for short in ck._SHORT.values():
        for kind in ("ce_start", "ce_start_link", "link_gate", "ce_wait"):
            assert f"emulated_{short}_{kind}\0".encode() in blob, (short, kind)
    for short in ("allreduce", "reducescatter"):
        for dt in ("bf16x8", "bf16", "f32"):
            assert f"emulated_{short}_ce_reduce_{dt}\0".encode() in blob, (short, dt)


def test_the_lane_link_probe_judges_serialised_pairs():
    """benchmarks/probe_lane_link.py's check, on the H100 figures of 2026-12-06
    (reports/emulated-h100-2026-12-06/probes.log, µs): sm one 212.288, model 189.456, a
    pair through the link 399.632 and staggered 399.376 hold (one + model = 401.7); two
    comms with no link (224.816, run at once) do not; ce's (one 260.080, model 195.154,
    pair 508.736, staggered 526.144) hold, under 2 one = 520.2 + 5 %."""
    from script_module import load

    probe = load("benchmarks/probe_lane_link.py", "_probe_lane_link")
    assert probe.link_holds(212.288, 189.456, 399.632, 399.376)
    assert not probe.link_holds(212.288, 189.456, 224.816)
    assert probe.link_holds(260.080, 195.154, 508.736, 526.144)
    assert not probe.link_holds(260.080, 195.154, 560.0)  # over 2 one by more than 5 %
    assert not probe.link_holds(212.288, 189.456, 380.0)  # under (one + model) by 5.4 %


def test_lane_phase_measures_the_gap_between_the_lanes_calls():
    """benchmarks/lane_phase.py on hand-made intervals (``classify``'s columns, ns): step 1
    spans 0-1000 µs with calls on comm streams 7 and 9 at 400, 450, 700, 800 and on 7 at
    950 (after --from 0.37: 370 µs); gaps 7->9: 50, 100; 9->7: 250, 150. A call at 300 is
    in the forward, one outside the profiled steps (iteration -1) is left out, and step 2
    (2000-3000 µs: 9 at 2600, 7 at 2620) adds 9->7: 20 without a gap across the steps."""
    pd = pytest.importorskip("pandas")
    from script_module import load

    lp = load("benchmarks/lane_phase.py", "_lane_phase")
    rows = [(1, 3, 0, 10, "gemm"), (1, 7, 300, 301, "s"), (1, 7, 400, 401, "s"),
            (1, 9, 450, 451, "s"), (1, 7, 700, 701, "s"), (1, 9, 800, 801, "s"),
            (1, 7, 950, 951, "s"), (1, 3, 999, 1000, "gemm"), (-1, 9, 960, 961, "s"),
            (2, 3, 2000, 2010, "gemm"), (2, 9, 2600, 2601, "s"), (2, 7, 2620, 2621, "s"),
            (2, 3, 2999, 3000, "gemm")]  # fmt: skip
    iv = pd.DataFrame(
        [(it, st, t0 * 1000, t1 * 1000, "emulated_allreduce_ce_start_link" if n == "s" else n)
         for it, st, t0, t1, n in rows],
        columns=["iteration", "stream", "start", "end", "name"])  # fmt: skip
    assert lp.starts(iv).groupby("stream").size().to_dict() == {7: 5, 9: 3}
    assert lp.gaps(iv, frm=0.37) == {(7, 9): [50, 100], (9, 7): [250, 150, 20]}
    assert lp.gaps(iv, frm=0.5) == {(7, 9): [100], (9, 7): [150, 20]}


def test_comm_ctas_without_a_curve_is_refused_before_any_mode_runs():
    """--comm-ctas under --comm emulate needs each needed entry's per-CTA bandwidth curve,
    checked at validation: before 2026-12-06 --mode all failed only once tp, nocomm,
    domino and domino-nocomm had run (reports/emulated-h100-2026-12-06c/call1,
    sm-ctas16-c16). h200-nvlink-tp8 has every curve since 2026-12-07 (the reduce-scatter's
    and all-gather's derived from the all-reduce's); h200-nvlink-tp4 has none."""
    em = {"model": "llama3-3b", "tp": 8, "device": "cuda", "comm": "emulate", "comm_ctas": 16}
    ok = _cfg(**em).validate()  # every mode: sp's all-gathers and reduce-scatters too
    assert ok.comm_ctas == 16 and ok.comm_profile == "h200-nvlink-tp8"
    tp4 = {**em, "tp": 4}
    with pytest.raises(ConfigError, match=r"entry all_reduce R=4 bfloat16 has no per-CTA "
                                          r"bandwidth curve .* --comm-ctas 16"):  # fmt: skip
        _cfg(**tp4).validate()
    assert _cfg(**{**tp4, "comm_ctas": 24}).validate().comm_ctas == 24  # the entries' own CTAs


def test_reduce_scatter_and_all_gather_bandwidth_at_fewer_ctas():
    """The derived curve of h200-nvlink-tp8's reduce-scatter and all-gather: the
    all-reduce's published points (1 / 2 / 4 / 8 CTAs: 37.5 / 74.1 / 133.5 / 234 GB/s),
    then linear up to the entry's own 24 CTAs and busbw (all-gather 350, reduce-scatter
    360 GB/s). Hand-worked: at 12 CTAs 234 + (350 - 234) * 4 / 16 = 263 and
    234 + (360 - 234) * 4 / 16 = 265.5 GB/s busbw, algbw = busbw * R / (R - 1); at 3 CTAs
    74.1 + (133.5 - 74.1) / 2 = 103.8 for both."""
    from domino_prof.emulation.profile import load_profile

    prof = load_profile("h200-nvlink-tp8")
    for coll, full, at12 in (("all_gather", 350.0, 263.0), ("reduce_scatter", 360.0, 265.5)):
        e = prof.entry(coll, 8, "bfloat16")
        assert e.busbw_at(12) == pytest.approx(at12, rel=1e-6)
        assert e.busbw_at(3) == pytest.approx(103.8)
        assert e.busbw_at(24) == e.busbw_at(32) == pytest.approx(full, rel=1e-6)
        e12 = e.with_ctas(12)
        assert e12.ctas == 12 and e12.algbw_gbps == pytest.approx(at12 * 8 / 7, rel=1e-6)
        assert e12.alpha_us == e.alpha_us


def test_comm_ctas_scope_is_checked_in_one_line():
    em = {"model": "llama3-3b", "tp": 8, "device": "cuda", "comm": "emulate"}
    cfg = _cfg(**em, comm_ctas=12, comm_ctas_scope="bwd").validate()
    assert (cfg.comm_ctas, cfg.comm_ctas_scope) == (12, "bwd")
    with pytest.raises(ConfigError, match=r"^--comm-ctas-scope must be one of all, bwd, got "):
        _cfg(**em, comm_ctas=12, comm_ctas_scope="fwd").validate()
    with pytest.raises(ConfigError, match=r"^--comm-ctas-scope bwd says which .* add "
                                          r"--comm-ctas N$"):  # fmt: skip
        _cfg(**em, comm_ctas_scope="bwd").validate()
    with pytest.raises(ConfigError, match=r"^--comm-ctas-scope bwd runs with --comm emulate "
                                          r"only"):  # fmt: skip
        _cfg(model="llama3-3b", tp=8, device="cuda", comm="nccl", comm_ctas=12,
             comm_ctas_scope="bwd").validate()  # fmt: skip


def test_comm_ctas_scope_bwd_sends_the_backward_s_collectives_to_its_comm():
    """``--comm-ctas-scope bwd`` (schedule._bwd_comm): the executor launches a collective
    through ``bwd_comm`` while the schedule's phase is the backward, through the step's
    comm otherwise. domino-sp on CPU at tp 1 (each collective a copy), 2 layers: the
    forward's all-gathers and reduce-scatters (ag, rs) and the vocab-parallel loss's
    all-reduces (max, sum) go to one comm, the backward's
    (rsb, gag, nag, and the norm weights' all-reduce at the end) to the other, and the
    gradients are bitwise those of a step with one comm."""
    import torch

    from domino_prof.reference_model import schedule as sched
    from domino_prof.reference_model.comm import ProcessGroupComm, SkipComm
    from domino_prof.reference_model.config import ModelConfig
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    class Rec(ProcessGroupComm):
        def __init__(self, tag, log):
            super().__init__()
            self.tag, self.log = tag, log

        def all_reduce(self, t, *, async_op, op="sum"):
            self.log.append(self.tag)
            return super().all_reduce(t, async_op=async_op, op=op)

        def all_gather(self, out, t, *, async_op):
            self.log.append(self.tag)
            return super().all_gather(out, t, async_op=async_op)

        def reduce_scatter(self, out, t, *, async_op):
            self.log.append(self.tag)
            return super().reduce_scatter(out, t, async_op=async_op)

    cfg = ModelConfig(name="t", dim=32, ffn_dim=64, n_heads=4, n_kv_heads=2, n_layers=2,
                      vocab_size=64)  # fmt: skip
    inp, tgt = batch(cfg, mbs=2, seq=8, seed=3, device="cpu")
    grads = {}
    for scoped in (False, True):
        log: list = []
        fwd = Rec("fwd", log)
        model = shard_model(cfg, fwd, seed=1, device="cpu", dtype=torch.float32)
        # regather: its backward all-gathers of the norm outputs (nag) are routed too
        r = StepRunner(model, fwd, schedule="domino-sp", splits=2, record=True,
                       bwd_comm=Rec("bwd", log) if scoped else None,
                       sp_wgrad_input="regather")  # fmt: skip
        r.step(inp, tgt)
        launches = [k for ev, k in r.executor.events if ev == "launch"]
        assert len(launches) == len(log)
        by = {}
        for key, tag in zip(launches, log):
            by.setdefault(key[0], set()).add(tag)
        if scoped:
            assert by == {"ag": {"fwd"}, "rs": {"fwd"}, "max": {"fwd"}, "sum": {"fwd"},
                          "rsb": {"bwd"}, "gag": {"bwd"}, "nag": {"bwd"},
                          "norm-grads": {"bwd"}}  # fmt: skip
        else:
            assert set().union(*by.values()) == {"fwd"}
        grads[scoped] = [p.grad.clone() for p in model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(grads[False], grads[True]))

    # build_runner's choice: the emulated comm's phase sibling at --comm-ctas N, only
    # with --comm-ctas-scope bwd, and none for a comm with nothing to run
    class Em:
        def phase_sibling(self, n):
            return ("sibling", n)

    scope = SimpleNamespace(comm_ctas=12, comm_ctas_scope="bwd")
    assert sched._bwd_comm(scope, Em()) == ("sibling", 12)
    assert sched._bwd_comm(SimpleNamespace(comm_ctas=12, comm_ctas_scope="all"), Em()) is None
    assert sched._bwd_comm(scope, SkipComm(8, 0)) is None


def test_side_priority_knob_is_read_checked_and_recorded(monkeypatch):
    """DOMINO_PROF_SIDE_PRIORITY: domino-sp's side stream at the compute stream's priority
    (normal, the default) or the highest; run.json's side_stream says so only when it is
    not the default; a bad value is one line at validation (CUDA), not a rank's
    traceback."""
    from domino_prof.reference_model import streams
    from domino_prof.reference_model.config import side_priority, side_stream_info

    cuda = SimpleNamespace(device="cuda")
    monkeypatch.delenv("DOMINO_PROF_SIDE_PRIORITY", raising=False)
    assert side_priority() == "normal" and side_stream_info(cuda) is None
    made = []
    monkeypatch.setattr(streams.torch.cuda, "Stream",
                        lambda device, priority=0: made.append(priority) or object())
    streams.CudaStreams("cuda")
    monkeypatch.setenv("DOMINO_PROF_SIDE_PRIORITY", "high")
    assert side_stream_info(cuda) == {"priority": "high"}
    assert side_stream_info(SimpleNamespace(device="cpu")) is None  # no side stream on CPU
    streams.CudaStreams("cuda")
    streams.CudaStreams("cuda", side=False)  # the lanes' streams only: no side stream made
    assert made == [0, streams.HIGHEST]
    monkeypatch.setenv("DOMINO_PROF_SIDE_PRIORITY", "max")
    em = {"model": "llama3-3b", "tp": 8, "device": "cuda", "comm": "emulate"}
    with pytest.raises(ConfigError, match=r"^DOMINO_PROF_SIDE_PRIORITY='max': give normal or "
                                          r"high$"):  # fmt: skip
        _cfg(**em)
    assert _cfg(device="cpu").device == "cpu"  # CPU: no side stream, the knob unread
