"""The micro-batch buffers' copies the split pays (issue 34, the split's own cost):
``--wgrad-in accumulate`` keeps each micro-batch's norm output where the norm wrote it
(w_in's gradient one GEMM per micro-batch), and the attention backward concatenates its
input gradient straight into the kept slot. Counted here on CPU, by hand: the tiny preset
has 2 layers (4 sub-layers), domino 2 micro-batches. The gradients of both settings
against the unsharded model are tests/gloo_cases.py SPLIT_CASES (``*-acc``), at tp 2."""

from __future__ import annotations

import collections

import pytest

torch = pytest.importorskip("torch")

from domino_prof.errors import ConfigError
from domino_prof.reference_model.config import RunConfig, tiny


def _op_counts(wgrad_in: str) -> collections.Counter:
    from torch.profiler import ProfilerActivity, profile

    from domino_prof.reference_model.comm import SkipComm
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    cfg = tiny()
    inp, tgt = batch(cfg, mbs=2, seq=8, seed=1, device="cpu")
    comm = SkipComm(2, 1)
    runner = StepRunner(shard_model(cfg, comm, seed=1), comm, schedule="domino", splits=2,
                        wgrad_in=wgrad_in)  # fmt: skip
    runner.step(inp, tgt)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        runner.step(inp, tgt)
    return collections.Counter(e.name for e in p.events())


def test_accumulate_drops_one_norm_output_copy_per_sub_layer_and_micro_batch():
    joint, acc = _op_counts("joint"), _op_counts("accumulate")
    # 4 sub-layers x 2 micro-batches: the norm outputs no longer copied into [ΣT, d]
    assert joint["aten::copy_"] - acc["aten::copy_"] == 4 * 2
    # w_in's gradient: the first micro-batch's GEMM writes it (mm, out=), the second
    # accumulates (addmm_), one more per sub-layer; joint has none
    assert (joint["aten::addmm_"], acc["aten::addmm_"]) == (0, 4)
    assert acc["aten::mm"] == joint["aten::mm"]


def test_attention_backward_concatenates_into_the_kept_slot():
    from domino_prof.reference_model import units as U
    from domino_prof.reference_model.model import rope_tables

    torch.manual_seed(0)
    b, S, Hl, Kl, D, d = 1, 8, 2, 1, 16, 32
    dims = U.Dims(heads=Hl, kv_heads=Kl, head_dim=D, ffn=64, eps=1e-5)
    cs = U.rope_table(rope_tables(D, S, 500000.0, "cpu"))
    conj = cs.clone()
    conj[..., 1].neg_()
    n = torch.randn(b * S, d)
    wqkv, wo = torch.randn((Hl + 2 * Kl) * D, d), torch.randn(d, Hl * D)
    _, saved = U.attn_fwd(n, wqkv, wo, cs, b, dims)
    da = torch.randn(b * S, d)
    want_dn, want, _ = U.attn_dgrad(da, saved, wqkv, wo, conj, b, dims)  # no slot: a new tensor
    buf = torch.full((3 * b * S, (Hl + 2 * Kl) * D), float("nan"))
    slot = buf[b * S : 2 * b * S]  # micro-batch 1 of 3
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as p:
        dn, got, _ = U.attn_dgrad(da, saved, wqkv, wo, conj, b, dims, dqkv_out=slot)
    assert got.data_ptr() == slot.data_ptr() and got.shape == slot.shape
    assert torch.equal(got, want) and torch.equal(dn, want_dn)
    assert torch.isnan(buf[: b * S]).all() and torch.isnan(buf[2 * b * S :]).all()
    assert "aten::copy_" not in {e.name for e in p.events()}


def test_wgrad_in_is_checked_and_recorded():
    with pytest.raises(ConfigError, match="--wgrad-in must be joint or accumulate, got 'x'"):
        RunConfig(model=tiny(), wgrad_in="x").validate()
    c = RunConfig(model=tiny(), wgrad_in="accumulate").validate()
    assert c.to_dict()["wgrad_in"] == "accumulate"
    assert RunConfig.from_dict(c.to_dict()).wgrad_in == "accumulate"
    old = {k: v for k, v in c.to_dict().items() if k != "wgrad_in"}  # a run.json before it
    assert RunConfig.from_dict(old).wgrad_in == "joint"
