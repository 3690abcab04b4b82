"""Findings: ranking, severity, thresholds, and the printed table."""

from __future__ import annotations

import pytest
from rich.console import Console
from test_launches import launch_rank
from test_switches import load, two_stream_rank

from domino_prof.analysis.config import AnalysisConfig
from domino_prof.analysis.findings import build_findings
from domino_prof.analysis.overheads import DEFAULT_THRESHOLDS, resolve_thresholds
from domino_prof.commands._findings import findings_table, format_where
from domino_prof.engine import analyze
from domino_prof.errors import ConfigError


def render(table) -> str:
    console = Console(width=250, record=True, color_system=None)
    console.print(table)
    return console.export_text()


def test_unknown_threshold_names_valid_keys():
    with pytest.raises(ConfigError) as e:
        resolve_thresholds({"switch_gap_pct": 1.0})
    msg = str(e.value)
    assert "switch_gap_pct" in msg
    for key in DEFAULT_THRESHOLDS:
        assert key in msg


@pytest.mark.parametrize(
    "bad", [{"skew_share": -0.1}, {"skew_share": float("nan")}, {"min_graph_run": 2.5},
            {"top_n": 0}, {"tiny_share": "lots"}],
)  # fmt: skip
def test_bad_threshold_values(bad):
    with pytest.raises(ConfigError):
        resolve_thresholds(bad)


def test_thresholds_override_defaults():
    t = resolve_thresholds({"min_graph_run": 4, "skew_share": 0.5})
    assert t["min_graph_run"] == 4 and isinstance(t["min_graph_run"], int)
    assert t["skew_share"] == 0.5 and t["host_bound_share"] == DEFAULT_THRESHOLDS[
        "host_bound_share"]  # fmt: skip


def test_unknown_threshold_through_analyze(tmp_path):
    trace, iv = load(tmp_path, two_stream_rank())
    with pytest.raises(ConfigError, match="valid keys"):
        analyze(trace, AnalysisConfig(overhead_thresholds={"nope": 1})).overheads


def test_ranking_and_severity_bands():
    """step 10 ms: gains 0.6 (6% -> high), 0.05 (0.5% -> low), 0.2 (2% -> medium)."""
    t = resolve_thresholds(None)
    sw = {
        "switch_gap_ms_per_step": 0.05,
        "switch_gap": {"count": 2},
        "blocking_sync_ms_per_step": 0.2,
        "blocking_syncs": [{"api": "cudaStreamSynchronize", "op": "loss.item"}],
    }
    ranks = {"computed": True, "max_wait_ms_per_step": 0.6, "late_rank": 3,
             "worst_instances": [{"coll": "allreduce", "iteration": 5}]}  # fmt: skip
    f = build_findings(switches=sw, launches=None, ranks=ranks, step_ms=10.0, thresholds=t)
    # switch gap 0.5% of step is under switch_gap_share 2%: not listed
    assert [x["id"] for x in f] == ["rank_skew", "blocking_sync"]
    assert [x["severity"] for x in f] == ["high", "medium"]
    assert f[0]["where"] == {"rank": 3, "stream": None, "op": "allreduce", "iteration": 5}
    assert f[1]["share_of_step"] == pytest.approx(0.02)
    t2 = resolve_thresholds({"switch_gap_share": 0.001})
    f2 = build_findings(switches=sw, launches=None, ranks=ranks, step_ms=10.0, thresholds=t2)
    assert [x["id"] for x in f2] == ["rank_skew", "blocking_sync", "stream_switch_gap"]
    assert f2[2]["severity"] == "low"


def test_findings_table_prints_every_finding(tmp_path):
    trace, iv = load(tmp_path, launch_rank())
    out = analyze(trace, AnalysisConfig()).overheads
    text = render(findings_table(out))
    assert "host_bound" not in text  # titles, not ids, are shown
    assert "Host-bound launches" in text and "0.023 ms/step" in text
    assert "rank 0 · stream 7 · op fwd.small_ops · iter 1" in text
    assert "CUDA graphs" in text
    assert "n/a" in text  # the tiny-kernel finding has no gain estimate
    assert text.index("high") < text.index("low")


def test_findings_table_empty():
    text = render(findings_table({"findings": []}))
    assert "no overhead above its threshold" in text
    assert format_where({"rank": None, "stream": None, "op": None, "iteration": None}) == "-"


def test_analyze_cli_prints_findings_and_writes_json(tmp_path):
    import json

    from typer.testing import CliRunner

    from domino_prof.cli import app

    d = tmp_path / "t"
    d.mkdir()
    launch_rank().write(d / "rank0.json")
    runner = CliRunner()
    res = runner.invoke(app, ["analyze", str(d), "--json", str(tmp_path / "a.json")],
                        env={"COLUMNS": "200"})  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "Host-bound launches" in res.output and "Tiny kernels" in res.output
    doc = json.loads((tmp_path / "a.json").read_text())
    ids = [f["id"] for f in doc["overheads"]["findings"]]
    assert ids == ["host_bound_launches", "tiny_kernels"]
    assert doc["overheads"]["launches"]["host_bound_device_idle_ns"] == 23_000
    # a bad threshold key: one stderr line naming the valid keys, exit 2
    bad = runner.invoke(app, ["analyze", str(d), "--threshold", "gap=1"])
    assert bad.exit_code == 2
    assert "unknown overhead threshold 'gap'" in bad.output
    assert "switch_gap_share" in bad.output and "Traceback" not in bad.output
