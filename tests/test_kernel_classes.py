"""benchmarks/kernel_classes.py (where domino's overlap tax sits, by kernel class): the
classes by name and the per-step sums of a hand-made trace."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import script_module

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_classes.py"


def _mod():
    return script_module.load("benchmarks/kernel_classes.py")


def _k(name, dur):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": 0, "dur": dur}


TRACE = {"traceEvents": [
    _k("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NNT", 3000.0),  # gemm
    _k("mm_kernel", 1000.0),  # the Triton tile: gemm
    _k("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 2000.0),  # attn
    _k("emulated_allreduce_paced", 5000.0),  # comm
    _k("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 1000.0),  # comm
    _k("triton_red_fused__fused_rms_norm_0", 500.0),  # norm
    _k("vectorized_elementwise_kernel", 700.0),  # other
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 9e9},  # not a kernel
]}  # fmt: skip


def test_classes_per_step_by_name():
    m = _mod()
    # two profiled steps: gemm (3000 + 1000) / 2 µs = 2 ms; attn 1; comm 3; norm 0.25;
    # other 0.35 (the cpu op is no kernel)
    assert m.classes(TRACE, 2) == {"gemm": 2.0, "attn": 1.0, "norm": 0.25, "comm": 3.0,
                                   "other": 0.35}  # fmt: skip


def test_cli_reads_the_steps_from_run_json_and_names_a_run_without(tmp_path):
    run = tmp_path / "run"
    (run / "domino").mkdir(parents=True)
    with gzip.open(run / "domino" / "rank0.pt.trace.json.gz", "wt") as f:
        json.dump(TRACE, f)
    (run / "run.json").write_text(json.dumps({"config": {"profile_steps": 4}}))
    p = subprocess.run([sys.executable, str(PATH), str(run)], capture_output=True, text=True,
                       check=False)  # fmt: skip
    assert p.returncode == 0, p.stderr
    # four steps: gemm 4000 / 4 µs = 1.00 ms ... comm 1.50
    (row,) = [ln for ln in p.stdout.splitlines() if ln.split()[:2] == ["run", "domino"]]
    assert row.split()[1:] == ["domino", "1.00", "0.50", "0.12", "1.50", "0.17"]
    (run / "run.json").unlink()
    p = subprocess.run([sys.executable, str(PATH), str(run)], capture_output=True, text=True,
                       check=False)  # fmt: skip
    assert p.returncode != 0 and "no run.json with config.profile_steps" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("name,cls", [("Memcpy DtoD", "other"), ("sm90_xmma_gemm_bf16", "gemm"),
                                      ("flash_bwd_kernel", "attn")])  # fmt: skip
def test_kernel_class(name, cls):
    assert _mod().kernel_class(name) == cls


def _d(cat, name, ts, dur, stream=7):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0,
            "args": {"device": 0, "stream": stream}}  # fmt: skip


# Two profiled steps, hand-worked. nocomm: a GEMM 0-10, a gap of 2, an attention 12-20;
# a second stream's kernel 0-4 (no gap: alone on its stream). 200 µs later a norm (a gap
# over GAP_MAX_US: the host's wait, not counted).
BASE = {"traceEvents": [
    _d("kernel", "nvjet_sm90_tst_256x128", 0.0, 10.0),
    _d("kernel", "cudnn_generated_fort_native_sdpa_sm90_flash_bprop", 12.0, 8.0),
    _d("kernel", "ncclDevKernel_AllReduce", 0.0, 4.0, stream=20),
    _d("kernel", "vectorized_layer_norm_kernel", 220.0, 2.0),
]}  # fmt: skip
# domino-nocomm: two half GEMMs (0-6, 7-13), a copy 13.5-15.5, a set 16-16.5, two
# attentions 17-24 and 25-32: gaps 1 + 0.5 + 0.5 + 0.5 + 1 = 3.5 µs (5 of them).
SPLIT = {"traceEvents": [
    _d("kernel", "nvjet_sm90_tst_128x128", 0.0, 6.0),
    _d("kernel", "nvjet_sm90_tst_128x128", 7.0, 6.0),
    _d("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 13.5, 2.0),
    _d("gpu_memset", "Memset (Unknown)", 16.0, 0.5),
    _d("kernel", "cudnn_generated_fort_native_sdpa_sm90_flash_bprop", 17.0, 7.0),
    _d("kernel", "cudnn_generated_fort_native_sdpa_sm90_flash_bprop", 25.0, 7.0),
]}  # fmt: skip


def test_split_classes_count_memory_ops_and_launch_gaps():
    m = _mod()
    b, s = m.device_classes(BASE, 2), m.device_classes(SPLIT, 2)
    # per step (÷ 2), ms (÷ 1000): nocomm gemm 10 µs -> 0.005 ms, 0.5 events
    assert b["gemm"] == (0.005, 0.5) and b["attn"] == (0.004, 0.5)
    assert b["comm"] == (0.002, 0.5) and b["norm"] == (0.001, 0.5)
    assert b["gaps"] == (0.001, 0.5)  # the 2 µs gap; the 200 µs idle is none
    assert s["gemm"] == (0.006, 1.0) and s["attn"] == (0.007, 1.0)
    assert s["copy"] == (0.001, 0.5) and s["set"] == (0.00025, 0.5)
    assert s["gaps"] == (0.00175, 2.5)
    rows = {r[0]: r for r in m.split_rows(b, s)}
    assert rows["attn"][3] == pytest.approx(0.003)
    assert rows["gaps"][3] == pytest.approx(0.00075)
    # totals: nocomm 10 + 8 + 4 + 2 + 2 (gap) = 26 µs -> 0.013; split 12 + 2 + 0.5 + 14
    # + 3.5 = 32 µs -> 0.016; events 2 and 3 per step (gaps' counts not summed)
    assert rows["total"][1:] == pytest.approx((0.013, 0.016, 0.003, 2.0, 3.0))


def test_split_cli_names_a_run_without_domino_nocomm(tmp_path):
    run = tmp_path / "run"
    for mode, tr in (("nocomm", BASE), ("domino-nocomm", SPLIT)):
        (run / mode).mkdir(parents=True)
        (run / mode / "rank0.pt.trace.json").write_text(json.dumps(tr))
    (run / "run.json").write_text(json.dumps({"config": {"profile_steps": 2},
                                              "limits": {"split_ms": 0.004}}))  # fmt: skip
    p = subprocess.run([sys.executable, str(PATH), "--split", str(run)], capture_output=True,
                       text=True, check=False)  # fmt: skip
    assert p.returncode == 0, p.stderr
    (attn,) = [ln.split() for ln in p.stdout.splitlines() if ln.split()[:1] == ["attn"]]
    assert attn == ["attn", "0.00", "0.01", "+0.00", "0", "1"]
    assert "measured split (run.json limits.split_ms): 0.00 ms" in p.stdout
    (run / "domino-nocomm" / "rank0.pt.trace.json").unlink()
    p = subprocess.run([sys.executable, str(PATH), "--split", str(run)], capture_output=True,
                       text=True, check=False)  # fmt: skip
    assert p.returncode != 0 and "no domino-nocomm trace" in p.stderr
    assert "Traceback" not in p.stderr


def test_concurrent_time_is_the_events_beyond_their_union_per_device():
    m = _mod()

    def ev(ts, dur, stream, pid=0, cat="kernel"):
        return {"ph": "X", "cat": cat, "name": "k", "ts": ts, "dur": dur, "pid": pid,
                "args": {"device": pid, "stream": stream}}  # fmt: skip

    trace = {"traceEvents": [
        ev(0, 100, 7), ev(50, 100, 8),  # 50 µs at once (union 150 of 200)
        ev(200, 10, 7), ev(205, 10, 8, cat="gpu_memcpy"),  # 5 µs at once, a copy beside
        ev(300, 40, 7), ev(350, 10, 7),  # one after the other: none
        ev(0, 100, 7, pid=1),  # another device, alone: none
    ]}  # fmt: skip
    # (50 + 5) µs over 2 steps = 0.0275 ms
    assert m.concurrent_ms(trace, 2) == pytest.approx(0.0275)
    assert m.concurrent_ms(TRACE, 1) == pytest.approx((3000 + 1000 + 2000 + 5000 + 1000 + 500
                                                      + 700 - 5000) / 1e3)  # all at ts 0


def _at(name, ts, dur, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


def test_by_name_two_traces_hand_worked(tmp_path):
    m = _mod()
    assert m.short_name("void at::native::elementwise_kernel<128, 4, F>(int, F)") == (
        "void at::native::elementwise_kernel")
    # A: one GEMM 0-100 µs and one attention kernel 150-250; B (the split): the GEMM twice
    # at 60 µs, attention twice at 70 µs, and a copy of 10 µs between them
    a = {"traceEvents": [_at("nvjet_tst<1>(x)", 0, 100), _at("sdpa_fprop", 150, 100)]}
    b = {"traceEvents": [_at("nvjet_tst<2>(y)", 0, 60), _at("nvjet_tst<2>(y)", 60, 60),
                         _at("Memcpy DtoD", 120, 10, "gpu_memcpy"),
                         _at("sdpa_fprop", 130, 70), _at("sdpa_fprop", 210, 70),
                         _at("aten::mm", 0, 999, "cpu_op")]}  # not a device event  # fmt: skip
    ta, tb = m.by_name(a, 1), m.by_name(b, 1)
    assert ta == {"nvjet_tst": (0.1, 1.0), "sdpa_fprop": (0.1, 1.0)}
    assert tb == {"nvjet_tst": (0.12, 2.0), "gpu_memcpy": (0.01, 1.0), "sdpa_fprop": (0.14, 2.0)}
    rows = m.name_rows(ta, tb)
    assert [r[0] for r in rows] == ["sdpa_fprop", "nvjet_tst", "gpu_memcpy"]  # by |B - A|
    assert rows[0][5] == pytest.approx(0.04) and rows[2][1:] == (0.0, 0.0, 0.01, 1.0, 0.01)
    # span (first kernel start to last end), busy (union), sum: A 250 / 200 / 200 µs;
    # B 280 / 260 (the copy is no kernel: 120-130 idle) / 260
    assert m.span_busy(a, 1) == pytest.approx((0.25, 0.2, 0.2))
    assert m.span_busy(b, 2) == pytest.approx((0.14, 0.13, 0.13))  # two steps: halved
    pa, pb = tmp_path / "a.json", tmp_path / "b.json.gz"
    pa.write_text(json.dumps(a))
    with gzip.open(pb, "wt") as f:
        json.dump(b, f)
    p = subprocess.run([sys.executable, str(PATH), "--by-name", str(pa), str(pb)],
                       check=False, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "span 0.28 ms, busy 0.26" in p.stdout and "+0.040" in p.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    p = subprocess.run([sys.executable, str(PATH), "--by-name", str(pa), str(bad)],
                       check=False, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "bad.json: not a readable JSON trace" in p.stderr


def test_timeline_shares_and_comm_gaps_hand_worked(tmp_path):
    """--timeline: compute nvjet [0, 1000) µs and norm [1600, 2000); comm all-gather
    [500, 1500), reduce-scatter [1512, 1600) and an NCCL kernel [1630, 1730). Bins of 1 ms:
    [0, 1000): compute 1000 / 1000, comm 500 / 1000; [1000, 2000): compute 400, comm 500 +
    88 + 100 = 688. Comm gaps: 1512 - 1500 = 12 and 1630 - 1600 = 30 µs; in a window from
    1.55 ms only the NCCL kernel starts, with none before it there: no gap."""
    m = _mod()
    t = {"traceEvents": [_at("nvjet_tst", 0, 1000), _at("emulated_allgather_paced", 500, 1000),
                         _at("emulated_reducescatter_paced", 1512, 88),
                         _at("triton_norm", 1600, 400), _at("ncclDevKernel_AllGather", 1630, 100),
                         _at("Memset", 0, 2000, "gpu_memset")]}  # memory: neither  # fmt: skip
    rows = m.timeline(m.kernel_ivs(t), 1000.0)
    assert [r[0] for r in rows] == [0.0, 1.0]
    assert [r[1:] for r in rows] == [pytest.approx((1.0, 0.5)), pytest.approx((0.4, 0.688))]
    assert m.comm_gaps(m.kernel_ivs(t), 0, 1e9) == pytest.approx([12.0, 30.0])
    assert m.comm_gaps(m.kernel_ivs(t), 1.55, 10) == []
    f = tmp_path / "t.json"
    f.write_text(json.dumps(t))
    p = subprocess.run([sys.executable, str(PATH), "--timeline", "--bin-ms", "1", str(f)],
                       check=False, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "0.0 ms: 100/ 50  40/ 69" in p.stdout
    assert ("comm gaps in the whole trace: 2, 0.04 ms; by 5 us (100: 100 and more): 10: 1, "
            "30: 1") in p.stdout
    p = subprocess.run([sys.executable, str(PATH), "--timeline", "--window", "x", str(f)],
                       check=False, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode != 0 and "--window 'x': give LO:HI" in p.stderr
