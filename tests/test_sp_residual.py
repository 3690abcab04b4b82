"""``--sp-residual fold`` (issue 34): the sequence-parallel cores add the residual shard
into their partial sums before the reduce-scatter, so the chain between the
reduce-scatter and the next all-gather is the norm alone (sp_step.py). Checked here: the
segment's add (exact, against the core without it), which chain segments add and which
cores do (counted by hand on the tiny preset: 2 layers, 4 sub-layer cores, 5 norms), the
one-line error and the default; the gradients against the unsharded model at tp 2 on gloo
are tests/gloo_cases.py ``SPLIT_CASES`` (fold, the default, in the SP cases; ``*chain*``
for chain; tests/test_domino_splits.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from domino_prof.errors import ConfigError
from domino_prof.reference_model import segments
from domino_prof.reference_model.config import RunConfig, tiny


def test_the_core_adds_the_residual_at_this_rank_s_rows_only():
    from domino_prof.reference_model import units as U

    cfg = tiny()
    torch.manual_seed(0)
    d, ffn, T = cfg.dim, 32, 12
    n = torch.randn(T, d)
    w_in, w_out = torch.randn(2 * ffn, d) / 8, torch.randn(d, ffn) / 8
    dims = U.Dims(heads=2, kv_heads=1, head_dim=d // 2, ffn=ffn, eps=1e-5, seq_major=True)
    resid = torch.randn(4, d)
    plain = segments.seg_core_fwd("mlp", n, w_in, w_out, None, 0, dims)[0].clone()
    fold = segments.seg_core_fwd("mlp", n, w_in, w_out, None, 0, dims, None, None, resid, 4)[0]
    assert torch.equal(fold[4:8], plain[4:8] + resid)
    assert torch.equal(fold[:4], plain[:4]) and torch.equal(fold[8:], plain[8:])


def _adds(schedule: str, splits: int, how: str, monkeypatch) -> tuple[int, int, int]:
    """(norms given a reduce-scattered y to add, norms, cores given a residual) of one
    step on a 2-rank SkipComm."""
    from domino_prof.reference_model.comm import SkipComm
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    seen = {"y": 0, "norm": 0, "resid": 0}
    norm, core = segments.seg_norm, segments.seg_core_fwd

    def seg_norm(h, y, *a):
        seen["norm"] += 1
        seen["y"] += y is not None
        return norm(h, y, *a)

    def seg_core_fwd(*a):
        seen["resid"] += len(a) > 9 and a[9] is not None
        return core(*a)

    monkeypatch.setattr(segments, "seg_norm", seg_norm)
    monkeypatch.setattr(segments, "seg_core_fwd", seg_core_fwd)
    cfg = tiny()
    inp, tgt = batch(cfg, mbs=2, seq=8, seed=1, device="cpu")
    comm = SkipComm(2, 1)
    StepRunner(shard_model(cfg, comm, seed=1), comm, schedule=schedule, splits=splits,
               sp_residual=how).step(inp, tgt)  # fmt: skip
    return seen["y"], seen["norm"], seen["resid"]


@pytest.mark.parametrize("schedule,splits", [("sp", 1), ("domino-sp", 2)])
def test_fold_moves_every_residual_add_from_the_chain_into_the_cores(schedule, splits,
                                                                     monkeypatch):  # fmt: skip
    # chain: the norms of units 1..4 (three sub-layers and the head) add the unit below's
    # reduce-scattered output, once per micro-batch; the first norm reads the embedding
    assert _adds(schedule, splits, "chain", monkeypatch) == (4 * splits, 5 * splits, 0)
    # fold: no norm adds; each of the 4 cores adds its input shard
    assert _adds(schedule, splits, "fold", monkeypatch) == (0, 5 * splits, 4 * splits)


def test_sp_residual_is_checked_and_recorded():
    with pytest.raises(ConfigError, match=r"^--sp-residual must be fold or chain, got 'x'$"):
        RunConfig(model=tiny(), sp_residual="x").validate()
    assert RunConfig(model=tiny()).validate().to_dict()["sp_residual"] == "fold"
    c = RunConfig(model=tiny(), sp_residual="chain").validate()
    assert c.to_dict()["sp_residual"] == "chain"
    from domino_prof.reference_model.comm import SkipComm
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner

    comm = SkipComm(2, 1)
    with pytest.raises(ValueError, match="sp_residual must be fold or chain"):
        StepRunner(shard_model(tiny(), comm, seed=1), comm, schedule="sp", sp_residual="add")
