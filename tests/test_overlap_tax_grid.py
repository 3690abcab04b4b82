"""The overlap tax groups kernels by name, launch grid and op (docs/METRICS.md, Extension:
overlap tax), and the trace loader's ``grid`` column is x·y·z of ``args.grid``. Hand-built
trace, times in µs; expected values worked out in the comments."""

from __future__ import annotations

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
