"""What `run` and `tune` need where the model trains: the GPU machine's image has torch,
pandas, numpy, typer and rich, but not the trace engine's decoder (msgspec), plotly or
orjson (docs/ARCHITECTURE.md §4). A run with ``--no-analyze`` must train, write its run
directory and print its comparison there; tune must read its candidates' run.json there.

On 2026-12-07 every `run` of an emulated headline on one H100 ended in
``ModuleNotFoundError: No module named 'msgspec'`` after its last mode: its printout read
two mode maps through ``analysis.limits``, which imports the trace engine. Here those
packages are made unimportable (a package of each name on PYTHONPATH that raises, in the
rank processes too) and the same path runs on CPU, tp 2 with gloo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ABSENT = ("msgspec", "plotly", "orjson")  # not on the device image


def _env(tmp: Path) -> dict:
    block = tmp / "absent"
    for name in ABSENT:
        (block / name).mkdir(parents=True, exist_ok=True)
        (block / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError({f'No module named {name!r} (absent on the device image)'!r})\n"
        )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(block), str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture(scope="module")
def device_run(tmp_path_factory):
    """The run, made once per session: under xdist a worker that runs the last test it
    holds tears the module's fixtures down (it does not know the next test yet), and the
    run was made twice in scripts/test.sh (16 s, then 12 s, on the serial rank-process
    leg). So its result is kept beside it (result.json, written after the run) and a
    rebuilt fixture reads that instead of running it again."""
    tmp = tmp_path_factory.getbasetemp() / "device-image"
    out, done = tmp / "run", tmp / "result.json"
    env = _env(tmp)
    if done.exists():
        r = json.loads(done.read_text())
        p = subprocess.CompletedProcess(r["args"], r["returncode"], r["stdout"], r["stderr"])
        return p, out, env
    cmd = [sys.executable, "-m", "domino_prof.commands.run", "--device", "cpu", "--tp", "2",
           "--model", "tiny", "--seq", "64", "--mode", "all", "--steps", "2", "--block-steps",
           "1", "--profile-steps", "1", "--no-analyze", "--out", str(out)]  # fmt: skip
    p = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=240)
    done.write_text(json.dumps({"args": cmd, "returncode": p.returncode, "stdout": p.stdout,
                                "stderr": p.stderr}))  # fmt: skip
    return p, out, env


def test_run_no_analyze_needs_neither_decoder_nor_plotly(device_run):
    p, out, _ = device_run
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "ModuleNotFoundError" not in p.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "complete"
    timed = [m for m, r in run["modes"].items() if r.get("step_ms") is not None]
    assert "domino-sp-nocomm" in timed and "domino-nocomm" in timed
    # the printout ran to its end: the no-comm notes of both split modes (stderr)
    err = " ".join(p.stderr.split())
    assert "domino-nocomm skips every TP collective" in err
    assert "domino-sp-nocomm skips every TP collective" in err
    assert not (out / "report.html").exists()  # no analysis: no report, and it says so
    assert "--reanalyze" in err


def test_tune_reads_a_candidate_without_the_decoder(device_run):
    """tune's reading of a candidate's run.json (candidate_numbers) in the same image."""
    p, out, env = device_run
    assert p.returncode == 0
    code = (
        "import json, sys\n"
        "from domino_prof.commands import tune\n"
        "run = json.load(open(sys.argv[1]))\n"
        "got = tune.candidate_numbers(run, 'domino-sp')\n"
        f"assert not any(m in sys.modules for m in {ABSENT!r})\n"
        "print(json.dumps(got))\n"
    )
    q = subprocess.run([sys.executable, "-c", code, str(out / "run.json")], env=env,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert q.returncode == 0, q.stderr[-2000:]
    got = json.loads(q.stdout)
    run = json.loads((out / "run.json").read_text())
    assert got["domino_step_ms"] == run["modes"]["domino-sp"]["step_ms"]
    assert got["limits"] is None  # not analysed: no decomposition, and none invented


def test_analysis_without_the_decoder_is_a_note_not_a_traceback(device_run, tmp_path):
    """`run` analyses by default; where msgspec is absent that step must leave a complete
    run.json and one note with the way on (2026-12-07, one H100: `run --analyze` raised
    ModuleNotFoundError after every mode had trained and left run.json incomplete).
    `run --reanalyze` takes the same path (runs._analyse_and_write) without training."""
    import shutil

    p, out, env = device_run
    assert p.returncode == 0
    d = tmp_path / "copy"
    shutil.copytree(out, d)
    cmd = [sys.executable, "-m", "domino_prof.commands.run", "--reanalyze", str(d)]
    q = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert q.returncode == 0, q.stdout[-2000:] + q.stderr[-2000:]
    assert "Traceback" not in q.stderr and "Traceback" not in q.stdout
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "complete"
    notes = [n for n in run["notes"] if n.startswith("traces not analysed")]
    assert len(notes) == 1 and "msgspec" in notes[0] and f"--reanalyze {d}" in notes[0]
    assert all(r.get("analysis") is None for r in run["modes"].values())
    assert not any((d / r["trace_dir"] / "analysis.json").exists() for r in run["modes"].values())
