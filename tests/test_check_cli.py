"""`domino-prof check` / `domino-prof baseline` through typer's CliRunner, on real
analyses of synthetic Kineto traces (tests/tracegen.py), with exact exit codes.

The trace (per rank, two ProfilerStep windows of 100 µs; times in µs from t0 =
100·(step-1)):

    fwd.layer_attn_0_batch_0 [t0+1, t0+40):  gemm   stream 7  [t0+10, t0+30)
                                             nccl   stream 13 [t0+a,  t0+a+20)
    bwd.layer_mlp_0_batch_0  [t0+41, t0+90): gemm   stream 7  [t0+50, t0+80)
                                             nccl   stream 13 [t0+60, t0+70)

Forward comm [a, a+20) is hidden by the gemm [10, 30) for max(0, 30-a) µs;
backward comm [60, 70) lies inside the gemm [50, 80): 10 of 10 µs hidden.
Per step: C = 20 + 10 = 30 µs, H = (30-a) + 10, E = C - H. Two steps:

    a     fwd hidden %      bwd %   rank hidden %            exposed ms/step
    20    2·10/40 = 50      100     2·20/60 = 66.667         10 µs = 0.010
    22    2·8/40  = 40      100     2·18/60 = 60.000         12 µs = 0.012
    30    0/40    = 0       100     2·10/60 = 33.333         20 µs = 0.020
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rundirs import write_run_dir
from tracegen import TraceBuilder
from typer.testing import CliRunner

from domino_prof.cli import app

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def rank_trace(
    rank: int, world: int, *, a: float = 20.0, comm: bool = True, steps: bool = True
) -> TraceBuilder:
    b = TraceBuilder(rank=rank, world_size=world)
    for n in range(2):
        t0 = 100.0 * n
        if steps:
            b.step(n + 1, t0, t0 + 100)
        b.annotation("fwd.layer_attn_0_batch_0", t0 + 1, 39)
        b.kernel(GEMM, stream=7, start=t0 + 10, dur=20, launch=t0 + 2)
        if comm:
            b.kernel(NCCL, stream=13, start=t0 + a, dur=20, launch=t0 + 3)
        b.annotation("bwd.layer_mlp_0_batch_0", t0 + 41, 49)
        b.kernel(GEMM, stream=7, start=t0 + 50, dur=30, launch=t0 + 42)
        if comm:
            b.kernel(NCCL, stream=13, start=t0 + 60, dur=10, launch=t0 + 43)
    return b


def write_traces(
    d: Path, a: list[float | None], *, comm: bool = True, steps: bool = True, gz: bool = False
) -> Path:
    """One trace per rank; ``a[r]`` is rank r's forward comm start (see module doc),
    None for a rank without any comm."""
    d.mkdir(parents=True, exist_ok=True)
    for r, ar in enumerate(a):
        suffix = ".pt.trace.json.gz" if gz else ".pt.trace.json"
        b = rank_trace(r, len(a), a=ar or 0.0, comm=comm and ar is not None, steps=steps)
        b.write(d / f"rank{r}{suffix}")
    return d


def write_run(d: Path, modes: dict[str, list[float]]) -> Path:
    """A `domino-prof run`-style directory: DIR/run.json + DIR/<mode>/rank*.pt.trace.json.gz."""
    return write_run_dir(d, {m: {"analysis": f"{m}/analysis.json"} for m in modes},
                         traces=lambda p, m: write_traces(p, modes[m], gz=True))  # fmt: skip


def invoke(args: list[str], **env: str):
    env.setdefault("GITHUB_ACTIONS", "")
    env.setdefault("GITHUB_STEP_SUMMARY", "")
    return CliRunner().invoke(app, [str(x) for x in args], env=env)


def table_rows(stdout: str) -> list[tuple[str, int, str]]:
    """(rule, rank, verdict) of each table row printed by `check`."""
    out = []
    for line in stdout.splitlines():
        m = re.match(r"^(.+?)\s+(\d+)\s+.*\s(pass|FAIL|N/A|SKIP)$", line)
        if m and not line.startswith("rule"):
            out.append((m.group(1).strip(), int(m.group(2)), m.group(3)))
    return out


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return write_traces(tmp_path / "good", [20, 20])


# --------------------------------------------------------------------------- floors
def test_min_hidden_passes(good: Path):
    r = invoke(["check", good, "--min-hidden", 66])  # both ranks 66.667 % >= 66
    assert r.exit_code == 0, r.output
    assert table_rows(r.stdout) == [("min-hidden", 0, "pass"), ("min-hidden", 1, "pass")]
    assert "66.67%" in r.stdout and ">= 66.00%" in r.stdout
    assert "PASS: all 2 checks hold" in r.stdout


def test_min_hidden_below_floor_fails(tmp_path: Path):
    d = write_traces(tmp_path / "t", [20, 30])  # rank 1: 33.333 %
    r = invoke(["check", d, "--min-hidden", 50])
    assert r.exit_code == 1, r.output
    assert table_rows(r.stdout) == [("min-hidden", 0, "pass"), ("min-hidden", 1, "FAIL")]
    assert re.search(r"min-hidden\s+1\s+33\.33%\s+>= 50\.00%\s+FAIL", r.stdout)
    assert "FAIL: 1 of 2 checks failed" in r.stdout


def test_phase_restricts_the_floor(good: Path):
    # forward: 50 % on both ranks; backward: 100 %
    r = invoke(["check", good, "--phase", "fwd", "--min-hidden", 50.5])
    assert r.exit_code == 1
    assert re.search(r"min-hidden \[forward\]\s+0\s+50\.00%", r.stdout)
    assert invoke(["check", good, "--phase", "fwd", "--min-hidden", 50]).exit_code == 0
    assert invoke(["check", good, "--phase", "bwd", "--min-hidden", 100]).exit_code == 0
    r = invoke(["check", good, "--phase", "sideways", "--min-hidden", 1])
    assert r.exit_code == 2 and "--phase 'sideways' is not a phase" in r.stderr


def test_max_exposed_ms(tmp_path: Path):
    d = write_traces(tmp_path / "t", [20, 22])  # 0.010 and 0.012 ms per step
    r = invoke(["check", d, "--max-exposed-ms", 0.011])
    assert r.exit_code == 1
    assert re.search(r"max-exposed-ms\s+0\s+0\.010 ms\s+<= 0\.011 ms\s+pass", r.stdout)
    assert re.search(r"max-exposed-ms\s+1\s+0\.012 ms\s+<= 0\.011 ms\s+FAIL", r.stdout)
    assert invoke(["check", d, "--max-exposed-ms", 0.012]).exit_code == 0
    # backward comm is fully hidden: 0 ms exposed per step
    assert invoke(["check", d, "--phase", "bwd", "--max-exposed-ms", 0]).exit_code == 0


def test_op_pattern(tmp_path: Path):
    d = write_traces(tmp_path / "t", [20, 22])
    # "attn" selects the forward op: rank 0 50 %, rank 1 40 %
    r = invoke(["check", d, "--op-pattern", "attn", "--min-hidden", 45])
    assert r.exit_code == 1
    assert table_rows(r.stdout) == [
        ("min-hidden [ops~attn]", 0, "pass"),
        ("min-hidden [ops~attn]", 1, "FAIL"),
    ]
    assert invoke(["check", d, "--op-pattern", "mlp", "--min-hidden", 100]).exit_code == 0


def test_op_pattern_matching_nothing_is_an_error_not_a_pass(good: Path):
    r = invoke(["check", good, "--op-pattern", "layer_moe", "--min-hidden", 0])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1  # one line, no traceback
    assert "--op-pattern 'layer_moe' matches no op name in the trace" in r.stderr
    assert "fwd.layer_attn_0_batch_0" in r.stderr  # tells what exists
    r = invoke(["check", good, "--op-pattern", "[", "--min-hidden", 0])
    assert r.exit_code == 2 and "not a valid regular expression" in r.stderr


def test_no_rule_is_an_error(good: Path):
    r = invoke(["check", good])
    assert r.exit_code == 2
    assert "no rule given: pass at least one of --min-hidden PCT, --max-exposed-ms MS, " in (
        r.stderr
    )


def test_no_comm_cannot_be_gated(tmp_path: Path):
    d = write_traces(tmp_path / "t", [20, 20], comm=False)
    r = invoke(["check", d, "--min-hidden", 10])
    assert r.exit_code == 2
    assert "no comm kernels in the trace: hidden % is n/a" in r.stderr
    r = invoke(["baseline", d, "-o", tmp_path / "b.json"])
    assert r.exit_code == 2 and not (tmp_path / "b.json").exists()


def test_a_rank_without_comm_is_na_exit_2(tmp_path: Path):
    d = write_traces(tmp_path / "t", [20, None])  # rank 1 launches no comm
    junit = tmp_path / "j.xml"
    r = invoke(["check", d, "--min-hidden", 10, "--junit", junit])
    assert r.exit_code == 2
    assert table_rows(r.stdout) == [("min-hidden", 0, "pass"), ("min-hidden", 1, "N/A")]
    assert r.stderr.splitlines()[-1] == (
        "domino-prof: error: rank 1: no comm kernels: hidden % is n/a; the input cannot be gated"
    )
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "0", "1")
    # exposed ms is defined without comm (0 ms): that rule alone passes
    assert invoke(["check", d, "--max-exposed-ms", 0.01]).exit_code == 0


def test_exposed_per_step_needs_steps(tmp_path: Path):
    d = write_traces(tmp_path / "t", [20, 20], steps=False)
    r = invoke(["check", d, "--max-exposed-ms", 1])
    assert r.exit_code == 2
    assert "no ProfilerStep# windows: exposed ms per step is n/a" in r.stderr
    assert invoke(["check", d, "--min-hidden", 60]).exit_code == 0  # 66.67 % needs no steps


def test_bad_path_is_exit_2(tmp_path: Path):
    r = invoke(["check", tmp_path / "nope", "--min-hidden", 10])
    assert r.exit_code == 2 and "no such file or directory" in r.stderr


# --------------------------------------------------------------------------- baselines
def test_baseline_then_drop_beyond_and_within_tolerance(tmp_path: Path, good: Path):
    base = tmp_path / "ci" / "baseline.json"
    r = invoke(["baseline", good, "-o", base])
    assert r.exit_code == 0, r.output
    doc = json.loads(base.read_text())
    assert (doc["schema"], doc["version"]) == ("domino-prof/baseline", 1)
    assert doc["per_rank"]["1"]["hidden_pct"] == pytest.approx(200 / 3)  # 40/60 µs
    assert doc["per_rank"]["1"]["comm_ns"] == 60_000
    assert doc["per_phase"]["0"]["forward"]["hidden_pct"] == pytest.approx(50.0)
    assert doc["per_op"]["0"]["bwd.layer_mlp_0_batch_0"]["hidden_pct"] == pytest.approx(100.0)
    assert not list(base.parent.glob(".*.tmp"))  # atomic write left nothing behind

    worse = write_traces(tmp_path / "worse", [20, 22])
    # rank 1 overall 66.667 -> 60 (6.667 points), forward 50 -> 40 (10 points)
    r = invoke(["check", worse, "--baseline", base, "--max-drop", 7])
    assert r.exit_code == 1
    fails = [(rule, rank) for rule, rank, v in table_rows(r.stdout) if v == "FAIL"]
    assert fails == [("hidden drop [forward]", 1)]
    assert re.search(r"hidden drop\s+1\s+60\.00%\s+>= 59\.67%\s+pass", r.stdout)
    r = invoke(["check", worse, "--baseline", base, "--max-drop", 10])  # 10 <= 10 holds
    assert r.exit_code == 0, r.output
    r = invoke(["check", worse, "--baseline", base, "--max-drop", 5, "--phase", "bwd"])
    assert r.exit_code == 0  # backward unchanged at 100 %
    # per op: the attention op dropped 10 points on rank 1
    r = invoke(["check", worse, "--baseline", base, "--max-drop", 5, "--op-pattern", "attn"])
    assert r.exit_code == 1
    assert [x for x in table_rows(r.stdout) if x[2] == "FAIL"] == [
        ("hidden drop [op fwd.layer_attn_0_batch_0]", 1, "FAIL")
    ]


def test_baseline_made_with_other_comm_settings_adds_a_note(tmp_path: Path, good: Path):
    base = tmp_path / "b.json"
    assert invoke(["baseline", good, "-o", base]).exit_code == 0
    assert json.loads(base.read_text())["config"]["memcpy_as_comm"] is False
    # an extra comm regex that matches nothing: same figures, different settings
    r = invoke(["check", good, "--baseline", base, "--max-drop", 0, "--comm-pattern", "^zzz"])
    assert r.exit_code == 0
    assert "note: the baseline classified comm differently (comm_pattern" in r.stderr
    r = invoke(["check", good, "--baseline", base, "--max-drop", 0])
    assert r.exit_code == 0 and "classified comm differently" not in r.stderr


def test_rank_missing_vs_baseline_fails(tmp_path: Path, good: Path):
    base = tmp_path / "b.json"
    assert invoke(["baseline", good, "-o", base]).exit_code == 0
    only0 = write_traces(tmp_path / "one", [20])
    r = invoke(["check", only0, "--baseline", base, "--max-drop", 1])
    assert r.exit_code == 1
    assert ("rank present", 1, "FAIL") in table_rows(r.stdout)
    assert re.search(r"rank present\s+1\s+missing\s+present\s+FAIL", r.stdout)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "baseline is not valid JSON"),
        ('{"schema": "domino-prof/analysis", "version": 1}', "not a domino-prof baseline"),
        ('{"schema": "domino-prof/baseline", "version": 9}', "baseline version 9 is not supported"),
    ],
)
def test_malformed_baseline_is_exit_2(tmp_path: Path, good: Path, content: str, message: str):
    base = tmp_path / "b.json"
    base.write_text(content)
    r = invoke(["check", good, "--baseline", base, "--max-drop", 1])
    assert r.exit_code == 2
    assert r.stderr.startswith(f"domino-prof: error: {base}: ") and message in r.stderr
    r = invoke(["check", good, "--baseline", tmp_path / "missing.json", "--max-drop", 1])
    assert r.exit_code == 2 and "baseline not found" in r.stderr
    r = invoke(["check", good, "--max-drop", 1])
    assert r.exit_code == 2 and "--baseline FILE and --max-drop PP go together" in r.stderr


# --------------------------------------------------------------------------- run dirs
def test_run_directory_modes(tmp_path: Path):
    run = write_run(tmp_path / "run", {"tp": [30, 30], "domino": [20, 20]})
    r = invoke(["check", run, "--min-hidden", 60])  # domino by default: 66.667 %
    assert r.exit_code == 0, r.output
    assert "checking mode 'domino'" in r.stderr
    r = invoke(["check", run, "--mode", "tp", "--min-hidden", 60])  # tp: 33.333 %
    assert r.exit_code == 1
    r = invoke(["check", run, "--mode", "zero", "--min-hidden", 60])
    assert r.exit_code == 2 and "--mode 'zero' is not in" in r.stderr
    r = invoke(["check", run / "domino", "--mode", "tp", "--min-hidden", 60])
    assert r.exit_code == 2 and "applies to a run directory" in r.stderr
    two = write_run(tmp_path / "two", {"tp": [30, 30], "nocomm": [20, 20]})
    r = invoke(["check", two, "--min-hidden", 60])
    assert r.exit_code == 2 and "pick one with --mode NAME" in r.stderr
    base = tmp_path / "b.json"
    assert invoke(["baseline", run, "--mode", "tp", "-o", base]).exit_code == 0
    assert json.loads(base.read_text())["per_rank"]["0"]["hidden_pct"] == pytest.approx(100 / 3)


# --------------------------------------------------------------------------- CI output
def test_github_annotations(tmp_path: Path):
    d = write_traces(tmp_path / "t", [20, 30])
    r = invoke(["check", d, "--min-hidden", 50], GITHUB_ACTIONS="true")
    assert r.exit_code == 1
    ann = [line for line in r.stdout.splitlines() if line.startswith("::")]
    # ':' and ',' are escaped in properties, '%' everywhere (GitHub workflow commands)
    expected = (
        f"::error file={d},title=domino-prof check%3A min-hidden::"
        "rank 1: hidden comm 33.33%25 is below the floor 50%25"
    )
    assert ann == [expected]
    # no annotations outside GitHub Actions
    r = invoke(["check", d, "--min-hidden", 50])
    assert not [line for line in r.stdout.splitlines() if line.startswith("::")]
    # bad input is annotated too
    r = invoke(["check", d, "--op-pattern", "zzz", "--min-hidden", 1], GITHUB_ACTIONS="true")
    assert r.exit_code == 2
    assert r.stdout.startswith("::error title=domino-prof check::--op-pattern 'zzz' matches no")


def test_junit_xml(tmp_path: Path):
    d = write_traces(tmp_path / "t", [20, 30])
    junit = tmp_path / "out" / "junit.xml"
    r = invoke(["check", d, "--min-hidden", 50, "--max-exposed-ms", 0.015, "--junit", junit])
    assert r.exit_code == 1
    root = ET.parse(junit).getroot()
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    # 2 rules x 2 ranks; rank 1 fails both (33.33 % < 50; 0.020 ms > 0.015)
    assert len(cases) == 4 and suite.get("tests") == "4" and suite.get("failures") == "2"
    assert root.get("tests") == "4" and root.get("failures") == "2"
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failed == ["min-hidden rank 1", "max-exposed-ms rank 1"]
    msg = cases[1].find("failure").get("message")
    assert msg == "rank 1: hidden comm 33.33% is below the floor 50%"
    # bad input: one errored testcase, still valid XML
    r = invoke(["check", d, "--op-pattern", "zzz", "--min-hidden", 1, "--junit", junit])
    assert r.exit_code == 2
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("errors")) == ("1", "1")


def test_markdown_file_and_step_summary_append(tmp_path: Path, good: Path):
    md = tmp_path / "summary.md"
    md.write_text("previous content\n")
    r = invoke(["check", good, "--min-hidden", 70, "--markdown", md])
    assert r.exit_code == 1
    text = md.read_text()
    assert "previous content" not in text  # a normal file is replaced (atomically)
    assert text.splitlines()[0] == "### ❌ domino-prof check: FAIL: 2 of 2 checks failed"
    assert "| Rule | Rank | Measured | Limit | Verdict |" in text
    assert "| min-hidden | 0 | 66.67% | >= 70.00% | **FAIL** |" in text
    # the path of $GITHUB_STEP_SUMMARY is appended to, by GitHub's convention
    summary = tmp_path / "step_summary"
    summary.write_text("earlier step\n")
    r = invoke(
        ["check", good, "--min-hidden", 60, "--markdown", summary],
        GITHUB_STEP_SUMMARY=str(summary),
    )
    assert r.exit_code == 0
    lines = summary.read_text().splitlines()
    assert lines[0] == "earlier step"
    assert lines[1] == "### ✅ domino-prof check: PASS: all 2 checks hold"


def test_negative_duration_is_noted_by_check(tmp_path: Path):
    b = rank_trace(0, 1)
    b.kernel(NCCL, stream=13, start=150, dur=-5, launch=144)
    d = tmp_path / "neg"
    d.mkdir()
    b.write(d / "rank0.pt.trace.json")
    r = invoke(["check", d, "--min-hidden", 10])
    assert r.exit_code == 0, r.output  # the gate still runs on what was measured
    assert "note: rank 0: 1 event(s) with a negative duration (kernel 1;" in r.stderr
