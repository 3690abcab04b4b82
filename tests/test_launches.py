"""Kernel launches on a hand-built trace: delays, host-bound idle, tiny kernels, graphs.

Builder times are µs; expected values are ns (x1000).
"""

from __future__ import annotations

import json

import pytest
from test_switches import load
from tracegen import TraceBuilder

from domino_prof.analysis.config import AnalysisConfig
from domino_prof.analysis.launches import graph_candidates, launch_table
from domino_prof.analysis.results import notes_about
from domino_prof.engine import analyze


def launch_rank() -> TraceBuilder:
    """Stream 7 (a..g) and stream 9 (h). (launch start, launch dur) -> device [start, end):

    a: (0, 2)  -> [5, 25)    delay 3;  first on stream
    b: (3, 2)  -> [25, 45)   delay 20; launched before a ended: not host-bound
    c: (50, 4) -> [56, 57)   delay 2;  host-bound (50 > 45): idle 56-45 = 11; tiny (1 < 4)
    d: (54, 4) -> [60, 61)   delay 2;  54 < 57: not host-bound; tiny
    e: (62, 4) -> [68, 69)   delay 2;  host-bound (62 > 61): idle 7; tiny
    f: (70, 2) -> [80, 100)  delay 8;  host-bound (70 > 69): idle 11
    g: (72, 1) -> [100, 130) delay 27; not host-bound
    h: (40, 1) -> [46, 52) on stream 9, delay 5: busy inside c's gap [45, 56) for 6
    host-bound idle = 11 + 7 + 11 = 29; device-idle part = (11-6) + 7 + 11 = 23
    graph candidate: c, d, e, f (flags hb|tiny), saving 29, device-idle saving 23
    """
    b = TraceBuilder(rank=0)
    b.step(1, 0, 300)
    b.annotation("fwd.gemm", 0, 10)
    b.annotation("fwd.small_ops", 49, 26)  # [49, 75): launches c..g
    for name, ls, ld, s, d in [
        ("a", 0, 2, 5, 20), ("b", 3, 2, 25, 20), ("c", 50, 4, 56, 1), ("d", 54, 4, 60, 1),
        ("e", 62, 4, 68, 1), ("f", 70, 2, 80, 20), ("g", 72, 1, 100, 30),
    ]:  # fmt: skip
        b.kernel(f"k_{name}", stream=7, start=s, dur=d, launch=ls, launch_dur=ld)
    b.kernel("k_h", stream=9, start=46, dur=6, launch=40, launch_dur=1)
    return b


def test_launch_table_exact(tmp_path):
    _trace, iv = load(tmp_path, launch_rank())
    lt = launch_table(iv)
    s7 = lt.loc[lt["stream"] == 7].sort_values("start")
    assert s7["launch_delay_ns"].tolist() == [3_000, 20_000, 2_000, 2_000, 2_000, 8_000, 27_000]
    assert s7["host_bound"].tolist() == [False, False, True, False, True, True, False]
    assert s7["host_bound_idle_ns"].tolist() == [0, 0, 11_000, 0, 7_000, 11_000, 0]
    assert s7["host_bound_device_idle_ns"].tolist() == [0, 0, 5_000, 0, 7_000, 11_000, 0]
    assert s7["tiny"].tolist() == [False, False, True, True, True, False, False]
    cands = graph_candidates(lt, min_run=3)
    assert len(cands) == 1
    c = cands.iloc[0]
    assert (c["stream"], c["n_intervals"], c["n_host_bound"], c["n_tiny"]) == (7, 4, 3, 3)
    assert (c["saving_ns"], c["device_idle_saving_ns"]) == (29_000, 23_000)
    assert c["ops"] == ["fwd.small_ops"]
    assert graph_candidates(lt, min_run=5).empty


def test_launch_section(tmp_path):
    trace, iv = load(tmp_path, launch_rank())
    out = analyze(trace, AnalysisConfig()).overheads
    json.dumps(out.to_json(), allow_nan=False)
    la = out["launches"]
    assert la["computed"] and la["n_launched"] == 8 and la["n_without_launch_call"] == 0
    # counted delays (µs): a..h = 3, 20, 2, 2, 2, 8, 27, 5 -> sorted 2,2,2,3,5,8,20,27
    # p50 at position 3.5: 3 + 0.5*(5-3) = 4; p95 at 6.65: 20 + 0.65*7 = 24.55
    assert la["launch_delay"]["total_ns"] == 69_000
    assert la["launch_delay"]["p50_ns"] == pytest.approx(4_000)
    assert la["launch_delay"]["p95_ns"] == pytest.approx(24_550)
    assert la["launch_cpu_ns"] == 20_000  # 2+2+4+4+4+2+1+1
    assert la["host_bound_idle_ns"] == 29_000 and la["n_host_bound"] == 3
    assert la["host_bound_device_idle_ns"] == 23_000
    assert la["n_tiny"] == 3 and la["tiny_dur_ns"] == 3_000
    assert la["tiny_share"] == pytest.approx(3 / 8)
    assert la["n_graph_candidates"] == 1 and la["graph_saving_ns"] == 29_000
    # one rank-step: 29 µs -> 0.029 ms/step; device-idle 0.023
    assert la["host_bound_idle_ms_per_step"] == pytest.approx(0.029)
    assert la["graph_device_idle_saving_ms_per_step"] == pytest.approx(0.023)
    per_stream = {r["stream"]: r for r in la["per_stream"]}
    assert per_stream[7]["host_bound_idle_ns"] == 29_000 and per_stream[7]["n_tiny"] == 3
    assert per_stream[7]["top_ops"] == ["fwd.small_ops"]
    assert per_stream[9]["host_bound_idle_ns"] == 0 and per_stream[9]["n_intervals"] == 1
    (it,) = la["per_iteration"]
    # wall = 130 - 5 = 125 µs; device-idle share 23/125 = 0.184 > 0.05
    assert it["wall_ns"] == 125_000 and it["flagged"] is True
    assert it["host_bound_share"] == pytest.approx(23 / 125)
    assert it["top_ops"] == ["fwd.small_ops"]
    assert la["top_ops"][0]["op"] == "fwd.small_ops"
    assert la["top_ops"][0]["host_bound_device_idle_ns"] == 23_000
    # findings: host-bound, tiny (no gain -> low). The host-bound gain is the replay's
    # (analysis.replay) with launches at CUDA-graph cost: every launch call and the host
    # gap before it cost nothing (all calls at 0 µs), each kernel keeps its fitted launch
    # latency (a 5, h 6, c 6, d 6, e 6, f 10, g 6 µs; b 6) and follows its stream
    # predecessor after min(its fitted stream delay 0, 1 µs) = 0: a [5, 25], b [25, 45],
    # h [6, 12] (stream 9), c [45, 46], d [46, 47], e [47, 48], f [48, 68], g [68, 98]:
    # wall 93 µs against 125 -> gain 0.032 ms (26% of the step -> high)
    f = out["findings"]
    assert [x["id"] for x in f] == ["host_bound_launches", "tiny_kernels"]
    assert f[0]["severity"] == "high"
    assert f[0]["est_gain_ms_per_step"] == pytest.approx(0.032)
    assert f[0]["where"] == {"rank": 0, "stream": 7, "op": "fwd.small_ops", "iteration": 1}
    assert f[1]["value"] == pytest.approx(37.5) and f[1]["est_gain_ms_per_step"] is None


def test_graph_launch_counts_delay_once_and_never_tiny(tmp_path):
    """Two kernels under one cudaGraphLaunch (same correlation): only the first has a
    launch delay (10 - 3 = 7 µs); neither is tiny nor host-bound."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    corr = b.runtime("cudaGraphLaunch", 1, 2)
    for start in (10, 11):
        b.events.append({"ph": "X", "cat": "kernel", "name": "graph_k", "pid": 0, "tid": 7,
                         "ts": start, "dur": 0.5,
                         "args": {"device": 0, "stream": 7, "correlation": corr}})  # fmt: skip
    _trace, iv = load(tmp_path, b)
    lt = launch_table(iv).sort_values("start")
    assert lt["launch_delay_ns"].tolist() == [7_000, 0]
    assert lt["delay_counted"].tolist() == [True, False]
    assert lt["tiny"].tolist() == [False, False]
    assert lt["host_bound"].tolist() == [False, False]


def test_versioned_api_names_are_launches(tmp_path):
    """CUPTI sometimes names calls with a version suffix (cudaLaunchKernelExC_v11060)."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("k", stream=7, start=10, dur=5, launch=1, launch_name="cudaLaunchKernelExC_v11060")
    _trace, iv = load(tmp_path, b)
    lt = launch_table(iv)
    assert lt["launched"].tolist() == [True]
    assert lt["launch_delay_ns"].tolist() == [8_000]  # 10 - (1 + 1)


def test_device_idle_is_a_union_and_between_step_gaps_are_apart(tmp_path):
    """Two streams idle at the same time count once; a gap across a step boundary is
    reported apart, not in the per-step figures.

    step 1 [0, 50), step 2 [50, 100). (launch) -> device:
    stream 7: k1 (0) -> [2, 10); k2 (20) -> [30, 40): host-bound gap [10, 30) = 20
              k3 (60, step 2) -> [70, 80): host-bound gap [40, 70) = 30, between steps
    stream 9: m1 (1) -> [3, 10);  m2 (15) -> [25, 35): host-bound gap [10, 25) = 15
    per gap, device-idle: k2 [10,30) minus m2's [25,35) = 15; m2 [10,25) = 15 (sum 30)
    union for step 1: [10,30) minus [25,35) = [10,25) = 15
    """
    b = TraceBuilder(rank=0)
    b.step(1, 0, 50)
    b.step(2, 50, 100)
    b.kernel("k1", stream=7, start=2, dur=8, launch=0)
    b.kernel("m1", stream=9, start=3, dur=7, launch=1)
    b.kernel("m2", stream=9, start=25, dur=10, launch=15)
    b.kernel("k2", stream=7, start=30, dur=10, launch=20)
    b.kernel("k3", stream=7, start=70, dur=10, launch=60)
    _trace, iv = load(tmp_path, b)
    la = analyze(_trace, AnalysisConfig()).overheads["launches"]
    it = {r["iteration"]: r for r in la["per_iteration"]}
    assert it[1]["host_bound_device_idle_ns"] == 15_000
    assert it[1]["host_bound_idle_ns"] == 35_000 and it[1]["n_host_bound"] == 2
    assert it[2]["host_bound_device_idle_ns"] == 0 and it[2]["host_bound_idle_ns"] == 0
    assert la["host_bound_between_steps_ns"] == 30_000
    assert la["host_bound_idle_ns"] == 65_000  # every gap, steps or not
    assert la["host_bound_device_idle_ns"] == 15_000
    assert la["host_bound_device_idle_ms_per_step"] == pytest.approx(15_000 / 2 / 1e6)
    per_stream = {r["stream"]: r for r in la["per_stream"]}
    assert per_stream[7]["host_bound_device_idle_ns"] == 15_000 + 30_000  # per gap


def hip_rank() -> TraceBuilder:
    """A ROCm-style stream 7: every HIP launch API, a blocking copy and a hipGraphLaunch.
    (launch start, launch dur) -> device [start, end), in µs:

    a hipExtModuleLaunchKernel (0, 2)   -> [5, 25)    delay 3; first on the stream
    b hipModuleLaunchKernel    (30, 2)  -> [35, 36)   delay 3; host-bound 35-25=10; tiny
    c hipExtLaunchKernel       (40, 2)  -> [45, 46)   delay 3; host-bound 9; tiny
    d hipMemsetAsync           (50, 1)  -> [55, 60)   delay 4; host-bound 9
    e hipMemcpyAsync           (62, 1)  -> [64, 70)   delay 1; host-bound 4
    f hipMemcpyWithStream      (75, 30) -> [80, 100)  blocking: host-bound 10; no delay,
                                                     no launch CPU, not tiny (20 < 30)
    g hipGraphLaunch           (110, 5) -> [120, 121) [121, 122) [122, 123): one call,
                                           delay 5 on the first only; host-bound 20
    h hipLaunchKernel          (130, 2) -> [140, 141) delay 8; host-bound 17; tiny
    launched 10 of 10; host-bound idle 10+9+9+4+10+20+17 = 79; tiny b, c, h: 3/10;
    delays 3+3+3+4+1+5+8 = 27; launch CPU 2+2+2+1+1+5+2 = 15 (the graph call once);
    graph candidate: b c d e (f, blocking, ends it): saving 10+9+9+4 = 32.
    Before HIP names were known only h counted: 1 launched, 1 tiny -> "100 % tiny".
    """
    b = TraceBuilder(rank=0)
    b.step(1, 0, 300)
    for name, api, ls, ld, s, d, cat in [
        ("a", "hipExtModuleLaunchKernel", 0, 2, 5, 20, "kernel"),
        ("b", "hipModuleLaunchKernel", 30, 2, 35, 1, "kernel"),
        ("c", "hipExtLaunchKernel", 40, 2, 45, 1, "kernel"),
        ("d", "hipMemsetAsync", 50, 1, 55, 5, "gpu_memset"),
        ("e", "hipMemcpyAsync", 62, 1, 64, 6, "gpu_memcpy"),
        ("f", "hipMemcpyWithStream", 75, 30, 80, 20, "gpu_memcpy"),
    ]:  # fmt: skip
        b.kernel(f"k_{name}", stream=7, start=s, dur=d, launch=ls, launch_dur=ld,
                 launch_name=api, cat=cat)  # fmt: skip
    corr = b.runtime("hipGraphLaunch", 110, 5)
    for start in (120, 121, 122):
        b.events.append({"ph": "X", "cat": "kernel", "name": "k_graph", "pid": 0, "tid": 7,
                         "ts": b._ts(start), "dur": 1,
                         "args": {"device": 0, "stream": 7, "correlation": corr}})  # fmt: skip
    b.kernel("k_h", stream=7, start=140, dur=1, launch=130, launch_dur=2,
             launch_name="hipLaunchKernel")  # fmt: skip
    return b


def test_hip_launch_apis_and_hip_graphs(tmp_path):
    trace, iv = load(tmp_path, hip_rank())
    lt = launch_table(iv).sort_values("start", kind="stable")
    assert lt["launched"].all()
    assert lt["graph_launched"].tolist() == [False] * 6 + [True] * 3 + [False]
    assert lt["blocking_launch"].tolist() == [False] * 5 + [True] + [False] * 4
    assert lt["host_bound_idle_ns"].tolist() == [
        0, 10_000, 9_000, 9_000, 4_000, 10_000, 20_000, 0, 0, 17_000,
    ]  # fmt: skip
    assert lt["launch_delay_ns"].tolist() == [
        3_000, 3_000, 3_000, 4_000, 1_000, 0, 5_000, 0, 0, 8_000,
    ]  # fmt: skip
    assert lt["tiny"].tolist() == [False, True, True] + [False] * 6 + [True]
    la = analyze(trace, AnalysisConfig()).overheads["launches"]
    assert (la["n_launched"], la["n_graph_launched"], la["n_blocking_launches"]) == (10, 3, 1)
    assert la["host_bound_idle_ns"] == 79_000 and la["n_host_bound"] == 7
    assert la["n_tiny"] == 3 and la["tiny_share"] == pytest.approx(0.3)
    assert la["launch_delay"]["total_ns"] == 27_000 and la["launch_delay"]["count"] == 7
    assert la["launch_cpu_ns"] == 15_000
    assert la["n_graph_candidates"] == 1 and la["graph_saving_ns"] == 32_000
    (c,) = la["graph_candidates"]
    assert (c["n_intervals"], c["n_host_bound"], c["n_tiny"]) == (4, 4, 2)


def test_unknown_launch_api_is_named_in_a_note(tmp_path):
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("k1", stream=7, start=10, dur=5, launch=1)
    b.kernel("k2", stream=7, start=30, dur=5, launch=20, launch_name="hipFutureLaunch")
    trace, iv = load(tmp_path, b)
    out = analyze(trace, AnalysisConfig()).overheads
    assert out["launches"]["n_launched"] == 1
    (note,) = notes_about(out["notes"], "launches")
    assert "are joined to calls that are not known launch APIs" in note
    assert "1 device interval(s)" in note and "(hipFutureLaunch 1)" in note
