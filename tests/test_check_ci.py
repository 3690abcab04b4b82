"""The CI docs run: the example GitHub Actions workflow's `domino-prof` lines, and
the pytest helper (`domino_prof.pytest_plugin`), on synthetic traces whose
figures are worked out in tests/test_check_cli.py (a = forward comm start:
a=20 -> 66.667 % hidden per rank, forward 50 %; a=22 -> 60 %, forward 40 %;
a=30 -> 33.333 %, forward 0 %; backward is always 100 %)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_check_cli import invoke, table_rows, write_traces

from domino_prof.errors import DominoProfError
from domino_prof.pytest_plugin import assert_overlap

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "docs" / "examples" / "github-actions.yml"


def run_blocks(text: str) -> list[str]:
    """Shell text of every ``run:`` step (inline or ``|`` block), found without a
    YAML parser; backslash continuations joined."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(?:- )?run:\s*(.*)$", lines[i])
        i += 1
        if not m:
            continue
        indent, rest = len(m.group(1)), m.group(2).strip()
        if rest not in ("|", ">", "|-", ">-"):
            out.append(rest)
            continue
        block = []
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > indent):
            block.append(lines[i])
            i += 1
        out.append(textwrap.dedent("\n".join(block)).strip())
    return [re.sub(r"\\\n\s*", "", b) for b in out]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def domino_commands(text: str) -> list[str]:
    return [b for b in run_blocks(text) if b.startswith("domino-prof ")]


def test_example_workflow_has_the_gate():
    cmds = domino_commands(WORKFLOW.read_text())
    assert [c.split()[1] for c in cmds] == ["baseline", "check", "check"]
    gate = cmds[1]
    for opt in ("--baseline", "--max-drop", "--min-hidden", "--junit", "--markdown"):
        assert opt in gate


def test_example_workflow_is_valid_yaml_with_the_same_run_lines():
    yaml = pytest.importorskip("yaml")  # PyYAML is not a dependency; the regex test always runs
    doc = yaml.safe_load(WORKFLOW.read_text())
    steps = doc["jobs"]["overlap"]["steps"]
    runs = [re.sub(r"\\\n\s*", "", s["run"]).strip() for s in steps if "run" in s]
    assert [r for r in runs if r.startswith("domino-prof ")] == domino_commands(
        WORKFLOW.read_text()
    )
    assert set(doc["env"]) == {"TRACE_DIR", "BASELINE"}
    triggers = doc.get(True, doc.get("on"))  # YAML 1.1 reads the key `on` as True
    assert "pull_request" in triggers


def _argv(cmd: str, env: dict[str, str]) -> list[str]:
    """shlex-split a workflow line and expand $VAR / ${VAR} from ``env`` only."""
    argv = shlex.split(cmd)
    assert argv[0] == "domino-prof"
    return [re.sub(r"\$\{?(\w+)\}?", lambda m: env[m.group(1)], a) for a in argv[1:]]


def _run(cmds: list[str], env: dict[str, str]):
    gh = {k: v for k, v in env.items() if k.startswith("GITHUB_")}
    return [invoke(_argv(c, env), **gh) for c in cmds]


def test_example_workflow_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    good = write_traces(tmp_path / "profile-traces", [20, 20])
    summary = tmp_path / "step_summary.md"
    env = {
        "TRACE_DIR": str(good),
        "BASELINE": str(tmp_path / ".ci" / "overlap-baseline.json"),
        "GITHUB_ACTIONS": "true",
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    # baseline from the good traces; gate (drop 0 <= 2, 66.67 % >= 50); forward
    # attention ops 50 % >= 40
    cmds = domino_commands(WORKFLOW.read_text())
    res = _run(cmds, env)
    assert [(c.split()[1], r.exit_code) for c, r in zip(cmds, res)] == [
        ("baseline", 0), ("check", 0), ("check", 0),
    ]  # fmt: skip
    assert (tmp_path / "overlap-junit.xml").is_file()
    assert "PASS: all" in summary.read_text()

    # A regression: rank 1's forward comm now starts at a=30 (0 % of it hidden):
    # overall 66.67 -> 33.33 %, below the floor of 50 and a 33-point drop; the
    # attention ops' 0 % is below 40. Both gates fail (exit 1), vs the committed baseline.
    env["TRACE_DIR"] = str(write_traces(tmp_path / "regressed", [20, 30]))
    gate, attn = _run(cmds[1:], env)
    assert (gate.exit_code, attn.exit_code) == (1, 1)
    assert "::error file=" in gate.stdout
    rows = table_rows(gate.stdout)
    assert ("min-hidden", 1, "FAIL") in rows and ("hidden drop", 1, "FAIL") in rows
    assert ("rank present", 1, "pass") in rows
    assert summary.read_text().count("### ") == 2  # the step summary was appended to


# --------------------------------------------------------------------------- pytest helper
def test_assert_overlap_passes_and_returns_rows(tmp_path: Path):
    d = write_traces(tmp_path / "t", [20, 22])
    rows = assert_overlap(d, min_hidden=60)  # 66.67 and 60.00 % (inclusive floor)
    assert [(r.rank, r.verdict) for r in rows] == [(0, "pass"), (1, "pass")]
    assert rows[1].measured == pytest.approx(60.0)


def test_assert_overlap_raises_with_the_table(tmp_path: Path):
    d = write_traces(tmp_path / "t", [20, 22])
    with pytest.raises(AssertionError) as e:
        assert_overlap(d, min_hidden=45, phase="fwd")  # forward: 50 % and 40 %
    text = str(e.value)
    assert text.splitlines()[0] == f"domino-prof overlap gate on {d}: FAIL: 1 of 2 checks failed"
    assert re.search(r"min-hidden \[forward\]\s+1\s+40\.00%\s+>= 45\.00%\s+FAIL", text)
    base = tmp_path / "b.json"
    assert invoke(["baseline", write_traces(tmp_path / "g", [20, 20]), "-o", base]).exit_code == 0
    with pytest.raises(AssertionError, match="hidden drop"):
        assert_overlap(d, baseline=base, max_drop=5)  # rank 1 dropped 6.67 points
    with pytest.raises(DominoProfError, match="matches no op name"):
        assert_overlap(d, min_hidden=1, op_pattern="nothing-like-this")


def test_overlap_gate_fixture_in_a_pytest_run(tmp_path: Path):
    traces = write_traces(tmp_path / "t", [20, 30])
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import os

            def test_rank0_only_floor(overlap_gate):
                overlap_gate(os.environ["TRACES"], min_hidden=30)   # 66.67 and 33.33 %

            def test_floor_that_rank1_misses(overlap_gate):
                overlap_gate(os.environ["TRACES"], min_hidden=50)
            """
        )
    )
    env = {**os.environ, "TRACES": str(traces)}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "domino_prof.pytest_plugin", "-q",
         "-p", "no:cacheprovider", "-o", "addopts=", str(tmp_path / "test_user.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 failed, 1 passed" in r.stdout
    assert "FAIL: 1 of 2 checks failed" in r.stdout
