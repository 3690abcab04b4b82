"""CLI-side user mistakes of issue #22 (items B2-B6, B8 second half, B10-B12, B15 third
part, B16): each one stderr line naming what is wrong and what to do, exit 2, before
any work; nothing half-written left behind. In-process through typer's CliRunner where
no ranks are spawned, subprocesses where they are (the launcher)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_check_cli import write_traces
from typer.testing import CliRunner

from domino_prof.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
S = ROOT / "tests" / "data" / "h200_llama3_3b_2layers_tp2"


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


# --------------------------------------------------------------------------- B10
@pytest.mark.parametrize("cmd", ["analyze", "report", "check", "baseline", "compare"])
def test_a_negative_rank_is_one_line_before_any_work(cmd, tmp_path, traces):
    one = traces / "rank0.pt.trace.json"  # --rank is for a single file
    args = [cmd, str(one), "--rank", "-3"]
    if cmd == "compare":
        args.insert(2, str(one))
    if cmd == "baseline":
        args += ["-o", str(tmp_path / "b.json")]
    if cmd == "check":
        args += ["--min-hidden", "0"]
    line = _one_line(runner.invoke(app, args))
    assert "Invalid value for '--rank': -3 is not a rank (ranks count from 0)" in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_timeout_that_is_not_positive_is_one_line(value, tmp_path):
    out = tmp_path / "run"
    line = _one_line(runner.invoke(app, ["run", "--timeout", value, "--out", str(out)]))
    assert f"Invalid value for '--timeout': {value} s would stop the ranks at once; give seconds > 0" in line, line
    assert not out.exists()


# --------------------------------------------------------------------------- B12
@pytest.mark.parametrize(
    ("cmd", "endings"),
    [
        ("report", ".html, .htm"),
        ("compare", ".html, .htm"),
        ("baseline", ".json"),
        ("analyze", ".json, .json.gz, .html, .htm"),
        ("check", ".xml, .md"),
    ],
)
def test_every_command_rejects_an_unknown_output_suffix_the_same_way(
    cmd, endings, tmp_path, traces
):
    target = tmp_path / "out.txt"
    args = [cmd, str(traces), "-o", str(target)]
    if cmd == "compare":
        args.insert(2, str(traces))
    line = _one_line(runner.invoke(app, args))
    assert line == (
        f"domino-prof: error: -o {target}: cannot tell the format from the file name; "
        f"end it in {endings}"
    )
    assert not target.exists()


# --------------------------------------------------------------------------- B15 (3)
def test_analyze_says_where_it_wrote(tmp_path, traces):
    j, h = tmp_path / "f.json", tmp_path / "f.html"
    res = runner.invoke(app, ["analyze", str(traces), "-o", str(j)])
    assert res.exit_code == 0, res.output
    size = j.stat().st_size / 1e6
    assert res.stdout.splitlines()[-1] == f"wrote {j} ({size:.1f} MB)"
    res = runner.invoke(app, ["analyze", str(traces), "-o", str(j), "-o", str(h)])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[-2:] == [
        f"wrote {j} ({j.stat().st_size / 1e6:.1f} MB)",
        f"wrote {h} ({h.stat().st_size / 1e6:.1f} MB)",
    ]
    # JSON on stdout: stdout is the document alone, the HTML's line goes to stderr
    res = runner.invoke(app, ["analyze", str(traces), "-o", "-", "-o", str(h)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["schema"] == "domino-prof/analysis"
    assert f"wrote {h} (" in res.stderr


# --------------------------------------------------------------------------- B11
def test_check_baseline_given_a_trace_says_so(tmp_path, traces):
    gz = tmp_path / "rank0.pt.trace.json.gz"
    gz.write_bytes(gzip.compress((traces / "rank0.pt.trace.json").read_bytes()))
    for given in (gz, traces / "rank0.pt.trace.json"):
        line = _one_line(runner.invoke(app, ["check", str(traces), "--baseline", str(given)]))
        assert line == (
            f"domino-prof: error: --baseline {given} is a trace, not a baseline; make a "
            f"baseline from it with `domino-prof baseline {given} -o baseline.json`, then "
            "give --baseline baseline.json"
        )


def test_check_baseline_given_a_directory_says_so(traces):
    line = _one_line(runner.invoke(app, ["check", str(traces), "--baseline", str(traces)]))
    assert line == (
        f"domino-prof: error: --baseline {traces} is a directory, not a baseline; make "
        f"one with `domino-prof baseline {traces} -o baseline.json`, then give "
        "--baseline baseline.json"
    )


# --------------------------------------------------------------------------- B16
def test_scripts_test_sh_removes_its_temp_dir(tmp_path):
    """scripts/test.sh with stub commands (python, domino-prof, chromium) in a copy of
    the tree: whether it passes or fails, nothing of it is left under $TMPDIR."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test.sh", tree / "scripts" / "test.sh")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, body in (("python", "exit 0"), ("chromium", "exit 0"),
                       ("domino-prof", 'exit "${STUB_RC:-0}"')):  # fmt: skip
        f = bin_ / name
        f.write_text(f"#!/bin/sh\n{body}\n")
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    tmpdir = tmp_path / "tmp"
    for rc in ("0", "1"):
        tmpdir.mkdir()
        env = dict(os.environ, PATH=f"{bin_}:/usr/bin:/bin", PYTHON=str(bin_ / "python"),
                   TMPDIR=str(tmpdir), STUB_RC=rc)  # fmt: skip
        p = subprocess.run(["bash", str(tree / "scripts" / "test.sh")], env=env,
                           capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert p.returncode == int(rc), p.stderr
        assert list(tmpdir.iterdir()) == [], rc
        tmpdir.rmdir()


# --------------------------------------------------------------------------- B3
@pytest.fixture
def http_server():
    """A real HTTP server (not Dask) on a free 127.0.0.1 port, in a thread; closed after."""
    import http.server
    import threading

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"tcp://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=10)


@pytest.mark.timeout(60)
def test_a_scheduler_address_where_something_else_answers_is_one_line(
    http_server, traces, monkeypatch
):
    """`python3 -m http.server` on the port hung `distributed.Client` over 400 s: the
    probe waits for the Dask handshake (a scheduler sends it first) at most the connect
    timeout (10 s; 1 s here)."""
    pytest.importorskip("distributed")
    from domino_prof import engine

    monkeypatch.setattr(engine, "CONNECT_TIMEOUT_S", 1.0)
    line = _one_line(runner.invoke(app, ["analyze", str(traces), "--scheduler", http_server]))
    assert line == (
        f"domino-prof: error: --scheduler {http_server}: something answers there but it is "
        "not a Dask scheduler (no Dask handshake within 1 s); give the scheduler's address "
        "(tcp://HOST:8786) or 'local'"
    )


@pytest.mark.timeout(60)
def test_a_scheduler_that_answers_garbage_is_one_line(traces, monkeypatch):
    import threading

    pytest.importorskip("distributed")
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve():
        conn, _ = srv.accept()
        with conn:
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
            time.sleep(0.5)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        line = _one_line(runner.invoke(app, ["analyze", str(traces), "--scheduler",
                                             f"tcp://127.0.0.1:{port}"]))  # fmt: skip
    finally:
        t.join(timeout=10)
        srv.close()
    assert line.startswith(f"domino-prof: error: --scheduler tcp://127.0.0.1:{port}: something "
                           "answers there but it is not a Dask scheduler (it sent "
                           "b'SSH-2.0-OpenSSH_9.6")  # fmt: skip


@pytest.mark.timeout(120)
def test_a_scheduler_without_workers_is_one_line_after_a_stated_wait(traces, monkeypatch):
    distributed = pytest.importorskip("distributed")
    import logging

    from domino_prof import engine

    monkeypatch.setattr(engine, "WORKER_WAIT_S", 0.5)
    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp",
                                  dashboard_address=":0", silence_logs=logging.ERROR) as c:  # fmt: skip
        addr = c.scheduler_address
        assert addr.startswith("tcp://127.0.0.1:")
        line = _one_line(runner.invoke(app, ["analyze", str(traces), "--scheduler", addr]))
    assert line == (
        f"domino-prof: error: --scheduler {addr}: the scheduler has no workers (waited "
        f"0.5 s for one); start some with `dask worker {addr}`, or use --scheduler local"
    )
