"""Comm split by collective type (issue #14): all-reduce, reduce-scatter and all-gather
kernels told apart by name (or the profiler's "Collective name"), each type's comm the
union of its intervals, in the analysis, `analyze --by collective` and the report."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
from tracegen import TraceBuilder

from domino_prof.analysis import AnalysisConfig
from domino_prof.analysis.overlap import collective_type
from domino_prof.engine import analyze
from domino_prof.trace import load_trace

US = 1000


def _trace(tmp_path):
    """One rank, one step [0, 200) µs. Compute on stream 7: [10, 50) and [100, 130).
    Comm on stream 13 (ring kernels) and 14:
      AllReduce      [20, 40)  -> hidden 20
      ReduceScatter  [40, 60)  -> hidden 10 ([40, 50))
      ReduceScatter  [55, 70)  on stream 14, overlaps the first RS: union [40, 70) = 30
      AllGather      [120, 150) -> hidden 10 ([120, 130))
    """
    b = TraceBuilder(rank=0, world_size=2)
    b.step(1, 0, 200)
    b.kernel("sm90_gemm", stream=7, start=10, dur=40, launch=1)
    b.kernel("sm90_gemm", stream=7, start=100, dur=30, launch=2)
    b.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
             stream=13, start=20, dur=20, launch=3)  # fmt: skip
    b.kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
             stream=13, start=40, dur=20, launch=4)  # fmt: skip
    b.kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
             stream=14, start=55, dur=15, launch=5)  # fmt: skip
    b.kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
             stream=13, start=120, dur=30, launch=6)  # fmt: skip
    return b.write(tmp_path / "rank0.json")


def test_types_from_kernel_and_collective_names():
    names = pd.Series([
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ncclKernel_ReduceScatter_RING_LL_Sum_f32",
        "ncclDevKernel_AllGather_RING_LL", "gloo:all_reduce", "gloo:all_gather",
        "ncclDevKernel_SendRecv", "ncclDevKernel_Broadcast_RING_LL", "multimem_all_reduce_kernel",
        "ncclDevKernel_Reduce_Sum_f32_RING_LL", "mystery_kernel", "ncclDevKernel_Generic",
    ])  # fmt: skip
    coll = pd.Series([""] * 10 + ["_reduce_scatter_base"])
    assert list(collective_type(names, coll)) == [
        "all_reduce", "reduce_scatter", "all_gather", "all_reduce", "all_gather", "send_recv",
        "broadcast", "all_reduce", "reduce", "other", "reduce_scatter",
    ]  # fmt: skip


def test_by_collective_type_exact(tmp_path):
    a = analyze(load_trace(_trace(tmp_path), progress=False), AnalysisConfig())
    t = a.by_collective_type
    got = {
        r["collective"]: (r["count"], r["comm_ns"], r["hidden_ns"], r["exposed_ns"])
        for r in t.to_dict("records")
    }
    assert got == {
        "all_reduce": (1, 20 * US, 20 * US, 0),
        "reduce_scatter": (2, 30 * US, 10 * US, 20 * US),  # union, not 20 + 15
        "all_gather": (1, 30 * US, 10 * US, 20 * US),
    }
    assert list(t["collective"]) == ["all_gather", "reduce_scatter", "all_reduce"]  # comm desc
    assert np.allclose(t["hidden_pct"], 100 * t["hidden_ns"] / t["comm_ns"])
    assert sorted(a.by_collective["collective"]) == [
        "all_gather",
        "all_reduce",
        "reduce_scatter",
        "reduce_scatter",
    ]
    doc = a.to_json()
    assert set(doc["by_collective_type"]["collective"]) == set(got)
    json.dumps(doc, allow_nan=False)


def test_analyze_by_collective_prints_the_types(tmp_path):
    path = _trace(tmp_path)
    p = subprocess.run(
        [sys.executable, "-m", "domino_prof.cli", "analyze", str(path), "--by", "collective"],
        capture_output=True, text=True, check=False,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "By collective type" in p.stdout
    line = next(ln for ln in p.stdout.splitlines() if "reduce_scatter" in ln and "│" in ln)
    cells = [c.strip() for c in line.strip("│ ").split("│")]
    # rank, collective, count, comm ms, hidden ms, exposed ms, hidden %
    assert cells[:7] == ["0", "reduce_scatter", "2", "0.030", "0.010", "0.020", "33.3%"]


def test_report_section_by_collective_type(tmp_path):
    from domino_prof.report import figures as F

    a = analyze(load_trace(_trace(tmp_path), progress=False), AnalysisConfig())
    sec = F.comm_by_collective_type(a)
    fig = sec.body
    assert [tr.name for tr in fig.data] == ["comm, exposed", "comm, hidden"]
    assert list(fig.data[0].y) == ["all_reduce", "reduce_scatter", "all_gather"]  # largest on top
    # one step, one rank: µs per step and rank
    assert list(fig.data[0].x) == [0.0, 20.0, 20.0]  # exposed
    assert list(fig.data[1].x) == [20.0, 10.0, 10.0]  # hidden
