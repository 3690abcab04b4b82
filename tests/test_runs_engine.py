"""`run` analyses its modes through the engine (issue 24, item 2): the same path as
analyze / report / check, so a run's own analysis has the engine's per-rank jobs and
memory bound, and the documents it writes are those of `engine.analyze` on the loaded
trace, byte for byte."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from domino_prof import engine, runs
from domino_prof.analysis import AnalysisConfig
from domino_prof.analysis.document import encode
from domino_prof.engine import analyze
from domino_prof.trace import load_trace

DATA = Path(__file__).parent / "data" / "cpu_gloo_tp2"


def test_run_analyses_every_mode_through_the_engine(tmp_path, monkeypatch):
    out = tmp_path / "run"
    shutil.copytree(DATA, out)
    called = []
    real = engine.analyse_path

    def spy(path, config, **kw):
        called.append(Path(path).name)
        return real(path, config, **kw)

    monkeypatch.setattr(engine, "analyse_path", spy)
    run = runs.refresh(out)
    modes = list(json.loads((DATA / "run.json").read_text())["modes"])
    assert called == modes  # every mode, in the run's order, nocomm included (it fails)
    for mode in ("tp", "domino"):
        doc = (out / mode / "analysis.json").read_bytes()
        direct = analyze(load_trace(out / mode, progress=False), AnalysisConfig())
        assert doc == encode(direct.to_json())
    assert run["modes"]["nocomm"]["hidden_pct"] is None  # no comm: a note, not a number
