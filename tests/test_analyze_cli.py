"""`domino-prof analyze` through typer's CliRunner (and once as the installed script)."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys

import pytest
from script_module import installed
from tracegen import TraceBuilder
from typer.testing import CliRunner

from domino_prof.analysis.document import table
from domino_prof.cli import app

runner = CliRunner()


def two_rank_dir(tmp_path):
    """rank 0: compute s7 [0,40), comm s13 [20,60) -> C 40, H 20 (50%);
    rank 1: compute s7 [0,10), comm s13 [20,60) -> C 40, H 0.
    One step [0,100) each, annotation fwd.attn_0 around the launches."""
    d = tmp_path / "run"
    d.mkdir()
    for r, cdur in ((0, 40), (1, 10)):
        b = TraceBuilder(rank=r, world_size=2)
        b.step(1, 0, 100)
        b.annotation("fwd.attn_0", 0.5, 5)
        b.kernel("gemm", stream=7, start=0, dur=cdur, launch=1)
        b.kernel("ncclDevKernel_AllReduce", stream=13, start=20, dur=40, launch=2)
        b.write(d / f"rank{r}.json")
    return d


def invoke(*args):
    return runner.invoke(app, ["analyze", *map(str, args)])


def test_summary_and_json(tmp_path):
    d = two_rank_dir(tmp_path)
    out = tmp_path / "out" / "a.json"
    r = invoke(d, "--json", out, "--by", "stream")
    assert r.exit_code == 0, r.output
    # totals: C = 80 µs, H = 20 µs -> 25.0 %; exposed per step = mean(20, 40) = 30 µs
    assert "hidden comm 25.0%" in r.stdout
    assert "0.030 ms exposed comm per step" in r.stdout
    assert "2 rank(s), 1 iteration(s)" in r.stdout
    assert "fwd.attn_0" in r.stdout  # top exposed op names
    assert "By stream" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["schema"] == "domino-prof/analysis" and doc["version"] == 2
    by_rank = table(doc, "by_rank").to_dict("records")
    assert [(x["rank"], x["comm_ns"], x["hidden_ns"]) for x in by_rank] == [
        (0, 40_000, 20_000),
        (1, 40_000, 0),
    ]
    assert doc["totals"]["hidden_pct"] == pytest.approx(25.0)


def test_json_to_stdout(tmp_path):
    r = invoke(two_rank_dir(tmp_path), "--json", "-")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["totals"]["exposed_ns"] == 60_000


@pytest.mark.parametrize("by", ["stream", "op", "iteration", "collective", "phase"])
def test_every_breakdown_prints(tmp_path, by):
    r = invoke(two_rank_dir(tmp_path), "--by", by)
    assert r.exit_code == 0, r.output
    assert f"By {by}" in r.stdout


def test_no_comm_prints_na_not_zero(tmp_path):
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("gemm", stream=7, start=0, dur=10, launch=1)
    b.write(tmp_path / "rank0.json")
    r = invoke(tmp_path / "rank0.json", "--json", tmp_path / "a.json")
    assert r.exit_code == 0, r.output
    assert "hidden comm n/a" in r.stdout
    assert "nan" not in r.stdout.lower()
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["totals"]["hidden_pct"] is None
    assert doc["by_rank"]["hidden_pct"][0] is None  # v2: one list per column


def test_comm_pattern_flag(tmp_path):
    # my_allreduce [0,50) becomes comm: union with the nccl kernel [20,60) = 60 µs
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("my_allreduce", stream=7, start=0, dur=50, launch=1)
    b.kernel("ncclDevKernel_AllReduce", stream=13, start=20, dur=40, launch=2)
    b.write(tmp_path / "rank0.json")
    r = invoke(tmp_path / "rank0.json", "--comm-pattern", "my_all", "--json", "-")
    assert json.loads(r.stdout)["totals"]["comm_ns"] == 60_000
    r = invoke(tmp_path / "rank0.json", "--comm-pattern", "my_all", "--comm-pattern-only",
               "--json", "-")  # fmt: skip
    # only my_allreduce is comm now; the nccl kernel is compute and hides [20,50)
    t = json.loads(r.stdout)["totals"]
    assert (t["comm_ns"], t["hidden_ns"]) == (50_000, 30_000)


def _bad_inputs(tmp_path):
    good = two_rank_dir(tmp_path)
    cases = {}
    p = tmp_path / "empty.json"
    p.write_text("")
    cases["empty file"] = [p]
    p = tmp_path / "invalid.json"
    p.write_text('{"traceEvents": [')
    cases["invalid json"] = [p]
    p = tmp_path / "trunc.json.gz"
    p.write_bytes(gzip.compress(json.dumps(TraceBuilder().to_dict()).encode())[:-20])
    cases["truncated gzip"] = [p]
    p = tmp_path / "noevents.json"
    p.write_text('{"distributedInfo": {"rank": 0}}')
    cases["no traceEvents"] = [p]
    b = TraceBuilder(rank=0)
    b.step(1, 0, 10)
    b.cpu("aten::mm", 1, 2)
    p = b.write(tmp_path / "cpuonly.json")
    cases["no device activity"] = [p]
    cases["missing path"] = [tmp_path / "nope"]
    e = tmp_path / "emptydir"
    e.mkdir()
    cases["dir without traces"] = [e]
    dup = tmp_path / "dup"
    shutil.copytree(good, dup)
    shutil.copy(dup / "rank0.json", dup / "rank0_again.json")
    cases["duplicate ranks"] = [dup]
    cases["bad regex"] = [good, "--comm-pattern", "("]
    cases["bad threshold key"] = [good, "--threshold", "nope=1"]
    cases["bad threshold shape"] = [good, "--threshold", "top_n"]
    cases["only without pattern"] = [good, "--comm-pattern-only"]
    cases["unwritable json"] = [good, "--json", tmp_path / "emptydir"]
    cases["unknown --by"] = [good, "--by", "layer"]
    cases["--top 0"] = [good, "--top", "0"]
    return cases


def test_bad_inputs_exit_2_with_one_line(tmp_path):
    for what, args in _bad_inputs(tmp_path).items():
        r = invoke(*args)
        assert r.exit_code == 2, (what, r.output)
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert len(lines) == 1, (what, r.stderr)
        assert lines[0].startswith("domino-prof: error: "), (what, lines)
        assert "Traceback" not in r.output, what
    # the no-device message says what to do
    r = invoke(tmp_path / "cpuonly.json")
    assert "no device activity (kernels/memcpy) or gloo events" in r.stderr
    assert "ProfilerActivity.CUDA" in r.stderr


def test_skip_bad_reports_good_ranks_and_names_bad_file(tmp_path):
    d = two_rank_dir(tmp_path)
    (d / "rank2.json").write_text("{ not json")
    r = invoke(d)
    assert r.exit_code == 2 and "rank2.json" in r.stderr
    r = invoke(d, "--skip-bad", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["ranks"] == [0, 1]
    assert any("rank2.json" in n for n in doc["notes"])


def test_installed_script_bad_input_and_success(tmp_path):
    exe = installed("domino-prof")
    cmd = [exe] if exe else [sys.executable, "-m", "domino_prof.cli"]
    p = subprocess.run([*cmd, "analyze", str(tmp_path / "missing")], capture_output=True,
                       text=True, timeout=120, check=False)  # fmt: skip
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "missing" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([*cmd, "analyze", str(two_rank_dir(tmp_path)), "--json", "-"],
                       capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["totals"]["hidden_ns"] == 20_000


def test_thresholds_reach_the_config(tmp_path):
    r = invoke(two_rank_dir(tmp_path), "--threshold", "top_n=3", "--json", "-")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["overhead_thresholds"] == {"top_n": 3.0}


def test_html_report_is_written(tmp_path):
    pytest.importorskip("plotly")
    out = tmp_path / "rep" / "report.html"
    r = invoke(two_rank_dir(tmp_path), "--html", out)
    assert r.exit_code == 0, r.output
    assert out.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")


def test_many_ranks_show_the_worst(tmp_path):
    # rank r: comm [20,60) with compute [0, 4r): exposed = 40 - max(0, 4r - 20) µs,
    # so ranks 0..5 have the most exposed (40 µs each) and rank 9 the least (24 µs)
    d = tmp_path / "many"
    d.mkdir()
    for r in range(10):
        b = TraceBuilder(rank=r, world_size=10)
        b.step(1, 0, 100)
        b.annotation(f"fwd.op_{r}", 0.5, 5)
        b.kernel("gemm", stream=7, start=0, dur=4 * r, launch=1)
        b.kernel("ncclDevKernel_AllReduce", stream=13, start=20, dur=40, launch=2)
        b.write(d / f"rank{r}.json")
    r = invoke(d, "--top", "3")
    assert r.exit_code == 0, r.output
    assert "the 3 with the most exposed comm (of 10" in r.stdout
    assert "Top 3 exposed (rank, op name) pairs" in r.stdout
    assert "fwd.op_0" in r.stdout and "fwd.op_9" not in r.stdout


def test_cpu_trace_without_collectives_says_there_is_no_comm(tmp_path):
    """A CPU gloo run with collectives skipped (`run --mode nocomm`) has cpu_ops only."""
    b = TraceBuilder(rank=0, world_size=2, backend="gloo")
    b.step(1, 0, 100)
    b.cpu("aten::mm", 10, 50)
    path = b.write(tmp_path / "rank0.json")
    res = invoke(path)
    assert res.exit_code == 2
    assert "CPU (gloo) trace without any gloo:* collective" in res.stderr
    assert "rank0.json" in res.stderr
