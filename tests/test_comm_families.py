"""Comm that is not NCCL: torch symmetric memory (async TP), TransformerEngine
userbuffers, DeepEP, NVSHMEM, and peer-to-peer copies, on one hand-built trace.

Kernel names are real demangled names (from the projects' sources: symm_mem's
CUDASymmetricMemoryOps.cu / CUDASymmetricMemory.cu, TE's userbuffers.cu, DeepEP's
intranode.cu, NVSHMEM's on-stream collectives). Builder times are µs, expected ns.
"""

from __future__ import annotations

import json

import pytest
from tracegen import TraceBuilder
from typer.testing import CliRunner

from domino_prof.analysis import AnalysisConfig, combine_comm_pattern
from domino_prof.analysis.results import notes_about
from domino_prof.cli import app
from domino_prof.engine import analyze
from domino_prof.trace import load_trace

US = 1000
ONE_SHOT = ("void (anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16, 2>"
            "(c10::BFloat16**, c10::BFloat16*, c10::BFloat16*, unsigned long, unsigned long, "
            "unsigned int**, unsigned long, unsigned long)")  # fmt: skip
BARRIER = ("c10d::symmetric_memory::barrier_kernel(unsigned int**, int, int, int, "
           "unsigned long)")  # fmt: skip
UB = ("void userbuffers_fp16_sum_inplace_gpu_rw_ag<2>(int, int, int, int, int, int, int, "
      "void**, int, unsigned long)")  # fmt: skip
DEEPEP = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)"
LAYOUT = "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*)"
SHMEM = "void alltoall_on_stream_kernel<float>(int, float*, float const*, unsigned long)"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def comm_rank() -> TraceBuilder:
    """Device intervals [start, end) µs; compute: GEMM [10,50), layout [70,72), GEMM2 [85,95).

    comm: barrier (symm) [0,5) | userbuffers [12,22) | PtoP copy [20,30) |
    one_shot (symm) [40,60) | NCCL [45,55) | DtoD copy between devices 0->1 [60,70) |
    DeepEP dispatch [80,90) | NVSHMEM alltoall [100,110)
    union: [0,5) 5 + [12,30) 18 + [40,70) 30 + [80,90) 10 + [100,110) 10 = 73
    hidden: [12,30) 18 + [40,50) 10 + [85,90) 5 = 33; exposed 40
    memory: same-device DtoD copy [112,115) (comm with --memcpy-as-comm: C = 76)
    Before only NCCL was comm: C = 10, H = 5 and the rest hid it as "compute".
    """
    b = TraceBuilder(rank=0)
    b.step(1, 0, 200)
    b.kernel("sm90_gemm_bf16", stream=7, start=10, dur=40, launch=1)
    b.kernel(BARRIER, stream=20, start=0, dur=5, launch=0.5)
    b.kernel(UB, stream=22, start=12, dur=10, launch=2)
    b.kernel("Memcpy PtoP (Device -> Device)", stream=21, start=20, dur=10, launch=3,
             launch_name="cudaMemcpyAsync", cat="gpu_memcpy",
             fromDevice=1, inDevice=0, toDevice=0)  # fmt: skip
    b.kernel(ONE_SHOT, stream=20, start=40, dur=20, launch=4)
    b.kernel(NCCL, stream=13, start=45, dur=10, launch=5)
    b.kernel("Memcpy DtoD (Device -> Device)", stream=21, start=60, dur=10, launch=6,
             launch_name="cudaMemcpyAsync", cat="gpu_memcpy",
             fromDevice=0, inDevice=0, toDevice=1)  # fmt: skip
    b.kernel(LAYOUT, stream=23, start=70, dur=2, launch=7)
    b.kernel(DEEPEP, stream=23, start=80, dur=10, launch=8)
    b.kernel("sm90_gemm_bf16", stream=7, start=85, dur=10, launch=9)
    b.kernel(SHMEM, stream=24, start=100, dur=10, launch=10)
    b.memcpy(stream=7, start=112, dur=3, launch=111)
    return b


@pytest.fixture
def trace(tmp_path):
    return load_trace(comm_rank().write(tmp_path / "rank0.json"))


def test_known_comm_families_are_comm_by_default(trace):
    a = analyze(trace)
    t = a.totals
    assert (t["comm_ns"], t["hidden_ns"], t["exposed_ns"]) == (73 * US, 33 * US, 40 * US)
    assert t["intervals_by_kind"] == {"compute": 3, "comm": 8, "memory": 1}
    assert [(s["source"], s["n_intervals"], s["busy_ns"]) for s in t["comm_sources"]] == [
        ("nccl", 1, 10 * US),
        ("symm_mem", 2, 25 * US),
        ("nvshmem", 1, 10 * US),
        ("deepep", 1, 10 * US),
        ("te_userbuffers", 1, 10 * US),
        ("p2p_copy", 2, 20 * US),
    ]
    # the same-device copy beside symmetric-memory comm stays memory, with a hint
    (note,) = notes_about(a.notes, "classify")
    assert note.startswith("1 same-device DtoD copies (0.003 ms) beside symmetric-memory")
    assert "--memcpy-as-comm" in note


def test_memcpy_as_comm_adds_same_device_copies(trace):
    a = analyze(trace, AnalysisConfig(memcpy_as_comm=True))
    assert (a.totals["comm_ns"], a.totals["hidden_ns"]) == (76 * US, 33 * US)
    assert a.totals["comm_sources"][-1] == {
        "source": "dtod_copy", "label": "device-to-device copies (--memcpy-as-comm)",
        "n_intervals": 1, "busy_ns": 3 * US,
    }  # fmt: skip
    assert notes_about(a.notes, "classify") == []


def test_user_pattern_is_its_own_source_and_only_replaces(trace):
    a = analyze(trace, AnalysisConfig(comm_pattern=combine_comm_pattern("sm90_gemm")))
    src = {s["source"]: s["n_intervals"] for s in a.totals["comm_sources"]}
    assert src["user"] == 2 and src["nccl"] == 1
    only = analyze(trace, AnalysisConfig(comm_pattern=combine_comm_pattern("ncclDev",
                                                                           replace=True)))  # fmt: skip
    # with the default replaced, only NCCL (via the user's regex) and the copies are comm
    assert [s["source"] for s in only.totals["comm_sources"]] == ["p2p_copy", "user"]


def test_analyze_says_which_patterns_matched(tmp_path):
    p = comm_rank().write(tmp_path / "rank0.json")
    r = CliRunner().invoke(app, ["analyze", str(p)])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if x.startswith("comm recognised:"))
    assert line == (
        "comm recognised: NCCL/RCCL/HCCL/MSCCL 1 (0.010 ms), torch symmetric memory 2 "
        "(0.025 ms), NVSHMEM/rocSHMEM 1 (0.010 ms), DeepEP 1 (0.010 ms), TransformerEngine "
        "userbuffers 1 (0.010 ms), peer-to-peer copies 2 (0.020 ms) (events, durations "
        "summed; overlapping events each count)"
    )
    doc = json.loads(CliRunner().invoke(app, ["analyze", str(p), "--json", "-"]).stdout)
    assert doc["totals"]["comm_sources"][0]["source"] == "nccl"


# DeepEP under both namespaces: deep_ep:: (the open-source library) and dpsk::ep:: (the
# names in DeepSeek's published training traces). Comm: (intranode|internode|
# internode_ll)::(dispatch|combine|notify_dispatch|cached_notify*|barrier); nothing else.
DEEPEP_COMM = (
    "void dpsk::ep::internode::dispatch<false, 8, 1, 4, 24, 8>(int4*, float*, long*, float*)",
    "void dpsk::ep::internode::combine<8, 1, 4, 24, 8>(int4*, float*, bool const*, int4 const*)",
    "void dpsk::ep::internode::cached_notify<8, 24>(int, int, int, int, int, int*, int const*)",
    "void dpsk::ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*)",
    "void dpsk::ep::intranode::cached_notify_combine<8>(void**, int*, int, int, int, int**)",
    "void dpsk::ep::internode_ll::dispatch<false, 3, 7168>(void*, float*, int*, long*, int*)",
    "void deep_ep::internode_ll::combine<7168, 9>(void*, void*, int*, void*, void const*)",
    "void deep_ep::intranode::cached_notify_dispatch<8>(int const*, int, void**, int**, int)",
)
DEEPEP_NOT_COMM = (
    "void dpsk::ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*)",
    "void dpsk::ep::internode_ll::clean_low_latency_buffer<32>(int*, int, int*, int)",
    "void dpsk::moe::dispatch<8>(int4*, float*)",  # not an EP transport namespace
    "void megablocks::intranode::dispatch<8>(int4*, float*)",  # not DeepEP's
    "void dpsk::ep::intranode::dispatch_tokens_locally<8>(int4*)",  # not the kernel name
)


def _one_kernel_each(names: tuple[str, ...], tmp_path, *, start: float = 0.0) -> list:
    """Each name one kernel of 10 µs on its own stream, one after another."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 1000)
    for i, n in enumerate(names):
        b.kernel(n, stream=30 + i, start=start + 20 * i, dur=10, launch=start + 20 * i)
    return analyze(load_trace(b.write(tmp_path / "rank0.json")))


def test_deepep_kernels_are_comm_under_both_namespaces(tmp_path):
    a = _one_kernel_each(DEEPEP_COMM + DEEPEP_NOT_COMM, tmp_path)
    iv = a.intervals
    assert sorted(iv.loc[iv["kind"] == "comm", "name"].astype(str)) == sorted(DEEPEP_COMM)
    assert a.totals["comm_sources"] == [{"source": "deepep", "label": "DeepEP",
                                         "n_intervals": 8, "busy_ns": 80 * US}]  # fmt: skip
    assert a.totals["comm_ns"] == 80 * US


EMULATED = (
    "emulated_allreduce",
    "emulated_allreduce_bf16_kernel",
    "void emulated_reducescatter<c10::BFloat16>(c10::BFloat16*, long)",
    "emulated_allgather_ring(float*, float const*, long)",
)


def test_emulator_kernels_are_comm_of_their_own_family(tmp_path):
    """The comm emulator's kernels (emulated_allreduce*, emulated_reducescatter*,
    emulated_allgather*) are comm, family "emulated", typed by their collective."""
    a = _one_kernel_each(EMULATED + ("emulated_gemm", "my_emulated_allreduce"), tmp_path)
    iv = a.intervals
    assert sorted(iv.loc[iv["kind"] == "comm", "name"].astype(str)) == sorted(EMULATED)
    assert a.totals["comm_sources"] == [{"source": "emulated", "label": "emulated",
                                         "n_intervals": 4, "busy_ns": 40 * US}]  # fmt: skip
    types = a.by_collective_type.set_index("collective")["count"].to_dict()
    assert types == {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1}
