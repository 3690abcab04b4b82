"""``--sp-wgrad-input keep`` (issue 34): the sequence-parallel weight gradients read the
forward's gathered norm outputs instead of all-gathering them again in the backward
(sp_step.py). Counted here by hand on the tiny preset (2 layers: 4 sub-layer units and the
head), the gradients against regather's bit for bit at tp 2 on gloo (the shared rank job,
tests/gloo_cases.py ``_keep_bits``), and against the unsharded model in ``SPLIT_CASES``
(``*keep*``)."""

from __future__ import annotations

import collections

import pytest

torch = pytest.importorskip("torch")
import gloo_cases

from domino_prof.errors import ConfigError
from domino_prof.reference_model.config import RunConfig, tiny


def _launches(schedule: str, splits: int, how: str, **kw) -> collections.Counter:
    """{(phase, collective key name): launches} of one step on a 2-rank SkipComm."""
    from domino_prof.reference_model.comm import SkipComm
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    cfg = tiny()
    inp, tgt = batch(cfg, mbs=2, seq=8, seed=1, device="cpu")
    comm = SkipComm(2, 1)
    runner = StepRunner(shard_model(cfg, comm, seed=1), comm, schedule=schedule,
                        splits=splits, sp_wgrad_input=how, record=True, **kw)  # fmt: skip
    runner.step(inp, tgt)
    return collections.Counter(key[0] for kind, key in runner.executor.events
                               if kind == "launch")  # fmt: skip


@pytest.mark.parametrize("schedule,splits,kw", [("sp", 1, {}), ("domino-sp", 2, {}),
                                                ("domino-sp", 2, {"wgrad_in": "accumulate"})])
def test_keep_issues_no_all_gather_of_the_norm_outputs_in_the_backward(schedule, splits, kw):
    again, keep = _launches(schedule, splits, "regather", **kw), _launches(schedule, splits,
                                                                          "keep", **kw)
    # regather: the norm bwd of units 1..4 (three sub-layers and the head) gathers the
    # unit below's norm output, once per micro-batch; keep: none
    assert again["nag"] == 4 * splits and keep["nag"] == 0
    # every other collective is the same: forward all-gathers (5 units) and
    # reduce-scatters (4 cores), backward reduce-scatters and gradient all-gathers
    assert {k: v for k, v in again.items() if k != "nag"} == dict(keep)
    assert (keep["ag"], keep["rs"], keep["rsb"], keep["gag"]) == (5 * splits, 4 * splits,
                                                                 5 * splits, 5 * splits)


def test_keep_gives_regather_s_gradients_bit_for_bit():
    res = gloo_cases.results(2)
    for rank, out in ((r, o["keep_bits"]) for r, o in res.items()):
        assert set(out) == {"sp", "domino-sp", "domino-sp-acc"}
        for case, (same_loss, differ, n) in out.items():
            assert n > 10 and same_loss and differ == [], (rank, case, differ)


def test_sp_wgrad_input_is_checked_and_recorded():
    with pytest.raises(ConfigError, match=r"^--sp-wgrad-input must be regather or keep, "
                                          r"got 'x'$"):  # fmt: skip
        RunConfig(model=tiny(), sp_wgrad_input="x").validate()
    assert RunConfig(model=tiny()).validate().to_dict()["sp_wgrad_input"] == "keep"
    c = RunConfig(model=tiny(), sp_wgrad_input="regather").validate()
    assert c.to_dict()["sp_wgrad_input"] == "regather"
    from domino_prof.reference_model.comm import SkipComm
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner

    comm = SkipComm(2, 1)
    with pytest.raises(ValueError, match="sp_wgrad_input must be regather or keep"):
        StepRunner(shard_model(tiny(), comm, seed=1), comm, schedule="sp",
                   sp_wgrad_input="again")  # fmt: skip
