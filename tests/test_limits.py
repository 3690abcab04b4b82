"""analysis.limits without domino-nocomm (the remainder method): the profiled step gap of
domino to nocomm split into exposed comm, overlap tax, host and the rest (docs/METRICS.md,
Extension: what limits domino; the measured method, with domino-nocomm, is checked in
tests/test_overlap_tax_fraction.py). Hand-worked documents: every expected number below
is worked out in its comment."""

from __future__ import annotations

import pytest

from domino_prof.analysis.limits import limits, top_exposed


def doc(step_ms, exposed, tax, by_op=None, ranks=(0, 1), steps=2):
    return {"ranks": list(ranks),
            "totals": {"step_ms": step_ms, "exposed_ms_per_step": exposed,
                       "n_iterations": steps},
            "overheads": {"whatif": {"overlap_tax": {"tax_ms_per_step": tax}}},
            "by_op": by_op or {"rank": [], "op": [], "exposed_ns": []}}  # fmt: skip


RUN = {"modes": {"domino": {"step_ms": 110.0}, "nocomm": {"step_ms": 99.0}}}


def test_gap_splits_into_exposed_tax_and_rest():
    # by_op: two ranks x two steps. layer ops: attn_0_batch_0 exposes 4 + 2 = 6 ms over the
    # 4 rank-steps -> 1.5 ms; mlp_1_batch_1 2 ms -> 0.5; attn_1_batch_0 0.4 -> 0.1; the
    # optimizer's row is no layer op and is left out, whatever its size
    by_op = {"rank": [0, 1, 0, 0, 1],
             "op": ["fwd.layer_attn_0_batch_0", "fwd.layer_attn_0_batch_0",
                    "bwd.layer_mlp_1_batch_1", "optimizer", "fwd.layer_attn_1_batch_0"],
             "exposed_ns": [4_000_000, 2_000_000, 2_000_000, 9_000_000, 400_000]}  # fmt: skip
    d = limits(RUN, {"domino": doc(112.0, 3.0, 1.5, by_op), "nocomm": doc(100.0, 0.0, None)})
    # gap 112 - 100 = 12 = exposed 3 + tax 1.5 + rest 7.5
    assert (d["method"], d["split_mode"], d["residual_ms"], d["adds_up"]) == (
        "remainder", None, None, None)
    assert d["gap_ms"] == pytest.approx(12.0)
    assert (d["exposed_comm_ms"], d["overlap_tax_ms"]) == (3.0, 1.5)
    assert d["rest_ms"] == pytest.approx(7.5)
    assert [(t["op"], t["exposed_ms_per_step"]) for t in d["top_exposed"]] == [
        ("fwd.layer_attn_0_batch_0", pytest.approx(1.5)),
        ("bwd.layer_mlp_1_batch_1", pytest.approx(0.5)),
        ("fwd.layer_attn_1_batch_0", pytest.approx(0.1))]  # fmt: skip
    assert d["timed_of_bound"] == pytest.approx(99.0 / 110.0)
    assert "0.900 of nocomm's speed" in d["text"] and "the rest 7.50 ms" in d["text"]


def test_no_tax_measured_is_said_and_counts_zero_in_the_rest():
    d = limits(RUN, {"domino": doc(105.0, 2.0, None), "nocomm": doc(100.0, 0.0, None)})
    assert d["overlap_tax_ms"] is None and d["rest_ms"] == pytest.approx(3.0)
    assert "overlap tax not measured" in d["text"]


def test_a_run_without_either_mode_has_no_limits():
    assert limits(RUN, {"domino": doc(105.0, 2.0, None)}) is None
    assert limits(RUN, {"nocomm": doc(100.0, 0.0, None)}) is None
    nostep = doc(None, 2.0, None)
    assert limits(RUN, {"domino": nostep, "nocomm": doc(100.0, 0.0, None)}) is None


def test_top_exposed_divides_by_ranks_and_steps():
    one = doc(1.0, 0.0, None, {"rank": [0], "op": ["bwd.layer_attn_3_batch_2"],
                               "exposed_ns": [3_000_000]}, ranks=(0,), steps=3)  # fmt: skip
    assert top_exposed(one) == [{"op": "bwd.layer_attn_3_batch_2", "exposed_ms_per_step": 1.0}]


def test_report_section_lists_the_parts():
    from domino_prof.report.figures import domino_limits

    sec = domino_limits(RUN, {"domino": doc(112.0, 3.0, 1.5), "nocomm": doc(100.0, 0.0, None)})
    assert sec.title == "What limits domino here"
    assert [r[1] for r in sec.body.rows] == ["12.00 ms", "3.00 ms", "1.50 ms", "7.50 ms"]
    sec = domino_limits(RUN, {"domino": with_host(doc(112.0, 3.0, 1.5), 4.0),
                              "nocomm": with_host(doc(100.0, 0.0, None), 1.5)})  # fmt: skip
    assert [r[1] for r in sec.body.rows] == ["12.00 ms", "3.00 ms", "1.50 ms", "2.50 ms",
                                             "5.00 ms"]  # fmt: skip
    assert domino_limits(RUN, {"domino": doc(112.0, 3.0, 1.5)}) is None


def with_host(d, idle_ms, graphs_ms=None):
    """``d`` with a launches block (device idle waiting for launches) and, optionally,
    the what-if's CUDA-graph scenario."""
    d = dict(d)
    ov = dict(d["overheads"])
    ov["launches"] = {"computed": True, "host_bound_device_idle_ms_per_step": idle_ms}
    if graphs_ms is not None:
        ov["whatif"] = dict(ov["whatif"], scenarios=[
            {"name": "measured", "step_ms": d["totals"]["step_ms"]},
            {"name": "cuda_graphs", "step_ms": graphs_ms}])  # fmt: skip
    d["overheads"] = ov
    return d


def test_host_idle_beyond_the_bound_is_its_own_part():
    # gap 112 - 100 = 12 = exposed 3 + tax 1.5 + host (4.0 - 1.5 = 2.5) + rest 5
    d = limits(RUN, {"domino": with_host(doc(112.0, 3.0, 1.5), 4.0),
                     "nocomm": with_host(doc(100.0, 0.0, None), 1.5)})  # fmt: skip
    assert d["host_ms"] == pytest.approx(2.5) and d["rest_ms"] == pytest.approx(5.0)
    assert d["host_idle_ms"] == {"domino": 4.0, "nocomm": 1.5}
    assert d["host_is_the_limit"] is False  # the rest (5) is larger
    assert "host 2.50 ms" in d["text"] and "The host is the limit" not in d["text"]
    # one side unmeasured (a CPU trace has no launches): no host part, the rest keeps it
    d = limits(RUN, {"domino": with_host(doc(112.0, 3.0, 1.5), 4.0),
                     "nocomm": doc(100.0, 0.0, None)})  # fmt: skip
    assert d["host_ms"] is None and d["rest_ms"] == pytest.approx(7.5)
    assert "host " not in d["text"].replace("the host", "")


def test_a_host_bound_domino_says_so():
    # the full-depth emulated tp-8 eager shape: gap 177 = exposed 41.8 + tax 0.1 + host
    # (176.7 - 50.0 = 126.7) + rest 8.4; host is the largest part
    run = {"modes": {"domino": {"step_ms": 183.0}, "nocomm": {"step_ms": 69.1},
                     "tp": {"step_ms": 99.9}}}  # fmt: skip
    d = limits(run, {"domino": with_host(doc(284.4, 41.8, 0.1), 176.7, graphs_ms=100.0),
                     "nocomm": with_host(doc(107.4, 0.0, None), 50.0, graphs_ms=58.0),
                     "tp": with_host(doc(120.0, 30.0, None), 60.0, graphs_ms=110.0)})  # fmt: skip
    assert d["host_ms"] == pytest.approx(126.7)
    assert d["rest_ms"] == pytest.approx(177.0 - 41.8 - 0.1 - 126.7)
    assert d["host_is_the_limit"] is True
    assert d["text"].startswith("The host is the limit: the device waits for domino's "
                                "launches 176.70 ms per profiled step (nocomm: 50.00).")
    assert d["text"].endswith("CUDA graphs (--cuda-graphs) take the host off the step.")
    # no predicted graphs step is printed (the module doc says why), though the analyses
    # carry the what-if's cuda_graphs scenario
    assert "100.0" not in d["text"] and "predict" not in d["text"]


def test_a_profiled_step_far_from_the_timed_one_is_said():
    """profiled / timed step per mode (``profiled_over_timed``): further than 0.15 from 1
    for either, the text says the parts split the profiled step's gap, not the timed
    steps'. Here domino's profiled step 150 ms against its timed 110 (1.364), nocomm's 100
    against 99 (1.010): the profiled gap 50 ms, the timed 11."""
    d = limits(RUN, {"domino": doc(150.0, 3.0, 1.5), "nocomm": doc(100.0, 0.0, None)})
    assert d["profiled_over_timed"] == {"domino": pytest.approx(150 / 110),
                                        "nocomm": pytest.approx(100 / 99)}  # fmt: skip
    assert ("The profiled steps are not the timed ones (profiled / timed step: domino 1.36, "
            "nocomm 1.01): the parts split the profiled step's gap of 50.00 ms, not the timed "
            "steps' 11.00 ms; read them as where the profiled step's time went.") in d["text"]
    # faster when profiled counts too (a host-bound eager run's device wall: 88 against 110)
    d = limits(RUN, {"domino": doc(88.0, 3.0, 1.5), "nocomm": doc(80.0, 0.0, None)})
    assert "(profiled / timed step: domino 0.80, nocomm 0.81)" in d["text"]
    # within 0.15 of the timed one: nothing said
    d = limits(RUN, {"domino": doc(112.0, 3.0, 1.5), "nocomm": doc(100.0, 0.0, None)})
    assert d["profiled_over_timed"]["domino"] == pytest.approx(112 / 110)
    assert "profiled steps are not" not in d["text"]
    # no timed steps (an interrupted run): no ratio, nothing said
    d = limits({"modes": {}}, {"domino": doc(150.0, 3.0, 1.5), "nocomm": doc(100.0, 0.0, None)})
    assert d["profiled_over_timed"] == {"domino": None, "nocomm": None}
    assert "profiled steps are not" not in d["text"]
