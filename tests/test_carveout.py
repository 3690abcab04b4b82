"""--sm-carveout (reference_model/carveout.py): which segments take it, and the two torch
knobs it sets together. CPU: the runner's collectives are skipped (SkipComm), the torch
knobs are a recorder; the GPU effect is measured in benchmarks/bench_carveout.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from domino_prof.reference_model.carveout import Carveout, TorchBlas, carveout_of
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
    assert all(on for _, on in got) and calls == [24]  # set once, by the first segment


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
