"""Report: derived views (exact, hand-worked), figures, the page, and the CLI.

The shared synthetic trace (``domino_trace``), per rank, one step [0, 200] µs:

  op                          compute (stream 7)   comm (stream)
  fwd.layer_attn_0_batch_0    A [10, 40]           C0 [30, 60]  (13)
  fwd.layer_attn_0_batch_1    B [40, 70]           C1 [65, 95]  (14)
  bwd.layer_attn_0_batch_0    D [100, 130]         C2 [120, 140] (13)

compute union = [10, 70] ∪ [100, 130]
  C0 ∩ = [30, 60] = 30 µs hidden, 0 exposed           -> 100 %
  C1 ∩ = [65, 70] = 5 µs hidden, [70, 95] = 25 exposed -> 16.67 %
  C2 ∩ = [120, 130] = 10 hidden, [130, 140] = 10 exposed -> 50 %
per rank: comm 80, hidden 45, exposed 35 µs; step wall 10..140 = 130 µs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from rundirs import write_run_dir
from tracegen import TraceBuilder
from typer.testing import CliRunner

from domino_prof.analysis import timeline as tl
from domino_prof.cli import app
from domino_prof.engine import analyze
from domino_prof.report import figures as F
from domino_prof.report import write_compare, write_report
from domino_prof.report.page import render_report
from domino_prof.trace import load_trace

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def domino_trace(
    out: Path, *, world: int = 2, c1_start: float = 65.0, with_comm: bool = True
) -> Path:
    """The trace of the module docstring, one file per rank."""
    out.mkdir(parents=True, exist_ok=True)
    for rank in range(world):
        b = TraceBuilder(rank=rank, world_size=world)
        b.step(1, 0, 200)
        b.annotation("fwd.layer_attn_0_batch_0", 1, 9)
        b.kernel("sm90_gemm_a", stream=7, start=10, dur=30, launch=2)
        if with_comm:
            b.kernel(NCCL, stream=13, start=30, dur=30, launch=3)
        b.annotation("fwd.layer_attn_0_batch_1", 11, 9)
        b.kernel("sm90_gemm_b", stream=7, start=40, dur=30, launch=12)
        if with_comm:
            b.kernel(NCCL, stream=14, start=c1_start, dur=30, launch=13)
        b.annotation("bwd.layer_attn_0_batch_0", 21, 9)
        b.kernel("sm90_gemm_c", stream=7, start=100, dur=30, launch=22)
        if with_comm:
            b.kernel(NCCL, stream=13, start=120, dur=20, launch=23)
        b.write(out / f"rank{rank}.pt.trace.json")
    return out


@pytest.fixture(scope="module")
def dom(tmp_path_factory):
    return analyze(load_trace(domino_trace(tmp_path_factory.mktemp("dom"))))


def figure_specs(html: str) -> list[tuple[int, dict]]:
    """(data-expected-traces, figure JSON) of every figure div in a page."""
    out = []
    for m in re.finditer(
        r'<div class="dp-plot" id="([^"]+)" data-expected-traces="(\d+)">'
        r'</div><script type="application/json" id="\1-data">(.*?)</script>',
        html,
        flags=re.DOTALL,
    ):
        out.append((int(m.group(2)), json.loads(m.group(3).replace("<\\/", "</"))))
    return out


# --- timeline maths ------------------------------------------------------------
def test_split_hidden_exposed_hand_worked():
    # compute [0,20] [30,40]; comm [10,35] -> hidden [10,20], exposed [20,30], hidden
    # [30,35]; comm [45,50] has no compute under it -> exposed.
    iv = pd.DataFrame({
        "rank": [0, 0, 0, 0], "device": 0, "stream": [7, 7, 13, 13], "start": [0, 30, 10, 45],
        "end": [20, 40, 35, 50], "kind": ["compute", "compute", "comm", "comm"],
        "name": ["g", "g", "nccl", "nccl"], "op": ["a", "b", "c", "d"], "iteration": 1,
    })  # fmt: skip
    p = tl.split_hidden_exposed(iv)
    comm = p[p["part"] != "compute"]
    assert comm[["start", "end", "part", "op"]].values.tolist() == [
        [10, 20, "comm_hidden", "c"], [20, 30, "comm_exposed", "c"],
        [30, 35, "comm_hidden", "c"], [45, 50, "comm_exposed", "d"],
    ]  # fmt: skip
    assert p[p["part"] == "compute"][["start", "end"]].values.tolist() == [[0, 20], [30, 40]]
    # comm overlapping only comm is not hidden: another rank's compute does not count
    iv2 = iv.assign(rank=[1, 1, 0, 0])
    p2 = tl.split_hidden_exposed(iv2)
    assert set(p2.loc[p2["rank"] == 0, "part"]) == {"comm_exposed"}


def test_split_is_per_device_and_across_steps():
    # one rank, two devices. Device 0: comm [10, 30) of step 1, compute [20, 40) of
    # step 2 -> hidden [20, 30) (compute of any step hides it, as in the numbers).
    # Device 1: compute [0, 50) -- another device's compute hides nothing on device 0.
    iv = pd.DataFrame({
        "rank": 0, "device": [0, 0, 1], "stream": [13, 7, 9], "start": [10, 20, 0],
        "end": [30, 40, 50], "kind": ["comm", "compute", "compute"], "name": "k", "op": "o",
        "iteration": [1, 2, 1],
    })  # fmt: skip
    p = tl.split_hidden_exposed(iv, iteration=1)
    comm = p[p["part"].str.startswith("comm")]
    assert comm[["start", "end", "part"]].values.tolist() == [
        [10, 20, "comm_exposed"], [20, 30, "comm_hidden"]]  # fmt: skip


def test_split_sums_equal_analysis_hidden(dom):
    p = tl.split_hidden_exposed(dom.intervals, reference=dom.reference, iteration=1)
    length = p["end"] - p["start"]
    for r in (0, 1):
        on = p["rank"] == r
        assert int(length[on & (p["part"] == "comm_hidden")].sum()) == 45_000  # 30+5+10 µs
        assert int(length[on & (p["part"] == "comm_exposed")].sum()) == 35_000  # 25+10 µs
    br = dom.by_rank.set_index("rank")
    assert int(br.loc[0, "hidden_ns"]) == 45_000 and int(br.loc[0, "exposed_ns"]) == 35_000


def test_merge_for_display_merges_only_crowded_lanes():
    # lane (0,7): 10 compute pieces [10k, 10k+5), span 0..95 -> min gap 95/2 = 47.5;
    # all gaps are 5 -> one rectangle [0, 95], 10 pieces, busy 50. Its single exposed
    # piece stays. Lane (0,13) has 2 pieces (<= limit) and is untouched.
    s = np.arange(10) * 10
    pieces = pd.DataFrame({
        "rank": 0, "stream": [7] * 10 + [7, 13, 13], "start": np.r_[s, 50, 0, 3],
        "end": np.r_[s + 5, 52, 2, 4], "part": ["compute"] * 10 + ["comm_exposed"] * 3,
        "name": "k", "op": "o", "src": np.arange(13),
    })  # fmt: skip
    m, merged = tl.merge_for_display(pieces, max_per_lane=2)
    assert merged
    got = m[["stream", "start", "end", "part", "count", "busy_ns"]].values.tolist()
    assert got == [
        [7, 0, 95, "compute", 10, 50],
        [7, 50, 52, "comm_exposed", 1, 2],
        [13, 0, 2, "comm_exposed", 1, 2],
        [13, 3, 4, "comm_exposed", 1, 1],
    ]
    same, merged2 = tl.merge_for_display(pieces, max_per_lane=100)
    assert not merged2 and len(same) == 13


def test_pick_iteration_median():
    # walls 10, 30, 20, 1000 -> median 25; |30-25| = |20-25| -> the earliest (2)
    bi = pd.DataFrame({"rank": 0, "iteration": [1, 2, 3, 4], "wall_ns": [10, 30, 20, 1000]})
    assert tl.pick_iteration(bi) == 2
    assert tl.pick_iteration(bi.iloc[:0]) is None


def test_layer_grid_and_op_table(dom):
    g = tl.layer_grid(dom.by_op)
    got = {(r.phase, r.block, r.layer, r.batch): round(r.hidden_pct, 6) for r in g.itertuples()}
    assert got == {
        ("fwd", "attn", 0, 0): 100.0,
        ("fwd", "attn", 0, 1): round(500 / 30, 6),
        ("bwd", "attn", 0, 0): 50.0,
    }
    t = tl.op_table(dom.by_op)
    # pooled over 2 ranks: exposed 2x25, 2x10, 0 µs
    assert t[["op", "exposed_ns", "n_ranks"]].values.tolist() == [
        ["fwd.layer_attn_0_batch_1", 50_000, 2], ["bwd.layer_attn_0_batch_0", 20_000, 2],
        ["fwd.layer_attn_0_batch_0", 0, 2]]  # fmt: skip


def test_compare_ops_per_step_delta(tmp_path, dom):
    # B: C1 starts at 70 instead of 65 -> no overlap with [10,70]: exposed 30 (was 25).
    b = analyze(load_trace(domino_trace(tmp_path / "b", c1_start=70.0)))
    m = tl.compare_ops(dom.by_op, b.by_op, a_steps=1, b_steps=1, a_ranks=2, b_ranks=2)
    top = m.iloc[0]
    assert top["op"] == "fwd.layer_attn_0_batch_1"
    assert top["exposed_ns_a"] == 25_000 and top["exposed_ns_b"] == 30_000
    assert top["delta_exposed_ns"] == 5_000
    assert (m["delta_exposed_ns"].iloc[1:] == 0).all()


def one_op_trace(path: Path, op: str, comm_start: float) -> Path:
    """Rank 0, one step [0, 100] µs: op's gemm [10, 30] and its NCCL [comm_start, 50]."""
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 100)
    b.annotation(op, 1, 9)
    b.kernel("sm90_gemm", stream=7, start=10, dur=20, launch=2)
    b.kernel(NCCL, stream=13, start=comm_start, dur=50 - comm_start, launch=3)
    return b.write(path)


def test_compare_of_disjoint_ops_shows_a_dash_not_zero(tmp_path):
    # A: fwd.only_a, comm [40, 50] exposed 10 µs, hidden 0 %; B: fwd.only_b, comm
    # [20, 50]: 10 µs hidden under the gemm, 20 µs exposed (33.3 %). No op is on both
    # sides, so no delta exists: "—", never a +20.00 against a made-up 0.
    a = analyze(load_trace(one_op_trace(tmp_path / "a.json", "fwd.only_a", 40.0)))
    b = analyze(load_trace(one_op_trace(tmp_path / "b.json", "fwd.only_b", 20.0)))
    m = tl.compare_ops(a.by_op, b.by_op, a_steps=1, b_steps=1, a_ranks=1, b_ranks=1)
    assert m["op"].tolist() == ["fwd.only_b", "fwd.only_a"]  # one-sided: by exposed comm
    assert m[["in_a", "in_b"]].values.tolist() == [[False, True], [True, False]]
    assert m["exposed_ns_b"].iloc[0] == 20_000 and np.isnan(m["exposed_ns_a"].iloc[0])
    assert m["delta_exposed_ns"].isna().all()
    sec = F.compare_ops_figure(a, b, labels=("A", "B"))
    assert [list(r) for r in sec.extra[0].rows] == [
        ["fwd.only_b", "—", "20.00", "—", "—", "33.3"],
        ["fwd.only_a", "10.00", "—", "—", "0.0", "—"],
    ]
    xa, xb = (list(t.x) for t in sec.body.data)  # bars bottom-up: only_a, only_b
    assert xa == [10.0, None] and xb == [None, 20.0]
    res = CliRunner().invoke(
        app, ["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-o",
              str(tmp_path / "c.html")]
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.stdout.splitlines() if "fwd.only_a" in ln)
    assert re.search(r"fwd\.only_a\s*│\s*10\.00\s*│\s*—\s*│\s*—", line), line
    assert "+20.00" not in res.stdout and "-10.00" not in res.stdout


# --- figures --------------------------------------------------------------------------
def test_headline_cards(dom):
    cards = F.headline(dom).body
    assert [c.value for c in cards] == ["56.2 %", "0.035 ms", "0.13 ms"]  # 45/80; 35 µs; 130 µs
    assert cards[2].label == "profiled step"  # no run: the one step time is the profiled one
    cmp_row = {"mode": "domino", "speedup_vs_tp": 1.25, "frac_of_nocomm": 0.8}
    cards = F.headline(dom, comparison=cmp_row).body
    # the fraction of nocomm in the CLI's unit (was "80.0 %" beside the CLI's 0.800)
    assert [c.value for c in cards[3:]] == ["1.250×", "0.800"]
    assert cards[2].label == "profiled step"  # this row has no timed step
    # in a run the step card is the timed step, the one the speedups compare; the
    # profiled device wall is named, labelled, in its caption
    cards = F.headline(dom, comparison={**cmp_row, "step_ms": 1.6}).body
    assert (cards[2].label, cards[2].value) == ("timed step", "1.60 ms")
    assert "profiled: 0.13 ms device wall" in cards[2].sub
    assert [c.tone for c in cards[2:]] == ["", "", ""]  # green/red only for hidden comm


def test_mode_comparison_is_the_cli_table_with_neutral_bars():
    from domino_prof.runs import comparison_rows, comparison_table

    modes = {m: {"step_ms": s, "tokens_per_s": 256 / s, "hidden_pct": h}
             for m, s, h in (("tp", 2.0, 0.0), ("nocomm", 1.0, None), ("domino", 2.5, 40.0))}  # fmt: skip
    run = {"comparison": comparison_rows(modes)}
    sec = F.mode_comparison(run)
    bar = sec.body.data[0]
    assert list(bar.y) == [2.0, 1.0, 2.5]
    assert list(bar.marker.color) == [F.MODE_REF, F.MODE_OTHER, F.MODE_OTHER]
    assert F.COLORS["comm_hidden"] not in bar.marker.color  # domino is the slowest here
    table = sec.extra[0]
    assert (list(table.columns), [list(r) for r in table.rows]) == tuple(
        map(list, comparison_table(run["comparison"]))
    )
    assert list(table.columns) == ["mode", "timed step ms", "tokens/s", "hidden %",
                                   "speedup vs tp", "of nocomm"]  # fmt: skip
    # domino: speedup 2.0/2.5 = 0.800, of nocomm (256/2.5)/(256/1.0) = 0.400
    assert list(table.rows[2]) == ["domino", "2.50", "102", "40.0", "0.800", "0.400"]
    assert not sec.notes
    # the first line answers: does domino beat tp here, and by how much (timed steps)
    # (these modes have no timed blocks, so no interval: the verdict says so)
    assert sec.title == "Modes compared: domino 0.800× tp (slower, no interval)"
    sec = F.mode_comparison({"comparison": comparison_rows({"domino": modes["domino"]})})
    assert sec.title == "Modes compared"
    assert sec.notes and "tp did not run" in sec.notes[0]


def test_timeline_figure(dom):
    sec = F.step_timeline(dom)
    fig = sec.body
    assert isinstance(fig, go.Figure)
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {"compute", "comm, hidden", "comm, exposed"}
    ex = by_name["comm, exposed"]
    # t0 = 10 µs (first device start); rank 0 exposed pieces [70,95] and [130,140]
    r0 = [i for i, y in enumerate(ex.y) if y == "rank 0 · stream 14"]
    assert [round(ex.base[i], 6) for i in r0] == [0.06] and [round(ex.x[i], 6) for i in r0] == [
        0.025
    ]
    assert not sec.notes  # nothing downsampled


def test_timeline_downsampled_note(dom):
    sec = F.step_timeline(dom, max_per_lane=1)
    assert any("Downsampled" in n for n in sec.notes)


def test_layer_heatmap_values(dom):
    fig = F.layer_heatmap(dom).body
    fwd, bwd = fig.data
    assert list(fwd.x) == ["mb 0", "mb 1"] and list(fwd.y) == ["L0 attn"]
    assert fwd.z[0][0] == 100.0 and abs(fwd.z[0][1] - 500 / 30) < 1e-9
    assert bwd.z == ((50.0,),) or [list(r) for r in bwd.z] == [[50.0]]


def test_exposed_by_op_values(dom):
    fig = F.exposed_by_op(dom).body
    exposed = next(t for t in fig.data if t.name == "comm, exposed")
    # µs per step and rank, smallest first (bars are drawn bottom-up)
    assert list(exposed.y) == [
        "fwd.layer_attn_0_batch_0",
        "bwd.layer_attn_0_batch_0",
        "fwd.layer_attn_0_batch_1",
    ]
    assert list(exposed.x) == [0.0, 10.0, 25.0]


def test_missing_overheads_say_not_computed(dom):
    a = SimpleNamespace(
        **{**dom.__dict__, "overheads": None, "notes": ["overheads: not computed: test says so"]}
    )
    for fn in (F.switch_gaps, F.launch_delays, F.graph_candidates, F.rank_skew, F.findings):
        body = fn(a).body
        assert isinstance(body, F.Unavailable) and "not computed" in body.reason, fn.__name__
    partial = SimpleNamespace(**{**dom.__dict__, "overheads": {"notes": []}})
    for fn in (F.switch_gaps, F.launch_delays, F.rank_skew, F.findings):
        assert isinstance(fn(partial).body, F.Unavailable), fn.__name__
    html = render_report(a)
    assert html.count('class="unavailable"') >= 5


def test_single_rank_has_no_skew_figure(tmp_path):
    a = analyze(load_trace(domino_trace(tmp_path, world=1) / "rank0.pt.trace.json"))
    body = F.rank_skew(a).body
    assert isinstance(body, F.Unavailable) and "two or more ranks" in body.reason


# --- the page ----------------------------------------------------------------------
def test_page_is_self_contained(tmp_path, dom):
    path = write_report(dom, tmp_path / "r.html", title="t")
    html = path.read_text()
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    assert html.count(js[:200]) == 1  # plotly.js inlined exactly once
    ours = html.replace(js, "")  # (plotly.js itself names URLs it only uses for geo maps)
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", ours)
    assert "http://" not in ours and "https://" not in ours and "@import" not in ours
    specs = figure_specs(html)
    assert len(specs) == html.count('class="dp-plot"') >= 4
    for expected, spec in specs:
        assert expected == len(spec["data"]) > 0
    blocks = re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', html, re.DOTALL)
    assert blocks and not any(re.search(r"\bNaN\b|Infinity", b) for b in blocks)
    assert not list(tmp_path.glob(".r.html.*"))  # no temp file left by the atomic write


def test_no_comm_report(tmp_path):
    a = analyze(load_trace(domino_trace(tmp_path / "nc", with_comm=False)))
    html = render_report(a)
    assert "No comm in this trace" in html
    assert F.headline(a).body[0].value == "n/a"
    assert isinstance(F.layer_heatmap(a).body, F.Unavailable)
    assert isinstance(F.step_timeline(a).body, go.Figure)  # compute is still drawn
    for expected, spec in figure_specs(html):
        assert expected == len(spec["data"]) > 0  # no empty plot


def test_cpu_gloo_trace_report(tmp_path):
    # No GPU events: a CPU gloo trace (threads stand in for streams). Step [0, 100];
    # compute aten::mm [10, 30] on the main thread; c10d::allreduce_ launched at 31,
    # gloo:all_reduce [35, 55] on the pt_gloo_runloop thread -> nothing hides it.
    b = TraceBuilder(rank=0, world_size=1, backend="gloo")
    b.thread_name(77, "pt_gloo_runloop")
    b.step(1, 0, 100)
    b.cpu("aten::mm", 10, 20)
    b.cpu("c10d::allreduce_", 31, 2)
    b.annotation("gloo:all_reduce", 35, 20, tid=77)
    a = analyze(load_trace(b.write(tmp_path / "rank0.pt.trace.json")))
    assert a.mode == "cpu"
    html = render_report(a)
    assert "thread 77" in json.dumps([s for _, s in figure_specs(html)])
    assert "No launch call joined" in html or "not computed" in html  # no CUDA launches
    for expected, spec in figure_specs(html):
        assert expected == len(spec["data"]) > 0


def test_no_device_activity_report(dom):
    # analyze() refuses a trace with neither device nor gloo events (TraceError); an
    # Analysis whose frames are empty must still render, saying so in place.
    empty = {k: v.iloc[:0] for k, v in dom.__dict__.items() if isinstance(v, pd.DataFrame)}
    a = SimpleNamespace(
        **{**dom.__dict__, **empty, "totals": {"comm_ns": 0, "hidden_pct": None, "n_iterations": 0}}
    )
    html = render_report(a)
    assert "No device activity in this trace" in html and "No comm in this trace" in html
    assert figure_specs(html) == []


def test_write_report_mapping_is_a_run_report(tmp_path, dom):
    # the launcher passes {mode: Analysis} with run.json: one group per mode, domino first
    run = json.loads((make_run_dir(tmp_path / "run") / "run.json").read_text())
    html = write_report({"tp": dom, "domino": dom}, tmp_path / "r.html", run=run).read_text()
    assert html.index("Mode: domino") < html.index("Mode: tp")
    assert "All modes" in html and len(figure_specs(html)) == 1 + 2 * 5


def test_compare_page(tmp_path, dom):
    b = analyze(load_trace(domino_trace(tmp_path / "b", c1_start=70.0)))
    html = write_compare(dom, b, tmp_path / "c.html", labels=("tp", "domino")).read_text()
    assert "tp vs domino" in html
    specs = figure_specs(html)
    ops = specs[0][1]
    assert [t["name"] for t in ops["data"]] == ["tp", "domino"]
    assert "+5.00" in html  # delta of fwd.layer_attn_0_batch_1, µs per step and rank


# --- CLI -----------------------------------------------------------------------------
def make_run_dir(root: Path) -> Path:
    """A run directory as `domino-prof run` writes it (ARCHITECTURE.md §4), 2 modes."""
    return write_run_dir(
        root,
        {m: {"step_ms": s, "step_times_ms": [s], "tokens_per_s": 1000.0 / s, "mfu": None,
             "losses": [1.0], "hidden_pct": None, "analysis": f"{m}/analysis.json"}
         for m, s in (("tp", 2.0), ("domino", 1.6))},
        traces=lambda d, m: domino_trace(d, **({"c1_start": 70.0} if m == "tp" else {})),
        config={"preset": "tiny", "world_size": 2, "layers": 1},
        versions={"torch": "2.x", "domino_prof": "0.1.0"}, devices=["cpu"],
        comparison=[{"mode": "tp", "step_ms": 2.0, "tokens_per_s": 500.0,
                     "hidden_pct": 50.0, "speedup_vs_tp": 1.0, "frac_of_nocomm": None},
                    {"mode": "domino", "step_ms": 1.6, "tokens_per_s": 625.0,
                     "hidden_pct": 56.25, "speedup_vs_tp": 1.25, "frac_of_nocomm": None}],
    )  # fmt: skip


def test_cli_report_trace_dir(tmp_path):
    d = domino_trace(tmp_path / "tr")
    out = tmp_path / "out" / "r.html"
    res = CliRunner().invoke(app, ["report", str(d), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "hidden 56.2 %" in res.output and "exposed 0.035 ms/step" in res.output
    assert len(figure_specs(out.read_text())) >= 4


def test_cli_report_run_dir(tmp_path):
    run = make_run_dir(tmp_path / "run")
    res = CliRunner().invoke(app, ["report", str(run)])
    assert res.exit_code == 0, res.output
    html = (run / "report.html").read_text()
    assert "Mode: tp" in html and "Mode: domino" in html and "All modes" in html
    assert "1.250×" in html  # domino's speedup vs tp from run.json, on its headline card
    assert "config.preset" in html
    # RUN_DIR/<mode> is one mode with the run's context
    res = CliRunner().invoke(app, ["report", str(run / "domino"), "-o", str(tmp_path / "d.html")])
    assert res.exit_code == 0, res.output
    assert "1.250×" in (tmp_path / "d.html").read_text()


def test_cli_report_run_with_unanalysable_mode(tmp_path):
    # a CPU run's nocomm mode has neither device nor gloo events: analyze() refuses it;
    # the report still renders the other modes and says so in nocomm's place.
    run = make_run_dir(tmp_path / "run")
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 100)
    b.cpu("aten::mm", 10, 20)
    (run / "nocomm").mkdir()
    b.write(run / "nocomm" / "rank0.pt.trace.json")
    doc = json.loads((run / "run.json").read_text())
    doc["modes"]["nocomm"] = {**doc["modes"]["tp"], "trace_dir": "nocomm"}
    (run / "run.json").write_text(json.dumps(doc))
    res = CliRunner().invoke(app, ["report", str(run)])
    assert res.exit_code == 0, res.output
    html = (run / "report.html").read_text()
    # nocomm's place says in one line why it is empty (issue #22 C), not the loader's words
    assert "Mode: nocomm" in html and F.NOCOMM_EMPTY in html and "no device activity" not in html
    assert len(figure_specs(html)) == 1 + 2 * 5  # modes chart + tp and domino figures
    # a plain trace (no run around it) without device activity: same, exit 0
    plain = b.write(tmp_path / "rank0.pt.trace.json")
    res = CliRunner().invoke(app, ["report", str(plain), "-o", str(tmp_path / "n.html")])
    assert res.exit_code == 0, res.output
    assert "Not analysed:" in (tmp_path / "n.html").read_text()


def test_cli_compare(tmp_path):
    run = make_run_dir(tmp_path / "run")
    out = tmp_path / "diff.html"
    res = CliRunner().invoke(app, ["compare", str(run / "tp"), str(run / "domino"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    # labels default to the mode names; tp's C1 is 5 µs more exposed per step and rank
    assert "tp vs domino" in res.output and "-5.00" in res.output
    assert out.is_file()


@pytest.mark.parametrize("args, needle", [
    (["compare", "{run}", "{run}/tp", "--mode", "zero"], "--mode 'zero' is not in"),
    (["compare", "{run}/tp", "{run}/domino", "--mode", "tp"], "applies to a run directory"),
    (["compare", "{run}/tp", "{run}/domino", "--labels", "onlyone"], "--labels"),
    (["report", "{run}/nope"], "no such file"),
    (["report", "{run}/tp", "-o", "{run}"], "is a directory"),
])  # fmt: skip
def test_cli_bad_input(tmp_path, args, needle):
    run = make_run_dir(tmp_path / "run")
    res = CliRunner().invoke(app, [a.format(run=run) for a in args])
    assert res.exit_code == 2
    assert needle in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_cli_bad_run_json(tmp_path):
    (tmp_path / "run.json").write_text("{not json")
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2 and "run.json" in res.output


def test_cli_compare_of_runs_timed_differently_leaves_the_timed_step_out(tmp_path):
    """Two run directories whose timed steps were timed differently (run.json
    config.timing: absent = step, each alone; stream, back to back): compare says so in one
    note and shows no timed-step row; timed alike, the row is there."""
    import json

    a, b = make_run_dir(tmp_path / "a"), make_run_dir(tmp_path / "b")
    doc = json.loads((b / "run.json").read_text())
    doc["config"]["timing"] = "stream"
    (b / "run.json").write_text(json.dumps(doc))
    out = tmp_path / "c.html"
    res = CliRunner().invoke(app, ["compare", str(a), str(b), "--mode", "domino", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert ("timed steps not compared: A: domino's were timed each alone (--timing step), "
            "B: domino's back to back (--timing stream)") in res.output
    assert "timed step (ms)" not in res.output and "timed step (ms)" not in out.read_text()
    res = CliRunner().invoke(app, ["compare", str(a), str(a), "--mode", "domino", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "timed steps not compared" not in res.output and "timed step (ms)" in res.output
