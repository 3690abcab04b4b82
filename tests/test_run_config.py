"""RunConfig owns `run`'s options (issue #24 item 4): every field has its option, with the
field's flag, help and default; the options are checked before torch is imported; the
device and GPU count are the launcher's one function; comm_info loads a profile once."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer
from typer.testing import CliRunner

from domino_prof.cli import app
from domino_prof.errors import ConfigError
from domino_prof.reference_model import config, launcher
from domino_prof.reference_model.config import MODES, RunConfig, comm_info
from test_output_errors import _one_line  # the one-line-error check, shared

runner = CliRunner()


def _run_params() -> dict:
    cmd = typer.main.get_command(app).commands["run"]
    return {o: p for p in cmd.params for o in p.opts}


def test_every_runconfig_field_has_its_run_option():
    """Read from dataclasses.fields: a field added later without an option fails here."""
    params = _run_params()
    for f in dataclasses.fields(RunConfig):
        assert "flag" in f.metadata, f"RunConfig.{f.name} declares no `run` option"
        p = params.get(f.metadata["flag"])
        assert p is not None, f"RunConfig.{f.name}: `run` has no {f.metadata['flag']}"
        assert p.help == f.metadata["help"], f.name
        default = f.metadata.get("cli_default", f.default)
        assert p.default == default, f.name


def test_the_options_symbolic_defaults():
    params = _run_params()
    assert {k: params[k].default for k in ("--model", "--device", "--seq", "--dtype")} == {
        "--model": "auto", "--device": "auto", "--seq": 0, "--dtype": "auto"}  # fmt: skip
    assert params["--mode"].default == "all"
    assert (params["--steps"].default, params["--block-steps"].default) == (200, 4)
    assert params["--cuda-graphs"].secondary_opts == ["--no-cuda-graphs"]


@pytest.mark.parametrize(("device", "want"), [
    ("cpu", ("tiny", 2, 128, "float32", "gloo")),
    ("cuda", ("llama3-3b", 28, 4096, "bfloat16", "nccl")),
])  # fmt: skip
def test_from_options_resolves_auto_by_the_device(device, want):
    c = RunConfig.from_options(device=device, model="auto", seq=0, dtype="auto")
    assert (c.model.name, c.model.n_layers, c.seq, c.dtype, c.comm) == want
    assert (c.modes, c.timed_steps, c.block_steps) == (MODES, 200, 4)


def test_from_options_layers_and_explicit_values():
    c = RunConfig.from_options(device="cpu", model="llama3-1b", layers=3, seq=64,
                               dtype="bfloat16", lr=0.5)  # fmt: skip
    assert (c.model.name, c.model.n_layers, c.seq, c.dtype, c.lr) == (
        "llama3-1b", 3, 64, "bfloat16", 0.5)
    with pytest.raises(ConfigError, match=r"--layers must be >= 1, got -1"):
        RunConfig.from_options(device="cpu", layers=-1)


def test_check_options_under_auto_raises_only_what_every_device_says():
    # a mistake on any machine: raised before the device is known
    with pytest.raises(ConfigError, match=r"not divisible by --splits 2"):
        RunConfig.check_options(device="auto", mbs=3)
    # wording by device (tiny's 16 heads on CPU, llama3-3b's 8 kv heads on CUDA) or
    # valid on one device only: left to from_options once the device is known
    assert RunConfig.check_options(device="auto", tp=3) is None
    assert RunConfig.check_options(device="auto", cuda_graphs=True) is None
    assert RunConfig.check_options(device="auto") is None
    c = RunConfig.check_options(device="cpu", tp=4)
    assert (c.tp, c.device, c.model.name) == (4, "cpu", "tiny")


@pytest.fixture
def no_torch(monkeypatch):
    """`import torch` fails (sys.modules entry None): what `run` says before it needs torch."""
    monkeypatch.setitem(sys.modules, "torch", None)


@pytest.mark.parametrize(("args", "needle"), [
    (["--mbs", "3"], "not divisible by --splits 2"),
    (["--model", "gpt2"], "unknown model preset 'gpt2'"),
    (["--attention", "triton"], "unknown --attention 'triton'; use auto, flash or cudnn"),
    (["--device", "cpu", "--tp", "3"], "does not divide the tiny model's heads (16)"),
    (["--device", "cpu", "--cuda-graphs"], "--cuda-graphs needs --device cuda"),
    (["--device", "cpu", "--comm", "emulate"], "--comm emulate runs its collectives"),
    (["--device", "tpu"], "--device must be cpu or cuda, got 'tpu'"),
])  # fmt: skip
def test_bad_flags_are_one_line_before_torch_is_imported(tmp_path, no_torch, args, needle):
    out = tmp_path / "run"
    line = _one_line(runner.invoke(app, ["run", *args, "--out", str(out)]))
    assert needle in line and "needs PyTorch" not in line
    assert not out.exists()


@pytest.mark.parametrize("args", [["--device", "cpu"], ["--tp", "3"], ["--cuda-graphs"]])
def test_flags_that_pass_reach_the_torch_check(tmp_path, no_torch, args):
    # valid flags (or, under --device auto, flags whose fate the device decides): the
    # next step is torch, and without it one line naming the install
    line = _one_line(runner.invoke(app, ["run", *args, "--out", str(tmp_path / "run")]))
    assert "`domino-prof run` needs PyTorch: pip install 'torch==2.13.0'" in line


def _torch(n_gpu: int):
    return SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: n_gpu > 0,
                                                device_count=lambda: n_gpu))  # fmt: skip


@pytest.mark.parametrize(("n_gpu", "device", "tp", "emulated", "want"), [
    (0, "auto", 2, False, "cpu"),
    (2, "auto", 2, False, "cuda"),
    (2, "cpu", 8, False, "cpu"),
    (1, "cuda", 8, True, "cuda"),  # one process runs rank 0's shard
    (0, "cuda", 2, False, "no CUDA GPU is visible"),
    (2, "cuda", 4, False, "--tp 4 needs 4 GPUs but 2 are visible"),
    (2, "auto", 4, False, "--tp 4 needs 4 GPUs but 2 are visible"),
])  # fmt: skip
def test_resolve_device(monkeypatch, n_gpu, device, tp, emulated, want):
    monkeypatch.setattr(launcher, "import_torch", lambda: _torch(n_gpu))
    for k in ("TORCHELASTIC_RUN_ID", "RANK"):
        monkeypatch.delenv(k, raising=False)
    if want in ("cpu", "cuda"):
        assert launcher.resolve_device(device, tp=tp, emulated=emulated) == want
    else:
        with pytest.raises(ConfigError, match=want):
            launcher.resolve_device(device, tp=tp, emulated=emulated)


def test_resolve_device_under_torchrun_trusts_its_placement(monkeypatch):
    monkeypatch.setattr(launcher, "import_torch", lambda: _torch(1))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    assert launcher.resolve_device("cuda", tp=8, emulated=False) == "cuda"


def test_comm_info_loads_a_profile_once_per_name_and_file(tmp_path, monkeypatch):
    from domino_prof.emulation import profile

    loaded: list[str] = []
    real = profile.load_profile
    monkeypatch.setattr(profile, "load_profile", lambda n: loaded.append(str(n)) or real(n))
    config._profile_cached.cache_clear()
    cfg = RunConfig(model=config.tiny(), tp=2, device="cuda", comm="emulate")
    assert [comm_info(cfg)["profile"] for _ in range(3)] == ["h200-nvlink-tp2"] * 3
    assert loaded == ["h200-nvlink-tp2"]
    # a file: once per absolute path and modification time
    src = Path(profile.shipped_path("h200-nvlink-tp2"))
    doc = json.loads(src.read_text())
    p = tmp_path / "p.json"
    for name in ("one", "two"):
        doc["name"] = name
        p.write_text(json.dumps(doc))
        os.utime(p, ns=(0, 10**9 * (1 if name == "one" else 2)))  # distinct stamps
        fcfg = RunConfig(model=config.tiny(), tp=2, device="cuda", comm="emulate",
                         comm_profile=str(p))  # fmt: skip
        assert [comm_info(fcfg)["label"] for _ in range(2)] == [
            f"emulated comm (profile {name})"] * 2
    assert loaded == ["h200-nvlink-tp2", str(p), str(p)]
    config._profile_cached.cache_clear()
