"""Cross-rank matching with confidence: collectives that do not line up (different
counts, sizes, or ranks that profiled different steps) give no skew instead of a wrong
one, and no per-step figure exceeds its step (an invariant, checked on generated
lockstep traces and on the guard itself).

Builder times are µs; expected values are ns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_switches import load
from tracegen import TraceBuilder

from domino_prof.analysis.config import AnalysisConfig
from domino_prof.analysis.ranks import step_invariant_violations
from domino_prof.analysis.results import notes_about
from domino_prof.engine import analyze

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
NCCL_AG = "ncclDevKernel_AllGather_RING_LL"


def _rank(r: int, world: int, colls, *, steps=((6, 0, 100),), shift: float = 0.0) -> dict:
    """``colls``: (start, end, name, coll_name, nelems, pg) per collective (µs)."""
    b = TraceBuilder(rank=r, world_size=world)
    for n, t0, t1 in steps:
        b.step(n, t0 + shift, t1 + shift)
    for s, e, name, coll, nelems, pg in colls:
        args = {"Process Group Name": pg, "Collective name": coll}
        if nelems is not None:
            args["In msg nelems"] = nelems
        b.kernel(name, stream=13, start=s + shift, dur=e - s, launch=s + shift - 1, **args)
    return b.to_dict()


def _overheads(tmp_path, docs):
    trace, iv = load(tmp_path, docs=docs)
    return analyze(trace, AnalysisConfig()).overheads


def test_different_counts_are_left_out_not_paired_by_order(tmp_path):
    """Rank 1's profile missed the first of step 6's five all-reduces: by order, rank 0's
    k-th would be paired with rank 1's k-th, one collective apart. Counts differ, so the
    set is left out and, with nothing else to match, nothing is reported."""
    ar0 = [(10 + 20 * k, 15 + 20 * k, NCCL, "allreduce", 1024, "0") for k in range(5)]
    docs = {"rank0.json": _rank(0, 2, ar0), "rank1.json": _rank(1, 2, ar0[1:])}
    out = _overheads(tmp_path, docs)
    ar = out["across_ranks"]
    assert ar["computed"] is False
    assert ar["reason"] == "no collective could be matched with confidence across ranks"
    assert (
        "across ranks: left out, cannot be matched with confidence: 1 (group, collective, "
        "step) set(s) have different counts on different ranks (e.g. 'allreduce' in step 6: "
        "rank 0 5, rank 1 4)." in notes_about(out["notes"], "across_ranks")
    )
    assert not [f for f in out["findings"] if f["id"] == "rank_skew"]


def test_ranks_that_profiled_different_steps_report_no_skew(tmp_path):
    """Both files say ProfilerStep#5 and #6 (same counts, same sizes), but rank 1's were
    profiled 22.241 s later (its own schedule): on the one clock the kernels are far
    apart. Paired anyway, this reported a wait of ~22,241 ms per 0.1 ms step."""
    steps = ((5, 0, 100), (6, 100, 200))
    colls = [(t + 10, t + 20, NCCL, "allreduce", 1024, "0") for t in (0, 100)]
    docs = {
        "rank0.json": _rank(0, 2, colls, steps=steps),
        "rank1.json": _rank(1, 2, colls, steps=steps, shift=22_241_000.0),
    }
    out = _overheads(tmp_path, docs)
    ar = out["across_ranks"]
    assert ar["computed"] is False and ar["n_implausible"] == 2
    assert ar["reason"].startswith(
        "2 of 2 matched collectives do not overlap in time across ranks (e.g. 'allreduce': "
        "rank 1 starts 22240.990 ms after rank 0's kernel ended)"
    )
    assert "max_wait_ms_per_step" not in ar
    assert not [f for f in out["findings"] if f["id"] == "rank_skew"]


def test_size_mismatch_drops_that_group_only(tmp_path):
    """Step 6: two all-reduces whose second sizes disagree (2048 vs 4096 elements: the
    pairing is wrong), and one all-gather that agrees (starts 40 vs 43, ends 50): the
    all-reduces are left out, the all-gather gives skew 3 µs, late rank 1."""

    def colls(second: int, ag_start: float):
        return [
            (10, 20, NCCL, "allreduce", 1024, "0"),
            (25, 35, NCCL, "allreduce", second, "0"),
            (ag_start, 50, NCCL_AG, "allgather", 512, "0"),
        ]

    docs = {"rank0.json": _rank(0, 2, colls(2048, 40)), "rank1.json": _rank(1, 2, colls(4096, 43))}
    out = _overheads(tmp_path, docs)
    ar = out["across_ranks"]
    assert ar["computed"] is True and ar["n_instances"] == 1 and ar["n_left_out_groups"] == 1
    assert ar["skew"]["total_ns"] == 3_000 and ar["late_rank"] == 1
    (note,) = notes_about(out["notes"], "across_ranks")
    assert note.startswith("across ranks: left out, cannot be matched with confidence: ")
    assert "1 group(s) pair instances whose message sizes differ across ranks" in note
    assert "(e.g. 'allreduce': rank 0 2048, rank 1 4096)" in note


def test_concurrent_collectives_count_once_in_a_ranks_wait(tmp_path):
    """Two process groups reduce at the same time; rank 1 arrives 10 µs late to both.
    Rank 0 waits [10, 20) in each: its wait per step is the union, 10 µs, not 20."""

    def colls(s):
        return [(s, 30, NCCL, "allreduce", 64, "tp"), (s, 30, NCCL, "allreduce", 64, "dp")]

    out = _overheads(tmp_path, {"rank0.json": _rank(0, 2, colls(10)),
                                "rank1.json": _rank(1, 2, colls(20))})  # fmt: skip
    ar = out["across_ranks"]
    assert ar["n_instances"] == 2 and ar["skew"]["total_ns"] == 20_000
    strag = {s["rank"]: s for s in ar["stragglers"]}
    assert strag[0]["wait_ms_per_step"] == pytest.approx(0.010)
    assert ar["per_iteration"][0]["skew_total_ns"] == 10_000
    assert ar["skew_ms_per_step"] == pytest.approx(0.010)


@pytest.mark.parametrize("seed", range(8))
def test_no_per_step_figure_exceeds_its_step(tmp_path, seed):
    """Generated lockstep traces: 3 ranks, 2 steps, 4 all-reduces per step in group tp
    and 2 concurrent ones in group dp, each rank arriving with a random delay (a
    collective ends when the last rank has arrived plus a transfer). Every per-step
    figure must stay within its step: a rank's wait per step <= its wall, an
    iteration's skew <= the iteration's extent over ranks."""
    rng = np.random.default_rng(seed)
    world, docs = 3, {}
    plan = []  # (step, t0, [(pg, starts per rank, end)])
    for step, t0 in ((1, 0.0), (2, 1000.0)):
        colls, t = [], t0 + 10
        for k in range(4):
            starts = t + rng.integers(0, 40, size=world)
            end = starts.max() + rng.integers(2, 20)
            colls.append(("tp", starts, end))
            if k % 2 == 0:
                ds = t + rng.integers(0, 60, size=world)
                colls.append(("dp", ds, ds.max() + rng.integers(2, 20)))
            t = max(end, colls[-1][2]) + rng.integers(5, 50)
        plan.append((step, t0, colls))
    for r in range(world):
        b = TraceBuilder(rank=r, world_size=world)
        for step, t0, colls in plan:
            b.step(step, t0, t0 + 999)
            b.kernel("sm90_gemm", stream=7, start=t0 + 5, dur=3, launch=t0 + 1)
            for pg, starts, end in colls:
                s = float(starts[r])
                b.kernel(NCCL, stream=13 if pg == "tp" else 14, start=s, dur=float(end) - s,
                         launch=s - 1, **{"Process Group Name": pg,
                                          "Collective name": "allreduce"})  # fmt: skip
        docs[f"rank{r}.json"] = b.to_dict()
    trace, iv = load(tmp_path, docs=docs)
    ar = analyze(trace, AnalysisConfig()).overheads["across_ranks"]
    assert ar["computed"] is True and ar["n_instances"] == 12
    spans = (
        iv.loc[iv["iteration"] >= 0]
        .groupby(["rank", "iteration"])
        .agg(first=("start", "min"), last=("end", "max"))
    )
    walls = (spans["last"] - spans["first"]).groupby("rank").mean()
    for s in ar["stragglers"]:
        assert s["wait_ms_per_step"] * 1e6 <= walls[s["rank"]] + 1e-6
    ext = spans.groupby("iteration").agg(first=("first", "min"), last=("last", "max"))
    for it in ar["per_iteration"]:
        e = ext.loc[it["iteration"]]
        assert it["skew_total_ns"] <= e["last"] - e["first"]
        assert it["max_skew_ns"] <= it["skew_total_ns"]


def test_invariant_guard_names_the_figure_that_exceeds_its_step():
    """The guard itself, on figures that break it (what a wrong pairing produces)."""
    intervals = pd.DataFrame({"rank": [0, 0, 1], "iteration": [6, 6, 6],
                              "start": [0, 1_000_000, 0], "end": [500_000, 1_633_000, 1_633_000]})  # fmt: skip
    waits = pd.DataFrame({"rank": [0, 1], "iteration": [6, 6],
                          "wait_ns": [22_241_000_000, 0]})  # fmt: skip
    per_it = pd.DataFrame({"iteration": [6], "skew_total_ns": [22_241_000_000]})
    msgs = step_invariant_violations(waits, per_it, intervals, {0: 0, 1: 0})
    assert msgs == [
        "rank 0 would wait 22241.000 ms in step 6, whose wall is 1.633 ms",
        "step 6 would have 22241.000 ms of skew in 1.633 ms",
    ]
    ok = waits.assign(wait_ns=[1_000_000, 0])
    assert step_invariant_violations(ok, per_it.assign(skew_total_ns=[1_000_000]), intervals,
                                     {0: 0, 1: 0}) == []  # fmt: skip
