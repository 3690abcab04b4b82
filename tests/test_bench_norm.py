"""benchmarks/bench_norm.py: aten's add and norm against norm_kernel.py's launch. Without
CUDA it says so in one line (and how to dry-run); the dry run under Triton's interpreter
(skipped without Triton, as CI installs none) writes its figures, where the kernel's step
equals aten's to fp32 rounding."""

from __future__ import annotations

import json

import pytest
import script_module

torch = pytest.importorskip("torch")

bench = script_module.load("benchmarks/bench_norm.py")


def test_without_cuda_it_says_how_to_dry_run(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main([]) == 2
    assert capsys.readouterr().err == (
        "bench_norm: no CUDA device here; --device cpu runs a dry run under TRITON_INTERPRET=1\n")


def test_the_dry_run_writes_its_figures(tmp_path, monkeypatch, capsys):
    pytest.importorskip("triton")
    from domino_prof.reference_model import norm_kernel as NK

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    NK._kernel.cache_clear()
    monkeypatch.setattr(NK, "_launchers", {})
    out = tmp_path / "norm.json"
    try:
        rc = bench.main(["--device", "cpu", "--rows", "4", "--dim", "64", "--calls", "1",
                         "--model", "tiny", "--seq", "8", "--steps", "tp,domino-sp",
                         "--json", str(out)])  # fmt: skip
    finally:
        NK._kernel.cache_clear()
    assert rc == 0
    d = json.loads(out.read_text())
    assert d["self_check"] is None and d["dim"] == 64 and list(d["blocks_us"]) == ["4"]
    assert set(d["steps"]) == {"tp", "domino-sp"}
    for r in d["steps"].values():
        assert r["loss_triton"] == pytest.approx(r["loss_aten"], rel=1e-6)
        assert r["grad_max_rel"] <= 1e-5  # fp32 rounding
    assert "the norm kernel's self-check: passed" in capsys.readouterr().out
