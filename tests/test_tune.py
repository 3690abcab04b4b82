"""`domino-prof tune` (issue 34): a 2-candidate grid on the tiny preset at tp 2 (gloo, a
few steps each), its table and tune.json checked against what the candidates' run.json
files say, computed here independently (medians of the paired block ratios); the plan
(tp once per tp setting, a combination the config refuses skipped), the summary of a
run.json with a limits decomposition, and the grid's one-line errors."""

from __future__ import annotations

import json
import statistics

import pytest
from typer.testing import CliRunner

from domino_prof.cli import app
from domino_prof.commands import tune as T
from domino_prof.reference_model import modes
from domino_prof.rundata import host_speed_note
from test_output_errors import _one_line  # the one-line-error check, shared

pytest.importorskip("torch")

# --warmup 0: the checks recompute every figure from the candidates' run.json, whatever
# the step times are; a warm-up step per mode and candidate was ~1.7 s of the test
QUICK = ["--device", "cpu", "--steps", "4", "--block-steps", "2", "--warmup", "0",
         "--profile-steps", "1", "--no-analyze"]  # fmt: skip


def _medians(run: dict, mode: str) -> list[float]:
    return [statistics.median(b) for b in run["modes"][mode]["blocks"]["steps"]]


def test_tune_two_candidates_table_and_json_follow_from_their_runs(tmp_path):
    out = tmp_path / "tune"
    r = CliRunner().invoke(app, ["tune", *QUICK, "--mbs", "2", "--grid", "col_splits=1,2",
                                 "--out", str(out)])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "tune.json").read_text())
    assert (doc["schema"], doc["version"], doc["ranking"]) == ("domino-prof/tune", 1,
                                                               "frac_of_nocomm")  # fmt: skip
    names = [c["name"] for c in doc["candidates"]]
    assert names == ["c00-splits2-col1", "c01-splits2-col2"]
    runs = {n: json.loads((out / n / "run.json").read_text()) for n in names}
    want_modes = [m for m in ("domino", "nocomm", "domino-nocomm") if m in modes.MODES]
    # tp rides in the first candidate run only (one tp setting: no comm_ctas, no graphs)
    assert list(runs[names[0]]["modes"]) == [m for m in modes.names() if m in ["tp", *want_modes]]
    assert list(runs[names[1]]["modes"]) == [m for m in modes.names() if m in want_modes]
    assert [runs[n]["config"]["col_splits"] for n in names] == [1, 2]

    # the numbers, recomputed from the run.json files
    tp_step = statistics.median(_medians(runs[names[0]], "tp"))
    frac = {}
    for c in doc["candidates"]:
        run = runs[c["name"]]
        dom, noc = _medians(run, "domino"), _medians(run, "nocomm")
        frac[c["name"]] = statistics.median([n / d for n, d in zip(noc, dom)])
        step = statistics.median(dom)
        assert c["status"] == "ok" and c["error"] is None
        assert c["domino_step_ms"] == pytest.approx(step, rel=1e-12)
        assert c["domino_step_ms_interval"] == run["modes"]["domino"]["step_ms_interval"]
        assert c["frac_of_nocomm"] == pytest.approx(frac[c["name"]], rel=1e-12)
        assert c["vs_best_tp"] == pytest.approx(tp_step / step, rel=1e-12)
        assert c["limits"] is None  # --no-analyze (and a CPU nocomm has no trace to analyse)
        assert c["host"] is None  # a CPU run: no host-speed note (rundata.host_speed_note)
    assert doc["tp"] == [{"settings": {"comm_ctas": None, "cuda_graphs": False, "sm_carveout": None,
                                       "mbs": None, "comm_engine": None},
                          "settings_text": "default ctas", "run_dir": names[0],
                          "step_ms": pytest.approx(tp_step, rel=1e-12),
                          "step_ms_interval": runs[names[0]]["modes"]["tp"]["step_ms_interval"]}]
    order = sorted(names, key=lambda n: -frac[n])
    assert doc["ranked"] == order
    assert [c["rank"] for c in doc["candidates"]] == [order.index(n) + 1 for n in names]
    win = doc["candidates"][names.index(order[0])]
    assert doc["winner"]["name"] == order[0]
    cmd = doc["winner"]["command"]
    assert cmd.startswith("domino-prof run --model tiny --tp 2 --seq 128 --mbs 2 --device cpu")
    assert cmd.endswith(" --splits 2" + (" --col-splits 2" if win["settings"]["col_splits"] == 2
                                         else "") + " --mode domino")  # fmt: skip
    # the printed table: one row per candidate, best first, its figures
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("│")]
    assert len(rows) == 2
    for ln, n in zip(rows, order):
        c = doc["candidates"][names.index(n)]
        cells = [x.strip() for x in ln.strip("│").split("│")]
        assert cells[0] == str(order.index(n) + 1)
        assert cells[1] == c["settings_text"]
        assert cells[2].startswith(f"{c['domino_step_ms']:.2f}")
        assert cells[3].startswith(f"{frac[n]:.3f}")
        assert cells[-2] == f"{tp_step / c['domino_step_ms']:.3f}"
    assert f"winner ({win['settings_text']}): {cmd}" in r.stdout


def test_tune_names_a_candidate_timed_while_the_hosts_speed_moved(tmp_path, capsys):
    """_finish prints candidate_numbers' host note of an ok candidate: one line each."""
    from domino_prof.reference_model.config import tiny

    s = T.candidates(T.parse_grid(["col_splits=1,2"]))
    cands = [{"name": f"c0{i}", "status": "ok", "error": None, "settings": x.fields(),
              "settings_text": x.text(), **T.candidate_numbers({}), "domino_step_ms": 10.0 + i,
              "frac_of_nocomm": 0.8 - i / 10, "host": "the host's speed moved 2.0x" if i else None}
             for i, x in enumerate(s)]  # fmt: skip
    ranked, best = T.summarise(cands, [])
    doc = {"candidates": cands, "ranked": [c["name"] for c in ranked], "best_tp": best,
           "base_flags": [], "comm": None,
           "config": {"model": {"name": tiny().name}, "tp": 2, "seq": 128, "mbs": 2}}  # fmt: skip
    T._finish(doc, tmp_path, top=5)
    notes = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note: ")]
    assert notes == ["note: c01: the host's speed moved 2.0x"]


def test_plan_puts_tp_once_per_tp_setting_and_skips_refused_combinations():
    from domino_prof.reference_model.config import RunConfig

    grid = T.parse_grid(["splits=1,2", "col-splits=1,2", "comm_ctas=default"])
    cands = T.candidates(grid)
    assert [c.slug() for c in cands] == ["splits1-col1", "splits1-col2", "splits2-col1",
                                         "splits2-col2"]  # fmt: skip
    base = {"mbs": 2, "tp": 2}
    plan = T._plan(cands, base, "cpu", RunConfig)
    assert [(p["name"], p["cfg"] is None, p["tp"]) for p in plan] == [
        ("c00-splits1-col1", True, False), ("c01-splits1-col2", False, True),
        ("c02-splits2-col1", False, False), ("c03-splits2-col2", False, False)]  # fmt: skip
    assert "--splits must be >= 2 for domino" in plan[0]["error"]
    assert plan[1]["cfg"].modes[0] == "tp" and plan[2]["cfg"].modes[0] != "tp"
    # a value refused in every combination is a mistake of the grid: its one line
    with pytest.raises(T.ConfigError, match="--splits must be >= 2 for domino"):
        T._plan(T.candidates(T.parse_grid(["splits=1,2"])), base, "cpu", RunConfig)
    # sizes set the micro-batches: splits does not multiply them
    grid = T.parse_grid(["splits=2,4", "split_sizes=even,3:1"])
    assert [c.text() for c in T.candidates(grid)] == [
        "splits 2, col 1", "splits 2 (3+1), col 1", "splits 4, col 1"]  # fmt: skip


def test_candidate_numbers_and_table_read_limits_and_domino_nocomm():
    blocks = {"domino": [10.0, 11.0, 12.0], "nocomm": [8.0, 8.8, 9.0],
              "domino-nocomm": [9.0, 9.9, 10.8]}  # fmt: skip
    run = {
        "modes": {m: {"step_ms": statistics.median(v), "step_ms_interval": [min(v), max(v)],
                      "blocks": {"medians_ms": v}} for m, v in blocks.items()},
        "comparison": [{"mode": "domino", "frac_of_nocomm": 0.8, "frac_of_nocomm_low": 0.75,
                        "frac_of_nocomm_high": 0.82}],
        "limits": {"gap_ms": 2.5, "exposed_comm_ms": 1.25, "overlap_tax_ms": None,
                   "host_ms": 0.5, "rest_ms": 0.75, "text": "..."},
    }  # fmt: skip
    n = T.candidate_numbers(run)
    assert n["domino_step_ms"] == 11.0 and n["domino_step_ms_interval"] == [10.0, 12.0]
    assert (n["frac_of_nocomm"], n["frac_of_nocomm_interval"]) == (0.8, [0.75, 0.82])
    assert n["of_domino_nocomm"] == pytest.approx(0.9)  # median of 9/10, 9.9/11, 10.8/12
    assert n["host"] is None  # no probes (a CPU run, or one from before them)
    eager = {**run, "config": {"device": "cuda"},
             "modes": {**run["modes"], "nocomm": {**run["modes"]["nocomm"],
                                                   "host_probe_times_ms": [0.6, 1.2]}}}  # fmt: skip
    assert T.candidate_numbers(eager)["host"] == host_speed_note(eager)
    assert "moved 2.0x" in T.candidate_numbers(eager)["host"]
    assert n["limits"] == {"gap_ms": 2.5, "split_ms": None, "exposed_comm_ms": 1.25,
                           "exposed_cost_ms": None, "overlap_tax_ms": None,
                           "tax_withheld": None, "host_ms": 0.5, "residual_ms": None,
                           "rest_ms": 0.75, "occupancy_added_ms": None,
                           "kernel_time_added_ms": None, "concurrency_lost_ms": None,
                           "no_compute_added_ms": None}  # fmt: skip
    c = {"name": "c00", "status": "ok", "settings_text": "splits 2, col 2", **n}
    tps = [{"settings_text": "ctas 8", "step_ms": 13.0}, {"settings_text": "default ctas",
                                                         "step_ms": 12.1}]  # fmt: skip
    ranked, best = T.summarise([c], tps)
    assert best["step_ms"] == 12.1 and c["vs_best_tp"] == pytest.approx(12.1 / 11.0)
    from rich.console import Console

    con = Console(width=200, record=True)
    con.print(T.tune_table(ranked, top=5, best_tp=best, title="t"))
    text = " ".join(con.export_text().split())
    assert "0.800 [0.750, 0.820]" in text and "0.900" in text and "1.100" in text
    assert "gap 2.50, exposed 1.25, host 0.50, rest 0.75" in text
    assert "tp's best (default ctas, 12.10 ms)" in text
    # --schedule domino-sp reads its own modes and run.json's limits_sp, never domino's
    sp = {"modes": {"domino-sp": run["modes"]["domino"], "nocomm": run["modes"]["nocomm"],
                    "domino-sp-nocomm": {"blocks": {"medians_ms": [8.0, 9.9, 13.2]}}},
          "comparison": [{"mode": "domino-sp", "frac_of_nocomm": 0.7}],
          "limits": run["limits"], "limits_sp": {**run["limits"], "gap_ms": 4.0}}  # fmt: skip
    n = T.candidate_numbers(sp, "domino-sp")
    assert (n["domino_step_ms"], n["frac_of_nocomm"]) == (11.0, 0.7)
    assert n["of_domino_nocomm"] == pytest.approx(0.9)  # median of 8/10, 9.9/11, 13.2/12
    assert n["limits"]["gap_ms"] == 4.0


def test_the_limits_cell_takes_measured_limits_and_a_withheld_tax():
    """Every candidate runs domino-nocomm, so its run.json's limits are measured: split and
    residual, rest null (the cell once formatted the null rest and raised). A tax withheld
    for compute beside compute (the lanes) says so; a remainder keeps its rest."""
    measured = {"gap_ms": 17.0, "split_ms": 8.36, "exposed_comm_ms": 4.84,
                "exposed_cost_ms": 3.28, "overlap_tax_ms": 5.91, "tax_withheld": False,
                "host_ms": 0.24, "residual_ms": 0.55, "rest_ms": None}  # fmt: skip
    assert T._limits_text(measured) == ("gap 17.00, split 8.36, exposed 4.84 (cost 3.28), "
                                        "tax 5.91, host 0.24, residual 0.55")  # fmt: skip
    lanes = {**measured, "overlap_tax_ms": None, "tax_withheld": True, "residual_ms": 6.46}
    assert T._limits_text(lanes) == ("gap 17.00, split 8.36, exposed 4.84 (cost 3.28), tax "
                                     "n/a (compute beside compute), host 0.24, residual 6.46")
    # a run.json since 2026-12-08 holds the compute held longer by occupancy beside it
    held = {**lanes, "occupancy_added_ms": 12.4, "kernel_time_added_ms": 7.4,
            "concurrency_lost_ms": 5.0, "no_compute_added_ms": 1.96}
    assert T._limits_text(held) == ("gap 17.00, split 8.36, exposed 4.84 (cost 3.28), tax "
                                    "n/a, compute held longer 12.40 (by occupancy), host "
                                    "0.24, residual 6.46")  # fmt: skip
    assert T._limits_text(None) == "n/a"
    run = {"modes": {}, "comparison": [], "limits": {**measured, "text": "..."}}
    occ = ("occupancy_added_ms", "kernel_time_added_ms", "concurrency_lost_ms",
           "no_compute_added_ms")
    assert T.candidate_numbers(run)["limits"] == {**measured, **dict.fromkeys(occ)}
    run["limits"] = {**held, "text": "..."}
    assert T.candidate_numbers(run)["limits"] == held


def test_mbs_is_a_grid_key_and_each_candidate_meets_tp_at_its_own_mbs():
    """mbs changes the tokens per step: a candidate's tp reference is the fastest tp of
    its mbs (hand-made numbers), tp is planned once per mbs, and the winner's command
    carries the candidate's --mbs instead of the sweep's."""
    from domino_prof.reference_model.config import RunConfig

    cands = T.candidates(T.parse_grid(["mbs=2,4"]))
    assert [(c.mbs, c.text(), c.slug(), c.flags()) for c in cands] == [
        (2, "mbs 2, splits 2, col 1", "mbs2-splits2-col1", ["--splits", "2", "--mbs", "2"]),
        (4, "mbs 4, splits 2, col 1", "mbs4-splits2-col1", ["--splits", "2", "--mbs", "4"])]
    plan = T._plan(cands, {"mbs": 2, "tp": 2}, "cpu", RunConfig)
    assert [(p["name"], p["cfg"].mbs, p["tp"]) for p in plan] == [
        ("c00-mbs2-splits2-col1", 2, True), ("c01-mbs4-splits2-col1", 4, True)]
    # the unswept grid: no mbs in a candidate's settings or name (as before)
    (c,) = T.candidates(T.parse_grid(None))
    assert c.mbs is None and "mbs" not in c.fields() and c.slug() == "splits2-col1"
    tps = [{"settings": {"mbs": 2}, "settings_text": "mbs 2", "step_ms": 10.0},
           {"settings": {"mbs": 4}, "settings_text": "mbs 4", "step_ms": 21.0},
           {"settings": {"mbs": 4}, "settings_text": "mbs 4, ctas 8", "step_ms": 20.0}]
    got = [{"name": "a", "status": "ok", "settings": {"mbs": 2}, "domino_step_ms": 8.0,
            "frac_of_nocomm": 0.7},
           {"name": "b", "status": "ok", "settings": {"mbs": 4}, "domino_step_ms": 16.0,
            "frac_of_nocomm": 0.8}]  # fmt: skip
    ranked, best = T.summarise(got, tps)
    assert [c["name"] for c in ranked] == ["b", "a"] and best["step_ms"] == 10.0
    assert (got[0]["vs_best_tp"], got[1]["vs_best_tp"]) == (10.0 / 8.0, 20.0 / 16.0)
    assert got[1]["best_tp_ms"] == 20.0
    cmd = T.run_command(["--model", "tiny", "--mbs", "2", "--seed", "1"], cands[1])
    assert cmd == ("domino-prof run --model tiny --seed 1 --splits 2 --mbs 4 --mode domino")
    # a sweep-wide --sm-carveout is in every candidate's settings: the line has it once
    (c,) = T.candidates(T.parse_grid(["sm_carveout=24"]))
    cmd = T.run_command(["--mbs", "2", "--sm-carveout", "24", "--seed", "1"], c)
    assert cmd == "domino-prof run --mbs 2 --seed 1 --splits 2 --sm-carveout 24 --mode domino"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--grid", "foo=1"], "--grid 'foo=1': unknown key 'foo'; keys: splits, col_splits, "
         "split_sizes, comm_ctas, cuda_graphs"),
        (["--grid", "splits"], "--grid 'splits' is not KEY=V1,V2,..."),
        (["--grid", "splits=1,x"], "--grid splits: 'x' is not a whole number"),
        (["--grid", "splits=2", "--grid", "splits=4"], "--grid splits given twice"),
        (["--grid", "split_sizes=3-1"], "--grid split_sizes: '3-1' is neither 'even' nor sizes"),
        (["--grid", "cuda_graphs=maybe"], "--grid cuda_graphs: 'maybe' is not on or off"),
        (["--grid", "col_splits=3"], "--col-splits 3 does not divide the tiny model's dim (256)"),
        (["--mbs", "4", "--grid", "split_sizes=3:2"], "--split-sizes 3,2 sums to 5 sequences"),
        (["--grid", "cuda_graphs=on"], "--cuda-graphs needs --device cuda"),
        (["--grid", "comm_ctas=8"], "--comm-ctas sets the CTAs of NCCL's"),
        (["--top", "0"], "--top must be >= 1, got 0"),
        (["--grid", "comm_engine=dma"], "--grid comm_engine: 'dma' is not one of default, sm, ce"),
        (["--grid", "comm_engine=ce"], "--comm-engine ce is emulated only"),
        (["--comm-engine", "ce"], "--comm-engine ce is emulated only"),
    ],
)  # fmt: skip
def test_bad_grids_are_one_line(args, needle, tmp_path):
    r = CliRunner().invoke(app, ["tune", "--device", "cpu", *args, "--out", str(tmp_path / "t")])
    assert needle in _one_line(r)
    assert not (tmp_path / "t").exists()  # refused before any candidate ran


def test_sm_carveout_is_a_tp_knob_and_a_flag():
    from domino_prof.commands.tune import TP_KEYS, candidates, parse_grid

    cands = candidates(parse_grid(["sm_carveout=default,16", "comm_ctas=8"]))
    assert [c.sm_carveout for c in cands] == [None, 16]
    assert "sm_carveout" in TP_KEYS and cands[1].tp() == (8, False, 16, None, None)
    assert cands[1].flags()[-4:] == ["--comm-ctas", "8", "--sm-carveout", "16"]
    assert cands[1].slug().endswith("-ctas8-carve16") and "carveout 16" in cands[1].text()


def test_comm_engine_is_a_tp_knob_and_a_flag():
    from domino_prof.commands.tune import TP_KEYS, candidates, parse_grid

    cands = candidates(parse_grid(["comm_engine=default,ce", "cuda_graphs=on"]))
    assert [c.comm_engine for c in cands] == [None, "ce"]
    # tp is timed at each engine: its best over both is the reference, never a tp slowed
    # by the candidate's engine alone
    assert "comm_engine" in TP_KEYS and cands[1].tp() == (None, True, None, None, "ce")
    assert cands[0].fields().get("comm_engine") is None
    assert cands[1].fields()["comm_engine"] == "ce"
    assert cands[1].flags()[-3:] == ["--comm-engine", "ce", "--cuda-graphs"]
    assert cands[1].slug() == "splits2-col1-ce-graphs" and "engine ce" in cands[1].text()
    from domino_prof.commands.tune import _tp_text

    assert _tp_text(cands[1]) == "default ctas, engine ce, graphs"


def test_graph_scope_applies_to_the_candidates_with_graphs():
    """--graph-scope is sweep-wide: the candidates with CUDA graphs take it, those without
    have none to scope (segment); the winner's command line carries it."""
    from domino_prof.reference_model.config import RunConfig

    cands = T.candidates(T.parse_grid(["cuda_graphs=off,on"]))
    base = {"mbs": 2, "tp": 8, "comm": "emulate", "graph_scope": "step"}
    plan = T._plan(cands, base, "cuda", RunConfig)
    scopes = [(p["settings"].cuda_graphs, p["cfg"].graph_scope) for p in plan]
    assert scopes == [(False, "segment"), (True, "step")]
    on = plan[1]["cfg"]
    flags = T._base_flags(on, layers=0)
    assert flags[flags.index("--graph-scope") + 1] == "step"
    assert "--graph-scope" not in T._base_flags(plan[0]["cfg"], layers=0)


def test_wgrad_in_is_a_candidate_knob_not_tps():
    from domino_prof.commands.tune import TP_KEYS, candidates, parse_grid

    cands = candidates(parse_grid(["wgrad_in=default,accumulate"]))
    assert [c.wgrad_in for c in cands] == [None, "accumulate"]
    assert "wgrad_in" not in TP_KEYS and cands[0].tp() == cands[1].tp()  # one tp for both
    assert "wgrad_in" not in cands[0].fields()
    assert cands[1].fields()["wgrad_in"] == "accumulate"
    assert cands[1].flags()[-2:] == ["--wgrad-in", "accumulate"]
    assert cands[1].slug() == "splits2-col1-wgrad-accumulate"
    assert cands[1].text() == "splits 2, col 1, wgrad-in accumulate"
    with pytest.raises(T.ConfigError, match="--grid wgrad_in: 'x' is not one of default, joint, "
                                          "accumulate"):  # fmt: skip
        parse_grid(["wgrad_in=x"])


def test_mb_streams_is_a_candidate_knob_not_tps():
    from domino_prof.commands.tune import TP_KEYS, candidates, parse_grid
    from domino_prof.reference_model.config import RunConfig

    cands = candidates(parse_grid(["mb_streams=default,2", "cuda_graphs=on"]))
    assert [c.mb_streams for c in cands] == [None, 2]
    assert "mb_streams" not in TP_KEYS and cands[0].tp() == cands[1].tp()  # one tp for both
    assert "mb_streams" not in cands[0].fields()
    assert cands[1].fields()["mb_streams"] == 2
    assert cands[1].flags()[-3:] == ["--mb-streams", "2", "--cuda-graphs"]
    assert cands[1].slug() == "splits2-col1-streams2-graphs"
    assert cands[1].text() == "splits 2, col 1, mb-streams 2, graphs"
    base = {"mbs": 2, "tp": 8, "comm": "emulate", "graph_scope": "step"}
    plan = T._plan(cands, base, "cuda", RunConfig)
    assert [p["cfg"].mb_streams for p in plan] == [1, 2]
    # 2 streams with 4 micro-batches is skipped, with its reason; 3 refused everywhere: an error
    cands = candidates(parse_grid(["mb_streams=1,2", "splits=2,4", "mbs=4"]))
    plan = T._plan(cands, base, "cuda", RunConfig)
    skipped = [(p["settings"].splits, p["settings"].mb_streams) for p in plan if p["cfg"] is None]
    assert skipped == [(4, 2)]
    why = next(p["error"] for p in plan if p["cfg"] is None)
    assert "--mb-streams 2 takes 2 micro-batches, got --splits 4" in why
    with pytest.raises(T.ConfigError, match="--mb-streams must be 1 or 2, got 3"):
        T._plan(candidates(parse_grid(["mb_streams=3"])), base, "cuda", RunConfig)


def test_schedule_domino_sp_tunes_domino_over_sequence_parallelism(tmp_path):
    """--schedule domino-sp: each candidate runs domino-sp, nocomm and domino-sp-nocomm
    (tp rides in the first); the figures are domino-sp's, recomputed from the run.json
    files, the split column is domino-sp over domino-sp-nocomm (no domino-nocomm), and the
    winner's line runs --mode domino-sp. wgrad_in is one of
    its knobs (its weight gradients joint or one per micro-batch); a domino-only knob
    refused in every candidate is the grid's one line."""
    out = tmp_path / "tune"
    r = CliRunner(env={"COLUMNS": "250"}).invoke(  # the table's headers on one line
        app, ["tune", *QUICK, "--mbs", "2", "--schedule", "domino-sp", "--grid",
              "wgrad_in=joint,accumulate", "--out", str(out)])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "tune.json").read_text())
    assert doc["schedule"] == "domino-sp"
    assert doc["modes"] == ["nocomm", "domino-sp", "domino-sp-nocomm"]
    names = [c["name"] for c in doc["candidates"]]
    runs = {n: json.loads((out / n / "run.json").read_text()) for n in names}
    assert list(runs[names[0]]["modes"]) == ["tp", "nocomm", "domino-sp", "domino-sp-nocomm"]
    assert list(runs[names[1]]["modes"]) == ["nocomm", "domino-sp", "domino-sp-nocomm"]
    assert [runs[n]["config"]["wgrad_in"] for n in names] == ["joint", "accumulate"]
    tp_step = statistics.median(_medians(runs[names[0]], "tp"))
    for c in doc["candidates"]:
        ds, noc = _medians(runs[c["name"]], "domino-sp"), _medians(runs[c["name"]], "nocomm")
        step = statistics.median(ds)
        assert c["status"] == "ok"
        assert c["domino_step_ms"] == pytest.approx(step, rel=1e-12)
        assert c["frac_of_nocomm"] == pytest.approx(
            statistics.median([n / d for n, d in zip(noc, ds)]), rel=1e-12)
        dsn = _medians(runs[c["name"]], "domino-sp-nocomm")
        assert c["of_domino_nocomm"] == pytest.approx(
            statistics.median([n / d for n, d in zip(dsn, ds)]), rel=1e-12)
        assert c["limits"] is None  # --no-analyze: no analyses, no decomposition
        assert c["vs_best_tp"] == pytest.approx(tp_step / step, rel=1e-12)
    win = doc["candidates"][names.index(doc["ranked"][0])]
    assert doc["winner"]["command"].endswith(
        f" --splits 2 --wgrad-in {win['settings']['wgrad_in']} --mode domino-sp")
    head = next(ln for ln in r.stdout.splitlines() if "settings" in ln)
    assert "domino-sp ms" in head and "domino-sp / nocomm" in head
    assert "domino-sp / domino-sp-nocomm" in head and " domino-nocomm" not in head
    assert len([ln for ln in r.stdout.splitlines() if ln.startswith("│")]) == 2
    r = CliRunner().invoke(app, ["tune", *QUICK, "--mbs", "2", "--schedule", "domino-sp",
                                 "--grid", "col_splits=1,2", "--out", str(tmp_path / "t2")])  # fmt: skip
    assert r.exit_code == 2
    assert "--col-splits 2 applies to the modes of the domino schedule" in r.output


def test_an_unknown_schedule_is_one_line(tmp_path):
    r = CliRunner().invoke(app, ["tune", *QUICK, "--schedule", "sp", "--out", str(tmp_path / "t")])
    assert r.exit_code != 0
    assert "--schedule must be one of domino, domino-sp, got 'sp'" in r.output


def test_comm_ctas_scope_applies_to_the_candidates_with_comm_ctas():
    """--comm-ctas-scope bwd is sweep-wide: the candidates (and tp's own settings) with
    --comm-ctas N take it, those with the library's CTAs have none to scope; the winner's
    command line carries it only with --comm-ctas."""
    from domino_prof.reference_model.config import RunConfig

    cands = T.candidates(T.parse_grid(["comm_ctas=default,12", "cuda_graphs=on"]))
    base = {"mbs": 2, "tp": 8, "comm": "emulate", "graph_scope": "step",
            "comm_ctas_scope": "bwd"}  # fmt: skip
    plan = T._plan(cands, base, "cuda", RunConfig)
    got = [(p["settings"].comm_ctas, p["cfg"].comm_ctas, p["cfg"].comm_ctas_scope, p["tp"])
           for p in plan]  # fmt: skip
    assert got == [(None, None, "all", True), (12, 12, "bwd", True)]
    flags = T._base_flags(plan[1]["cfg"], layers=0, ctas_scope="bwd")
    assert flags[flags.index("--comm-ctas-scope") + 1] == "bwd"
    win12 = T.run_command(flags, cands[1], "domino-sp")
    assert "--comm-ctas 12" in win12 and "--comm-ctas-scope bwd" in win12
    win = T.run_command(flags, cands[0], "domino-sp")
    assert "--comm-ctas" not in win  # neither flag: the scope alone is refused by run
    assert "--comm-ctas-scope" not in T._base_flags(plan[1]["cfg"], layers=0)


def test_sp_wgrad_input_is_a_domino_sp_candidate_knob_not_tps():
    from domino_prof.commands.tune import TP_KEYS, candidates, parse_grid
    from domino_prof.reference_model.config import RunConfig

    cands = candidates(parse_grid(["sp_wgrad_input=default,regather", "cuda_graphs=on"]))
    assert [c.sp_wgrad_input for c in cands] == [None, "regather"]
    assert "sp_wgrad_input" not in TP_KEYS and cands[0].tp() == cands[1].tp()
    assert "sp_wgrad_input" not in cands[0].fields()
    assert cands[1].fields()["sp_wgrad_input"] == "regather"
    assert cands[1].flags()[-3:] == ["--sp-wgrad-input", "regather", "--cuda-graphs"]
    assert cands[1].slug() == "splits2-col1-sp-regather-graphs"
    assert cands[1].text() == "splits 2, col 1, sp-wgrad-input regather, graphs"
    base = {"mbs": 2, "tp": 8, "comm": "emulate", "graph_scope": "step"}
    plan = T._plan(cands, base, "cuda", RunConfig, schedule="domino-sp")
    assert [p["cfg"].sp_wgrad_input for p in plan] == ["keep", "regather"]
    # with --schedule domino the knob has nothing to act on: refused in every candidate
    # it is in, so the grid's one line
    with pytest.raises(T.ConfigError, match="^--sp-wgrad-input regather applies to a sequence-"
                                            "parallel schedule: tune it with --schedule "
                                            "domino-sp$"):  # fmt: skip
        T._plan(cands, base, "cuda", RunConfig)
    with pytest.raises(T.ConfigError, match="--grid sp_wgrad_input: 'x' is not one of default, "
                                            "regather, keep"):  # fmt: skip
        parse_grid(["sp_wgrad_input=x"])


def test_carveout_auto_is_a_domino_sp_candidate_knob_not_tps():
    from domino_prof.commands.tune import TP_KEYS, candidates, parse_grid
    from domino_prof.reference_model.config import RunConfig

    cands = candidates(parse_grid(["carveout_auto=default,off,on", "cuda_graphs=on"]))
    assert [c.carveout_auto for c in cands] == [None, False, True]
    assert "carveout_auto" not in TP_KEYS and cands[0].tp() == cands[1].tp() == cands[2].tp()
    assert "carveout_auto" not in cands[0].fields()
    assert cands[1].fields()["carveout_auto"] is False
    assert cands[1].flags()[-2:] == ["--no-carveout-auto", "--cuda-graphs"]
    assert cands[2].flags()[-2:] == ["--carveout-auto", "--cuda-graphs"]
    assert cands[1].slug() == "splits2-col1-auto-off-graphs"
    assert cands[1].text() == "splits 2, col 1, carveout-auto off, graphs"
    base = {"mbs": 2, "tp": 8, "comm": "emulate", "graph_scope": "step"}
    plan = T._plan(cands, base, "cuda", RunConfig, schedule="domino-sp")
    assert [p["cfg"].carveout_auto for p in plan] == [True, False, True]
    with pytest.raises(T.ConfigError, match="^carveout_auto acts on domino-sp only "):
        T._plan(cands[1:], base, "cuda", RunConfig)
    eager = candidates(parse_grid(["carveout_auto=on,off", "cuda_graphs=off"]))
    with pytest.raises(T.ConfigError, match="^carveout_auto acts with CUDA graphs only "):
        T._plan(eager, base, "cuda", RunConfig, schedule="domino-sp")
    with pytest.raises(T.ConfigError, match="--grid carveout_auto: 'x' is not on or off"):
        parse_grid(["carveout_auto=x"])
