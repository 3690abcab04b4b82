"""benchmarks/gpu_session.sh, the one GPU session driver (issue 35): its suites, the
citations of them in the docs and reports, and a dry run (RUN= a stand-in command)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRIVER = ROOT / "benchmarks" / "gpu_session.sh"


def _suites() -> dict[str, str]:
    p = subprocess.run(["bash", str(DRIVER), "--list"], capture_output=True, text=True,
                       timeout=30, check=True)  # fmt: skip
    return {ln.split()[0]: ln.split(None, 1)[1] for ln in p.stdout.splitlines()}


def _docs() -> list[Path]:
    return [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "reports").rglob("*.md")]


def test_every_suite_has_a_function_and_a_line():
    text = DRIVER.read_text()
    suites = _suites()
    assert len(suites) >= 25
    for name, what in suites.items():
        assert f"suite_{name.replace('-', '_')}()" in text, name
        assert re.match(r"(1 GPU|2 GPUs|2xH200): ", what), (name, what)
    # the one driver: no other GPU session script is left
    assert sorted(p.name for p in (ROOT / "benchmarks").glob("gpu_*.sh")) == ["gpu_session.sh"]


def test_an_unknown_suite_is_one_line_exit_2(tmp_path):
    p = subprocess.run(["bash", str(DRIVER), "evidence", "nope"], capture_output=True, text=True,
                       timeout=30, env=dict(os.environ, OUT=str(tmp_path / "o")), check=False)  # fmt: skip
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "gpu_session.sh: no suite 'nope'; bash benchmarks/gpu_session.sh --list names them"]
    assert not (tmp_path / "o").exists()  # nothing ran


def test_the_docs_cite_suites_that_exist_and_old_scripts_that_were_folded_in():
    suites = set(_suites())
    text = DRIVER.read_text()
    folded = set(re.findall(r"\(was (gpu_[a-z0-9_]+\.sh)", text))
    assert len(folded) == 15  # the 14 one-off scripts and the old gpu_session.sh
    cited_suites, cited_old = set(), set()
    for doc in _docs():
        t = doc.read_text(errors="replace")
        for m in re.finditer(r"gpu_session\.sh((?: [a-z0-9][a-z0-9-]*)+)", t):
            cited_suites.update(m.group(1).split())
        cited_old.update(s for s in re.findall(r"\b(gpu_[a-z0-9_]+\.sh)\b", t)
                         if s != "gpu_session.sh")  # fmt: skip
    assert cited_suites and cited_suites <= suites, cited_suites - suites
    # a report may still name the script it was measured with: the driver says what it became
    assert cited_old <= folded, cited_old - folded


def test_a_dry_run_runs_the_suite_commands(tmp_path):
    """RUN=echo: the 8b suite's two runs as the driver forms them, a log of the session,
    and the machine's description file."""
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), WORK=str(tmp_path / "w"), RUN="echo RUN")
    p = subprocess.run(["bash", str(DRIVER), "8b"], capture_output=True, text=True, timeout=60,
                       env=env, check=False, cwd=ROOT)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    logs = sorted((tmp_path / "w" / "8b").glob("*.log"))
    assert [f.name for f in logs] == ["llama3-8b_cuda-graphs.log", "llama3-8b_no-cuda-graphs.log"]
    assert logs[0].read_text().split() == [
        "RUN", "--tp", "2", "--seq", "4096", "--model", "llama3-8b", "--mbs", "2", "--mode", "all",
        "--cuda-graphs", "--warmup", "3", "--steps", "8", "--profile-steps", "1", "--no-analyze",
        "--out", str(tmp_path / "w" / "8b" / "llama3-8b_cuda-graphs")]  # fmt: skip
    log = (out / "gpu_session.log").read_text()
    assert "== suite 8b rc=0" in log and (out / "env.txt").is_file()


def test_headline_next_forms_the_headline_runs(tmp_path):
    """RUN=echo, PARTS=graphs: issue 34's next-session suite runs the emulated headline
    with --cuda-graphs twice, as README's TP-8 section types it, timed steps only."""
    out, w = tmp_path / "out", tmp_path / "w"
    env = dict(os.environ, OUT=str(out), WORK=str(w), RUN="echo RUN", PARTS="graphs")
    p = subprocess.run(["bash", str(DRIVER), "headline-next"], capture_output=True, text=True,
                       timeout=60, env=env, check=False, cwd=ROOT)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    for n in ("graphs1", "graphs2"):
        assert (w / "headline-next" / f"{n}.log").read_text().split() == [
            "RUN", "--tp", "8", "--seq", "4096", "--comm", "emulate", "--mode", "all",
            "--cuda-graphs", "--steps", "16", "--block-steps", "4", "--profile-steps", "2",
            "--no-analyze", "--out", str(w / "headline-next" / n)]  # fmt: skip
    # the results come back as one tar beside the driver's two files (8 files at most)
    assert sorted(f.name for f in out.iterdir()) == ["env.txt", "gpu_session.log",
                                                     "headline-next.tar.gz"]
    import tarfile

    with tarfile.open(out / "headline-next.tar.gz") as t:
        assert "results/headline.txt" in t.getnames()
    env["PARTS"] = "nope"
    p = subprocess.run(["bash", str(DRIVER), "headline-next"], capture_output=True, text=True,
                       timeout=60, env=env, check=False, cwd=ROOT)  # fmt: skip
    assert p.returncode == 1 and "headline-next: no part 'nope'" in p.stdout
