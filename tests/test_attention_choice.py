"""The attention kernel choice (units.attn_backend) is decided once per device index and
then a plain dict lookup: under torch.compile the first call must not be traced, since
Dynamo cannot put torch.backends.cudnn.is_available() in a graph (every --compile run on
CUDA stopped at its first segment; train.worker now decides before the first step)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from domino_prof.reference_model import units


class FakeDevice:
    type = "cuda"

    def __init__(self, index):
        self.index = index


def test_the_cudnn_decision_is_made_once_per_device_index(monkeypatch):
    calls = []
    monkeypatch.setattr(units, "_cudnn_ok", {})
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: calls.append(1) or True)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91000)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (9, 0) if i == 3 else (8, 0))
    assert units._cudnn_hopper(FakeDevice(None)) is True  # the current device, 3: Hopper
    assert units._cudnn_hopper(FakeDevice(0)) is False  # device 0: sm_80
    assert len(calls) == 2
    # later calls (what a compiled segment would trace) read the dict only
    monkeypatch.setattr(torch.backends.cudnn, "is_available",
                        lambda: pytest.fail("decided again"))  # fmt: skip
    assert units._cudnn_hopper(FakeDevice(None)) is True
    assert units._cudnn_hopper(FakeDevice(0)) is False
    assert units._cudnn_ok == {None: True, 0: False}
