"""Outputs that cannot be written, and run flags that cannot work: one stderr line and
exit 2 (never a traceback, whose exit 1 `check` uses for "regression"); when one of
several outputs fails, none is left looking complete."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_check_cli import write_traces
from typer.testing import CliRunner

from domino_prof.cli import app

runner = CliRunner()


def _one_line(res, *, code: int = 2) -> str:
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("domino-prof: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    return write_traces(tmp_path_factory.mktemp("t") / "good", [20, 20])


def _unwritable(tmp_path: Path, name: str) -> list[Path]:
    """Paths that cannot be written, also as root: below a regular file, and in /proc."""
    f = tmp_path / "plain-file"
    f.write_text("x")
    out = [f / name]
    if os.path.isdir("/proc"):
        out.append(Path("/proc") / name)
    return out


def test_report_compare_baseline_to_unwritable_paths(tmp_path, traces):
    for html in _unwritable(tmp_path, "x.html"):
        json_ = html.with_suffix(".json")  # a baseline is JSON under .json (issue #22 B12)
        for target, args in (
            (html, ["report", traces, "-o", html]),
            (html, ["compare", traces, traces, "-o", html]),
            (json_, ["baseline", traces, "-o", json_]),
        ):
            line = _one_line(runner.invoke(app, [str(a) for a in args]))
            assert line.startswith(f"domino-prof: error: cannot write {target} (")
            assert line.endswith("; choose a writable file path")
            assert not target.exists()


def test_outputs_that_are_directories(tmp_path, traces):
    d = tmp_path / "adir"
    d.mkdir()
    for args, example in (
        (["baseline", traces, "-o", d], "baseline.json"),
        (["report", traces, "-o", d], "report.html"),
        (["compare", traces, traces, "-o", d], "compare.html"),
        (["analyze", traces, "--json", d], "analysis.json"),
        (["check", traces, "--min-hidden", "1", "--junit", d], "gate.xml"),
    ):
        line = _one_line(runner.invoke(app, [str(a) for a in args]))
        assert f"{d} is a directory; give a file name such as {d / example}" in line


def test_check_junit_or_markdown_unwritable_is_exit_2_not_1(tmp_path, traces):
    for target in _unwritable(tmp_path, "gate.xml"):
        for flag in ("--junit", "--markdown"):
            res = runner.invoke(
                app, ["check", str(traces), "--min-hidden", "99", flag, str(target)]
            )
            # the gate fails (66.7 % < 99 %), but the output cannot be written: that is bad
            # usage (2), not a regression (1)
            line = _one_line(res)
            assert line.startswith(f"domino-prof: error: cannot write {target} (")


def test_bad_input_and_unwritable_junit_is_still_one_line(tmp_path):
    target = _unwritable(tmp_path, "gate.xml")[0]
    res = runner.invoke(app, ["check", str(tmp_path / "missing"), "--min-hidden", "1",
                              "--junit", str(target)])  # fmt: skip
    line = _one_line(res)
    assert "missing: no such file or directory" in line and f"cannot write {target}" in line


def test_one_failed_output_leaves_no_other_looking_complete(tmp_path, traces):
    ok_json = tmp_path / "analysis.json"
    bad = _unwritable(tmp_path, "r.html")[0]
    res = runner.invoke(app, ["analyze", str(traces), "--json", str(ok_json), "--html", str(bad)])
    line = _one_line(res)
    assert f"cannot write {bad} (" in line and "(no output was written)" in line
    assert not ok_json.exists()
    ok_xml = tmp_path / "gate.xml"
    res = runner.invoke(app, ["check", str(traces), "--min-hidden", "1", "--junit", str(ok_xml),
                              "--markdown", str(_unwritable(tmp_path, "g.md")[0])])  # fmt: skip
    _one_line(res)
    assert not ok_xml.exists()
    # and both written when both can be
    res = runner.invoke(app, ["analyze", str(traces), "--json", str(ok_json), "--html",
                              str(tmp_path / "r.html")])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(ok_json.read_text())["totals"]["comm_ns"] > 0
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_step_summary_is_appended_only_when_the_files_are_written(tmp_path, traces):
    summary = tmp_path / "summary.md"
    summary.write_text("# before\n")
    bad = _unwritable(tmp_path, "gate.xml")[0]
    env = {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ACTIONS": ""}
    res = runner.invoke(app, ["check", str(traces), "--min-hidden", "1", "--junit", str(bad),
                              "--markdown", str(summary)], env=env)  # fmt: skip
    _one_line(res)
    assert summary.read_text() == "# before\n"
    res = runner.invoke(app, ["check", str(traces), "--min-hidden", "1", "--markdown",
                              str(summary)], env=env)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert summary.read_text().startswith("# before\n### ✅ domino-prof check: PASS")


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["--mbs", "0"], "--mbs must be >= 1 (sequences per batch), got 0"),
        (["--dtype", "float16"], "--dtype float16 is not supported"),
        (["--dtype", "fp8"], "unknown dtype 'fp8'; use float32 or bfloat16"),
    ],
)
def test_run_flags_that_would_train_to_nan(tmp_path, args, what):
    pytest.importorskip("torch")
    res = runner.invoke(app, ["run", "--device", "cpu", "--out", str(tmp_path / "r"), *args])
    assert what in _one_line(res)
    assert not (tmp_path / "r").exists()  # nothing started


def test_run_out_is_an_existing_file(tmp_path):
    pytest.importorskip("torch")
    f = tmp_path / "taken"
    f.write_text("mine")
    res = runner.invoke(app, ["run", "--device", "cpu", "--out", str(f)])
    line = _one_line(res)
    assert line == (
        f"domino-prof: error: --out {f} is an existing file; give a directory (it is "
        "created if missing)"
    )
    assert f.read_text() == "mine"
