"""Usage errors of every command: one stderr line, exit 2, no traceback; `--help` and
normal exits untouched (domino_prof/cli.py)."""

from __future__ import annotations

import subprocess

import pytest
from script_module import installed
from typer.testing import CliRunner

from domino_prof.cli import app

runner = CliRunner()

CASES = [
    (["analyze", "--top", "x", "."], "domino-prof analyze", "Invalid value for '--top'"),
    (["analyze", "--bogus", "."], "domino-prof analyze", "No such option: --bogus"),
    (["analyze"], "domino-prof analyze", "Missing argument"),
    (["report"], "domino-prof report", "Missing argument"),
    (["check"], "domino-prof check", "Missing argument"),
    (["run", "--mode", "zz"], "domino-prof run", "Invalid value for '--mode'"),
    (["run", "--tp", "two"], "domino-prof run", "Invalid value for '--tp'"),
    (["nosuch"], "domino-prof", "No such command 'nosuch'"),
    (["--bogus"], "domino-prof", "No such option: --bogus"),
]


@pytest.mark.parametrize(("args", "where", "what"), CASES)
def test_usage_error_is_one_line_exit_2(args, where, what):
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("domino-prof: error: ")
    assert what in lines[0]
    assert lines[0].endswith(f"(see {where} --help)")
    assert "Traceback" not in res.output


@pytest.mark.parametrize("args", [["--help"], ["analyze", "--help"], ["run", "--help"]])
def test_help_still_works(args):
    res = runner.invoke(app, args)
    assert res.exit_code == 0
    assert "Usage: domino-prof" in res.stdout
    assert res.stderr == ""


def test_no_args_shows_help():
    res = runner.invoke(app, [])
    assert "Usage: domino-prof" in res.output
    assert "analyze" in res.output
    assert "error" not in res.output


def test_user_error_inside_a_command_keeps_its_exit_code(tmp_path):
    # DominoProfError -> commands/_common.fail -> typer.Exit(2): not swallowed as 0
    res = runner.invoke(app, ["analyze", str(tmp_path / "missing")])
    assert res.exit_code == 2
    assert len(res.stderr.splitlines()) == 1
    assert "missing" in res.stderr


@pytest.mark.skipif(installed("domino-prof") is None, reason="script not installed")
def test_installed_script_usage_error():
    p = subprocess.run([installed("domino-prof"), "analyze", "--top", "x", "."],
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.count("\n") == 1
    assert p.stderr.startswith("domino-prof: error: Invalid value for '--top'")
