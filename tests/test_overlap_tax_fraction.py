"""The overlap tax weighed by each interval's overlap fraction, the comm stretch, the tax
against a reference trace's classes and the measured "what limits domino" split
(docs/METRICS.md, "Extension: overlap tax" and "Extension: what limits domino").

Hand-built interval frames (times in ns) whose every expected figure is worked out in
the comments, and an independent computation on the committed emulated seq-4096 trace:
the trace parsed with plain ``json``/``gzip``, f and the class medians computed with plain
Python loops, compared with the module to 1e-9."""

from __future__ import annotations

import bisect
import gzip
import json
import re
import statistics
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from domino_prof.analysis.limits import limits
from domino_prof.analysis.overlap_tax import (
    ALONE_MIN,
    against,
    classes_frame,
    overlap_tax,
    tax_part,
)

OP = "fwd.layer_mlp_3_batch_1"  # every compute row's op: key "... @ fwd.layer_mlp_N_batch_N"
KINDS = ["compute", "comm", "memory"]


def frame(rows, *, rank=0) -> pd.DataFrame:
    """An intervals frame from (kind, name, stream, start, end[, iteration[, op[, grid[,
    msg]]]]) rows: device 0, iteration 0, op OP, no grid, no size unless given."""
    full = [r + (0, OP, -1, -1)[len(r) - 5:] for r in rows]
    k, n, st, s, e, it, op, g, m = zip(*full)
    return pd.DataFrame({
        "rank": np.full(len(full), rank, np.int64), "device": np.zeros(len(full), np.int64),
        "stream": np.array(st, np.int64), "start": np.array(s, np.int64),
        "end": np.array(e, np.int64), "kind": pd.Categorical(k, categories=KINDS),
        "name": pd.Categorical(n), "op": pd.Categorical(op),
        "iteration": np.array(it, np.int64), "grid": np.array(g, np.int64),
        "msg_nelems": np.array(m, np.int64)})  # fmt: skip


def one_rank() -> pd.DataFrame:
    """Comm on stream 9: an all-reduce of 1024 elements [100, 200), and three alone ones
    [300, 340), [400, 440), [500, 545). Compute on stream 7:

    gemm   alone [0, 10), [20, 32), [40, 54): 10, 12, 14 -> baseline (median) 12
           [120, 135): 15 ns, wholly under comm (f = 1): tax 15 - 12 = 3
           [190, 210): 20 ns, [190, 200) under comm (f = 0.5): tax 20 - 12 = 8
           [60, 60): zero length, left out (with it the alone median would be 11)
           [600, 700) outside steps (iteration -1), left out (else the median is 13)
    norm   alone [62, 67), [70, 75): 2 < ALONE_MIN alone runs: no baseline
           [140, 146): 6 ns under comm (f = 1): unmeasured
    silu   alone [80, 84), [86, 90), [92, 96): never under comm: no overlapped class
    a memset [210, 230) is memory: no class, hides nothing
    """
    ar = "ncclDevKernel_AllReduce"
    return frame([
        ("comm", ar, 9, 100, 200, 0, OP, -1, 1024),
        ("comm", ar, 9, 300, 340, 0, OP, -1, 1024),
        ("comm", ar, 9, 400, 440, 0, OP, -1, 1024),
        ("comm", ar, 9, 500, 545, 0, OP, -1, 1024),
        ("compute", "gemm", 7, 0, 10), ("compute", "gemm", 7, 20, 32),
        ("compute", "gemm", 7, 40, 54), ("compute", "gemm", 7, 120, 135),
        ("compute", "gemm", 7, 190, 210), ("compute", "gemm", 7, 60, 60),
        ("compute", "gemm", 7, 600, 700, -1),
        ("compute", "norm", 7, 62, 67), ("compute", "norm", 7, 70, 75),
        ("compute", "norm", 7, 140, 146),
        ("compute", "silu", 7, 80, 84), ("compute", "silu", 7, 86, 90),
        ("compute", "silu", 7, 92, 96),
        ("memory", "Memset (Device)", 7, 210, 230),
    ])  # fmt: skip


GEMM = "gemm @ fwd.layer_mlp_N_batch_N"
NORM = "norm @ fwd.layer_mlp_N_batch_N"
AR = "ncclDevKernel_AllReduce [n 1024] @ fwd.layer_mlp_N_batch_N"


def test_tax_weighs_each_interval_by_its_overlap_fraction():
    doc = overlap_tax([tax_part(one_rank(), mode="gpu")], n_rank_steps=1, hidden_ns=40)
    assert ALONE_MIN == 3
    # classes with an overlapped interval: gemm (measured) and norm (2 alone: unmeasured)
    assert (doc["n_classes"], doc["n_measured"], doc["n_overlapped"]) == (2, 1, 3)
    (g,) = doc["top"]
    assert (g["key"], g["n"], g["n_alone"], g["n_overlapped"]) == (GEMM, 5, 3, 2)
    assert g["baseline_ns"] == 12.0  # median of 10, 12, 14
    assert g["mean_f"] == pytest.approx(0.75)  # (1 + 0.5) / 2
    # tax 3 + 8 = 11 ns; slowdown per overlapped time 1 + 11 / ((1 + 0.5) x 12) = 1 + 11/18
    assert g["tax_ns"] == 11.0 and g["slowdown"] == pytest.approx(1 + 11 / 18)
    assert doc["tax_ms_per_step"] == pytest.approx(11e-6)
    assert doc["slowdown"] == pytest.approx(1 + 11 / 18)
    # overlapped time 15 + 20 (gemm) + 6 (norm); the norm's 6 ns are unmeasured, not taxed
    assert doc["overlapped_ms_per_step"] == pytest.approx(41e-6)
    assert doc["unmeasured_ms_per_step"] == pytest.approx(6e-6)
    (u,) = doc["top_unmeasured"]
    assert (u["key"], u["baseline_ns"], u["tax_ns"]) == (NORM, None, None)
    # net hidden = hidden 40 ns - tax 11 ns
    assert doc["net_hidden_ms_per_step"] == pytest.approx(29e-6)


def test_comm_stretch_is_the_same_measure_over_comm():
    doc = overlap_tax([tax_part(one_rank(), mode="gpu")], n_rank_steps=1, hidden_ns=None)
    c = doc["comm"]
    # the all-reduce [100, 200) lies over compute [120, 135), [140, 146), [190, 200):
    # 15 + 6 + 10 = 31 ns, g = 0.31; the alone ones 40, 40, 45 -> baseline 40;
    # stretch 100 - 40 = 60 ns; per time under compute 1 + 60 / (0.31 x 40)
    (t,) = c["top"]
    assert (t["key"], t["n"], t["n_alone"], t["baseline_ns"]) == (AR, 4, 3, 40.0)
    assert t["mean_f"] == pytest.approx(0.31)
    assert t["tax_ns"] == 60.0 and t["slowdown"] == pytest.approx(1 + 60 / 12.4)
    assert doc["comm_stretch_ms_per_step"] == pytest.approx(60e-6)
    assert c["stretch_ms_per_step"] == pytest.approx(60e-6)
    assert (c["n_stretched"], c["unmeasured_ms_per_step"]) == (1, 0.0)


def test_nothing_overlapped_is_a_measured_zero_and_nothing_measured_is_none():
    alone = frame([("compute", "gemm", 7, 0, 10), ("compute", "gemm", 7, 20, 30)])
    doc = overlap_tax([tax_part(alone, mode="gpu")], n_rank_steps=2, hidden_ns=0)
    assert (doc["n_classes"], doc["tax_ms_per_step"], doc["slowdown"]) == (0, 0.0, None)
    # one overlapped gemm and only 2 alone ones: overlapped, nothing measured -> None
    under = frame([("comm", "nccl", 9, 0, 100), ("compute", "gemm", 7, 10, 30),
                   ("compute", "gemm", 7, 200, 210), ("compute", "gemm", 7, 220, 230)])
    doc = overlap_tax([tax_part(under, mode="gpu")], n_rank_steps=1, hidden_ns=20)
    assert (doc["n_classes"], doc["n_measured"], doc["tax_ms_per_step"]) == (1, 0, None)
    assert doc["unmeasured_ms_per_step"] == pytest.approx(20e-6)
    assert doc["net_hidden_ms_per_step"] is None
    # no step: no per-step figure
    assert overlap_tax([tax_part(under, mode="gpu")], n_rank_steps=0,
                       hidden_ns=None)["tax_ms_per_step"] is None  # fmt: skip


def test_ranks_combine_by_concatenation():
    """Two ranks' parts concatenated = the part of both ranks' frame at once; each rank's
    class has its own baseline (rank 1's gemm runs 20 alone, 30 under comm)."""
    r0 = one_rank()
    r1 = frame([("comm", "nccl", 9, 0, 100), ("compute", "gemm", 7, 10, 40),
                ("compute", "gemm", 7, 200, 220), ("compute", "gemm", 7, 230, 250),
                ("compute", "gemm", 7, 260, 280)], rank=1)  # fmt: skip
    both = pd.concat([r0, r1], ignore_index=True)
    both["kind"] = pd.Categorical(both["kind"].astype(str), categories=KINDS)
    both["name"] = pd.Categorical(both["name"].astype(str))
    both["op"] = pd.Categorical(both["op"].astype(str))
    parts = [tax_part(r0, mode="gpu"), tax_part(r1, mode="gpu")]
    whole = tax_part(both, mode="gpu")
    pd.testing.assert_frame_equal(pd.concat([p.compute for p in parts], ignore_index=True),
                                  whole.compute)  # fmt: skip
    doc = overlap_tax(parts, n_rank_steps=2, hidden_ns=None)
    # rank 0: 11 ns; rank 1: 30 - 20 = 10 ns; over 2 rank-steps: 10.5 ns per step
    assert doc["tax_ms_per_step"] == pytest.approx(10.5e-6)
    assert [(t["rank"], t["tax_ns"]) for t in doc["top"]] == [(0, 11.0), (1, 10.0)]
    assert doc == overlap_tax([whole], n_rank_steps=2, hidden_ns=None)


def test_cpu_counts_leaf_ops_under_gloo():
    """CPU: device = pid, stream = thread. Thread 1 runs a wrapper [0, 100) holding the
    leaf aten::mm [10, 40); three alone aten::mm runs of 10 on thread 1 after it; gloo's
    all-reduce [0, 30) on thread 2 of the same process. The wrapper is not a leaf (its
    child's time is the child's): no class; aten::mm [10, 40): 20 of 30 ns under gloo,
    f = 2/3, tax 30 - 10 = 20, slowdown 1 + 20 / (2/3 x 10) = 4."""
    iv = frame([("comm", "gloo:all_reduce", 2, 0, 30),
                ("compute", "Wrapper", 1, 0, 100), ("compute", "aten::mm", 1, 10, 40),
                ("compute", "aten::mm", 1, 110, 120), ("compute", "aten::mm", 1, 130, 140),
                ("compute", "aten::mm", 1, 150, 160)])  # fmt: skip
    doc = overlap_tax([tax_part(iv, mode="cpu")], n_rank_steps=1, hidden_ns=None)
    keys = set(classes_frame(doc["classes"])["key"])
    assert keys == {"aten::mm @ fwd.layer_mlp_N_batch_N"}
    (t,) = doc["top"]
    assert t["mean_f"] == pytest.approx(2 / 3) and t["tax_ns"] == 20.0
    assert t["slowdown"] == pytest.approx(4.0)


# --------------------------------------------------------------- against a reference
def _doc(rows, steps=1):
    return overlap_tax([tax_part(frame(rows), mode="gpu")], n_rank_steps=steps, hidden_ns=None)


MODE_ROWS = [  # class A: 10, 10 alone, 14 (f = 1), 16 (f = 0.5); class C only here: 7
    ("comm", "nccl", 9, 100, 116),
    ("compute", "A", 7, 0, 10), ("compute", "A", 7, 20, 30),
    ("compute", "A", 7, 100, 114), ("compute", "A", 7, 108, 124),
    ("compute", "C", 7, 200, 207),
]  # fmt: skip
# the reference (domino-nocomm: no comm): A 10, 11, 12, 11 -> mean 11; B only here: 5 x 3
REF_ROWS = [("compute", "A", 7, 0, 10), ("compute", "A", 7, 20, 31), ("compute", "A", 7, 40, 52),
            ("compute", "A", 7, 60, 71), ("compute", "B", 7, 80, 85),
            ("compute", "B", 7, 90, 95), ("compute", "B", 7, 100, 105)]  # fmt: skip


def test_tax_against_a_reference_explains_the_compute_difference():
    mode, ref = _doc(MODE_ROWS), _doc(REF_ROWS)
    # (the A run [108, 124) is 8 of 16 ns under the comm [100, 116): f = 0.5)
    d = against(mode, ref)
    # class A: tax = Σ dur - n x 11 = 50 - 44 = 6 ns; under comm (14 + 16) - 2 x 11 = 8,
    # alone (10 + 10) - 2 x 11 = -2; slowdown 1 + 8 / ((1 + 0.5) x 11)
    assert d["n_classes"] == 1
    assert d["tax_ms_per_step"] == pytest.approx(6e-6)
    assert d["tax_overlapped_ms_per_step"] == pytest.approx(8e-6)
    assert d["tax_alone_ms_per_step"] == pytest.approx(-2e-6)
    assert d["slowdown"] == pytest.approx(1 + 8 / 16.5)
    # compute 57 (mode) and 59 (reference); unmatched C 7 and B 15:
    # 57 - 59 = 6 + 7 - 15 exactly, with the same A count per step on both sides
    assert d["time_ms_per_step"] == {"mode": pytest.approx(57e-6), "reference": pytest.approx(59e-6)}
    assert d["unmatched_ms_per_step"] == {"mode": pytest.approx(7e-6),
                                          "reference": pytest.approx(15e-6)}  # fmt: skip
    assert d["count_ms_per_step"] == pytest.approx(0.0, abs=1e-15)
    (t,) = d["top"]
    assert (t["key"], t["n"], t["ref_n"], t["ref_mean_ns"], t["mean_ns"]) == (
        "A @ fwd.layer_mlp_N_batch_N", 4, 4, 11.0, 12.5)
    # three A runs in the reference (10, 11, 12: mean 11): the count term 11 x (4 - 3)
    # = 11 ns is what the tax cannot explain (57 - 48 = 9 = 6 + 7 - 15 + 11)
    short = _doc(REF_ROWS[:3] + REF_ROWS[4:])
    assert against(mode, short)["count_ms_per_step"] == pytest.approx(11e-6)
    # a reference class with fewer than ALONE_MIN alone runs is unmatched
    assert against(mode, _doc(REF_ROWS[2:]))["n_classes"] == 0
    assert against(mode, {"n_rank_steps": 1}) is None  # a document without class rows


def test_comm_against_another_mode_only_where_the_size_is_known():
    rows = [("comm", "nccl", 9, 0, 50, 0, OP, -1, 64), ("comm", "nccl", 9, 100, 130),
            ("compute", "k", 7, 0, 10)]  # fmt: skip
    ref = _doc([("comm", "nccl", 9, t, t + 30, 0, OP, -1, 64) for t in (0, 100, 200)]
               + [("comm", "nccl", 9, t, t + 20) for t in (300, 400, 500)])  # fmt: skip
    d = against(_doc(rows), ref, which="comm_classes", sized_only=True)
    # the sized all-reduce [0, 50), 10 of 50 ns under compute: 50 - 30 = 20 ns; the one
    # without a size is left out (in another mode one op may move another size)
    assert d["n_classes"] == 1 and d["tax_overlapped_ms_per_step"] == pytest.approx(20e-6)
    assert against(_doc(rows), ref, which="comm_classes")["n_classes"] == 2


# ------------------------------------------------------------------ what limits domino
def _tax_json(n, sum_ns, n_alone, alone_ns, f_sum, key="gemm @ fwd.layer_mlp_N_batch_N"):
    med = alone_ns / n_alone if n_alone else None
    return {"n_rank_steps": 1, "tax_ms_per_step": 0.5, "unmeasured_ms_per_step": 1.0,
            "comm_stretch_ms_per_step": 0.7,
            "classes": {"keys": [key], "rank": [0], "key": [0], "n": [n], "sum_ns": [sum_ns],
                        "n_alone": [n_alone], "alone_ns": [alone_ns],
                        "alone_median_ns": [med], "f_sum": [f_sum]}}  # fmt: skip


def _analysis(step_ms, exposed, tax, idle_ms=None):
    ov = {"whatif": {"overlap_tax": tax}}
    if idle_ms is not None:
        ov["launches"] = {"computed": True, "host_bound_device_idle_ms_per_step": idle_ms}
    return {"ranks": [0], "totals": {"step_ms": step_ms, "exposed_ms_per_step": exposed,
                                     "n_iterations": 1},
            "overheads": ov, "by_op": {"rank": [], "op": [], "exposed_ns": []}}  # fmt: skip


RUN = {"modes": {"domino": {"step_ms": 110.0}, "nocomm": {"step_ms": 99.0},
                 "domino-nocomm": {"step_ms": 104.0}}}  # fmt: skip


def test_limits_measures_every_part_with_domino_nocomm():
    # domino: gemm 4 runs, 10 ms in all (2 alone: 4 ms); domino-nocomm: 4 runs, 8 ms, all
    # alone (mean 2 ms): tax = 10 - 4 x 2 = 2 ms (under comm 6 - 2 x 2 = 2, alone 0).
    # gap 112 - 100 = 12 = split (106 - 100 = 6) + exposed 3 + tax 2 + host (4.0 - 3.5 =
    # 0.5) + residual 0.5; |0.5| <= 5% of 12 = 0.6: adds up
    dom = _analysis(112.0, 3.0, _tax_json(4, 10_000_000, 2, 4_000_000, 1.5), idle_ms=4.0)
    dnc = _analysis(106.0, 0.0, _tax_json(4, 8_000_000, 4, 8_000_000, 0.0), idle_ms=3.5)
    noc = _analysis(100.0, 0.0, _tax_json(4, 7_000_000, 4, 7_000_000, 0.0), idle_ms=1.0)
    d = limits(RUN, {"domino": dom, "nocomm": noc, "domino-nocomm": dnc})
    assert (d["method"], d["split_mode"]) == ("measured", "domino-nocomm")
    assert d["gap_ms"] == pytest.approx(12.0) and d["split_ms"] == pytest.approx(6.0)
    assert d["overlap_tax_ms"] == pytest.approx(2.0)
    assert d["overlap_tax"]["tax_overlapped_ms_per_step"] == pytest.approx(2.0)
    assert d["overlap_tax"]["tax_alone_ms_per_step"] == pytest.approx(0.0)
    assert d["host_ms"] == pytest.approx(0.5)
    assert d["host_idle_ms"] == {"domino": 4.0, "domino-nocomm": 3.5}
    assert d["residual_ms"] == pytest.approx(0.5) and d["adds_up"] is True
    assert d["rest_ms"] is None and d["comm_stretch_ms"] == 0.7
    assert "the split's own cost 6.00 ms" in d["text"]
    assert "residual 0.50 ms (the parts add up" in d["text"]
    assert "Comm stretched by compute: 0.70 ms per step" in d["text"]
    assert d["tax_unmatched_ms"] == 0.0 and "classes both run only" not in d["text"]
    # a kernel class domino runs and domino-nocomm does not (a tile only beside comm):
    # 2 runs, 1 ms; U(domino) - U(domino-nocomm) = 1 - 0 > 0.6 (5% of 12): named
    c = _tax_json(4, 10_000_000, 2, 4_000_000, 1.5)["classes"]
    tiled = {"keys": c["keys"] + ["tile @ fwd.layer_mlp_N_batch_N"], "rank": [0, 0],
             "key": [0, 1], "n": [4, 2], "sum_ns": [10_000_000, 1_000_000],
             "n_alone": [2, 0], "alone_ns": [4_000_000, 0],
             "alone_median_ns": [2_000_000, None], "f_sum": [1.5, 2.0]}  # fmt: skip
    dt = _analysis(112.0, 3.0, {**_tax_json(4, 10_000_000, 2, 4_000_000, 1.5),
                                "classes": tiled}, idle_ms=4.0)  # fmt: skip
    d = limits(RUN, {"domino": dt, "nocomm": noc, "domino-nocomm": dnc})
    assert d["overlap_tax_ms"] == pytest.approx(2.0)  # the matched class only, as before
    assert d["tax_unmatched_ms"] == pytest.approx(1.0)
    assert ("over the kernel classes both run only: 1.00 ms per step more of domino's "
            "compute than of domino-nocomm's is in classes the other does not run") in d["text"]
    # domino's step 1 ms longer: residual 1.5 > 0.65 (5% of 13): does not add up, shown
    d = limits(RUN, {"domino": {**dom, "totals": {**dom["totals"], "step_ms": 113.0}},
                     "nocomm": noc, "domino-nocomm": dnc})  # fmt: skip
    assert d["residual_ms"] == pytest.approx(1.5) and d["adds_up"] is False
    assert "residual 1.50 ms (the parts do not add up: |residual| > 5% of the gap)" in d["text"]
    # the exposed comm counted where domino-nocomm idles too: domino exposes 5 ms, but its
    # idle beyond domino-nocomm's is (112 - 10) - (106 - 8) = 4 ms, 0.5 of it the host's:
    # 5 - 3.5 = 1.5 ms of the exposed comm lies in the split's own gaps = -residual
    d = limits(RUN, {"domino": {**dom, "totals": {**dom["totals"], "exposed_ms_per_step": 5.0}},
                     "nocomm": noc, "domino-nocomm": dnc})  # fmt: skip
    assert d["residual_ms"] == pytest.approx(-1.5) and d["adds_up"] is False
    assert d["exposed_in_split_gaps_ms"] == pytest.approx(1.5)
    assert "of the exposed comm, 1.50 ms fell where domino-nocomm's device is idle" in d["text"]
    # domino-nocomm's document without class rows (analysed before issue 33): tax not
    # measured, the residual 12 - (6 + 3 + 0.5) = 2.5 holds it, adds_up unknown
    old = {**dnc, "overheads": {**dnc["overheads"], "whatif": {"overlap_tax": {}}}}
    d = limits(RUN, {"domino": dom, "nocomm": noc, "domino-nocomm": old})
    assert (d["overlap_tax_ms"], d["adds_up"]) == (None, None)
    assert d["residual_ms"] == pytest.approx(2.5)
    assert "overlap tax not measured (an analysis without class rows" in d["text"]
    assert "whether the parts add up is not known" in d["text"]
    # without domino-nocomm: domino's own tax (0.5) and the rest as a remainder:
    # 12 - 3 - 0.5 - host (4.0 - 1.0 = 3.0) = 5.5
    d = limits(RUN, {"domino": dom, "nocomm": noc})
    assert (d["method"], d["split_ms"], d["residual_ms"]) == ("remainder", None, None)
    assert d["overlap_tax_ms"] == 0.5 and d["rest_ms"] == pytest.approx(5.5)
    assert "1.00 ms of overlapped compute unmeasured" in d["text"]
    assert "a remainder: run domino-nocomm to measure it" in d["text"]


def test_domino_sp_is_measured_against_its_own_no_comm_mode():
    # domino-sp's decomposition (run.json limits_sp): the numbers of the domino test above
    # under domino-sp's names. gap 112 - 100 = 12 = split (domino-sp-nocomm 106 - 100 = 6)
    # + exposed 3 + tax (10 - 4 x 2 = 2) + host (4.0 - 3.5 = 0.5) + residual 0.5
    from domino_prof.analysis.limits import limits_by_mode

    run = {"modes": {"domino-sp": {"step_ms": 110.0}, "nocomm": {"step_ms": 99.0},
                     "domino-sp-nocomm": {"step_ms": 104.0}}}  # fmt: skip
    ds = _analysis(112.0, 3.0, _tax_json(4, 10_000_000, 2, 4_000_000, 1.5), idle_ms=4.0)
    dsn = _analysis(106.0, 0.0, _tax_json(4, 8_000_000, 4, 8_000_000, 0.0), idle_ms=3.5)
    noc = _analysis(100.0, 0.0, _tax_json(4, 7_000_000, 4, 7_000_000, 0.0), idle_ms=1.0)
    d = limits(run, {"domino-sp": ds, "nocomm": noc, "domino-sp-nocomm": dsn}, mode="domino-sp")
    assert (d["mode"], d["method"], d["split_mode"]) == (
        "domino-sp", "measured", "domino-sp-nocomm")  # fmt: skip
    assert (d["gap_ms"], d["split_ms"], d["overlap_tax_ms"], d["host_ms"], d["residual_ms"]) == (
        pytest.approx(12.0), pytest.approx(6.0), pytest.approx(2.0), pytest.approx(0.5),
        pytest.approx(0.5))  # fmt: skip
    assert d["host_idle_ms"] == {"domino-sp": 4.0, "domino-sp-nocomm": 3.5}
    assert d["timed_of_bound"] == pytest.approx(99.0 / 110.0)
    assert "domino-sp runs at 0.900 of nocomm's speed" in d["text"]
    assert "(domino-sp-nocomm's profiled step − nocomm's, measured)" in d["text"]
    # domino-sp's exposed comm where domino-sp-nocomm idles too: (112 - 10) - (106 - 8) = 4
    # ms of idle added, 0.5 of it the host's: 5 - 3.5 = 1.5 ms in the split's own gaps
    d = limits(run, {"domino-sp": {**ds, "totals": {**ds["totals"], "exposed_ms_per_step": 5.0}},
                     "nocomm": noc, "domino-sp-nocomm": dsn}, mode="domino-sp")  # fmt: skip
    assert "of the exposed comm, 1.50 ms fell where domino-sp-nocomm's device is idle" in d["text"]
    # without domino-sp-nocomm: the rest as a remainder, 12 - 3 - 0.5 - (4.0 - 1.0) = 5.5
    d = limits(run, {"domino-sp": ds, "nocomm": noc}, mode="domino-sp")
    assert (d["method"], d["rest_ms"]) == ("remainder", pytest.approx(5.5))
    assert "a remainder: run domino-sp-nocomm to measure it" in d["text"]
    # run.json's two keys, each from its own mode's documents: domino's gap 109 - 100 = 9,
    # split 107 - 100 = 7; domino-sp's as above
    both = {**run, "modes": {**run["modes"], **RUN["modes"]}}
    docs = {"domino-sp": ds, "nocomm": noc, "domino-sp-nocomm": dsn,
            "domino": _analysis(109.0, 1.0, _tax_json(4, 9_000_000, 4, 9_000_000, 0.0)),
            "domino-nocomm": _analysis(107.0, 0.0, _tax_json(4, 9_000_000, 4, 9_000_000, 0.0))}
    lims = limits_by_mode(both, docs)
    assert sorted(lims) == ["limits", "limits_sp"]
    assert (lims["limits"]["mode"], lims["limits"]["gap_ms"], lims["limits"]["split_ms"]) == (
        "domino", pytest.approx(9.0), pytest.approx(7.0))  # fmt: skip
    assert lims["limits_sp"]["split_ms"] == pytest.approx(6.0)
    assert sorted(limits_by_mode(run, {"domino-sp": ds, "nocomm": noc})) == ["limits_sp"]
    # the report's section for domino-sp, beside domino's
    from domino_prof.report.figures import domino_limits

    sec = domino_limits(run, {"domino-sp": ds, "nocomm": noc, "domino-sp-nocomm": dsn},
                        mode="domino-sp")  # fmt: skip
    assert (sec.key, sec.title) == ("limits-domino-sp", "What limits domino-sp here")
    assert sec.body.rows[0] == ["profiled step gap (domino-sp − nocomm)", "12.00 ms"]
    assert sec.body.rows[1][0].startswith("the split's own cost (domino-sp-nocomm − nocomm")


def test_report_table_shows_the_measured_parts_and_the_residual():
    from domino_prof.report.figures import domino_limits

    dom = _analysis(112.0, 3.0, _tax_json(4, 10_000_000, 2, 4_000_000, 1.5), idle_ms=4.0)
    dnc = _analysis(106.0, 0.0, _tax_json(4, 8_000_000, 4, 8_000_000, 0.0), idle_ms=3.5)
    noc = _analysis(100.0, 0.0, _tax_json(4, 7_000_000, 4, 7_000_000, 0.0), idle_ms=1.0)
    sec = domino_limits(RUN, {"domino": dom, "nocomm": noc, "domino-nocomm": dnc})
    rows = [(r[0].split(" (")[0], r[1]) for r in sec.body.rows]
    assert rows == [("profiled step gap", "12.00 ms"), ("the split's own cost", "6.00 ms"),
                    ("exposed comm", "3.00 ms"), ("overlap tax", "2.00 ms"),
                    ("host", "0.50 ms"), ("residual", "0.50 ms"),
                    ("comm stretched by compute", "0.70 ms")]  # fmt: skip
    assert "adds up: within 5% of the gap" in sec.body.rows[5][0]


# ------------------------------------------- independent check on the committed trace
TRACE = (Path(__file__).resolve().parents[1] / "reports" / "emulated-h200-full-2026-12-02"
         / "graphs-tp8-seq4096" / "domino" / "rank0.pt.trace.json.gz")  # fmt: skip
COMM = re.compile(r"^(void )?(nccl|emulated_(allreduce|reducescatter|allgather))", re.IGNORECASE)
WRAPPERS = re.compile(r"^(nccl|rccl|hccl|gloo):")
STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _ns(x: Decimal) -> int:
    return int((x * 1000).to_integral_value())  # µs -> ns, exact (half-even)


def _independent():
    """f, classes, medians and taxes of the trace's rank by plain loops (METRICS.md)."""
    with gzip.open(TRACE, "rt") as fh:
        doc = json.load(fh, parse_float=Decimal)
    base = int(doc.get("baseTimeNanoseconds", 0))
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    launch = {}
    for e in ev:  # first launch call of each correlation
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            launch.setdefault(e["args"].get("correlation"), e)
    steps = [(int(STEP.match(e["name"]).group(1)), base + _ns(e["ts"]),
              base + _ns(e["ts"]) + _ns(e["dur"]))
             for e in ev if STEP.match(e["name"]) and e["dur"] > 0]  # fmt: skip
    ann = {}
    for e in ev:
        if (e.get("cat") == "user_annotation" and not STEP.match(e["name"])
                and not WRAPPERS.match(e["name"]) and e["dur"] > 0):
            s = base + _ns(e["ts"])
            ann.setdefault((e["pid"], e["tid"]), []).append((s, s + _ns(e["dur"]), e["name"]))
    comp, comm = [], []
    for e in ev:
        if e.get("cat") != "kernel":
            continue
        s = base + _ns(e["ts"])
        end = s + _ns(e["dur"])
        lc = launch.get(e["args"].get("correlation"))
        it, op = -1, "(none)"
        if lc is not None:
            t = base + _ns(lc["ts"])
            it = next((n for n, a, b in steps if a <= t < b), -1)
            inside = [x for x in ann.get((lc["pid"], lc["tid"]), ()) if x[0] <= t < x[1]]
            if inside:  # properly nested: the innermost starts last
                op = max(inside, key=lambda x: (x[0], -x[1]))[2]
        g = e["args"].get("grid")
        grid = g[0] * g[1] * g[2] if isinstance(g, list) and all(
            isinstance(x, int) and x > 0 for x in g) else -1  # fmt: skip
        row = (s, end, e["name"], grid, op, it)
        (comm if COMM.search(e["name"]) else comp).append(row)
    n_steps = len({r[5] for r in comp + comm if r[5] >= 0})

    def merged(rows):
        out = []
        for s, e in sorted((r[0], r[1]) for r in rows):
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            elif e > s:
                out.append([s, e])
        return out

    def covered(s, e, union):
        starts = [u[0] for u in union]
        i = max(bisect.bisect_right(starts, s) - 1, 0)
        tot = 0
        while i < len(union) and union[i][0] < e:
            tot += max(0, min(e, union[i][1]) - max(s, union[i][0]))
            i += 1
        return tot

    def classes(rows, union, key):
        out = {}
        for s, e, name, grid, op, it in rows:
            if it < 0 or e <= s:
                continue
            c = out.setdefault(key(name, grid, op), {"alone": [], "over": []})
            f = covered(s, e, union) / (e - s)
            (c["over"] if f > 0 else c["alone"]).append((e - s, f))
        return out

    def dig(op):
        return re.sub(r"\d+", "N", op)

    def key(name, grid, op):  # the trace records no message sizes: comm keys have none
        return f"{name}{f' [grid {grid}]' if grid != -1 else ''} @ {dig(op)}"

    assert not any("In msg nelems" in e.get("args", {}) for e in ev)
    return classes(comp, merged(comm), key), classes(comm, merged(comp), key), n_steps


def _tax(classes):
    tax, unmeasured = 0.0, 0.0
    for c in classes.values():
        if not c["over"]:
            continue
        if len(c["alone"]) >= 3:
            base = statistics.median(d for d, _ in c["alone"])
            tax += sum(d - base for d, _ in c["over"])
        else:
            unmeasured += sum(d for d, _ in c["over"])
    return tax, unmeasured


@pytest.fixture(scope="module")
def headline():
    from domino_prof.analysis.classify import classify
    from domino_prof.analysis.config import AnalysisConfig
    from domino_prof.trace import load_trace

    cl = classify(load_trace(TRACE), AnalysisConfig(), mode="gpu")
    spans = cl.intervals.loc[cl.intervals["iteration"] >= 0, "iteration"].nunique()
    part = tax_part(cl.intervals, mode="gpu", reference=cl.reference)
    return overlap_tax([part], n_rank_steps=int(spans), hidden_ns=None), _independent()


def test_the_committed_headline_trace_agrees_with_plain_loops(headline):
    doc, (comp, comm, n_steps) = headline
    assert n_steps == doc["n_rank_steps"] == 2
    for name, mine in (("classes", comp), ("comm_classes", comm)):
        got = classes_frame(doc[name]).set_index("key")
        assert sorted(got.index) == sorted(mine)
        for key, c in mine.items():
            r = got.loc[key]
            alone = [d for d, _ in c["alone"]]
            assert (r["n"], r["n_alone"]) == (len(alone) + len(c["over"]), len(alone)), key
            assert r["sum_ns"] == sum(alone) + sum(d for d, _ in c["over"])
            if alone:
                assert r["alone_median_ns"] == statistics.median(alone)
            assert r["f_sum"] == pytest.approx(sum(f for _, f in c["over"]), rel=1e-9, abs=1e-12)
    tax, unmeasured = _tax(comp)
    assert doc["tax_ms_per_step"] == pytest.approx(tax / n_steps / 1e6, rel=1e-9)
    assert doc["unmeasured_ms_per_step"] == pytest.approx(unmeasured / n_steps / 1e6, rel=1e-9)
    stretch, st_un = _tax(comm)
    assert doc["comm"]["unmeasured_ms_per_step"] == pytest.approx(st_un / n_steps / 1e6,
                                                                 rel=1e-9)  # fmt: skip
    measured = [c for c in comm.values() if c["over"] and len(c["alone"]) >= 3]
    want = stretch / n_steps / 1e6 if measured else None  # null: stretched, none measured
    assert doc["comm_stretch_ms_per_step"] == (pytest.approx(want, rel=1e-9) if measured
                                               else None)  # fmt: skip
    over = [c for c in comp.values() if c["over"]]
    assert doc["n_classes"] == len(over)
    assert doc["n_measured"] == sum(len(c["alone"]) >= 3 for c in over)


def test_compute_beside_compute_is_counted_per_device():
    """``concurrent_ns``: Σ dur − |∪| of a rank's compute intervals of steps per device.
    Device 0: gemm [0, 10) on stream 7 and [5, 15) on stream 8 (5 ns at once), norm
    [20, 30) on 7 and [22, 24) on 8 (2 ns), a zero-length one at 26 and one outside steps
    [0, 50) on stream 8 (neither counted); device 1: gemm [0, 10) beside device 0's (another
    device: not concurrent). 5 + 2 = 7 ns; over 2 rank-steps, 3.5e-6 ms a step. One
    stream (one_rank): 0."""
    f = frame([("compute", "gemm", 7, 0, 10), ("compute", "gemm", 8, 5, 15),
               ("compute", "norm", 7, 20, 30), ("compute", "norm", 8, 22, 24),
               ("compute", "norm", 8, 26, 26), ("compute", "gemm", 8, 0, 50, -1),
               ("compute", "gemm", 9, 0, 10), ("comm", "ar", 9, 40, 60)])  # fmt: skip
    f.loc[6, "device"] = 1
    part = tax_part(f, mode="cuda")
    assert part.concurrent_ns == 7
    assert tax_part(one_rank(), mode="cuda").concurrent_ns == 0
    doc = overlap_tax([part, tax_part(one_rank(), mode="cuda")], n_rank_steps=2, hidden_ns=0)
    assert doc["compute_concurrent_ms_per_step"] == pytest.approx(7 / 2 / 1e6)


def test_limits_withhold_the_tax_where_compute_ran_beside_compute():
    """The lanes (--mb-streams 2): domino's or domino-nocomm's compute beside other compute
    for more than 5% of the gap (0.6 ms of 12) a step: the class-by-class tax is no part of
    the step; null, the text says why, the residual holds it: 12 - (6 + 3 + 0.5) = 2.5."""
    dom = _analysis(112.0, 3.0, {**_tax_json(4, 10_000_000, 2, 4_000_000, 1.5),
                                 "compute_concurrent_ms_per_step": 0.7}, idle_ms=4.0)
    dnc = _analysis(106.0, 0.0, _tax_json(4, 8_000_000, 4, 8_000_000, 0.0), idle_ms=3.5)
    noc = _analysis(100.0, 0.0, _tax_json(4, 7_000_000, 4, 7_000_000, 0.0), idle_ms=1.0)
    d = limits(RUN, {"domino": dom, "nocomm": noc, "domino-nocomm": dnc})
    assert (d["overlap_tax_ms"], d["adds_up"], d["tax_withheld"]) == (None, None, True)
    assert d["compute_concurrent_ms"] == {"domino": 0.7, "domino-nocomm": None}
    assert d["residual_ms"] == pytest.approx(2.5)
    assert ("overlap tax not measured (compute ran beside other compute of its device: "
            "0.70 ms a step in domino, over 5% of the gap;") in d["text"]
    assert "whether the parts add up is not known" in d["text"]
    # in domino-nocomm only: withheld too
    dnc2 = _analysis(106.0, 0.0, {**_tax_json(4, 8_000_000, 4, 8_000_000, 0.0),
                                  "compute_concurrent_ms_per_step": 2.0}, idle_ms=3.5)
    d = limits(RUN, {"domino": dom, "nocomm": noc, "domino-nocomm": dnc2})
    assert d["overlap_tax_ms"] is None and "2.00 ms a step in domino-nocomm" in d["text"]
    # at or under 5% of the gap (0.5 and 0.6): the tax stands (2.0, as without it)
    for v in (0.5, 0.6):
        dv = _analysis(112.0, 3.0, {**_tax_json(4, 10_000_000, 2, 4_000_000, 1.5),
                                    "compute_concurrent_ms_per_step": v}, idle_ms=4.0)
        d = limits(RUN, {"domino": dv, "nocomm": noc, "domino-nocomm": dnc})
        assert d["overlap_tax_ms"] == pytest.approx(2.0) and d["tax_withheld"] is False
    # the report's table says so in the tax row
    from domino_prof.report.figures import domino_limits

    sec = domino_limits(RUN, {"domino": dom, "nocomm": noc, "domino-nocomm": dnc})
    row = next(r for r in sec.body.rows if r[0].startswith("overlap tax"))
    assert row == ["overlap tax (not a part: compute ran beside other compute, 0.70 ms a step "
                   "in domino; the residual holds it)", "n/a"]


def test_occupancy_counts_compute_beside_compute_once():
    """The occupancy view (METRICS, what limits domino, 2026-12-08): U = the union of a
    mode's compute kernels per step. Times in ms (x 1e6 ns), one rank, one step.
    domino-sp: gemm [0, 10) on stream 7 and [5, 15) on 8 (5 ms at once), norm [20, 26) on
    7, comm [12, 22) on 9: Σ 26, concurrent 5, U = |[0, 15) ∪ [20, 26)| = 21; step 30.
    domino-sp-nocomm: gemm [0, 8) on 7 and [4, 12) on 8 (4 at once), norm [12, 17): Σ 21,
    concurrent 4, U = 17; step 20. nocomm's step 18: gap 12 = split 2 + occupancy added
    (21 - 17 = 4: kernel time 26 - 21 = 5, less 5 - 4 = 1 ms more beside compute) + time
    without compute added ((30 - 21) - (20 - 17) = 6). Concurrent 5 ms > 5% of 12: the
    class-by-class tax is withheld, the occupancy is not."""
    ms = 1_000_000

    def doc(rows, step_ms):
        rows = [(k, n, st, s * ms, e * ms) for k, n, st, s, e in rows]
        tax = overlap_tax([tax_part(frame(rows), mode="cuda")], n_rank_steps=1, hidden_ns=None)
        return _analysis(step_ms, 0.0, tax)

    ds = doc([("compute", "gemm", 7, 0, 10), ("compute", "gemm", 8, 5, 15),
              ("compute", "norm", 7, 20, 26), ("comm", "ar", 9, 12, 22)], 30.0)  # fmt: skip
    dsn = doc([("compute", "gemm", 7, 0, 8), ("compute", "gemm", 8, 4, 12),
               ("compute", "norm", 7, 12, 17)], 20.0)  # fmt: skip
    noc = doc([("compute", "gemm", 7, 0, 18)], 18.0)
    run = {"modes": {"domino-sp": {"step_ms": 30.0}, "nocomm": {"step_ms": 18.0}}}
    d = limits(run, {"domino-sp": ds, "nocomm": noc, "domino-sp-nocomm": dsn}, mode="domino-sp")
    assert d["tax_withheld"] is True and d["overlap_tax_ms"] is None
    assert d["compute_occupancy_ms"] == {"domino-sp": pytest.approx(21.0),
                                         "domino-sp-nocomm": pytest.approx(17.0)}  # fmt: skip
    assert d["occupancy_added_ms"] == pytest.approx(4.0)
    assert (d["kernel_time_added_ms"], d["concurrency_lost_ms"]) == (pytest.approx(5.0),
                                                                     pytest.approx(-1.0))
    assert d["no_compute_added_ms"] == pytest.approx(6.0)
    assert d["split_ms"] + d["occupancy_added_ms"] + d["no_compute_added_ms"] == pytest.approx(
        d["gap_ms"])
    assert "part of the step; by occupancy below)" in d["text"]
    assert ("domino-sp's compute kept the device busy 4.00 ms longer than domino-sp-nocomm's: "
            "its kernels took 5.00 ms longer in all (slower beside comm, or other kernels: the "
            "tax, with the classes only one of them runs), and 1.00 ms more of its compute ran "
            "beside other compute; its time without compute grew 6.00 ms") in d["text"]
    # the split mode's chains hidden beside its GEMMs, alone in the mode: lost concurrency
    dsn2 = doc([("compute", "gemm", 7, 0, 8), ("compute", "gemm", 8, 0, 8),
                ("compute", "norm", 7, 12, 17)], 20.0)  # fmt: skip
    d2 = limits(run, {"domino-sp": ds, "nocomm": noc, "domino-sp-nocomm": dsn2},
                mode="domino-sp")  # fmt: skip
    # split: Σ 21, concurrent 8, U 13: added 21 - 13 = 8 = kernel time 5 + 3 ms lost
    assert (d2["occupancy_added_ms"], d2["kernel_time_added_ms"], d2["concurrency_lost_ms"]) == (
        pytest.approx(8.0), pytest.approx(5.0), pytest.approx(3.0))
    assert ("and 3.00 ms of compute that ran beside other compute in domino-sp-nocomm took "
            "device time of its own here") in d2["text"]
    from domino_prof.report.figures import domino_limits

    sec = domino_limits(run, {"domino-sp": ds, "nocomm": noc, "domino-sp-nocomm": dsn},
                        mode="domino-sp")  # fmt: skip
    rows = [(r[0].split(" (")[0], r[1]) for r in sec.body.rows]
    at = rows.index(("by occupancy: compute busy, added", "4.00 ms"))
    assert rows[at + 1:at + 4] == [("  of which kernel time, added", "5.00 ms"),
                                   ("  of which compute beside compute, lost", "-1.00 ms"),
                                   ("by occupancy: time without compute, added", "6.00 ms")]
    # domino-sp's kernels on one stream (nothing at once): U is their sum, 10 + 6 = 16
    one = doc([("compute", "gemm", 7, 0, 10), ("compute", "norm", 7, 20, 26),
               ("comm", "ar", 9, 12, 22)], 30.0)  # fmt: skip
    d = limits(run, {"domino-sp": one, "nocomm": noc, "domino-sp-nocomm": dsn}, mode="domino-sp")
    assert d["compute_occupancy_ms"]["domino-sp"] == pytest.approx(16.0)
    # an analysis from before the concurrent figure: no occupancy, and no sentence
    old = _analysis(30.0, 0.0, {k: v for k, v in ds["overheads"]["whatif"]["overlap_tax"].items()
                                if k != "compute_concurrent_ms_per_step"})  # fmt: skip
    d = limits(run, {"domino-sp": old, "nocomm": noc, "domino-sp-nocomm": dsn}, mode="domino-sp")
    assert all(d[k] is None for k in ("compute_occupancy_ms", "occupancy_added_ms",
                                      "kernel_time_added_ms", "concurrency_lost_ms",
                                      "no_compute_added_ms"))  # fmt: skip
    assert "By occupancy" not in d["text"]
