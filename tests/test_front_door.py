"""One front door: every command takes the same PATH forms (a run directory with
``--mode``), the same shared options and ``-o/--output``; ``--version``; help that
reads whole at 80 columns.

The run directory here has all seven modes of `domino-prof run --mode all`, built from
the hand-worked traces of tests/test_check_cli.py (per rank, two steps; a = start of
the forward comm; hidden % = 2·(40 - a)/60 per rank for a <= 30):

    mode       a (rank 0, 1)   hidden % per rank
    tp         30, 30          33.333, 33.333
    nocomm     no comm         n/a
    domino     20, 22          66.667, 60.000
    domino-nocomm  no comm     n/a
    sp         30, 30          33.333, 33.333
    domino-sp  20, 20          66.667, 66.667
    domino-sp-nocomm  no comm  n/a
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from rundirs import write_run_dir
from test_check_cli import invoke, table_rows, write_traces

from domino_prof.cli import app

MODES = {"tp": [30, 30], "nocomm": [None, None], "domino": [20, 22],
         "domino-nocomm": [None, None], "sp": [30, 30], "domino-sp": [20, 20],
         "domino-sp-nocomm": [None, None]}  # fmt: skip


def write_run(d: Path, modes: dict[str, list], **entry) -> Path:
    step = {"tp": 2.0, "nocomm": 1.0, "domino": 1.6, "domino-nocomm": 1.2, "sp": 2.0,
            "domino-sp": 1.7, "domino-sp-nocomm": 1.25}  # fmt: skip
    return write_run_dir(
        d,
        {m: {"step_ms": step.get(m, 1.0), **entry} for m in modes},
        traces=lambda p, m: write_traces(p, modes[m], gz=True),
        config={"model": {"name": "tiny"}, "tp": 2, "seq": 128, "mbs": 2},
        comparison=[
            {
                "mode": m,
                "step_ms": step.get(m, 1.0),
                "tokens_per_s": 256 / step.get(m, 1.0),
                "hidden_pct": None,
                "speedup_vs_tp": 2.0 / step.get(m, 1.0),
                "frac_of_nocomm": 1.0 / step.get(m, 1.0),
            }
            for m in modes
        ],
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return write_run(tmp_path_factory.mktemp("front") / "run", MODES)


# --------------------------------------------------------------------------- run dirs
def test_analyze_takes_a_run_dir_and_its_modes(run, tmp_path):
    # before: "two files claim rank 0" (the loader saw every mode's rank files)
    r = invoke(["analyze", run, "-o", tmp_path / "d.json"])
    assert r.exit_code == 0, r.output
    assert f"note: analysing mode 'domino' of {run / 'run.json'}" in r.stderr
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["by_rank"]["hidden_pct"] == pytest.approx([200 / 3, 60.0])
    assert "timed" in r.stdout and "domino-sp" in r.stdout  # the modes table comes first
    r = invoke(["analyze", run, "--mode", "tp", "-o", "-"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["by_rank"]["hidden_pct"] == pytest.approx([100 / 3, 100 / 3])
    r = invoke(["analyze", run / "sp"])  # RUN_DIR/<mode>: that mode, no note
    # " ".join: rich folds the headline at 80 columns, where depends on the tmp path's length
    assert r.exit_code == 0 and "(mode sp)" in " ".join(r.stdout.split())
    assert "note: analysing" not in r.stderr
    r = invoke(["analyze", run, "--mode", "bogus"])
    assert r.exit_code == 2 and "--mode 'bogus' is not in" in r.stderr


def test_check_of_a_run_dir_gates_the_modes_that_overlap(run):
    r = invoke(["check", run, "--min-hidden", 50])
    assert r.exit_code == 0, r.output
    assert "checking modes 'domino', 'domino-sp'" in r.stderr
    assert "not tp, nocomm, domino-nocomm, sp" in r.stderr  # domino-nocomm skips its comm
    rows = [ln.split() for ln in r.stdout.splitlines()[2:6]]
    assert [(x[0], x[1], x[2], x[3]) for x in rows] == [
        ("domino", "min-hidden", "0", "66.67%"), ("domino", "min-hidden", "1", "60.00%"),
        ("domino-sp", "min-hidden", "0", "66.67%"), ("domino-sp", "min-hidden", "1", "66.67%"),
    ]  # fmt: skip
    r = invoke(["check", run, "--min-hidden", 61])  # domino rank 1 (60 %) fails
    assert r.exit_code == 1
    assert "FAIL: 1 of 4 checks failed" in r.stdout
    r = invoke(["check", run, "--mode", "tp", "--min-hidden", 30])  # any mode, by name
    assert r.exit_code == 0 and table_rows(r.stdout) == [
        ("min-hidden", 0, "pass"), ("min-hidden", 1, "pass")]  # fmt: skip
    for mode in ("nocomm", "domino-nocomm"):  # no comm: exit 2
        r = invoke(["check", run, "--mode", mode, "--min-hidden", 30])
        assert r.exit_code == 2 and "no comm kernels" in r.stderr


def test_run_json_overlap_flag_decides_what_check_gates(tmp_path):
    # run.json written by `domino-prof run` says per mode whether it overlaps by design
    d = write_run(tmp_path / "r", {"tp": [30, 30], "domino": [20, 22]}, overlap=False)
    r = invoke(["check", d, "--min-hidden", 10])
    assert r.exit_code == 2 and "none of which overlaps comm by design" in r.stderr
    assert "pick one with --mode NAME" in r.stderr


def test_baseline_of_a_run_dir_records_its_mode_and_check_uses_it(run, tmp_path):
    base = tmp_path / "b.json"
    r = invoke(["baseline", run, "--mode", "domino-sp", "-o", base])
    assert r.exit_code == 0, r.output
    doc = json.loads(base.read_text())
    assert doc["run_mode"] == "domino-sp"
    assert doc["per_rank"]["1"]["hidden_pct"] == pytest.approx(200 / 3)
    r = invoke(["check", run, "--baseline", base, "--max-drop", 0])
    assert r.exit_code == 0, r.output
    assert "checking mode 'domino-sp'" in r.stderr  # the baseline's mode, not domino
    r = invoke(["baseline", run, "--output", tmp_path / "d.json"])  # default: domino
    assert r.exit_code == 0 and "note: recording mode 'domino'" in r.stderr
    r = invoke(["check", run, "--baseline", tmp_path / "d.json", "--max-drop", 0])
    assert r.exit_code == 0, r.output


def test_report_and_compare_take_a_run_dir_and_mode(run, tmp_path):
    r = invoke(["report", run, "--mode", "domino-sp", "-o", tmp_path / "m.html"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0].startswith("domino-sp: hidden 66.7 %")
    assert not (run / "report.html").exists()  # one mode: not the run's report
    r = invoke(["compare", run, run, "--mode", "tp", "-o", tmp_path / "c.html"])
    assert r.exit_code == 0, r.output
    assert "A: tp vs B: tp" in r.stdout
    # both sides come from runs: the timed step (run.json) is the first row
    assert re.search(r"timed step \(ms\)\s*│\s*2\.000\s*│\s*2\.000", r.stdout)
    r = invoke(["compare", run, run / "tp", "-o", tmp_path / "c2.html"])
    assert r.exit_code == 0, r.output
    assert "note: A: mode 'domino'" in r.stderr and "domino vs tp" in r.stdout


# --------------------------------------------------------------------------- options
def _commands() -> dict:
    group = typer.main.get_command(app)
    return dict(group.commands)


def _option_names(cmd) -> list[str]:
    # typer may vendor its own click: compare by kind, not by class
    names = [
        n
        for p in cmd.params
        if p.param_type_name == "option" and not p.hidden
        for n in (*p.opts, *p.secondary_opts)
    ]
    assert names, cmd.name  # the checks below must have something to check
    return names


def test_every_command_help_names_every_option_whole_at_80_columns():
    cmds = _commands()
    assert set(cmds) == {"run", "analyze", "report", "compare", "check", "baseline", "calibrate",
                         "tune"}
    for name, cmd in cmds.items():
        res = invoke([name, "--help"], COLUMNS="80")
        assert res.exit_code == 0, res.output
        lines = res.stdout.splitlines()
        assert max(len(ln) for ln in lines) <= 80, name
        assert "…" not in res.stdout
        for opt in [*_option_names(cmd), "--help"]:
            assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", res.stdout), (name, opt)
    top = invoke(["--help"], COLUMNS="80").stdout
    assert "…" not in top and max(map(len, top.splitlines())) <= 80
    for name in cmds:
        assert re.search(rf"^  {name}\s", top, re.MULTILINE)


SHARED = ("--mode", "--rank", "--skip-bad", "--comm-pattern", "--comm-pattern-only",
          "--memcpy-as-comm", "-o", "--output")  # fmt: skip


@pytest.mark.parametrize("name", ["analyze", "report", "compare", "check", "baseline"])
def test_commands_share_one_set_of_options(name):
    opts = set(_option_names(_commands()[name]))
    assert set(SHARED) <= opts
    assert ("--threshold" in opts) == (name in ("analyze", "report", "compare"))
    # switches are flags only, off by default (no --x/--no-x pairs); --no-align-clocks
    # (issue 25) is such a flag, named for what it turns off
    assert not [o for o in opts if o.startswith("--no-") and o != "--no-align-clocks"]


def test_version():
    from domino_prof import __version__

    r = invoke(["--version"])
    assert r.exit_code == 0 and r.stdout == f"domino-prof {__version__}\n"


def test_analyze_output_suffix_picks_the_format(tmp_path):
    d = write_traces(tmp_path / "t", [20, 20])
    r = invoke(["analyze", d, "-o", tmp_path / "a.json", "--output", tmp_path / "a.html"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "a.json").read_text())["schema"] == "domino-prof/analysis"
    assert (tmp_path / "a.html").read_text().startswith("<!DOCTYPE html>")
    r = invoke(["analyze", d, "-o", tmp_path / "a.txt"])
    assert r.exit_code == 2 and "cannot tell the format from the file name" in r.stderr
    assert not (tmp_path / "a.txt").exists()


def test_check_output_suffix_picks_junit_or_markdown(tmp_path):
    d = write_traces(tmp_path / "t", [20, 20])
    r = invoke(["check", d, "--min-hidden", 50, "-o", tmp_path / "g.xml", "-o", tmp_path / "g.md"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "g.xml").read_text().startswith("<?xml")
    assert (tmp_path / "g.md").read_text().startswith("### ✅ domino-prof check: PASS")
