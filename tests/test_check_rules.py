"""Rule evaluation and baselines (domino_prof.analysis.baseline) on hand-built frames.

The fixture is an Analysis-shaped object whose frames are written out by hand
from the intervals below (U = 10 µs = 10_000 ns), so every expected number can
be checked on paper. The CLI tests (test_check_cli.py) run the same code on
real analyses of synthetic Kineto traces.
"""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from domino_prof.analysis.baseline import (
    CheckRules,
    evaluate,
    exit_code,
    figures,
    make_baseline,
    validate_baseline,
)
from domino_prof.errors import ConfigError

U = 10_000  # ns

# rank, device, start, end, kind, op, phase, iteration   (times in U; iteration -1 =
# launched outside any ProfilerStep window)
INTERVALS = [
    # rank 0, step 0: fwd comm [50,150) vs compute [0,100): C=100, H=50
    (0, 0, 0, 100, "compute", "fwd.a", "forward", 0),
    (0, 0, 50, 150, "comm", "fwd.a", "forward", 0),
    # rank 0, step 0: a second fwd op whose comm [60,120) runs concurrently with
    # fwd.a's. The union of fwd.a + fwd.c comm is still [50,150): C=100, H=50.
    (0, 0, 60, 120, "comm", "fwd.c", "forward", 0),
    # rank 0, step 1: bwd comm [220,260) inside compute [200,300): C=40, H=40
    (0, 0, 200, 300, "compute", "bwd.b", "backward", 1),
    (0, 0, 220, 260, "comm", "bwd.b", "backward", 1),
    # rank 0, outside steps: comm [600,610) with no compute: C=10, H=0
    (0, 0, 600, 610, "comm", "(none)", "other", -1),
    # rank 1, step 0: fwd comm [0,100) under compute [0,100): C=100, H=100
    (1, 0, 0, 100, "compute", "fwd.a", "forward", 0),
    (1, 0, 0, 100, "comm", "fwd.a", "forward", 0),
    # rank 1, step 1: bwd comm [300,400) with no compute at all: C=100, H=0
    (1, 0, 300, 400, "comm", "bwd.b", "backward", 1),
    # rank 1, step 1: optimizer compute only (an op without comm)
    (1, 0, 500, 520, "compute", "opt.step", "optimizer", 1),
]


def _pct(c: int, h: int) -> float:
    return 100.0 * h / c if c else math.nan


def _frame(rows: list[tuple], keys: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=[*keys, "comm_ns", "hidden_ns"])
    df["comm_ns"] = df["comm_ns"] * U
    df["hidden_ns"] = df["hidden_ns"] * U
    df["exposed_ns"] = df["comm_ns"] - df["hidden_ns"]
    df["hidden_pct"] = [_pct(c, h) for c, h in zip(df["comm_ns"], df["hidden_ns"])]
    return df


def fake_analysis() -> SimpleNamespace:
    cols = ["rank", "device", "start", "end", "kind", "op", "phase", "iteration"]
    iv = pd.DataFrame(INTERVALS, columns=cols)
    iv["start"] *= U
    iv["end"] *= U
    for c in ("kind", "op", "phase"):
        iv[c] = iv[c].astype("category")
    return SimpleNamespace(
        source="fake",
        mode="gpu",
        ranks=[0, 1],
        intervals=iv,
        # rank 0: C = 100 (fwd, union of a and c) + 40 + 10 = 150, H = 50 + 40 = 90
        # rank 1: C = 100 + 100 = 200, H = 100
        by_rank=_frame([(0, 150, 90), (1, 200, 100)], ["rank"]),
        by_phase=_frame(
            [
                (0, "forward", 100, 50),
                (0, "backward", 40, 40),
                (0, "other", 10, 0),
                (1, "forward", 100, 100),
                (1, "backward", 100, 0),
                (1, "optimizer", 0, 0),
            ],
            ["rank", "phase"],
        ),
        # per op: fwd.a on rank 0 is [50,150) vs [0,100): C=100, H=50;
        # fwd.c is [60,120) vs [0,100): C=60, H=40.
        by_op=_frame(
            [
                (0, "fwd.a", 100, 50),
                (0, "fwd.c", 60, 40),
                (0, "bwd.b", 40, 40),
                (0, "(none)", 10, 0),
                (1, "fwd.a", 100, 100),
                (1, "bwd.b", 100, 0),
                (1, "opt.step", 0, 0),
            ],
            ["rank", "op"],
        ),
        # per (rank, iteration): r0 it-1 C=10 H=0; r0 it0 C=100 H=50; r0 it1 C=40 H=40;
        # r1 it0 C=100 H=100; r1 it1 C=100 H=0
        by_iteration=_frame(
            [(0, -1, 10, 0), (0, 0, 100, 50), (0, 1, 40, 40), (1, 0, 100, 100), (1, 1, 100, 0)],
            ["rank", "iteration"],
        ),
        totals={"n_iterations": 2},
    )


def test_figures_read_frames_and_phases():
    a = fake_analysis()
    f = figures(a)
    assert f[0].hidden_pct == pytest.approx(60.0)  # 90 / 150
    assert f[1].hidden_pct == pytest.approx(50.0)
    # exposed per step: rank 0 steps 0 and 1 expose 50U + 0 = 500_000 ns over 2 steps
    # = 0.25 ms (the 10U outside any step are not a step's)
    assert f[0].exposed_ms_per_step == pytest.approx(0.25)
    assert f[1].exposed_ms_per_step == pytest.approx(0.5)  # 100U / 2 = 0.5 ms
    b = figures(a, phase="backward")
    assert b[0].hidden_pct == pytest.approx(100.0)
    assert b[1].hidden_pct == pytest.approx(0.0)
    assert figures(a, phase="optimizer")[1].hidden_pct is None  # no comm: undefined


def test_op_pattern_is_the_exact_union_not_a_sum():
    a = fake_analysis()
    # ^fwd\. on rank 0: comm fwd.a [50,150) ∪ fwd.c [60,120) = [50,150): C = 100U,
    # hidden by compute [0,100): H = 50U -> 50 %. (Summing by_op rows would give
    # C = 160U, H = 90U -> 56.25 %: concurrent comm counted twice.)
    f = figures(a, op_pattern=r"^fwd\.")
    assert (f[0].comm_ns, f[0].hidden_ns) == (100 * U, 50 * U)
    assert f[0].hidden_pct == pytest.approx(50.0)
    assert (f[1].comm_ns, f[1].hidden_ns) == (100 * U, 100 * U)
    # fwd.c alone: [60,120) ∩ [0,100) = 40U of 60U
    assert figures(a, op_pattern="fwd.c")[0].hidden_pct == pytest.approx(100 * 40 / 60)
    # "." finds every op, "(none)" included: the same figures as by_rank / by_iteration
    every, base = figures(a, op_pattern="."), figures(a)
    assert every == base
    # phase + pattern: only backward comm of ops matching "b$" -> bwd.b
    fb = figures(a, op_pattern="b$", phase="backward")
    assert fb[1].hidden_pct == pytest.approx(0.0) and fb[0].hidden_pct == pytest.approx(100.0)


def test_op_pattern_matching_nothing_is_an_error():
    a = fake_analysis()
    with pytest.raises(ConfigError, match="matches no op name"):
        figures(a, op_pattern="layer_mlp")
    # opt.step exists but launches no comm: still an error, not a pass
    with pytest.raises(ConfigError, match="none of them launches comm"):
        evaluate(a, CheckRules(min_hidden=10, op_pattern="opt"))
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        evaluate(a, CheckRules(min_hidden=10, op_pattern="(unclosed"))


def test_min_hidden_verdicts_and_exit_codes():
    a = fake_analysis()
    res = evaluate(a, CheckRules(min_hidden=60))
    # rank 0: 60 >= 60 holds (a floor is inclusive); rank 1: 50 < 60 fails
    assert [(r.rank, r.verdict) for r in res] == [(0, "pass"), (1, "fail")]
    assert exit_code(res) == 1
    assert exit_code(evaluate(a, CheckRules(min_hidden=50))) == 0  # 50 >= 50 holds
    # forward only: rank 0 50 %, rank 1 100 %
    res = evaluate(a, CheckRules(min_hidden=75, phase="forward"))
    assert [(r.rank, r.verdict, r.measured) for r in res] == [
        (0, "fail", pytest.approx(50.0)),
        (1, "pass", pytest.approx(100.0)),
    ]


def test_max_exposed_ms():
    a = fake_analysis()
    res = evaluate(a, CheckRules(max_exposed_ms=0.3))  # 0.25 ms pass, 0.5 ms fail
    assert [(r.rank, r.verdict) for r in res] == [(0, "pass"), (1, "fail")]
    assert [r.measured for r in res] == [pytest.approx(0.25), pytest.approx(0.5)]
    # backward only: rank 0 exposes 0, rank 1 100U = 1 ms over 2 steps = 0.5 ms
    res = evaluate(a, CheckRules(max_exposed_ms=0.5, phase="backward"))
    assert exit_code(res) == 0


def test_no_comm_in_selection_cannot_be_gated():
    a = fake_analysis()
    with pytest.raises(ConfigError, match="no comm kernels in phase 'optimizer'"):
        evaluate(a, CheckRules(min_hidden=10, phase="optimizer"))


def test_one_rank_without_comm_is_na_exit_2():
    a = fake_analysis()
    # forward ops on rank 1 only: rank 0 has "fwd.a" too, so use an op only rank 1 has.
    a.intervals.loc[a.intervals["rank"] == 1, "op"] = "fwd.a"  # rank 1: all comm is fwd.a
    a.intervals["op"] = a.intervals["op"].astype(str)
    a.intervals.loc[(a.intervals["rank"] == 1) & (a.intervals["kind"] == "comm"), "op"] = "only1"
    a.by_op.loc[a.by_op["rank"] == 1, "op"] = "only1"
    res = evaluate(a, CheckRules(min_hidden=10, op_pattern="only1"))
    assert [(r.rank, r.verdict) for r in res] == [(0, "n/a"), (1, "pass")]
    assert "no comm kernels: hidden % is n/a" in res[0].message
    assert exit_code(res) == 2


def test_rules_need_at_least_one_and_pairs():
    # the library names its options as Python keywords; the CLI renders them as flags
    with pytest.raises(ConfigError, match="no rule given: pass at least one of min_hidden") as e:
        CheckRules()
    assert e.value.render(cli=True) == (
        "no rule given: pass at least one of --min-hidden PCT, --max-exposed-ms MS, "
        "--max-critical-comm MS, --baseline FILE --max-drop PP"
    )
    with pytest.raises(ConfigError, match="go together"):
        CheckRules(max_drop=2)
    with pytest.raises(ConfigError, match="go together"):
        CheckRules(baseline={"per_rank": {}})
    with pytest.raises(ConfigError, match="not a percentage"):
        CheckRules(min_hidden=120)


def test_baseline_round_trip_and_drop():
    a = fake_analysis()
    doc = make_baseline(a)
    assert doc["schema"] == "domino-prof/baseline" and doc["version"] == 1
    text = json.dumps(doc, allow_nan=False)  # no NaN anywhere
    doc = validate_baseline(json.loads(text))
    assert doc["per_rank"]["0"]["hidden_pct"] == pytest.approx(60.0)
    assert doc["per_phase"]["1"]["backward"]["hidden_pct"] == 0.0
    assert "optimizer" not in doc["per_phase"]["1"]  # no comm: not stored
    assert set(doc["per_op"]["0"]) == {"fwd.a", "fwd.c", "bwd.b", "(none)"}
    # same analysis against its own baseline: every drop is 0 -> pass
    res = evaluate(a, CheckRules(baseline=doc, max_drop=0))
    assert exit_code(res) == 0
    kinds = [(r.rule, r.rank, r.scope) for r in res]
    assert kinds == [
        ("rank present", 0, "all"), ("rank present", 1, "all"),
        ("hidden drop", 0, "all"), ("hidden drop", 1, "all"),
        ("hidden drop", 0, "forward"), ("hidden drop", 1, "forward"),
        ("hidden drop", 0, "backward"), ("hidden drop", 1, "backward"),
        ("hidden drop", 0, "other"), ("hidden drop", 1, "other"),
    ]  # fmt: skip
    # rank 1 has no "other" comm in the baseline: nothing to compare, reported as skip
    assert res[-1].verdict == "skip" and res[-2].verdict == "pass"
    # Raise the baseline's rank 1 backward figure to 3 %: now 0 % is a 3-point drop.
    doc["per_phase"]["1"]["backward"]["hidden_pct"] = 3.0
    res = evaluate(a, CheckRules(baseline=doc, max_drop=2.5))
    bad = [r for r in res if r.verdict == "fail"]
    assert [(r.rank, r.scope) for r in bad] == [(1, "backward")]
    assert bad[0].limit == pytest.approx(0.5)  # 3 - 2.5
    assert exit_code(evaluate(a, CheckRules(baseline=doc, max_drop=3))) == 0  # exactly 3 ok


def test_baseline_missing_rank_fails():
    a = fake_analysis()
    doc = make_baseline(a)
    doc["per_rank"]["2"] = dict(doc["per_rank"]["1"])
    res = evaluate(a, CheckRules(baseline=doc, max_drop=5))
    missing = [r for r in res if r.rule == "rank present" and r.verdict == "fail"]
    assert [r.rank for r in missing] == [2]
    assert exit_code(res) == 1


def test_baseline_per_op_with_pattern():
    a = fake_analysis()
    doc = make_baseline(a)
    doc["per_op"]["0"]["fwd.c"]["hidden_pct"] = 80.0  # now 66.67 %: a 13.3-point drop
    res = evaluate(a, CheckRules(baseline=doc, max_drop=10, op_pattern="fwd"))
    drops = [(r.rank, r.scope, r.verdict) for r in res if r.rule == "hidden drop"]
    assert drops == [(0, "op fwd.a", "pass"), (0, "op fwd.c", "fail"), (1, "op fwd.a", "pass")]
    with pytest.raises(ConfigError, match="matches no op name in the baseline"):
        evaluate(a, CheckRules(baseline=doc, max_drop=10, op_pattern="zzz"))


@pytest.mark.parametrize(
    ("doc", "msg"),
    [
        ({"schema": "domino-prof/analysis", "version": 1}, "not a domino-prof baseline"),
        ([1, 2], "not a domino-prof baseline"),
        ({"schema": "domino-prof/baseline", "version": 2}, "baseline version 2 is not supported"),
        ({"schema": "domino-prof/baseline", "version": 1, "per_rank": {}}, "no 'per_phase'"),
        (
            {"schema": "domino-prof/baseline", "version": 1, "per_phase": {}, "per_op": {},
             "per_rank": {"0": {"hidden_pct": "high"}}},
            "per_rank['0'] is malformed",
        ),
    ],
)  # fmt: skip
def test_malformed_baseline(doc, msg):
    with pytest.raises(ConfigError, match=re.escape(msg)):
        validate_baseline(doc, source="b.json")


def test_no_nan_in_results():
    a = fake_analysis()
    for r in evaluate(a, CheckRules(min_hidden=0, max_exposed_ms=10)):
        assert r.measured is None or np.isfinite(r.measured)


def test_selections_use_the_analysis_compute_reference_on_cpu_traces(tmp_path):
    """A CPU (gloo) trace: its compute reference is not the union of its compute rows
    (a wrapper op hides comm only through its children). The gate's selections
    (phase, op pattern) measure against the analysis' own reference, so they give
    the numbers analyze prints. Times µs:

        main thread: ColumnParallelFnBackward [0, 100) (a wrapper: it has children)
                       aten::mm [10, 20)
                       bwd.x annotation [24, 28) holding c10d::allreduce_ [25, 27)
        runloop 77:  gloo:all_reduce [30, 60)  -> nothing computes then: 0 of 30 hidden
    """
    from tracegen import TraceBuilder

    from domino_prof.engine import analyze
    from domino_prof.trace import load_trace

    b = TraceBuilder(rank=0, world_size=1, backend="gloo")
    b.thread_name(77, "pt_gloo_runloop")
    b.step(1, 0, 100)
    b.cpu("ColumnParallelFnBackward", 0, 100)
    b.cpu("aten::mm", 10, 10)
    b.annotation("bwd.x", 24, 4)
    b.cpu("c10d::allreduce_", 25, 2)
    b.annotation("gloo:all_reduce", 30, 30, tid=77)
    a = analyze(load_trace(b.write(tmp_path / "rank0.pt.trace.json")))
    assert a.mode == "cpu"
    assert a.by_rank[["comm_ns", "hidden_ns"]].values.tolist() == [[30_000, 0]]
    for kw in ({}, {"op_pattern": "bwd"}, {"phase": "backward"}):
        f = figures(a, **kw)[0]
        assert (f.comm_ns, f.hidden_ns, f.step_exposed_ns) == (30_000, 0, 30_000), kw
    res = evaluate(a, CheckRules(min_hidden=1, op_pattern="bwd"))
    assert [(r.measured, r.verdict) for r in res] == [(0.0, "fail")]
