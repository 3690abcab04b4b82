"""Phase and op of kernels launched by a CUDA graph launch (docs/METRICS.md "Extension:
phase"): a graph may hold work of every phase (one graph per step: the reference model's
``--graph-scope step``), so the "inside a step: forward" rule does not hold for them; a
graph launched inside a named range keeps that range's op and phase.

Hand-built trace, times in µs, one step [0, 100):

    fwd.layer_0 [1, 20) holds graph launch G1 (2);  no range holds graph launch G2 (30)
    G1: gemm_a  s7 [5, 15)    ncclDevKernel_AllReduce s13 [10, 20)   -> fwd.layer_0 / forward
    G2: gemm_b  s7 [35, 55)   ncclDevKernel_AllReduce s13 [40, 60)   -> (none) / other
        gemm_c  s7 [60, 70)   (a backward GEMM of the same graph)     -> (none) / other
    K:  gemm_d  s7 [75, 80)   cudaLaunchKernel (72), no range          -> (none) / forward

comm per phase: forward [10, 20) = 10, hidden by gemm_a [5, 15) for 5;
other [40, 60) = 20, hidden by gemm_b [35, 55) for 15.
"""

from __future__ import annotations

from tracegen import TraceBuilder

from domino_prof.engine import analyze
from domino_prof.trace import load_trace

US = 1000
AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def _trace(tmp_path):
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 100)
    b.annotation("fwd.layer_0", 1, 19)
    g1 = b.runtime("cudaGraphLaunch_v10000", 2, 2)
    b.kernel("gemm_a", stream=7, start=5, dur=10, corr=g1)
    b.kernel(AR, stream=13, start=10, dur=10, corr=g1)
    g2 = b.runtime("cudaGraphLaunch_v10000", 30, 2)
    b.kernel("gemm_b", stream=7, start=35, dur=20, corr=g2)
    b.kernel(AR, stream=13, start=40, dur=20, corr=g2)
    b.kernel("gemm_c", stream=7, start=60, dur=10, corr=g2)
    b.kernel("gemm_d", stream=7, start=75, dur=5, launch=72)
    return b.write(tmp_path / "rank0.json")


def test_graph_launched_kernels_outside_ranges_have_phase_other(tmp_path):
    a = analyze(load_trace(_trace(tmp_path)))
    iv = a.intervals.sort_values("start")
    got = list(zip(iv["name"].astype(str), iv["op"].astype(str), iv["phase"].astype(str)))
    assert got == [
        ("gemm_a", "fwd.layer_0", "forward"),
        (AR, "fwd.layer_0", "forward"),
        ("gemm_b", "(none)", "other"),
        (AR, "(none)", "other"),
        ("gemm_c", "(none)", "other"),
        ("gemm_d", "(none)", "forward"),
    ]
    assert list(iv["iteration"]) == [1] * 6
    ph = a.by_phase.set_index("phase")
    assert ph.loc["forward", "comm_ns"] == 10 * US and ph.loc["forward", "hidden_ns"] == 5 * US
    assert ph.loc["other", "comm_ns"] == 20 * US and ph.loc["other", "hidden_ns"] == 15 * US
    notes = [str(n) for n in a.notes]
    (note,) = [n for n in notes if "CUDA graph launches that no op range holds" in n]
    assert note.startswith("3 device intervals (1 of them comm)")
