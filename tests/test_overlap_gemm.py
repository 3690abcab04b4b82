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


def _step(schedule: str, splits: int, gemm):
    from domino_prof.reference_model.comm import SkipComm
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    cfg = tiny()
    inp, tgt = batch(cfg, mbs=2, seq=8, seed=1, device="cpu")
    comm = SkipComm(2, 1)
    model = shard_model(cfg, comm, seed=1)
    sw = OverlapGemm(gemm=gemm) if gemm is not None else None
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
    with pytest.raises(ConfigError, match="cublas or triton"):
        RunConfig.check_options(device="cpu", overlap_gemm="cutlass")
