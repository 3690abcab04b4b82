"""What a new user meets first (issue 35): the verdict's reason, the run's last lines,
the what-if table without zero gains, help texts that need no source file."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from domino_prof.analysis.findings import ZERO_GAIN_MS
from domino_prof.analysis.overheads import DEFAULT_THRESHOLDS
from domino_prof.cli import app
from domino_prof.commands._options import THRESHOLD_KEYS
from domino_prof.commands.run import last_lines
from domino_prof.rundata import verdict_reason

DATA = Path(__file__).parent / "data"


def _run(tp: int = 2, backend: str = "nccl", **kw) -> dict:
    return {"config": {"tp": tp, "device": "cpu" if backend == "gloo" else "cuda"},
            "backend": backend, "cpu_count": 2, **kw}  # fmt: skip


def test_the_verdict_says_why_a_run_cannot_show_overlap():
    gloo = verdict_reason(_run(8, "gloo"))
    assert gloo.startswith("on CPU, gloo's collectives are computed by the cores that run "
                           "the model (8 ranks and their gloo threads on 2 cores)")  # fmt: skip
    assert verdict_reason(_run(1)).startswith("at tp 1 there is no collective to hide")
    host = {"mode": "domino", "host_is_the_limit": True}
    slower = [{"mode": "domino", "word": "slower"}]
    assert verdict_reason(_run(limits=host, verdict=slower)).startswith(
        "the host is the limit: the device waits for domino's kernel launches")
    # nothing stands in the way: no reason, and none for a host-bound run that still wins
    assert verdict_reason(_run(verdict=slower)) is None
    assert verdict_reason(_run(limits=host, verdict=[{"mode": "domino", "word": "faster"}])) is None
    assert verdict_reason(_run(8, "emulated", verdict=slower)) is None


def test_the_run_ends_naming_the_report(tmp_path):
    assert last_lines(tmp_path) == [
        f"run directory: {tmp_path}",
        f"no report.html: `domino-prof run --reanalyze {tmp_path}` analyses the traces and "
        "writes it",
    ]
    (tmp_path / "report.html").write_text("<html></html>")
    assert last_lines(tmp_path)[1] == (
        f"open the report: {tmp_path / 'report.html'} (one file, works offline)")


def test_analyze_lists_no_zero_gain_and_names_no_placeholder():
    """The committed H200 domino trace: of the replay's 12 scenarios, 6 gain nothing (e.g.
    comm x 2: every collective of rank 1 waits for the host anyway); they are named on
    one line, not listed as rows of 0.000, and neither is a finding with no gain (its
    stream-switch idle, 2.557 ms, stays in the JSON's stream-switch section)."""
    r = CliRunner().invoke(app, ["analyze", str(DATA / "h200_llama3_3b_2layers_tp2/domino")],
                           env={"COLUMNS": "200"})  # fmt: skip
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "Stream-switch idle" not in out and "(none)" not in out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("no gain (under")]
    assert line == (
        f"no gain (under {ZERO_GAIN_MS:g} ms per step): comm x 2; comm fully hidden (overlap "
        "ceiling); no cross-rank skew (transfer only); cudaDeviceSynchronize outside any "
        "annotation removed; cudaStreamSynchronize in aten::item removed; cross-stream "
        "waits at no latency"
    )
    rows = [ln for ln in out.splitlines() if ln.startswith("│") and "0.000 │" in ln]
    assert [ln.split("│")[1].strip() for ln in rows] == ["as profiled (replayed)"]
    # the comm sources line says why its total is not the comm total above
    assert "(events, durations summed; overlapping events each count)" in out


def test_threshold_help_lists_the_keys_without_a_source_file():
    assert THRESHOLD_KEYS == tuple(DEFAULT_THRESHOLDS)
    r = CliRunner().invoke(app, ["analyze", "--help"], env={"COLUMNS": "400"})
    text = " ".join(r.stdout.split())
    assert "Keys: " + ", ".join(DEFAULT_THRESHOLDS) in text
    assert ".py" not in text


def test_every_command_summary_fits_the_top_level_help():
    r = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"})
    cmds = r.stdout.split("Commands")[1].splitlines()
    assert any(ln.strip().startswith("calibrate") for ln in cmds)
    assert not [ln for ln in cmds if ln.rstrip().endswith("...")], r.stdout


def test_the_oversubscription_note(monkeypatch):
    from domino_prof.reference_model import launcher
    from domino_prof.reference_model.config import RunConfig

    monkeypatch.setattr(launcher, "cores", lambda: 2)
    cfg = RunConfig.from_options(device="cpu", model="tiny", layers=0, tp=8, seq=32, mbs=2,
                                 splits=2, modes=("tp",), dtype="float32", warmup_steps=1,
                                 timed_steps=2, block_steps=2, profile_steps=1, seed=0,
                                 lr=1e-3, data=None, timeout_s=900.0, cuda_graphs=False,
                                 compile=False, high_priority_comm=False, attention="auto",
                                 comm="auto", comm_profile="")  # fmt: skip
    assert launcher.oversubscribed_note(cfg) == (
        "8 gloo ranks on 2 CPU cores: the ranks take turns on the cores, so this run is slow "
        "(progress lines follow), its step times measure the sharing, not overlap, and it is "
        "stopped after --timeout 900 s; --tp 2 or fewer fits this machine"
    )
    monkeypatch.setattr(launcher, "cores", lambda: 8)
    assert launcher.oversubscribed_note(cfg) is None


def test_the_glossary_gives_every_threshold_with_its_default():
    """docs/METRICS.md's glossary, where --threshold's help points: each key and its default
    as analysis.overheads has it."""
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "METRICS.md").read_text()
    gloss = text.split("## Glossary: the words of the first screen", 1)[1]
    found = dict(re.findall(r"`([a-z_]+)`\s+([0-9.]+)", gloss.split("Finding thresholds", 1)[1]))
    assert {k: float(v) for k, v in found.items()} == {k: float(v) for k, v in
                                                        DEFAULT_THRESHOLDS.items()}  # fmt: skip


def test_the_report_says_why_too():
    """The report's first section (modes compared) carries the same reason, on the
    committed CPU run (gloo; written before run.json recorded the cores)."""
    import json

    from domino_prof.report.figures import mode_comparison

    run = json.loads((DATA / "cpu_gloo_tp2" / "run.json").read_text())
    sec = mode_comparison(run)
    assert sec.notes[0].startswith("Why: On CPU, gloo's collectives are computed by the cores "
                                   "that run the model (the ranks share the host's cores)")  # fmt: skip
    run["config"]["tp"] = 1  # no collective at all: the reason changes with the run
    assert mode_comparison(run).notes[0].startswith("Why: At tp 1 there is no collective")


def test_the_host_speed_note_speaks_when_the_probes_spread():
    """rundata.host_speed_note: the 10th and 90th percentile (nearest rank) of every
    mode's host_probe_times_ms on a CUDA run; a note from a 1.3x spread on."""
    from domino_prof.rundata import host_speed_note

    def run(device="cuda", **probes):
        return {"config": {"device": device},
                "modes": {m: {"host_probe_times_ms": p} for m, p in probes.items()}}  # fmt: skip

    # 10 probes: ranks 0 and 9 are the 10th and 90th percentiles: 0.6 and 1.2 ms
    note = host_speed_note(run(tp=[0.6] * 5, domino=[1.2] * 5))
    assert note.startswith("the host's speed moved 2.0x during the timed steps")
    assert "took 0.60 to 1.20 ms, 10th to 90th percentile" in note
    # 20 probes, one slow: ranks 1 and 18 are both 0.6 ms: one outlier says nothing
    assert host_speed_note(run(tp=[0.6] * 10, domino=[0.6] * 9 + [1.2])) is None
    # three slow of 20: rank 18 is slow, 1.25x: under the 1.3x the note needs
    assert host_speed_note(run(tp=[0.8] * 10, domino=[0.8] * 7 + [1.0] * 3)) is None
    assert "1.5x" in host_speed_note(run(tp=[0.8] * 10, domino=[0.8] * 7 + [1.2] * 3))
    assert host_speed_note(run("cpu", tp=[0.6] * 5, domino=[1.2] * 5)) is None  # gloo ranks
    graphs = run(tp=[0.6] * 5, domino=[1.2] * 5)
    graphs["config"]["cuda_graphs"] = True  # replayed steps: the host is off them
    assert host_speed_note(graphs) is None
    assert host_speed_note(run(tp=[], domino=[])) is None  # a run from before the probe
    assert host_speed_note({"config": {"device": "cuda"}, "modes": {"tp": {}}}) is None
