"""The overlap tax groups kernels by name, launch grid and op (docs/METRICS.md, Extension:
overlap tax), and the trace loader's ``grid`` column is x·y·z of ``args.grid``. Hand-built
trace, times in µs; expected values worked out in the comments."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_switches import load
from tracegen import TraceBuilder

from domino_prof.analysis.overlap_tax import overlap_tax, tax_part

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def rank_with_two_shapes() -> TraceBuilder:
    """Stream 7: gemm grid [4,1,1] runs 10 µs alone at 0, 20, 40 and 13 µs at 100, 120,
    140 under an all-reduce on stream 9 [95, 160]; gemm grid [8,2,1] (the same name: a
    wider GEMM) runs 40 µs alone at 200 and 250. Every kernel is launched under the op
    fwd.layer_mlp_0_batch_0 (the same name and op for both shapes)."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 400)
    b.annotation("fwd.layer_mlp_0_batch_0", 0, 300)
    for t in (0, 20, 40):
        b.kernel("gemm", stream=7, start=t + 2, dur=10, launch=t, grid=[4, 1, 1])
    for t in (100, 120, 140):
        b.kernel("gemm", stream=7, start=t + 2, dur=13, launch=t, grid=[4, 1, 1])
    b.kernel(NCCL, stream=9, start=95, dur=65, launch=94)
    for t in (200, 250):
        b.kernel("gemm", stream=7, start=t + 2, dur=40, launch=t, grid=[8, 2, 1])
    return b


def test_grid_column_is_the_product_and_minus_one_without(tmp_path):
    b = rank_with_two_shapes()
    b.kernel("odd", stream=7, start=300, dur=1, launch=299, grid=[2, "x", 1])  # not ints
    trace, _ = load(tmp_path, b)
    ev = trace.events
    k = ev[ev["cat"].astype(str) == "kernel"]
    grids = dict(zip(k["ts"].tolist(), k["grid"].tolist()))
    assert sorted(set(grids.values())) == [-1, 4, 16]  # [4,1,1]; [8,2,1]; none / malformed
    assert (ev.loc[ev["cat"].astype(str) != "kernel", "grid"] == -1).all()


def test_tax_compares_each_shape_with_itself(tmp_path):
    _, iv = load(tmp_path, rank_with_two_shapes())
    part = tax_part(iv, mode="gpu")
    doc = overlap_tax([part], n_rank_steps=1, hidden_ns=None)
    # grid 4: baseline = median of the three alone 10 µs runs = 10; the three 13 µs runs
    # lie wholly under the all-reduce [95, 160] (f = 1): tax 3 x (13 - 10) = 9 µs,
    # slowdown 1 + 9 / (3 x 1 x 10) = 1.3. Grid 16 has no overlapped kernel (no class).
    # Without the grid, the two 40 µs GEMMs would join the "alone" population:
    # median alone of 10, 10, 10, 40, 40 is still 10, but its mean 22 > 13 gave the old
    # mean-based tax 3 x (13 - 22) = -27 µs.
    assert (doc["n_classes"], doc["n_measured"]) == (1, 1)
    assert doc["tax_ms_per_step"] == pytest.approx(0.009)
    top = doc["top"][0]
    assert "[grid 4]" in top["key"] and top["baseline_ns"] == 10_000
    assert top["slowdown"] == pytest.approx(1.3) and top["mean_f"] == 1.0


def _general(iv):
    """The same intervals with name and op as plain strings: class keys by factorizing
    the strings instead of the categoricals' codes; the classes must be the same."""
    return iv.assign(name=iv["name"].astype(str).astype(object),
                     op=iv["op"].astype(str).astype(object))  # fmt: skip


def _same(a, b):
    import pandas as pd

    pd.testing.assert_frame_equal(a.compute, b.compute)
    pd.testing.assert_frame_equal(a.comm, b.comm)


@pytest.mark.parametrize("fixture", ["h200_llama3_3b_2layers_tp2/domino", "h200_two_stream"])
def test_categorical_keys_equal_string_keys_on_real_traces(fixture):
    from domino_prof.analysis.classify import classify
    from domino_prof.analysis.config import AnalysisConfig
    from domino_prof.trace import load_trace

    trace = load_trace(Path(__file__).parent / "data" / fixture)
    iv = classify(trace, AnalysisConfig(), mode="gpu").intervals
    fast = tax_part(iv, mode="gpu")
    assert len(fast.compute) >= 8  # classes of every rank
    overlapped = (fast.compute["n"] - fast.compute["n_alone"]).sum()
    assert (overlapped > 0) == ("domino" in fixture)  # two_stream: none
    _same(fast, tax_part(_general(iv), mode="gpu"))


def test_categorical_keys_equal_string_keys_on_random_intervals():
    """Random intervals on 3 ranks x 2 devices: names and ops with digits (ops that
    differ only in digits share a key), grids with -1, comm on other streams."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(7)
    n = 4000
    start = rng.integers(0, 1_000_000, n)
    kind = rng.choice(["compute", "comm", "memory"], n, p=[0.7, 0.2, 0.1])
    names = [f"k{i}_sm90" for i in range(7)] + ["gemm", "nccl_x"]
    ops = ["(none)", "fwd.layer_attn_0_batch_0", "fwd.layer_attn_12_batch_1",
           "bwd.layer_mlp_3_batch_0", "opt.step"]  # fmt: skip
    end = start + rng.integers(0, 5000, n)
    iv = pd.DataFrame({
        "rank": rng.integers(0, 3, n).astype(np.int64),
        "device": rng.integers(0, 2, n).astype(np.int64),
        "stream": rng.integers(7, 10, n).astype(np.int64),
        "start": start.astype(np.int64),
        "end": end.astype(np.int64),
        "kind": pd.Categorical(kind, categories=["compute", "comm", "memory"]),
        "name": pd.Categorical(rng.choice(names, n)),
        "op": pd.Categorical(rng.choice(ops, n)),
        "grid": rng.choice([-1, 1, 4, 128, 4096], n).astype(np.int64),
    })  # fmt: skip
    fast = tax_part(iv, mode="gpu")
    _same(fast, tax_part(_general(iv), mode="gpu"))
    # ops differing only in digits share a key: fewer keys than (name, grid, op) triples
    assert fast.compute["key"].str.contains(" @ fwd.layer_attn_N_batch_N").any()
    # every compute interval with a duration is in one class (no iteration column: all
    # count as in steps), every comm one likewise
    has = end > start
    assert int(fast.compute["n"].sum()) == int(((kind == "compute") & has).sum())
    assert int(fast.comm["n"].sum()) == int(((kind == "comm") & has).sum())
