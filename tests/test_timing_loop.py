"""The timing loop's plan (reference_model/train.py): how the timed steps split into
blocks and when the modes interleave block by block. The loop itself runs in
tests/test_run_cli.py (a real CPU run)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from domino_prof.reference_model.config import MODES, RunConfig, preset, tiny  # noqa: E402
from domino_prof.reference_model.train import block_sizes, interleaved  # noqa: E402


def test_block_sizes_keep_the_rest_in_a_short_last_block():
    assert block_sizes(RunConfig(model=tiny(), timed_steps=10, block_steps=4)) == [4, 4, 2]
    assert block_sizes(RunConfig(model=tiny(), timed_steps=8, block_steps=4)) == [4, 4]
    assert block_sizes(RunConfig(model=tiny(), timed_steps=3, block_steps=4)) == [3]
    assert block_sizes(RunConfig(model=tiny(), timed_steps=200, block_steps=4)) == [4] * 50


def test_modes_interleave_on_cpu_when_every_mode_fits():
    assert interleaved(RunConfig(model=tiny(), modes=MODES))  # the default run
    assert not interleaved(RunConfig(model=tiny(), modes=("domino",)))  # nothing to alternate
    # CUDA: whole modes one after the other (each mode's peak memory is its own)
    assert not interleaved(RunConfig(model=tiny(), modes=MODES, device="cuda"))
    # llama3-8b on CPU: 16 B/param × 8.0e9 / tp 2 × 5 modes = 320 GB per rank: no
    assert not interleaved(RunConfig(model=preset("llama3-8b"), modes=MODES))


def test_block_steps_must_be_positive():
    from domino_prof.errors import ConfigError

    with pytest.raises(ConfigError, match="--block-steps must be >= 1, got 0"):
        RunConfig(model=tiny(), block_steps=0).validate()
