"""Start-up of `domino-prof analyze` (issue 23): what it imports, and the light
parameter coercion in domino_prof/cli.py that keeps typer's pydantic out of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from domino_prof.cli import app

ROOT = Path(__file__).resolve().parents[1]

SAMPLES = {
    "path": ["a.json", "dir/rank0.json.gz", "-", ".", ""],
    "output": [("a.json",), ("a.json", "b.html"), ()],
    "mode": ["domino", "", "é"],
    "top": [5, "5", "007", "-3", "0", "123456789012345678", "1_000", " 5", "x", "5.0", True],
    "rank": ["0", "12", "-1", "abc"],
    "threshold": [("top_n=5",), ("a=1", "b=2")],
    "by": ["stream"],
}


def _outcome(fn):
    try:
        return ("ok", type(v := fn()).__name__, v)
    except Exception as e:  # noqa: BLE001 - the error is what is compared
        return ("error", type(e).__name__, getattr(e, "message", str(e)))


def test_light_coercion_gives_what_typer_gives(tmp_path, monkeypatch):
    """Every value, plain or not, coerces to what typer's own (pydantic) coercion gives,
    error messages included."""
    from typer.core import _TyperParameter

    light = _TyperParameter.__dict__["get_runtime_param"]
    if not getattr(light, "_light", False):
        pytest.skip("this typer has no pydantic coercion to bypass")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.json").write_text("{}")
    cmd = typer.main.get_command(app).commands["analyze"]
    ctx = typer.main.get_command(app).make_context("domino-prof", ["analyze", "x"])
    seen = 0
    for p in cmd.params:
        for v in [None, *SAMPLES.get(p.name, [])]:
            p._runtime_param = None  # typer's coercion caches itself here
            fast = light(p)
            assert type(fast).__name__ == "_Light", p.name
            got = _outcome(lambda p=p, v=v: fast.coerce(v, param=p, ctx=ctx))
            want = _outcome(lambda p=p, v=v: light._typers(p).coerce(v, param=p, ctx=ctx))
            assert got == want, (p.name, v)
            seen += 1
    assert seen > 40


def test_analyze_of_a_tiny_trace_imports_no_pydantic_and_no_other_command(tmp_path):
    trace = {
        "distributedInfo": {"rank": 0},
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
             "ts": 100, "dur": 50, "pid": 0, "tid": 7, "args": {"stream": 7, "device": 0}},
            {"ph": "X", "cat": "kernel", "name": "ampere_sgemm", "ts": 120, "dur": 60,
             "pid": 0, "tid": 8, "args": {"stream": 8, "device": 0}},
        ],
    }  # fmt: skip
    f = tmp_path / "tiny.json"
    f.write_text(json.dumps(trace))
    # printed by an atexit handler: the CLI ends this process (cli._exit) and runs them
    code = (
        "import atexit, sys, runpy; sys.argv = ['domino-prof', 'analyze', sys.argv[1]]\n"
        "atexit.register(lambda: print(sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('pydantic', 'plotly') or m.startswith('domino_prof.commands.') and not"
        " m.startswith('domino_prof.commands._'))))\n"
        "runpy.run_module('domino_prof.cli', run_name='__main__')\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(f)], capture_output=True,
                         text=True, cwd=str(ROOT), timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "hidden comm 60.0%" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "['domino_prof.commands.analyze']"


@pytest.mark.parametrize("args, rc", [([], 0), (["--top", "0"], 2)], ids=["ok", "bad-option"])
def test_the_cli_process_ends_without_the_interpreter_teardown(tmp_path, args, rc):
    """``cli._exit``: run as the CLI, the process runs its atexit handlers, flushes its
    output and ends with the command's exit code, without tearing down its modules (an
    object of ``__main__`` is never finalised); its JSON is whole."""
    f = tmp_path / "tiny.json"
    f.write_text(json.dumps({"distributedInfo": {"rank": 0}, "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
         "ts": 100, "dur": 50, "pid": 0, "tid": 7, "args": {"stream": 7, "device": 0}}]}))  # fmt: skip
    out_json = tmp_path / "out.json"
    code = (
        "import atexit, sys, runpy\n"
        "class Teardown:\n    def __del__(self):\n        print('torn down', flush=True)\n"
        "marker = Teardown()\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "sys.argv = ['domino-prof', 'analyze', *sys.argv[1:]]\n"
        "runpy.run_module('domino_prof.cli', run_name='__main__')\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(f), "-o", str(out_json), *args],
                         capture_output=True, text=True, cwd=str(ROOT), timeout=120)  # fmt: skip
    assert out.returncode == rc, out.stderr
    assert "atexit ran" in out.stdout and "torn down" not in out.stdout
    if rc == 0:
        assert "hidden comm 0.0%" in out.stdout
        assert json.loads(out_json.read_text())["totals"]["comm_ns"] == 50_000
    else:
        assert "--top" in out.stderr and not out_json.exists()
    # the same script, not as the CLI (another argv[0]): the usual teardown
    out = subprocess.run([sys.executable, "-c", code.replace("'domino-prof'", "'other'"),
                          str(f), "-o", str(out_json), *args], capture_output=True, text=True,
                         cwd=str(ROOT), timeout=120)  # fmt: skip
    assert out.returncode == rc and "torn down" in out.stdout

