"""--sm-carveout (reference_model/carveout.py): which segments take it, and the two torch
knobs it sets together. CPU: the runner's collectives are skipped (SkipComm), the torch
knobs are a recorder; the GPU effect is measured in benchmarks/bench_carveout.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from domino_prof.reference_model.carveout import Carveout, TorchBlas, auto_carveout, carveout_of
from domino_prof.reference_model.config import tiny


class Recorder:
    def __init__(self) -> None:
        self.calls: list = []

    def set(self, sms) -> None:
        self.calls.append(sms)


def _segments(schedule: str, splits: int, scope: str = "overlap"):
    """(segment key, carveout on) for every segment of one step of tiny at tp 2 (rank 1
    of SkipComm), and the recorder's calls."""
    from domino_prof.reference_model.comm import SkipComm
    from domino_prof.reference_model.executor import SegmentExecutor
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    cfg = tiny()
    inp, tgt = batch(cfg, mbs=2, seq=8, seed=1, device="cpu")
    comm = SkipComm(2, 1)
    model = shard_model(cfg, comm, seed=1)
    rec, got, phases = Recorder(), [], []
    runner = StepRunner(model, comm, schedule=schedule, splits=splits,
                        carveout=Carveout(24, scope, blas=rec))  # fmt: skip
    run = SegmentExecutor.run

    def spy(self, key, fn, *a, **k):
        out = run(self, key, fn, *a, **k)
        got.append((key, self.carveout._on))  # set by the segment() call inside run
        phases.append(self.phase)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SegmentExecutor, "run", spy)
        runner.step(inp, tgt)
    _segments.phases = phases  # the executor's phase at each segment, for scope fwd's test
    return got, rec.calls


def test_tp_never_takes_the_carveout():
    """tp waits for every collective at once: no segment is issued beside one."""
    got, calls = _segments("tp", 1)
    assert got and not any(on for _, on in got)
    assert calls == [None]  # the first segment sets it off explicitly (torch's own)


def test_domino_takes_it_exactly_beside_a_collective_in_flight():
    """Domino, 2 micro-batches, tiny (2 layers = 4 units, a head of 3 segments), by hand:
    a segment is issued with an all-reduce in flight unless every launched one was waited
    for. Off, 8 of the 28: the two embeddings and F(0,0) (nothing launched yet), the
    head's three forward segments of micro-batch 1 (micro-batch 0's reduce was waited
    before its head, micro-batch 1's before this one), the head's backward of micro-batch
    1 (the first of backward: the forward's reduces are all waited) and E'(0) (after the
    last wait). On: the other 20."""
    got, calls = _segments("domino", 2)
    off = {k for k, on in got if not on}
    assert len(got) == 28 and sum(on for _, on in got) == 20
    assert off == {("emb", 0, 0), ("emb", 0, 1), ("F", 0, 0), ("H1", 4, 1), ("H2", 4, 1),
                   ("H3", 4, 1), ("HD", 4, 1), ("E", 0, 0)}  # fmt: skip
    # the torch knobs change only where the state does: off, on, off (head 1), on, off
    assert calls == [None, 24, None, 24, None]


@pytest.mark.parametrize("schedule", ["domino", "domino-sp"])
def test_scope_fwd_is_overlap_in_the_forward_only(schedule):
    """Scope fwd: on exactly where scope overlap is on and the segment is of the forward.
    Domino by hand (the 28 segments above): forward = the 2 embeddings, 8 F and 6 head
    segments; overlap has 10 of them on (all but emb 0/1, F(0,0), H1-H3 of micro-batch
    1); the backward's 12 are off."""
    over, _ = _segments(schedule, 2)
    got, calls = _segments(schedule, 2, scope="fwd")
    phases = _segments.phases
    assert [k for k, _ in got] == [k for k, _ in over]
    assert set(phases) == {"fwd", "bwd"}
    assert [on for _, on in got] == [o and p == "fwd" for (_, o), p in zip(over, phases)]
    assert any(o and p == "bwd" for (_, o), p in zip(over, phases))  # overlap had some
    if schedule == "domino":
        fwd = [k for k, p in zip(got, phases) if p == "fwd"]
        assert len(fwd) == 16 and sum(on for _, on in got) == 10
        assert not any(on for (_, on), p in zip(got, phases) if p == "bwd")
        # off, on at F(0,1), off at micro-batch 1's head; the backward stays off
        assert calls == [None, 24, None]


@pytest.mark.parametrize("schedule", ["domino", "domino-sp"])
def test_scope_bwd_is_overlap_in_the_backward_only(schedule):
    """Scope bwd: on exactly where scope overlap is on and the segment is of the backward,
    so fwd and bwd split overlap's segments between them, none in both."""
    over, _ = _segments(schedule, 2)
    fwd, _ = _segments(schedule, 2, scope="fwd")
    got, _ = _segments(schedule, 2, scope="bwd")
    phases = _segments.phases
    assert [k for k, _ in got] == [k for k, _ in over]
    assert [on for _, on in got] == [o and p == "bwd" for (_, o), p in zip(over, phases)]
    assert [f + b for (_, f), (_, b) in zip(fwd, got)] == [int(o) for _, o in over]
    assert any(on for _, on in got) and any(on for _, on in fwd)
    if schedule == "domino":  # overlap's on segments beyond the forward's 10 (test above)
        assert sum(on for _, on in got) == sum(on for _, on in over) - 10 > 0


def test_scope_all_is_on_for_every_segment():
    got, calls = _segments("tp", 1, scope="all")
    # set once, by the first segment; off again when the step ends (Carveout.off)
    assert all(on for _, on in got) and calls == [24, None]


def test_torch_blas_sets_both_knobs_and_restores_torchs_library():
    log = []
    fake = SimpleNamespace(
        backends=SimpleNamespace(cuda=SimpleNamespace(
            preferred_blas_library=lambda *a: log.append(("lib", *a)) or "cublas")),
        _C=SimpleNamespace(_set_sm_carveout_experimental=lambda n: log.append(("sms", n))),
    )  # fmt: skip
    b = TorchBlas(fake)
    assert b.default == "cublas" and log == [("lib",)]  # read, not set
    log.clear()
    b.set(16)
    b.set(None)
    assert log == [("lib", "cublaslt"), ("sms", 16), ("sms", None), ("lib", "cublas")]


def test_carveout_of_and_bad_values():
    cfg = SimpleNamespace(sm_carveout=8, carveout_scope="overlap")
    assert carveout_of(cfg, torch.device("cpu")) is None  # not CUDA: none
    c = carveout_of(cfg, torch.device("cuda"))
    assert (c.sms, c.scope, c.counts) == (8, "overlap", (0, 0))
    with pytest.raises(ValueError, match="one of overlap, fwd, bwd, all"):
        Carveout(8, "gemms")
    with pytest.raises(ValueError, match=">= 0"):
        Carveout(-1)


class _Stand:
    """A comm whose collectives are an SM stand-in of ``n`` CTAs (None: copy engines)."""

    def __init__(self, n) -> None:
        self.n, self.asked = n, []

    def sm_ctas(self, dtype):
        self.asked.append(dtype)
        return self.n


def test_auto_carveout_is_domino_sp_s_backward_beside_an_sm_stand_in_only():
    from domino_prof.reference_model import modes

    on = SimpleNamespace(carveout_auto=True, cuda_graphs=True)
    dsp, rec = modes.SCHEDULES["domino-sp"], Recorder()
    stand = _Stand(24)
    c = auto_carveout(on, dsp, stand, torch.bfloat16, blas=rec)
    assert (c.sms, c.scope, c.auto, stand.asked) == (24, "bwd", True, [torch.bfloat16])
    assert auto_carveout(on, dsp, _Stand(8), torch.bfloat16, blas=rec).sms == 8  # --comm-ctas
    for sched in ("tp", "domino", "sp"):  # not micro-batched SP: none
        assert auto_carveout(on, modes.SCHEDULES[sched], _Stand(24), None, blas=rec) is None
    assert auto_carveout(on, dsp, _Stand(None), None, blas=rec) is None  # copy engines
    assert auto_carveout(on, dsp, object(), None, blas=rec) is None  # real or skipped comm
    off = SimpleNamespace(carveout_auto=False, cuda_graphs=True)
    assert auto_carveout(off, dsp, stand, None, blas=rec) is None
    eager = SimpleNamespace(carveout_auto=True, cuda_graphs=False)  # eager: host time, none
    assert auto_carveout(eager, dsp, stand, None, blas=rec) is None
    assert rec.calls == []  # deciding sets nothing


def test_carveout_of_prefers_sm_carveout_and_is_cuda_only():
    from domino_prof.reference_model import modes

    dsp = modes.SCHEDULES["domino-sp"]
    explicit = SimpleNamespace(sm_carveout=12, carveout_scope="fwd", carveout_auto=True)
    c = carveout_of(explicit, torch.device("cuda"), spec=dsp, comm=_Stand(24))
    assert (c.sms, c.scope, c.auto) == (12, "fwd", False)
    auto = SimpleNamespace(sm_carveout=None, carveout_scope="overlap", carveout_auto=True,
                           cuda_graphs=True)  # fmt: skip
    assert carveout_of(auto, torch.device("cpu"), spec=dsp, comm=_Stand(24)) is None
    assert carveout_of(auto, torch.device("cuda"), spec=modes.SCHEDULES["domino"],
                       comm=_Stand(24)) is None  # fmt: skip


def test_off_turns_torch_s_state_back_only_where_it_set_one():
    """Carveout.off (the executor calls it when a step ends: scope all's test above sees
    it, [24, None]); a runner without a carveout, tp's under --carveout-auto, issues
    after a domino-sp step that left it on."""
    rec = Recorder()
    c = Carveout(24, "bwd", blas=rec)
    c.off()  # never set: nothing to undo
    c.segment(True, "fwd")
    c.off()  # set off by the forward segment: nothing to undo
    c.segment(True, "bwd")
    c.off()
    c.off()
    assert rec.calls == [None, 24, None] and c.counts == (1, 2)


def test_emulated_comm_s_sm_ctas_are_the_profile_s_or_comm_ctas():
    """What --carveout-auto carves: the stand-in's CTAs of the reduce-scatters and
    all-gathers (h200-nvlink-tp8: 24 each), --comm-ctas N's count, none on copy engines."""
    from domino_prof.emulation.profile import load_profile
    from domino_prof.reference_model.emulate import EmulatedComm

    c = object.__new__(EmulatedComm)  # no GPU here: only what sm_ctas reads
    c.profile, c.size, c.engine, c.ctas = load_profile("h200-nvlink-tp8"), 8, "sm", None
    assert c.sm_ctas(torch.bfloat16) == 24 and c.sm_ctas(torch.float32) == 24
    c.ctas = 16
    assert c.sm_ctas(torch.bfloat16) == 16
    c.engine, c.ctas = "ce", None
    assert c.sm_ctas(torch.bfloat16) is None
