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
    # grid 4: 3 overlapped x (13 - 10) = 9 µs; grid 16 has no overlapped kernel (no group).
    # Without the grid, the two 40 µs GEMMs would join the "alone" population:
    # mean alone (3*10 + 2*40) / 5 = 22 > 13, a tax of 3 x (13 - 22) = -27 µs.
    assert doc["n_groups"] == 1
    assert doc["tax_ms_per_step"] == pytest.approx(0.009)
    assert "[grid 4]" in doc["top"][0]["key"]


def _general(iv):
    """The same intervals with name and op as plain strings: tax_part's general (string
    group-by) path, the reference the categorical fast path must equal."""
    return iv.assign(name=iv["name"].astype(str).astype(object),
                     op=iv["op"].astype(str).astype(object))  # fmt: skip


@pytest.mark.parametrize("fixture", ["h200_llama3_3b_2layers_tp2/domino", "h200_two_stream"])
def test_fast_groups_equal_the_general_path_on_real_traces(fixture):
    import pandas as pd

    from domino_prof.analysis.classify import classify
    from domino_prof.analysis.config import AnalysisConfig
    from domino_prof.trace import load_trace

    trace = load_trace(Path(__file__).parent / "data" / fixture)
    iv = classify(trace, AnalysisConfig(), mode="gpu").intervals
    fast = tax_part(iv, mode="gpu")
    assert len(fast) >= 8  # groups of every rank
    assert (fast["n_overlapped"].sum() > 0) == ("domino" in fixture)  # two_stream: none
    pd.testing.assert_frame_equal(fast, tax_part(_general(iv), mode="gpu"))


def test_fast_groups_equal_the_general_path_on_random_intervals():
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
    iv = pd.DataFrame({
        "rank": rng.integers(0, 3, n).astype(np.int64),
        "device": rng.integers(0, 2, n).astype(np.int64),
        "stream": rng.integers(7, 10, n).astype(np.int64),
        "start": start.astype(np.int64),
        "end": (start + rng.integers(0, 5000, n)).astype(np.int64),
        "kind": pd.Categorical(kind, categories=["compute", "comm", "memory"]),
        "name": pd.Categorical(rng.choice(names, n)),
        "op": pd.Categorical(rng.choice(ops, n)),
        "grid": rng.choice([-1, 1, 4, 128, 4096], n).astype(np.int64),
    })  # fmt: skip
    fast = tax_part(iv, mode="gpu")
    general = tax_part(_general(iv), mode="gpu")
    pd.testing.assert_frame_equal(fast, general)
    # the two paths were taken: categorical name/op -> the fast one; strings -> not
    from domino_prof.analysis.overlap_tax import _gpu_groups, overlapped_mask

    comp, ov = overlapped_mask(iv)
    dur = (iv["end"] - iv["start"]).to_numpy()[comp]
    pd.testing.assert_frame_equal(_gpu_groups(iv.loc[comp], ov, dur), fast)
    assert _gpu_groups(_general(iv).loc[comp], ov, dur) is None
    # ops differing only in digits share a key: fewer keys than (name, grid, op) triples
    assert fast["key"].str.contains(" @ fwd.layer_attn_N_batch_N").any()
    n_compute = int((kind == "compute").sum())
    assert int(fast[["n_overlapped", "n_alone"]].to_numpy().sum()) == n_compute
