"""Overlap numbers on hand-worked synthetic traces (docs/METRICS.md "Overlap").

All times below are µs relative to the trace start; the analysis works in ns, so an
expected ``30`` µs is ``30_000`` ns. The arithmetic is written next to each number.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from tracegen import TraceBuilder

from domino_prof.analysis import AnalysisConfig, combine_comm_pattern
from domino_prof.analysis.classify import innermost_containing, leaf_ops
from domino_prof.analysis.results import notes_about
from domino_prof.engine import analyze
from domino_prof.errors import ConfigError, TraceError
from domino_prof.trace import load_trace

US = 1000  # ns per µs


def build_rank0() -> TraceBuilder:
    """Rank 0: 3 compute streams (7, 8, 9), comm on 2 streams (13, 14), two steps.

    CPU (main thread 4242): ProfilerStep#1 [0,100), ProfilerStep#2 [100,200)
      fwd.layer_attn_0_batch_0 [1,40) holding fwd.inner [5,10)
      bwd.layer_0 [50,90);  Optimizer.step#AdamW.step [92,99);  fwd.layer_attn_1 [101,150)
    autograd thread 99: autograd::engine::evaluate_function: MmBackward0 [60,80)

    device (launch time in brackets)                       kind     op / phase / iteration
      K1 sm90_gemm_a   s7  [10,30)  (2)                    compute  fwd.layer_attn_0_batch_0
      K2 gemm_nested   s7  [12,20)  (4)  nested in K1      compute
      K3 elementwise   s8  [25,35)  (6)                    compute  fwd.inner
      K4 zero_k        s9  [40,40)  (7)  zero length       compute
      M1 memcpy        s7  [42,50)  (8)                    memory
      K5 softmax       s9  [60,70)  (55)                   compute  bwd.layer_0 / backward
      C1 ncclDevKernel s13 [15,45)  (3)                    comm     fwd.layer_attn_0_batch_0 / fwd / 1
      C2 ncclKernel    s14 [40,55)  (45: no annotation)    comm     (none) / forward / 1
      C7 ncclDevKernel s14 [64,75)  (62 on thread 99)      comm     (none) / backward / 1
      C3 ncclDevKernel s13 [80,80)  (60) zero length       comm     bwd.layer_0 / backward / 1
      C4 ncclDevKernel s13 [95,120) (93) crosses step end  comm     Optimizer.step#.. / optimizer / 1
      K6 gemm_b        s8  [110,130) (102)                 compute  fwd.layer_attn_1 / 2
      K7 gemm_c        s9  [150,170) (104)                 compute
      C5 ncclDevKernel s14 [140,160) (105)                 comm     fwd.layer_attn_1 / forward / 2
      K8 gemm_outside  s7  [200,215) (201)                 compute  (none) / other / -1
      C6 ncclKernel    s13 [210,220) (205) outside steps   comm     (none) / other / -1
    """
    b = TraceBuilder(rank=0, world_size=2)
    b.step(1, 0, 100)
    b.step(2, 100, 200)
    b.annotation("fwd.layer_attn_0_batch_0", 1, 39)
    b.annotation("fwd.inner", 5, 5)
    b.annotation("bwd.layer_0", 50, 40)
    b.annotation("Optimizer.step#AdamW.step", 92, 7)
    b.annotation("fwd.layer_attn_1", 101, 49)
    b.cpu("autograd::engine::evaluate_function: MmBackward0", 60, 20, tid=99)
    b.kernel("sm90_gemm_a", stream=7, start=10, dur=20, launch=2)
    b.kernel("gemm_nested", stream=7, start=12, dur=8, launch=4)
    b.kernel("elementwise", stream=8, start=25, dur=10, launch=6)
    b.kernel("zero_k", stream=9, start=40, dur=0, launch=7)
    b.memcpy(stream=7, start=42, dur=8, launch=8)
    b.kernel("softmax", stream=9, start=60, dur=10, launch=55)
    b.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", stream=13, start=15, dur=30, launch=3)
    b.kernel("ncclKernel_AllGather_RING_LL_Sum_float", stream=14, start=40, dur=15, launch=45)
    b.kernel("ncclDevKernel_AllReduce_Sum_f32_bwd", stream=14, start=64, dur=11, launch=62, tid=99)
    b.kernel("ncclDevKernel_Zero", stream=13, start=80, dur=0, launch=60)
    b.kernel("ncclDevKernel_ReduceScatter_Sum_bf16", stream=13, start=95, dur=25, launch=93)
    b.kernel("gemm_b", stream=8, start=110, dur=20, launch=102)
    b.kernel("gemm_c", stream=9, start=150, dur=20, launch=104)
    b.kernel("ncclDevKernel_AllReduce_Sum_bf16_2", stream=14, start=140, dur=20, launch=105)
    b.kernel("gemm_outside", stream=7, start=200, dur=15, launch=201)
    b.kernel("ncclKernel_Broadcast_RING", stream=13, start=210, dur=10, launch=205)
    return b


def build_rank1() -> TraceBuilder:
    """Rank 1: compute s7 [0, 50.001) (ns precision), comm s13 [20,80): H = 30.001 µs."""
    b = TraceBuilder(rank=1, world_size=2)
    b.step(1, 0, 100)
    b.annotation("fwd.x", 0.5, 10)
    b.kernel("gemm", stream=7, start=0, dur=50.001, launch=1)
    b.kernel("ncclKernel_AllReduce", stream=13, start=20, dur=60, launch=2)
    return b


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth")
    build_rank0().write(d / "rank0.json")
    build_rank1().write(d / "rank1.json.gz")
    return d


@pytest.fixture(scope="module")
def synth(synth_dir):
    return analyze(load_trace(synth_dir))


def rows(df, keys, cols=("comm_ns", "hidden_ns", "exposed_ns")):
    return {
        tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]: tuple(int(r[c]) for c in cols)
        for r in df.to_dict("records")
    }


def test_per_rank(synth):
    # rank 0 comm union: [15,55) ∪ [64,75) ∪ [95,120) ∪ [140,160) ∪ [210,220)
    #   = 40 + 11 + 25 + 20 + 10 = 106  (C3 is zero length; C1/C2 overlap counted once)
    # compute union: [10,35) [60,70) [110,130) [150,170) [200,215)  (K4 zero, M1 memory)
    # hidden: 20 ([15,35)) + 6 ([64,70)) + 10 ([110,120)) + 10 ([150,160)) + 5 = 51
    # C2 on [40,55) overlaps only comm (C1) and memory (M1): not hidden
    # rank 1: C = 60, H = |[20,80) ∩ [0,50.001)| = 30.001
    assert rows(synth.by_rank, ["rank"]) == {
        0: (106 * US, 51 * US, 55 * US),
        1: (60 * US, 30_001, 29_999),
    }
    pct = dict(zip(synth.by_rank["rank"], synth.by_rank["hidden_pct"]))
    assert pct[0] == pytest.approx(100 * 51 / 106)
    assert pct[1] == pytest.approx(100 * 30_001 / 60_000)
    assert synth.mode == "gpu"
    assert synth.ranks == [0, 1]


def test_totals(synth):
    t = synth.totals
    assert (t["comm_ns"], t["hidden_ns"], t["exposed_ns"]) == (166_000, 81_001, 84_999)
    assert t["hidden_pct"] == pytest.approx(100 * 81_001 / 166_000)
    assert t["n_iterations"] == 2 and t["n_ranks"] == 2
    # (rank, iteration) walls: r0 it1 110, r0 it2 60, r1 it1 80 -> mean 250/3 µs
    assert t["step_ms"] == pytest.approx(250 / 3 / 1000)
    # exposed per step: 40, 10, 29.999 µs -> mean
    assert t["exposed_ms_per_step"] == pytest.approx((40_000 + 10_000 + 29_999) / 3 / 1e6)
    assert t["outside_steps"] == {"intervals": 2, "comm_ns": 10 * US, "exposed_ns": 5 * US}
    assert t["intervals_by_kind"] == {"compute": 9, "comm": 8, "memory": 1}


def test_per_stream(synth):
    # s13: C1 [15,45) + C4 [95,120) + C6 [210,220) = 30+25+10 = 65; H = 20+10+5 = 35
    # s14: C2 [40,55) + C7 [64,75) + C5 [140,160) = 15+11+20 = 46; H = 0+6+10 = 16
    # compute streams carry no comm: 0 and hidden % undefined (NaN in-frame)
    got = rows(synth.by_stream, ["rank", "stream"])
    assert got == {
        (0, 7): (0, 0, 0),
        (0, 8): (0, 0, 0),
        (0, 9): (0, 0, 0),
        (0, 13): (65 * US, 35 * US, 30 * US),
        (0, 14): (46 * US, 16 * US, 30 * US),
        (1, 7): (0, 0, 0),
        (1, 13): (60 * US, 30_001, 29_999),
    }
    s = synth.by_stream.set_index(["rank", "stream"])["hidden_pct"]
    assert np.isnan(s[(0, 7)])


def test_per_collective(synth):
    got = rows(synth.by_collective, ["rank", "name"])
    assert got == {
        (0, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"): (30 * US, 20 * US, 10 * US),
        (0, "ncclKernel_AllGather_RING_LL_Sum_float"): (15 * US, 0, 15 * US),
        (0, "ncclDevKernel_AllReduce_Sum_f32_bwd"): (11 * US, 6 * US, 5 * US),
        (0, "ncclDevKernel_Zero"): (0, 0, 0),
        (0, "ncclDevKernel_ReduceScatter_Sum_bf16"): (25 * US, 10 * US, 15 * US),
        (0, "ncclDevKernel_AllReduce_Sum_bf16_2"): (20 * US, 10 * US, 10 * US),
        (0, "ncclKernel_Broadcast_RING"): (10 * US, 5 * US, 5 * US),
        (1, "ncclKernel_AllReduce"): (60 * US, 30_001, 29_999),
    }
    zero = synth.by_collective[synth.by_collective["name"] == "ncclDevKernel_Zero"]
    assert np.isnan(zero["hidden_pct"].iloc[0])


def test_per_op(synth):
    # (none): C2 [40,55) ∪ C7 [64,75) ∪ C6 [210,220) = 36, H = 0 + 6 + 5 = 11
    # ops overlap each other (C1/C2), so their sum (111) exceeds the rank's 106
    assert rows(synth.by_op, ["rank", "op"]) == {
        (0, "fwd.layer_attn_0_batch_0"): (30 * US, 20 * US, 10 * US),
        (0, "(none)"): (36 * US, 11 * US, 25 * US),
        (0, "bwd.layer_0"): (0, 0, 0),
        (0, "Optimizer.step#AdamW.step"): (25 * US, 10 * US, 15 * US),
        (0, "fwd.layer_attn_1"): (20 * US, 10 * US, 10 * US),
        (1, "fwd.x"): (60 * US, 30_001, 29_999),
    }
    # sorted by exposed, largest first within a rank
    assert synth.by_op[synth.by_op["rank"] == 0]["op"].iloc[0] == "(none)"


def test_op_attribution_on_kernels(synth):
    f = synth.intervals
    f0 = f[f["rank"] == 0].set_index("name")
    assert f0.loc["elementwise", "op"] == "fwd.inner"  # innermost of two nested ranges
    assert f0.loc["zero_k", "op"] == "fwd.inner"
    assert f0.loc["sm90_gemm_a", "op"] == "fwd.layer_attn_0_batch_0"
    assert f0.loc["Memcpy DtoD (Device -> Device)", "kind"] == "memory"
    assert f0.loc["gemm_outside", "iteration"] == -1
    assert f0.loc["ncclDevKernel_AllReduce_Sum_f32_bwd", "launch_tid"] == 99
    assert f0.loc["sm90_gemm_a", "launch_name"] == "cudaLaunchKernel"
    base = 1_790_000_000_000_000_000
    assert f0.loc["sm90_gemm_a", "launch_start"] == base + 2 * US
    assert f0.loc["sm90_gemm_a", "launch_end"] == base + 3 * US  # launch_dur 1 µs


def test_per_phase(synth):
    # forward: C1 ∪ C2 ∪ C5 = [15,55) + [140,160) = 60, H = 20 + 10 = 30
    # backward: C7 (autograd thread context) 11/6 and C3 (bwd.* op, zero length)
    # optimizer: C4 25/10 (inside Optimizer.step#); other: C6 outside steps 10/5
    assert rows(synth.by_phase, ["rank", "phase"]) == {
        (0, "forward"): (60 * US, 30 * US, 30 * US),
        (0, "backward"): (11 * US, 6 * US, 5 * US),
        (0, "optimizer"): (25 * US, 10 * US, 15 * US),
        (0, "other"): (10 * US, 5 * US, 5 * US),
        (1, "forward"): (60 * US, 30_001, 29_999),
    }
    f0 = synth.intervals[synth.intervals["rank"] == 0].set_index("name")
    assert f0.loc["softmax", "phase"] == "backward"


def test_per_iteration(synth):
    it = synth.by_iteration.set_index(["rank", "iteration"])
    # it 1 (launches in [0,100)): C1,C2,C7,C3,C4 = [15,55)+[64,75)+[95,120) = 76, H 36;
    #   C4 runs past the CPU step end (100) and stays in step 1; its hiding by K6
    #   (a step-2 kernel) still counts: compute of any stream hides comm.
    #   wall: first start K1 10 .. last end C4 120 = 110
    # it 2: K6 [110,130), C5 [140,160), K7 [150,170): wall 60, C 20, H 10
    # outside steps (-1): K8 [200,215), C6 [210,220): wall 20, C 10, H 5
    assert rows(synth.by_iteration, ["rank", "iteration"], ("comm_ns", "hidden_ns", "wall_ns")) == {
        (0, -1): (10 * US, 5 * US, 20 * US),
        (0, 1): (76 * US, 36 * US, 110 * US),
        (0, 2): (20 * US, 10 * US, 60 * US),
        (1, 1): (60 * US, 30_001, 80 * US),
    }
    assert it.loc[(0, 1), "exposed_comm_share"] == pytest.approx(40 / 110)
    assert it.loc[(0, 2), "exposed_comm_share"] == pytest.approx(10 / 60)


def test_json_document_is_complete_and_nan_free(synth):
    doc = synth.to_json()
    text = json.dumps(doc, allow_nan=False)  # raises on NaN
    back = json.loads(text)
    assert back["schema"] == "domino-prof/analysis" and back["version"] == 2
    assert back["totals"]["comm_ns"] == 166_000
    cols = back["by_stream"]  # v2: one list per column
    rows = [dict(zip(cols, vals)) for vals in zip(*cols.values())]
    s7 = next(r for r in rows if r["rank"] == 0 and r["stream"] == 7)
    assert s7["hidden_pct"] is None and s7["comm_ns"] == 0
    assert len(back["by_collective"]["name"]) == 8  # v2: one list per column
    for key in ("by_rank", "by_op", "by_phase", "by_iteration", "notes", "config", "overheads"):
        assert key in back
    assert back["config"]["comm_pattern"] == AnalysisConfig().comm_pattern


def test_comm_pattern_user_extension(tmp_path):
    # "custom_allreduce" is compute by default (so it hides the nccl kernel fully),
    # comm when the user pattern is OR-ed in (then nothing hides the nccl kernel)
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("custom_allreduce_kernel", stream=7, start=0, dur=50, launch=1)
    b.kernel("ncclDevKernel_AllReduce", stream=13, start=10, dur=20, launch=2)
    b.write(tmp_path / "rank0.json")
    tr = load_trace(tmp_path)
    a = analyze(tr)
    assert rows(a.by_rank, ["rank"]) == {0: (20 * US, 20 * US, 0)}
    cfg = AnalysisConfig(comm_pattern=combine_comm_pattern("custom_allreduce"))
    a2 = analyze(tr, cfg)
    # comm union [0,50) = 50, no compute left
    assert rows(a2.by_rank, ["rank"]) == {0: (50 * US, 0, 50 * US)}
    # replacing the default: only the custom kernel is comm, the nccl one is compute
    a3 = analyze(tr, AnalysisConfig(comm_pattern=combine_comm_pattern("custom", replace=True)))
    assert rows(a3.by_rank, ["rank"]) == {0: (50 * US, 20 * US, 30 * US)}
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        combine_comm_pattern("(")


def test_memcpy_as_comm(tmp_path):
    # a peer-to-peer copy [0,10) beside compute [5,20) is comm by default: C = 10, H = 5;
    # a same-device DtoD copy [30,40) is memory unless --memcpy-as-comm: then C = 20
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("gemm", stream=7, start=5, dur=15, launch=1)
    b.kernel("Memcpy PtoP (Device -> Device)", stream=20, start=0, dur=10, launch=2,
             launch_name="cudaMemcpyAsync", cat="gpu_memcpy")  # fmt: skip
    b.memcpy(stream=7, start=30, dur=10, launch=25)
    b.write(tmp_path / "rank0.json")
    tr = load_trace(tmp_path)
    a = analyze(tr)
    assert rows(a.by_rank, ["rank"]) == {0: (10 * US, 5 * US, 5 * US)}
    assert a.totals["intervals_by_kind"] == {"compute": 1, "comm": 1, "memory": 1}
    a = analyze(tr, AnalysisConfig(memcpy_as_comm=True))
    assert rows(a.by_rank, ["rank"]) == {0: (20 * US, 5 * US, 15 * US)}
    assert [s["source"] for s in a.totals["comm_sources"]] == ["p2p_copy", "dtod_copy"]


def test_no_device_activity_is_a_clear_error(tmp_path):
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.cpu("aten::mm", 1, 5)
    b.write(tmp_path / "rank0.json")
    with pytest.raises(TraceError, match="no device activity .* ProfilerActivity.CUDA"):
        analyze(load_trace(tmp_path))


def test_only_device_categories_count(tmp_path):
    # gpu_user_annotation / cuda_sync / cuda_runtime on the device are not work
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("ncclDevKernel_AllReduce", stream=13, start=10, dur=20, launch=1)
    b.kernel("big_annotation", stream=7, start=0, dur=90, cat="gpu_user_annotation")
    b.stream_wait(stream=7, at=15, wait_on_stream=13, record_corr=1)
    b.write(tmp_path / "rank0.json")
    a = analyze(load_trace(tmp_path))
    assert rows(a.by_rank, ["rank"]) == {0: (20 * US, 0, 20 * US)}
    assert set(a.intervals["name"].astype(str)) == {"ncclDevKernel_AllReduce"}


def test_missing_launch_is_outside_steps_with_a_note(tmp_path):
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("ncclDevKernel_AllReduce", stream=13, start=10, dur=20)  # no launch call
    b.write(tmp_path / "rank0.json")
    a = analyze(load_trace(tmp_path))
    r = a.intervals.iloc[0]
    assert (r["iteration"], r["op"], r["phase"], r["launch_start"]) == (-1, "(none)", "other", -1)
    (note,) = notes_about(a.notes, "classify")
    assert note.startswith("1 device intervals have no launch call with their correlation id")


def test_cpu_gloo_synthetic(tmp_path):
    """Hand-built CPU-only trace: threads stand in for streams.

    main thread 1 (pid 4242): ProfilerStep#3 [0,100); fwd.a [0,60) holding c10d::allreduce_
    [10,12); compute aten::mm [20,40) and [50,70); a c10d::wait-like bookkeeping op
    record_param_comms [55,58) inside aten::mm is not compute (its 3 µs are cut out).
    runloop thread 7: gloo:all_reduce [30,80).
    C = 50; compute reference = [20,40) ∪ ([50,70) minus [55,58)) -> hidden
    |[30,80) ∩ ([20,40) ∪ [50,55) ∪ [58,70))| = 10 + 5 + 12 = 27.
    """
    b = TraceBuilder(rank=0, backend="gloo")
    b.thread_name(7, "thread 7 (pt_gloo_runloop)")
    b.step(3, 0, 100, tid=1)
    b.annotation("fwd.a", 0, 60, tid=1)
    b.cpu("c10d::allreduce_", 10, 2, tid=1)
    b.cpu("aten::mm", 20, 20, tid=1)
    b.cpu("aten::mm", 50, 20, tid=1)
    b.cpu("record_param_comms", 55, 3, tid=1)
    b.annotation("gloo:all_reduce", 30, 50, tid=7)
    b.write(tmp_path / "rank0.json")
    a = analyze(load_trace(tmp_path))
    assert a.mode == "cpu"
    assert rows(a.by_rank, ["rank"]) == {0: (50 * US, 27 * US, 23 * US)}
    assert a.totals["comm_sources"] == [{"source": "gloo", "label": "gloo collectives (CPU)",
                                         "n_intervals": 1, "busy_ns": 50 * US}]  # fmt: skip
    comm = a.intervals[a.intervals["kind"] == "comm"].iloc[0]
    assert comm["op"] == "fwd.a"  # innermost annotation at the c10d launch on thread 1
    assert comm["iteration"] == 3
    assert comm["launch_name"] == "c10d::allreduce_" and comm["launch_tid"] == 1
    assert rows(a.by_stream, ["rank", "stream"]) == {
        (0, 1): (0, 0, 0),
        (0, 7): (50 * US, 27 * US, 23 * US),
    }
    # record_param_comms is neither a compute row nor comm
    assert "record_param_comms" not in set(a.intervals["name"].astype(str))


# ---- innermost annotation: vectorised depth trick vs a brute-force scan ------------


@pytest.mark.parametrize("seed", range(30))
def test_innermost_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    keys, starts, ends = [], [], []
    for k in range(int(rng.integers(1, 4))):
        # properly nested ranges from a random bracket sequence (ties included)
        t, stack = 0, []
        for _ in range(int(rng.integers(0, 30))):
            t += int(rng.integers(0, 3))
            if stack and rng.random() < 0.45:
                s = stack.pop()
                keys.append(k), starts.append(s), ends.append(t)
            else:
                stack.append(t)
        while stack:
            t += int(rng.integers(0, 3))
            keys.append(k), starts.append(stack.pop()), ends.append(t)
    keys, starts, ends = (np.array(x, dtype=np.int64) for x in (keys, starts, ends))
    qk = rng.integers(0, 4, 50)
    qt = rng.integers(0, 60, 50)
    got = innermost_containing(keys, starts, ends, qk, qt)
    for i in range(len(qt)):
        inside = [j for j in range(len(keys))
                  if keys[j] == qk[i] and starts[j] <= qt[i] < ends[j]]  # fmt: skip
        if not inside:
            assert got[i] == -1
        else:
            # innermost = shortest containing range (ties: nested ranges with equal
            # bounds are interchangeable)
            best = min(ends[j] - starts[j] for j in inside)
            assert got[i] in inside
            assert ends[got[i]] - starts[got[i]] == best


def _gloo_builder():
    b = TraceBuilder(rank=0, backend="gloo")
    b.step(1, 0, 100, tid=1)
    b.annotation("fwd.a", 0, 14, tid=1)
    b.annotation("fwd.b", 14, 46, tid=1)
    return b


def test_gloo_launch_matching_fifo_when_counts_agree(tmp_path):
    # c10d ops at 10 (in fwd.a) and 15 (in fwd.b); gloo events start at 16 and 30.
    # Equal counts -> k-th gloo event <-> k-th launch: the one at 16 belongs to the
    # launch at 10 (fwd.a) although the launch at 15 started later, before it.
    b = _gloo_builder()
    b.cpu("c10d::allreduce_", 10, 1, tid=1)
    b.cpu("c10d::allreduce_", 15, 1, tid=1)
    b.annotation("gloo:all_reduce", 16, 10, tid=7)
    b.annotation("gloo:all_reduce", 30, 10, tid=7)
    b.write(tmp_path / "rank0.json")
    comm = analyze(load_trace(tmp_path)).intervals.query("kind == 'comm'")
    assert list(comm["op"].astype(str)) == ["fwd.a", "fwd.b"]
    base = 1_790_000_000_000_000_000
    assert list(comm["launch_start"] - base) == [10 * US, 15 * US]


def test_gloo_launch_matching_latest_before_otherwise(tmp_path):
    # 2 launches (10 in fwd.a, 20 in fwd.b), 3 gloo events (12, 25, 40): counts differ,
    # so each takes the latest launch that started at or before it: 10, 20, 20.
    b = _gloo_builder()
    b.cpu("c10d::allreduce_", 10, 1, tid=1)
    b.cpu("c10d::broadcast_", 20, 1, tid=1)
    for t in (12, 25, 40):
        b.annotation("gloo:all_reduce", t, 2, tid=7)
    b.write(tmp_path / "rank0.json")
    comm = analyze(load_trace(tmp_path)).intervals.query("kind == 'comm'")
    assert list(comm["op"].astype(str)) == ["fwd.a", "fwd.b", "fwd.b"]
    assert list(comm["launch_name"].astype(str)) == [
        "c10d::allreduce_",
        "c10d::broadcast_",
        "c10d::broadcast_",
    ]


def test_two_devices_in_one_rank_hide_separately(tmp_path):
    # device 0: gemm [0,50); device 1: nccl [10,30) and gemm [20,25).
    # Compute hides comm only on its own device: C = 20, H = 5 (not 20).
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("gemm", stream=7, start=0, dur=50, launch=1)
    b.device = 1
    b.kernel("ncclDevKernel_AllReduce", stream=13, start=10, dur=20, launch=2)
    b.kernel("gemm", stream=7, start=20, dur=5, launch=3)
    b.write(tmp_path / "rank0.json")
    a = analyze(load_trace(tmp_path))
    assert rows(a.by_rank, ["rank"]) == {0: (20 * US, 5 * US, 15 * US)}
    assert rows(a.by_stream, ["device", "stream"]) == {
        (0, 7): (0, 0, 0),
        (1, 7): (0, 0, 0),
        (1, 13): (20 * US, 5 * US, 15 * US),
    }


def test_config_is_frozen_keyword_only_and_validated():
    import dataclasses

    cfg = AnalysisConfig(overhead_thresholds={"top_n": 3})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.memcpy_as_comm = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        AnalysisConfig("nccl")  # type: ignore[misc]
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        AnalysisConfig(comm_pattern="[")
    # the default covers both NCCL kernel families, RCCL and HCCL, case-insensitively
    rx = AnalysisConfig().comm_regex
    for name in ("ncclDevKernel_AllGather_RING_LL", "ncclKernel_AllReduce_RING_LL_Sum_float",
                 "rcclGenericKernel", "HcclAllReduce", "c10d::allreduce_"):  # fmt: skip
        assert rx.search(name), name
    for name in ("sm90_gemm", "void at::native::elementwise_kernel", "Memcpy PtoP",
                 "void deep_ep::layout::get_dispatch_layout<256>(long)"):  # fmt: skip
        assert not rx.search(name), name
    assert combine_comm_pattern(None) == AnalysisConfig().comm_pattern
    with pytest.raises(ConfigError):
        combine_comm_pattern(None, replace=True)


def test_cpu_blocked_wait_in_wrapper_is_not_compute(tmp_path):
    """A thread blocked in ``work.wait()`` records no op of its own: the time shows only
    as the self time of the enclosing wrapper op (an autograd node, a Python autograd
    Function). Such wrappers (not aten::*, with ops nested in them) hide comm only
    through their children; aten::* ops and leaf ops count in full.

    main thread 1: ProfilerStep#1 [0,200);
      ColumnParallelFnBackward [0,100) holding c10d::allreduce_ [5,10) and aten::mm
      [30,45); then it blocks in wait() until 100 (no op);
      VocabParallelCrossEntropy [110,190) holding c10d::allreduce_ [111,112), aten::max
      [112,120) (leaf) and aten::mm [120,180) with a nested aten::empty [121,122)
      (aten::* counts in full: [120,180)).
    runloop thread 7: gloo:all_reduce [10,100) and [115,185).
    C = 90 + 70 = 160.
    compute reference = [30,45) ∪ [112,120) ∪ [120,180) = [30,45) ∪ [112,180)
    hidden = |[10,100) ∩ [30,45)| + |[115,185) ∩ [112,180)| = 15 + 65 = 80, exposed 80.
    (Counting the wrappers as compute, reference = [0,5) ∪ [10,100) ∪ [110,111) ∪
    [112,190), would hide 90 + 70 = 160: everything.)
    """
    b = TraceBuilder(rank=0, backend="gloo")
    b.thread_name(7, "thread 7 (pt_gloo_runloop)")
    b.step(1, 0, 200, tid=1)
    b.cpu("ColumnParallelFnBackward", 0, 100, tid=1)
    b.cpu("c10d::allreduce_", 5, 5, tid=1)
    b.cpu("aten::mm", 30, 15, tid=1)
    b.cpu("VocabParallelCrossEntropy", 110, 80, tid=1)
    b.cpu("c10d::allreduce_", 111, 1, tid=1)
    b.cpu("aten::max", 112, 8, tid=1)
    b.cpu("aten::mm", 120, 60, tid=1)
    b.cpu("aten::empty", 121, 1, tid=1)
    b.annotation("gloo:all_reduce", 10, 90, tid=7)
    b.annotation("gloo:all_reduce", 115, 70, tid=7)
    b.write(tmp_path / "rank0.json")
    a = analyze(load_trace(tmp_path))
    assert a.mode == "cpu"
    assert rows(a.by_rank, ["rank"]) == {0: (160 * US, 80 * US, 80 * US)}
    coll = a.by_collective.sort_values("start")
    assert coll["hidden_ns"].tolist() == [15 * US, 65 * US]
    # the wrappers stay compute rows (by_stream, wall time); they just hide nothing alone
    names = set(a.intervals[a.intervals["kind"] == "compute"]["name"].astype(str))
    assert {"ColumnParallelFnBackward", "VocabParallelCrossEntropy"} <= names


def test_leaf_ops_match_brute_force():
    """leaf_ops on random properly nested ranges (ties, zero-length) vs a plain scan."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        th, st, du = [], [], []
        for k in range(3):
            t, stack = 0, []
            for _ in range(int(rng.integers(0, 25))):
                t += int(rng.integers(0, 3))
                if stack and rng.random() < 0.45:
                    s0 = stack.pop()
                    th.append(k), st.append(s0), du.append(t - s0)
                else:
                    stack.append(t)
            while stack:
                t += int(rng.integers(0, 3))
                s0 = stack.pop()
                th.append(k), st.append(s0), du.append(t - s0)
        th, st, du = (np.array(x, dtype=np.int64) for x in (th, st, du))
        got = leaf_ops(th, st, du)
        for i in range(len(st)):
            # a child: another op of the thread starting inside [s, e), not before i in
            # (start, -end) order (equal ranges: the first one listed is the parent)
            kids = [j for j in range(len(st)) if j != i and th[j] == th[i]
                    and st[i] <= st[j] < st[i] + du[i]
                    and (st[j], -(st[j] + du[j]), j) > (st[i], -(st[i] + du[i]), i)]  # fmt: skip
            assert got[i] == (not kids), (i, st[i], du[i])


def test_negative_duration_is_a_note_not_silent(tmp_path):
    """An NCCL kernel with "dur": -5 (µs) cannot carry measured time: it is read as 0 ns
    and a note names it; the other comm kernel (20 µs, 10 of it under the GEMM) is
    measured as usual: comm 20, hidden 10."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("sm90_gemm", stream=7, start=10, dur=20, launch=1)
    b.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", stream=13, start=20, dur=20, launch=2)
    b.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", stream=13, start=50, dur=-5, launch=3)
    t = load_trace(b.write(tmp_path / "rank0.json"))
    assert t.ranks[0].negative_durations == {"kernel": 1}
    assert t.ranks[0].worst_negative == (
        "kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", -5_000,
    )  # fmt: skip
    assert (t.events["dur"] >= 0).all()
    a = analyze(t)
    assert (a.totals["comm_ns"], a.totals["hidden_ns"]) == (20_000, 10_000)
    assert a.totals["n_negative_durations"] == 1
    (note,) = notes_about(a.notes, "negative_duration")
    assert note.startswith("rank 0: 1 event(s) with a negative duration (kernel 1; worst:")
    assert "dur -5 µs) read as 0 ns" in note and "re-export it" in note
