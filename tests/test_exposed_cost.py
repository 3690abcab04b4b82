"""Exposed comm's step cost (docs/METRICS.md, Overlap, "Extension (issue 33): exposed
comm's step cost") on hand-built traces, and the limits decomposition that uses it.

Builder times are µs, expected values ns (x1000). Compute runs on stream 7, comm (an NCCL
all-reduce kernel) on stream 13. Every kernel is launched at the step's start (0.01 µs
apart), long before the stream frees, so no gap is host-bound unless a test launches a
kernel late on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_switches import load
from tracegen import TraceBuilder

from domino_prof.analysis.config import AnalysisConfig
from domino_prof.analysis.exposed_cost import MIN_BUBBLES, step_gaps
from domino_prof.analysis.limits import limits
from domino_prof.analysis.reference import ComputeReference
from domino_prof.engine import analyze

COMM = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
HEADLINE = (Path(__file__).resolve().parents[1] / "reports" / "emulated-h200-fidelity-2026-12-03"
            / "graphs-paced")  # fmt: skip


class Rank:
    """A TraceBuilder whose kernels are launched early (at ``launch0`` + 0.01 µs each)."""

    def __init__(self) -> None:
        self.b = TraceBuilder(rank=0)
        self.n = 0

    def k(self, start, dur, *, comm=False, launch=None, launch0=0.0):
        self.n += 1
        at = launch0 + 0.01 * self.n if launch is None else launch
        self.b.kernel(COMM if comm else f"gemm_{self.n}", stream=13 if comm else 7,
                      start=start, dur=dur, launch=at, launch_dur=0.005)  # fmt: skip

    def bubbles(self, first, n):
        """``n`` + 1 compute kernels of 1 µs from ``first``, 0.5 µs apart: n bubbles."""
        for i in range(n + 1):
            self.k(first + 1.5 * i, 1)


def _totals(tmp_path, r: Rank):
    trace, _iv = load(tmp_path, r.b)
    a = analyze(trace, AnalysisConfig())
    return a.totals, a.overheads["launches"]


def test_a_waited_gap_costs_its_exposed_comm_and_bubbles_cost_nothing(tmp_path):
    """One step, window [10, 61):

    c0..c20 at 10 + 1.5 i: 20 gaps of 500 without comm -> bubble b = 500 (MIN_BUBBLES)
    comm1 [40, 50); c21 at 51: gap [41, 51) = 10000 holds e = 9000 (comm1's [40, 41) is
      under c20): the next kernel waited; cost min(9000, 10000 - 500) = 9000
    c21..c25 at 51 + 1.5 j, comm2 [51.5, 57.5) over them: it is exposed in 4 bubbles of
      500 (e = 2000); each costs min(500, 500 - 500) = 0
    comm3 [58, 60), c26 [60, 61): gap [58, 60) = 2000, e = 2000: cost 2000 - 500 = 1500
    exposed 9000 + 2000 + 2000 = 13000; cost 9000 + 0 + 1500 = 10500, over 6 gaps
    """
    r = Rank()
    r.bubbles(10, 20)
    r.k(40, 10, comm=True)
    for j in range(5):
        r.k(51 + 1.5 * j, 1)
    r.k(51.5, 6, comm=True)
    r.k(58, 2, comm=True)
    r.k(60, 1)
    r.b.step(1, 0, 100)
    t, _ = _totals(tmp_path, r)
    assert t["exposed_ms_per_step"] == pytest.approx(13_000 / 1e6)
    assert t["exposed_cost_ms_per_step"] == pytest.approx(10_500 / 1e6)
    c = t["exposed_cost"]
    assert (c["measured"], c["reason"], c["bubble_us"]) == (True, None, 0.5)
    assert (c["n_bubbles"], c["n_gaps"], c["n_rank_steps"]) == (MIN_BUBBLES, 6, 1)
    assert c["per_rank"] == [{"rank": 0, "exposed_cost_ms_per_step": pytest.approx(0.0105),
                              "bubble_us": 0.5, "n_bubbles": 20, "n_gaps": 6,
                              "reason": None}]  # fmt: skip
    assert list(t).index("exposed_cost_ms_per_step") == list(t).index("exposed_ms_per_step") + 1


def test_edges_host_waits_and_steps(tmp_path):
    """Step 1, window [5, 58):

    comm0 [5, 10) before c0: a lead edge gap [5, 10), e = 5000, no bubble: cost 5000
    c0..c20 at 10 + 1.5 i: 20 bubbles of 500
    comm1 [41, 45); c21 launched at 47 (after c20 ended at 41: host-bound), runs [49, 50):
      gap [41, 49) = 8000, e = 4000, host-bound device idle [45, 49) = 4000:
      cost min(4000, 8000 - 500 - 4000) = 3500
    c22 launched at 52 (host-bound, after c21's end), runs [53, 54): gap [50, 53) holds
      no comm but a host wait: not a bubble (20 bubbles, not 21)
    comm2 [54, 58) after the last compute: a tail edge gap, e = 4000: cost 4000
    step 1: exposed 13000, cost 12500, host-bound device idle 4000 + 3000
    Step 2, window [110, 114): c'0..c'2, no comm: 2 more bubbles, cost 0
    per step: exposed 6500, cost 6250; 22 bubbles, 3 gaps with exposed comm
    """
    r = Rank()
    r.k(5, 5, comm=True)
    r.bubbles(10, 20)
    r.k(41, 4, comm=True)
    r.k(49, 1, launch=47)
    r.k(53, 1, launch=52)
    r.k(54, 4, comm=True)
    for k in range(3):
        r.k(110 + 1.5 * k, 1, launch0=100)
    r.b.step(1, 0, 100)
    r.b.step(2, 100, 200)
    t, la = _totals(tmp_path, r)
    steps = {x["iteration"]: x["host_bound_device_idle_ns"] for x in la["per_iteration"]}
    assert steps == {1: 7_000, 2: 0}
    assert t["exposed_ms_per_step"] == pytest.approx(6_500 / 1e6)
    assert t["exposed_cost_ms_per_step"] == pytest.approx(6_250 / 1e6)
    c = t["exposed_cost"]
    assert (c["bubble_us"], c["n_bubbles"], c["n_gaps"], c["n_rank_steps"]) == (0.5, 22, 3, 2)


def test_a_gap_holding_a_memcpy_costs_only_its_idle_beyond_the_bubble(tmp_path):
    """Memory ops on the compute stream are device work, not idle (mem_g). One step,
    window [10, 54):

    c0..c20 at 10 + 1.5 i: 20 bubbles of 500 -> b = 500
    memcpy [41.5, 44.5) on the compute stream 7, comm1 [41, 46) on 13, c21 [46.5, 47.5):
      gap [41, 46.5) = 5500, e = 5000, mem_g = 3000:
      cost min(5000, 5500 - 500 - 3000) = 2000 (5000 before mem_g)
    memset [47.8, 48.3) on stream 7, c22 [49, 50): gap [47.5, 49) holds no comm but a
      memory op: not a bubble (20 bubbles, not 21)
    memcpy [50, 50.5) on the comm stream 13 (no compute there: not mem_g), comm2
      [50.5, 53) on 13, c23 [53, 54): gap [50, 53) = 3000, e = 2500:
      cost min(2500, 3000 - 500) = 2500
    exposed 5000 + 2500 = 7500; cost 2000 + 2500 = 4500, over 2 gaps
    """
    r = Rank()
    r.bubbles(10, 20)
    r.b.memcpy(stream=7, start=41.5, dur=3, launch=0.005)
    r.k(41, 5, comm=True)
    r.k(46.5, 1)
    r.b.kernel("Memset (Device)", stream=7, start=47.8, dur=0.5, launch=0.006,
               launch_name="cudaMemsetAsync", cat="gpu_memset")  # fmt: skip
    r.k(49, 1)
    r.b.memcpy(stream=13, start=50, dur=0.5, launch=0.007)
    r.k(50.5, 2.5, comm=True)
    r.k(53, 1)
    r.b.step(1, 0, 100)
    t, la = _totals(tmp_path, r)
    assert [x["host_bound_device_idle_ns"] for x in la["per_iteration"]] == [0]
    assert t["exposed_ms_per_step"] == pytest.approx(7_500 / 1e6)
    assert t["exposed_cost_ms_per_step"] == pytest.approx(4_500 / 1e6)
    c = t["exposed_cost"]
    assert (c["measured"], c["bubble_us"], c["n_bubbles"], c["n_gaps"]) == (True, 0.5, 20, 2)


def test_too_few_bubbles_is_not_measured_and_no_comm_costs_nothing(tmp_path):
    """The first trace above without c0: 19 bubbles (< 20): not measured, said why. A
    trace without comm and 2 gaps: cost 0 (nothing exposed), its bubble not measured."""
    r = Rank()
    r.bubbles(11.5, 19)
    r.k(40, 10, comm=True)
    r.k(51, 1)
    r.b.step(1, 0, 100)
    (tmp_path / "a").mkdir()
    t, _ = _totals(tmp_path / "a", r)
    assert t["exposed_ms_per_step"] == pytest.approx(9_000 / 1e6)
    assert t["exposed_cost_ms_per_step"] is None
    c = t["exposed_cost"]
    assert (c["measured"], c["bubble_us"], c["n_bubbles"]) == (False, None, 19)
    assert c["reason"].startswith("rank 0: 19 gap(s) between compute kernels hold no comm")
    r = Rank()
    r.bubbles(10, 2)
    r.b.step(1, 0, 100)
    t, _ = _totals(tmp_path, r)
    assert t["exposed_cost_ms_per_step"] == 0.0
    c = t["exposed_cost"]
    assert (c["measured"], c["reason"], c["bubble_us"], c["n_bubbles"]) == (True, None, None, 2)


def test_step_gaps_cut_at_the_window():
    """Compute [0, 10), [20, 30), [40, 50) on one device; windows (ns):
    [5, 45): compute at both ends -> interior [10, 20), [30, 40), no edge gap
    [12, 35): lead edge [12, 20), interior none, tail edge [30, 35)
    [60, 70): no compute -> one edge gap; [70, 70): empty -> no gap
    """
    ref = ComputeReference(np.zeros(3, np.int64), np.zeros(3, np.int64),
                           np.array([0, 20, 40]), np.array([10, 30, 50]))  # fmt: skip
    w = pd.DataFrame({"rank": 0, "device": 0, "iteration": [1, 2, 3, 4],
                      "start": [5, 12, 60, 70], "end": [45, 35, 70, 70]})  # fmt: skip
    g = step_gaps(ref, w)
    assert list(zip(g["iteration"], g["start"], g["end"], g["interior"])) == [
        (1, 10, 20, True), (1, 30, 40, True), (2, 12, 20, False), (2, 30, 35, False),
        (3, 60, 70, False)]  # fmt: skip


# ------------------------------------------------------------ the limits decomposition
def _doc(step_ms, exposed, time_ms, *, cost=None, bubble=None, idle_ms=None, reason=None):
    """An analysis document: one gemm class, its compute ``time_ms`` per step."""
    tax = {"n_rank_steps": 1, "tax_ms_per_step": 0.0, "classes": {
        "keys": ["gemm @ fwd.layer_mlp_N_batch_N"], "rank": [0], "key": [0], "n": [4],
        "sum_ns": [int(time_ms * 1e6)], "n_alone": [4], "alone_ns": [int(time_ms * 1e6)],
        "alone_median_ns": [time_ms * 1e6 / 4], "f_sum": [0.0]}}  # fmt: skip
    totals = {"step_ms": step_ms, "exposed_ms_per_step": exposed, "n_iterations": 1}
    if cost is not None or reason is not None:
        totals["exposed_cost_ms_per_step"] = cost
        totals["exposed_cost"] = {"measured": cost is not None, "reason": reason,
                                  "bubble_us": bubble}  # fmt: skip
    ov = {"whatif": {"overlap_tax": tax}}
    if idle_ms is not None:
        ov["launches"] = {"computed": True, "host_bound_device_idle_ms_per_step": idle_ms}
    return {"ranks": [0], "totals": totals, "overheads": ov,
            "by_op": {"rank": [], "op": [], "exposed_ns": []}}  # fmt: skip


RUN = {"modes": {"domino": {"step_ms": 110.0}, "nocomm": {"step_ms": 99.0}}}


def test_limits_take_the_step_cost_as_the_exposed_part():
    # domino 112 ms, compute 10 (gemm, 4 runs: tax 10 - 4 x 8/4 = 2 against domino-nocomm's
    # 8); domino-nocomm 106, nocomm 100. gap 12 = split 6 + cost 3.5 + tax 2 + host
    # (4.0 - 3.5 = 0.5) + residual 0. Exposed comm 5 (1.5 of it in bubbles). Cross-check:
    # idle added (112 - 10) - (106 - 8) = 4, less host 0.5: 3.5, so 5 - 3.5 = 1.5 of the
    # exposed comm lies where domino-nocomm idles too, as much as the bubbles hold
    dom = _doc(112.0, 5.0, 10.0, cost=3.5, bubble=0.42, idle_ms=4.0)
    dnc = _doc(106.0, 0.0, 8.0, cost=0.0, bubble=0.41, idle_ms=3.5)
    noc = _doc(100.0, 0.0, 7.0, cost=0.0, idle_ms=1.0)
    d = limits(RUN, {"domino": dom, "nocomm": noc, "domino-nocomm": dnc})
    assert (d["exposed_comm_ms"], d["exposed_cost_ms"], d["exposed_bubble_us"]) == (5.0, 3.5, 0.42)
    assert d["overlap_tax_ms"] == pytest.approx(2.0) and d["host_ms"] == pytest.approx(0.5)
    assert d["residual_ms"] == pytest.approx(0.0, abs=1e-12) and d["adds_up"] is True
    assert d["exposed_in_split_gaps_ms"] == pytest.approx(1.5)
    assert ("exposed comm 5.00 ms, of which 3.50 ms added to the step (the rest, 1.50 ms, lay "
            "in kernel-to-kernel bubbles of 0.42 µs or beside memory ops on the compute "
            "stream, which a step without comm has too)"
            ) in d["text"]  # fmt: skip
    assert (
        "cross-check: domino's device idle beyond domino-nocomm's, less the host's, is "
        "3.50 ms, so 1.50 ms of the exposed comm lay where domino-nocomm's device idles "
        "too, against the 1.50 ms the step cost leaves in bubbles and beside memory ops."
    ) in d["text"]
    # a cost of 4.5 leaves 0.5 in bubbles; the identity says 1.5: residual -1, > 0.6
    d = limits(RUN, {"domino": _doc(112.0, 5.0, 10.0, cost=4.5, bubble=0.42, idle_ms=4.0),
                     "nocomm": noc, "domino-nocomm": dnc})  # fmt: skip
    assert d["residual_ms"] == pytest.approx(-1.0) and d["adds_up"] is False
    assert (
        "against the 0.50 ms the step cost leaves in bubbles and beside memory ops: "
        "1.00 ms of the step cost "
        "lies in domino-nocomm's own gaps, so it is in two parts"
    ) in d["text"]
    # not measured (too few bubbles): the exposed comm is the part, with the reason
    why = "rank 0: 3 gap(s) between compute kernels hold no comm"
    d = limits(RUN, {"domino": _doc(112.0, 5.0, 10.0, reason=why, idle_ms=4.0),
                     "nocomm": noc, "domino-nocomm": dnc})  # fmt: skip
    assert d["exposed_cost_ms"] is None and d["residual_ms"] == pytest.approx(-1.5)
    assert (
        f"exposed comm 5.00 ms (its step cost not measured: {why}; the exposed comm is "
        "the part)" in d["text"]
    )
    assert "of the exposed comm, 1.50 ms fell where domino-nocomm's device is idle" in d["text"]
    # the report's table: exposed comm and, as the part, its step cost
    from domino_prof.report.figures import domino_limits

    sec = domino_limits(RUN, {"domino": dom, "nocomm": noc, "domino-nocomm": dnc})
    rows = [(r[0].split(" (")[0], r[1]) for r in sec.body.rows]
    assert rows[2:4] == [("exposed comm", "5.00 ms"), ("exposed comm's step cost", "3.50 ms")]
    assert "0.42 µs kernel-to-kernel bubbles" in sec.body.rows[3][0]


REANALYSED = [HEADLINE] + [HEADLINE.parents[1] / "emulated-h200-2026-12-03b" / n for n in (
    "graphs-paced", "eager-paced", "graphs-8b", "eager-8b", "graphs-mbs4", "graphs-8b-mbs4")
] + sorted(
    (HEADLINE.parents[1] / "emulated-h200-2026-12-03b" / "table").glob("*-r1"))  # fmt: skip


@pytest.mark.parametrize("run_dir", REANALYSED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_committed_run_json_is_what_limits_gives_its_analyses(run_dir):
    """run.json's limits of each re-analysed committed run is limits() of its committed
    analyses (so the committed figures are this code's, the step cost with mem_g), and
    the parts sum to the gap."""
    run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    docs = {f.parent.name: json.loads(f.read_text(encoding="utf-8"))
            for f in run_dir.glob("*/analysis.json")}  # fmt: skip
    d = json.loads(json.dumps(limits(run, docs)))
    assert d == run["limits"]
    assert d["exposed_cost_ms"] == docs["domino"]["totals"]["exposed_cost_ms_per_step"]
    assert 0 < d["exposed_cost_ms"] < d["exposed_comm_ms"]
    parts = d["split_ms"] + d["exposed_cost_ms"] + d["overlap_tax_ms"] + d["host_ms"]
    assert d["residual_ms"] == pytest.approx(d["gap_ms"] - parts)
    assert d["adds_up"] == (abs(d["residual_ms"]) <= 0.05 * d["gap_ms"])
