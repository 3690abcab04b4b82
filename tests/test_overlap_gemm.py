"""--overlap-gemm (reference_model/overlap_gemm.py, triton_mm.py): which segments take the
Triton GEMM, that the step's GEMMs go through it then, and the config's refusals. CPU:
the Triton kernel itself cannot run here (bench_overlap_gemm.py checks it on the GPU
against an fp32 reference); a fake GEMM stands in and records what it was given."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from domino_prof.errors import ConfigError
from domino_prof.reference_model import triton_mm, units
from domino_prof.reference_model.config import RunConfig, tiny
from domino_prof.reference_model.overlap_gemm import OverlapGemm, overlap_gemm_of


def _step(schedule: str, splits: int, gemm, covered: bool = False, expected_ns=None):
    from domino_prof.reference_model.comm import SkipComm
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    cfg = tiny()
    inp, tgt = batch(cfg, mbs=2, seq=8, seed=1, device="cpu")
    comm = SkipComm(2, 1)
    if expected_ns is not None:  # the collectives' expected time, as an emulator says
        comm.expected_ns = lambda collective, *args: expected_ns
    model = shard_model(cfg, comm, seed=1)
    sw = OverlapGemm(gemm=gemm, covered=covered) if gemm is not None else None
    runner = StepRunner(model, comm, schedule=schedule, splits=splits, overlap_gemm=sw)
    try:
        runner.step(inp, tgt)
    finally:
        units.set_gemm_beside(None)
    return sw, [p.grad.clone() if p.grad is not None else None for p in model.parameters()]


class FakeGemm:
    """Computes a @ b (or out += a @ b) itself, in float64, and counts its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int, bool]] = []

    def __call__(self, a, b, out, accumulate):
        self.calls.append((a.shape[0], b.shape[1], a.shape[1], accumulate))
        r = (a.double() @ b.double()).to(a.dtype)
        if out is None:
            return r
        if accumulate:
            out.add_(r)
        else:
            out.copy_(r)
        return out


def test_tp_never_takes_it():
    fake = FakeGemm()
    sw, _ = _step("tp", 1, fake)
    assert fake.calls == [] and sw.counts[0] == 0 and sw.counts[1] > 0


def test_domino_routes_its_in_flight_segments_and_grads_stay_equal():
    """Domino, 2 micro-batches, tiny: the 20 of 28 segments issued beside an all-reduce
    (test_carveout.py counts them by hand) run their GEMMs through the fake; the
    gradients equal the cuBLAS-path (torch.mm) step's within fp32 rounding."""
    fake = FakeGemm()
    sw, grads = _step("domino", 2, fake)
    _, ref = _step("domino", 2, None)
    assert sw.counts == (20, 28)
    assert len(fake.calls) > 20  # forward, input- and weight-gradient GEMMs
    for g, r in zip(grads, ref):
        if r is not None:
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
    assert units._gemm_beside is None


def test_switch_sets_only_on_changes_and_the_table_lookup():
    log = []
    sw = OverlapGemm(gemm="G", setter=log.append)
    for f in (False, True, True, False, True):
        sw.segment(f)
    assert log == [None, "G", None, "G"] and sw.counts == (3, 5)
    sw.off()
    assert log[-1] is None
    assert triton_mm.tile_for(4096, 2048, 3072) == triton_mm.Tile(128, 128, 64, 3, 8)
    assert triton_mm.tile_for(4096, 3072, 384) is None  # wo: cuBLAS won beside
    assert triton_mm.tile_for(7, 7, 7) is None  # unmeasured: cuBLAS
    # CPU operands never take the kernel, whatever the table says
    a = torch.ones(4096, 3072, dtype=torch.bfloat16)
    assert triton_mm.beside(a, torch.ones(3072, 2048, dtype=torch.bfloat16)) is None


def test_config_refusals():
    assert overlap_gemm_of(SimpleNamespace(overlap_gemm="cublas"), torch.device("cuda")) is None
    assert overlap_gemm_of(SimpleNamespace(overlap_gemm="triton"), torch.device("cpu")) is None
    assert isinstance(overlap_gemm_of(SimpleNamespace(overlap_gemm="triton"),
                                      torch.device("cuda")), OverlapGemm)  # fmt: skip
    with pytest.raises(ConfigError, match="needs --device cuda"):
        RunConfig.check_options(device="cpu", overlap_gemm="triton")
    assert overlap_gemm_of(SimpleNamespace(overlap_gemm="triton-covered"),
                           torch.device("cuda")).covered  # fmt: skip
    with pytest.raises(ConfigError, match="one of cublas, triton, triton-covered"):
        RunConfig.check_options(device="cpu", overlap_gemm="cutlass")
    with pytest.raises(ConfigError, match="triton-covered needs --device cuda"):
        RunConfig.check_options(device="cpu", overlap_gemm="triton-covered")


# ---- triton-covered: the collectives' expected time, spent by the GEMMs ---------------
def test_covered_spends_the_expected_time_in_launch_order():
    """Hand-worked: at 2e9 FLOP/s a GEMM (M x K) @ (K x N) is expected to take M·K·N ns.
    Collective 1 covers 1000 ns: a 600-ns GEMM is tiled (1000 >= 300) and leaves 400; the
    next 600-ns GEMM is tiled (400 >= 300) and leaves 0 (its other 200 ns are not
    covered); the third finds nothing left: cuBLAS (None), and so does the next segment.
    Then collective 2 (500 ns) and 3 (unknown): 2's time is spent first; a 900-ns GEMM
    leaves 2 at 0 and 3 still covering (unknown = until waited for)."""
    log, fake = [], FakeGemm()
    sw = OverlapGemm(gemm=fake, setter=log.append, covered=True, flops=2e9)
    a, b = torch.ones(2, 3), torch.ones(3, 100)  # 2·3·100 = 600 ns
    sw.launched(1, 1000)
    sw.segment(True)
    g = log[-1]
    assert g is not None and sw.cover() == 1000
    assert g(a, b, None, False) is not None and sw.cover() == 400
    assert g(a, b, None, False) is not None and sw.cover() == 0
    assert g(a, b, None, False) is None and sw.cover() == 0
    assert len(fake.calls) == 2 and (sw.tiled, sw.seen) == (2, 2)
    sw.segment(True)  # still open, nothing left: cuBLAS
    assert log[-1] is None and sw.counts == (1, 2)
    sw.waited(1)
    sw.launched(2, 500)
    sw.launched(3, None)
    sw.segment(True)
    assert log[-1] is not None and sw.cover() == float("inf")
    log[-1](torch.ones(3, 3), torch.ones(3, 100), None, False)  # 900 ns
    assert sw._left == {2: 0.0, 3: None}
    sw.waited(3)
    assert sw.cover() == 0
    sw.reset()
    assert sw._left == {}
    half = OverlapGemm(gemm=fake, setter=log.append, covered=True, flops=2e9)
    half.launched(1, 299)  # under half of a 600-ns GEMM: cuBLAS, the time still spent
    half.segment(True)
    assert log[-1](a, b, None, False) is None and half.cover() == 0


def test_covered_step_nothing_when_nothing_runs_everything_when_all_is_covered():
    """Domino on 2 ranks' shard, tiny, with the skip comm: it says its collectives take
    0 ns, so triton-covered tiles nothing; a comm whose collectives take far longer than
    any GEMM gives exactly ``triton``'s GEMMs. The gradients equal torch's throughout."""
    _, ref = _step("domino", 2, None)
    none = FakeGemm()
    sw0, g0 = _step("domino", 2, none, covered=True)
    assert none.calls == [] and sw0.counts == (0, 28)
    every, plain = FakeGemm(), FakeGemm()
    sw1, g1 = _step("domino", 2, every, covered=True, expected_ns=10**15)
    _step("domino", 2, plain)
    assert every.calls == plain.calls and sw1.counts == (20, 28)
    assert sw1.tiled == sw1.seen == len(plain.calls)
    for grads in (g0, g1):
        for g, r in zip(grads, ref):
            if r is not None:
                torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
    assert units._gemm_beside is None
