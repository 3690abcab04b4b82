"""`domino-prof run --reanalyze DIR` (runs.refresh) on the committed H200 run dir:
no torch needed, idempotent, run.json filled from the traces."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from domino_prof.runs import refresh

FIX = Path(__file__).parent / "data" / "h200_llama3_3b_2layers_tp2"


def test_refresh_fills_hidden_pct_and_is_idempotent(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(FIX, run_dir)
    for _ in range(2):  # a second refresh must not pile up notes or change numbers
        run = refresh(run_dir)
    # hidden % of the whole run = 100·ΣH/ΣC over both ranks, from expected.json (independent)
    exp = json.loads((FIX / "expected.json").read_text())
    for mode in ("domino", "tp"):
        h = sum(r["hidden_ns"] for r in exp[mode].values())
        c = sum(r["comm_ns"] for r in exp[mode].values())
        assert run["modes"][mode]["hidden_pct"] == 100.0 * h / c
        assert (run_dir / mode / "analysis.json").is_file()
    assert [n for n in run["notes"] if "traces not analysed" in n] == []
    on_disk = json.loads((run_dir / "run.json").read_text())
    assert on_disk["comparison"] == run["comparison"]
    assert [r["mode"] for r in run["comparison"]] == list(run["modes"])
    assert (run_dir / "report.html").stat().st_size > 1_000_000
