"""`--rank` and `--skip-bad` on analyze, report, compare, check and baseline (the
loader's errors tell the user to pass them, so every command that loads traces has them)."""

from __future__ import annotations

import json

import pytest
from test_check_cli import rank_trace, write_traces
from typer.testing import CliRunner

from domino_prof.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("opts")
    # one file without distributedInfo.rank and no rank in its name
    b = rank_trace(0, 1)
    b.include_dist_info = False
    anon = b.write(d / "trace.json")
    # a directory with two good ranks and one truncated file
    good = write_traces(d / "dir", [20, 20])
    (good / "rank2.pt.trace.json").write_text('{"traceEvents": [')
    return anon, good


def _commands(target, out_dir):
    return {
        "analyze": ["analyze", target, "-o", out_dir / "a.json"],
        "report": ["report", target, "-o", out_dir / "r.html"],
        "compare": ["compare", target, target, "-o", out_dir / "c.html"],
        "check": ["check", target, "--min-hidden", "1"],
        "baseline": ["baseline", target, "-o", out_dir / "b.json"],
    }


@pytest.mark.parametrize("cmd", ["analyze", "report", "compare", "check", "baseline"])
def test_rank_option(files, tmp_path, cmd):
    anon, _ = files
    args = [str(a) for a in _commands(anon, tmp_path)[cmd]]
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    assert "give the rank (--rank N / rank=N)" in res.stderr
    res = runner.invoke(app, [*args, "--rank", "0"])
    assert res.exit_code == 0, res.output
    if cmd == "baseline":
        assert list(json.loads((tmp_path / "b.json").read_text())["per_rank"]) == ["0"]
    if cmd == "analyze":
        assert json.loads((tmp_path / "a.json").read_text())["ranks"] == [0]


@pytest.mark.parametrize("cmd", ["analyze", "report", "compare", "check", "baseline"])
def test_skip_bad_option(files, tmp_path, cmd):
    _, good = files
    args = [str(a) for a in _commands(good, tmp_path)[cmd]]
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    assert "rank2.pt.trace.json: invalid JSON" in res.stderr
    assert "(or use --skip-bad to skip bad files)" in res.stderr
    res = runner.invoke(app, [*args, "--skip-bad"])
    assert res.exit_code == 0, res.output
    assert "note: skipped " in res.stderr and "rank2.pt.trace.json" in res.stderr
    if cmd == "baseline":
        assert list(json.loads((tmp_path / "b.json").read_text())["per_rank"]) == ["0", "1"]
    if cmd == "analyze":
        assert json.loads((tmp_path / "a.json").read_text())["ranks"] == [0, 1]
