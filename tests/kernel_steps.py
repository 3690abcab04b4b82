"""The one A/B step of the Triton kernels' tests (test_rope_kernel.py,
test_norm_kernel.py): a training step of rank 1 of a tp-2 tiny model (SkipComm: no
process group) with the kernel, counting its launches, then with aten's, asserting the
two steps' loss and every gradient the same to fp32 rounding."""

from __future__ import annotations

import pytest


def kernel_against_aten(schedule: str, module, fn: str, use_aten,
                        monkeypatch) -> tuple[int, int]:  # fmt: skip
    """Run the step with ``module.fn`` counted, then ``use_aten()`` and the step again.
    Returns (the kernel's launches in the first step, the micro-batches: 2 for the domino
    schedules, else 1); asserts the second step launched none and matches the first."""
    from domino_prof.reference_model.comm import SkipComm
    from domino_prof.reference_model.config import tiny
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    cfg = tiny()
    assert cfg.n_layers == 2
    inp, tgt = batch(cfg, mbs=2, seq=8, seed=1, device="cpu")
    comm = SkipComm(2, 1)
    model = shard_model(cfg, comm, seed=1)
    splits = 2 if schedule.startswith("domino") else 1
    runner = StepRunner(model, comm, schedule=schedule, splits=splits)
    calls = []
    real = getattr(module, fn)
    monkeypatch.setattr(module, fn, lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    loss_k = runner.step(inp, tgt)
    grads_k = {n: p.grad.clone() for n, p in model.named_parameters()}
    launches = len(calls)
    use_aten()
    loss_a = runner.step(inp, tgt)
    assert len(calls) == launches  # aten's step never launched it
    assert float(loss_k) == pytest.approx(float(loss_a), rel=1e-6)
    for n, p in model.named_parameters():
        scale = p.grad.abs().max().clamp_min(1e-12)
        assert float((grads_k[n] - p.grad).abs().max() / scale) <= 1e-6, n
    return launches, splits

