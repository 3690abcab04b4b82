"""Docs that run: every `domino-prof` line of docs/GUIDE.md's "Analyse your own traces"
block, and the trace commands of the README's tour, are executed on the committed H200
fixture (paths substituted)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from domino_prof.cli import app

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "data" / "h200_llama3_3b_2layers_tp2"


def _commands(doc: str, heading: str) -> list[str]:
    text = (ROOT / doc).read_text()
    block = text.split(heading, 1)[1].split("```bash", 1)[1].split("```")[0]
    return [ln.split("  #")[0].strip() for ln in block.splitlines() if ln.startswith("domino-prof")]


def _readme_commands() -> list[str]:
    return _commands("docs/GUIDE.md", "## Analyse your own traces")


def test_readme_tour_runs(tmp_path):
    """The README's tour: its analyze / report / check lines on a run directory (the
    committed H200 one for runs/RUN), the run lines are test_run_cli's."""
    cmds = _commands("README.md", "## A tour")
    assert [c.split()[1] for c in cmds] == [
        "run", "analyze", "analyze", "report", "check", "analyze", "run", "run"]  # fmt: skip
    runner = CliRunner()
    for cmd in cmds:
        if cmd.split()[1] == "run":
            continue
        args = [str(FIX) if t == "runs/RUN" else str(FIX / "domino") if t.startswith("path/")
                else str(tmp_path / t) if t.endswith(".html") else t
                for t in shlex.split(cmd)[1:]]  # fmt: skip
        res = runner.invoke(app, args)
        assert res.exit_code == 0, (cmd, res.output)
    assert (tmp_path / "report.html").stat().st_size > 1_000_000


def test_readme_analysis_examples_run(tmp_path):
    subst = {
        "path/to/traces/": str(FIX / "domino"),
        "rank0.json": str(FIX / "domino" / "rank0.pt.trace.json.gz"),
        "runs/my-run": str(FIX),
        "runs/a/tp": str(FIX / "tp"),
        "runs/a/domino": str(FIX / "domino"),
        "traces/": str(FIX / "domino"),
    }
    cmds = _readme_commands()
    assert [c.split()[1] for c in cmds] == [
        "analyze", "analyze", "analyze", "report", "compare", "baseline", "check"]  # fmt: skip
    runner = CliRunner()
    for cmd in cmds:
        args = []
        for tok in shlex.split(cmd)[1:]:
            tok = subst.get(tok, tok)
            if re.search(r"\.(json|html|xml)$", tok) and not tok.startswith(str(FIX)):
                tok = str(tmp_path / Path(tok).name)  # outputs go to tmp
            args.append(tok)
        res = runner.invoke(app, args)
        if args[0] == "check":
            # the fixture's domino run hides 16.9 % / 37.5 %: below the README's 80 % floor
            assert res.exit_code == 1, res.output
            assert "min-hidden" in res.output
        else:
            assert res.exit_code == 0, (cmd, res.output)
    for out in (
        "analysis.json",
        "report.html",
        "my-run.html",
        "diff.html",
        "baseline.json",
        "gate.xml",
    ):
        assert (tmp_path / out).stat().st_size > 0, out
