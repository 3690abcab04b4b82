"""CLI-side user mistakes of issue #22 (items B2-B6, B8 second half, B10-B12, B15 third
part, B16): each one stderr line naming what is wrong and what to do, exit 2, before
any work; nothing half-written left behind. In-process through typer's CliRunner where
no ranks are spawned, subprocesses where they are (the launcher)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rundirs import write_run_dir
from test_check_cli import write_traces
from test_output_errors import _one_line  # one line, exit 2, no traceback
from typer.testing import CliRunner

from domino_prof.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
S = ROOT / "tests" / "data" / "h200_llama3_3b_2layers_tp2"


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
    want = f"Invalid value for '--timeout': {value} s would stop the ranks at once; give seconds > 0"
    assert want in line, line
    assert not out.exists()


# --------------------------------------------------------------------------- B12
@pytest.mark.parametrize(
    ("cmd", "endings"),
    [
        ("report", ".html, .htm, .pftrace"),
        ("compare", ".html, .htm"),
        ("baseline", ".json"),
        ("analyze", ".json, .json.gz, .html, .htm, .pftrace"),
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
    the tree: whether it passes or fails, nothing of it is left under $TMPDIR, and the
    browser on PATH is the one it uses (scripts/get_chromium.sh fetches none)."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    for f in ("test.sh", "get_chromium.sh"):
        shutil.copy(ROOT / "scripts" / f, tree / "scripts" / f)
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


# --------------------------------------------------------------------------- B2
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_run_into_proc_is_one_line(tmp_path):
    pytest.importorskip("torch")
    line = _one_line(runner.invoke(app, ["run", "--mode", "tp", "--out", "/proc/x"]))
    # as root /proc/x fails at mkdir ("cannot create the run directory (...)"); as another
    # user at the writability check first ("cannot create or write in /proc"): one line both
    assert line.startswith("domino-prof: error: --out /proc/x: cannot create")
    assert line.endswith("; choose a writable directory")


# --------------------------------------------------------------------------- B6
def _npy(path: Path, arr) -> Path:
    import numpy as np

    np.save(path, arr)
    return path


@pytest.mark.parametrize(
    ("name", "make", "says"),
    [
        ("garbage.json", lambda p: p.write_text('{"a": [1, 2, 3]}'),
         "a token file must be a .npy 1-D integer array (numpy.save) or .bin raw uint16 "
         "tokens; '.json' is neither"),
        ("tokens", lambda p: p.write_bytes(b"\0" * 4096),
         "'no suffix' is neither"),
        ("odd.bin", lambda p: p.write_bytes(b"\0" * 1001),
         "1001 bytes is not a whole number of uint16 tokens"),
        ("short.bin", lambda p: p.write_bytes(b"\0" * 14),
         "7 tokens, fewer than one batch needs (258 = --mbs 2 x (--seq 128 + 1))"),
        ("floats.npy", lambda p: _npy(p, [0.5] * 1000),
         "holds a float64 array of shape (1000,); a .npy token file must be a 1-D integer array"),
        ("grid.npy", lambda p: _npy(p, [[1, 2]] * 1000),
         "holds a int64 array of shape (1000, 2)"),
        ("fake.npy", lambda p: p.write_text("not numpy"), "not a .npy array ("),
        ("missing.bin", lambda p: None, "no such file"),
    ],
)  # fmt: skip
def test_run_data_is_checked_before_any_rank_starts(name, make, says, tmp_path):
    pytest.importorskip("torch")
    f = tmp_path / name
    make(f)
    out = tmp_path / "run"
    line = _one_line(runner.invoke(app, ["run", "--data", str(f), "--out", str(out)]))
    assert line.startswith(f"domino-prof: error: --data {f}: "), line
    assert says in line, line
    assert not out.exists()


def test_a_good_token_file_passes_the_check(tmp_path):
    import numpy as np

    from domino_prof.reference_model.launcher import check_data

    check_data(_npy(tmp_path / "t.npy", np.arange(258, dtype=np.int32)), mbs=2, seq=128)
    (tmp_path / "t.bin").write_bytes(np.arange(258, dtype=np.uint16).tobytes())
    check_data(tmp_path / "t.bin", mbs=2, seq=128)


# --------------------------------------------------------------------------- B4
def test_a_second_run_into_the_same_out_refuses_at_once(tmp_path):
    """The first run holds the directory (here this test process, through the same
    runs.claim `run` uses): a second `run` refuses before it spawns anything."""
    pytest.importorskip("torch")
    from domino_prof import runs

    out = tmp_path / "run"
    with runs.claim(out):
        line = _one_line(runner.invoke(app, ["run", "--mode", "tp", "--out", str(out)]))
        assert line.startswith(f"domino-prof: error: --out {out}: a run is in progress "
                               f"there (pid {os.getpid()}, started ")  # fmt: skip
        assert line.endswith("; wait for it to finish or give another --out")
        assert sorted(p.name for p in out.iterdir()) == [runs.LOCK_FILE]  # nothing spawned
        # --reanalyze of it refuses too, and readers say a run is in progress
        write_run_dir(out, {}, status="incomplete")
        line = _one_line(runner.invoke(app, ["run", "--reanalyze", str(out)]))
        assert f"--reanalyze {out}: a run is in progress there (pid {os.getpid()}" in line
        line = _one_line(runner.invoke(app, ["analyze", str(out)]))
        assert f"a run is in progress here (pid {os.getpid()}" in line
    assert not (out / runs.LOCK_FILE).exists()  # released


def test_a_stale_lock_is_taken_over(tmp_path):
    """A lock file left by a run that died (no process holds its flock) is no lock."""
    from domino_prof import runs

    out = tmp_path / "run"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (out / runs.LOCK_FILE).write_text(json.dumps({"pid": int(dead), "started": "then"}))
    assert runs.lock_holder(out) is None
    with runs.claim(out):
        holder = runs.lock_holder(out)
        assert holder is not None and holder["pid"] == os.getpid()
    assert runs.lock_holder(out) is None


# --------------------------------------------------------------------------- B5
def _interrupted_run(tmp_path: Path, *, complete: list[str], partial: list[str]) -> Path:
    """What Ctrl-C leaves: run.json "incomplete", the modes whose traces were written,
    a mode with one rank's trace only, and temp files of interrupted writes."""
    from domino_prof import runs
    from domino_prof.reference_model.config import RunConfig

    src = json.loads((S / "run.json").read_text())
    cfg = dict(src["config"], modes=[*complete, *partial])
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps(runs.incomplete_run(RunConfig.from_dict(cfg))))
    for m in complete:
        shutil.copytree(S / m, out / m, ignore=shutil.ignore_patterns("analysis.json"))
    for m in partial:
        (out / m).mkdir()
        shutil.copy(S / "tp" / "rank0.pt.trace.json.gz", out / m / "rank0.pt.trace.json.gz")
        (out / m / ".rank1.pt.trace.json.gz.partial.json.tmp").write_text("{")
    (out / ".run.json.abc123.tmp").write_text("{")
    return out


def test_reanalyze_finishes_an_interrupted_run_from_its_complete_traces(tmp_path):
    out = _interrupted_run(tmp_path, complete=["domino"], partial=["tp"])
    line = _one_line(runner.invoke(app, ["analyze", str(out)]))
    assert line == (
        f"domino-prof: error: {out / 'run.json'}: the run did not finish (status incomplete: "
        f"interrupted or a rank failed); `domino-prof run --reanalyze {out}` analyses the "
        "modes whose traces are complete"
    )
    res = runner.invoke(app, ["run", "--reanalyze", str(out)])
    assert res.exit_code == 0, res.output
    assert "note: modes without complete traces (not analysed): tp" in res.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "partial"
    assert list(run["modes"]) == ["domino"]
    # S's independent figures (expected.py): hidden = sum of H / sum of C over both ranks
    exp = json.loads((S / "expected.json").read_text())["domino"].values()
    want = 100 * sum(r["hidden_ns"] for r in exp) / sum(r["comm_ns"] for r in exp)
    assert run["modes"]["domino"]["hidden_pct"] == pytest.approx(want, abs=1e-9)
    assert run["modes"]["domino"]["step_ms"] is None and run["comparison"] == []
    assert run["notes"][1] == "modes without complete traces (not analysed): tp"
    assert (out / "domino" / "analysis.json").is_file() and (out / "report.html").is_file()
    left = sorted(str(p.relative_to(out)) for p in out.rglob(".*"))
    assert left == [], left  # temp files and the lock file gone
    res = runner.invoke(app, ["analyze", str(out)])  # a partial run reads as a run
    assert res.exit_code == 0, res.output


def test_reanalyze_with_nothing_complete_is_one_line(tmp_path):
    out = _interrupted_run(tmp_path, complete=[], partial=["tp"])
    line = _one_line(runner.invoke(app, ["run", "--reanalyze", str(out)]))
    assert line == (
        f"domino-prof: error: {out}: the run was interrupted before any mode's traces were "
        "complete (a trace per rank of tp); nothing to analyse: re-run `domino-prof run`"
    )


def test_a_mode_directory_of_an_interrupted_run_reads_as_plain_traces(tmp_path):
    out = _interrupted_run(tmp_path, complete=["tp"], partial=[])
    res = runner.invoke(app, ["analyze", str(out / "tp")])
    assert res.exit_code == 0, res.output
    assert "hidden" in res.stdout


# --------------------------------------------------------------------------- C, B8
def _cpu_trace(d: Path, rank: int = 0, world: int = 1) -> Path:
    """A CPU gloo trace: step [0, 100] µs, aten::mm [10, 30] on the main thread (4242),
    gloo:all_reduce [35, 55] on the pt_gloo_runloop thread (77): nothing hides it."""
    from tracegen import TraceBuilder

    b = TraceBuilder(rank=rank, world_size=world, backend="gloo")
    b.thread_name(77, "pt_gloo_runloop")
    b.step(1, 0, 100)
    b.cpu("aten::mm", 10, 20)
    b.cpu("c10d::allreduce_", 31, 2)
    b.annotation("gloo:all_reduce", 35, 20, tid=77)
    d.mkdir(parents=True, exist_ok=True)
    return b.write(d / f"rank{rank}.pt.trace.json")


def _sections_text(html: str) -> dict[str, str]:
    """Visible text per report section (data-section key), scripts and styles dropped."""
    import re

    out: dict[str, str] = {}
    html = re.sub(r"<(script|style)\b.*?</\1>", "", html, flags=re.S)
    for key, body in re.findall(r'<section id="[^"]*" data-section="([^"]+)">(.*?)</section>',
                                html, flags=re.S):  # fmt: skip
        out[key] = out.get(key, "") + " " + re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))
    return out


def _plot_specs(html: str) -> list[dict]:
    import re

    return [json.loads(s.replace("<\\/", "</")) for s in re.findall(
        r'<script type="application/json" id="dp-fig-\d+-data">(.*?)</script>', html, flags=re.S)]


GPU_WORDS = r"\b(gpus?|devices?|streams?|kernels?|links?|nvlink|cuda)\b"


def test_a_cpu_report_speaks_of_threads_and_cores(tmp_path):
    import re

    from domino_prof.engine import analyze
    from domino_prof.report.page import render_report
    from domino_prof.trace import load_trace

    a = analyze(load_trace(_cpu_trace(tmp_path)))
    assert a.mode == "cpu"
    html = render_report(a)
    secs = _sections_text(html)
    # the configuration table lists the analysis' own notes and the comm regex verbatim
    shown = {k: v for k, v in secs.items() if k != "config"}
    for key, text in shown.items():
        assert not re.search(GPU_WORDS, text, flags=re.I), (key, text)
    assert {"switches", "launches", "graphs"}.isdisjoint(secs)  # GPU-only measures
    assert "One step, per rank and thread" in secs["timeline"]
    assert "cores" in secs["timeline"] and "thread" in secs["headline"]
    (spec,) = [s for s in _plot_specs(html)
               if s["data"] and str(s["data"][0].get("y", [""])[0]).startswith("rank ")]  # fmt: skip
    lanes = {y for t in spec["data"] for y in t["y"]}
    assert lanes == {"rank 0 · main thread 4242", "rank 0 · gloo thread 77"}
    axis = json.dumps(spec["layout"]["xaxis"]["title"])
    assert not re.search(GPU_WORDS, axis, flags=re.I), axis


def test_a_gpu_report_keeps_its_words(tmp_path):
    from domino_prof.analysis import AnalysisConfig
    from domino_prof.engine import analyse_path
    from domino_prof.report.page import render_report

    html = render_report(analyse_path(S / "domino", AnalysisConfig()))
    secs = _sections_text(html)
    assert "One step, per rank and stream" in secs["timeline"]
    assert {"switches", "launches", "graphs"} <= set(secs)


def test_the_nocomm_section_says_in_one_line_why_it_is_empty(tmp_path):
    """A CPU run's nocomm mode skips every collective: its trace has neither device work
    nor gloo comm; its place in the run report is one line saying so."""
    from domino_prof.report.figures import not_analysed

    reason = "x: no device activity (no kernel events) ... ProfilerActivity.CUDA?"
    u = not_analysed("nocomm", reason)
    assert u.reason == (
        "nocomm runs no collectives, so its trace has no comm to analyse; what comm costs "
        "is the timed step of tp against that of nocomm (the modes table)"
    )
    assert not_analysed("tp", reason).reason == f"Not analysed: {reason}"
    for m in ("domino-nocomm", "domino-sp-nocomm"):  # the split's modes: the same, in its words
        assert not_analysed(m, reason).reason == (
            f"{m} runs no collectives, so its trace has no comm to analyse; what its "
            "schedule's split costs is its timed step against that of nocomm (the modes table)")
    run = tmp_path / "run"
    _cpu_trace(run / "tp")
    (run / "nocomm").mkdir()
    from tracegen import TraceBuilder

    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 100)
    b.cpu("aten::mm", 10, 20)
    b.write(run / "nocomm" / "rank0.pt.trace.json")
    mode = {"step_ms": 1.0, "step_times_ms": [1.0], "tokens_per_s": 1.0, "losses": [1.0]}
    write_run_dir(run, {m: mode for m in ("tp", "nocomm")}, config={"tp": 1})
    res = runner.invoke(app, ["report", str(run)])
    assert res.exit_code == 0, res.output
    html = (run / "report.html").read_text()
    i = html.index("Mode: nocomm")
    assert u.reason in html[i:] and "ProfilerActivity" not in html[i:]
    assert f"nocomm: {u.reason}" in res.stderr


def test_the_config_table_shows_the_attention_kernel_used():
    from domino_prof.report.figures import configuration

    run = {"config": {"tp": 2, "attention": "auto"}, "attention": "flash"}
    rows = [r for row in configuration(None, run=run).body.rows for r in (row[:2], row[2:])]
    assert ["config.attention", "auto (used: flash)"] in rows
    run = {"config": {"tp": 2, "attention": "cudnn"}, "attention": "cudnn"}
    rows = [r for row in configuration(None, run=run).body.rows for r in (row[:2], row[2:])]
    assert ["config.attention", "cudnn (used: cudnn)"] in rows


def test_compare_of_a_cpu_run_against_a_gpu_run_says_so(tmp_path):
    cpu = _cpu_trace(tmp_path / "cpu")
    out = tmp_path / "c.html"
    res = runner.invoke(app, ["compare", str(cpu), str(S / "domino"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    note = (
        "A (rank0.pt.trace) is a CPU trace (gloo collectives on host threads) and B "
        "(domino) a GPU trace (NCCL kernels on device streams): their step times and comm "
        "figures come from different hardware, so the deltas say nothing about the "
        "schedule; compare CPU with CPU, GPU with GPU"
    )
    assert f"note: {note}" in res.stderr.splitlines()
    secs = _sections_text(out.read_text())
    assert note in secs["compare"]  # the first screen
    res = runner.invoke(app, ["compare", str(cpu), str(cpu), "-o", str(out)])
    assert res.exit_code == 0 and "CPU trace" not in res.stderr
