"""The paced stand-in's plan, on CPU (docs/EMULATION.md §3b): the ring step table moves
the derived local-HBM bytes, the kernel's CPU reference leaves the documented values,
and the profile's launch attributes and per-CTA bandwidth curve parse and interpolate
as documented. The CUDA kernel itself is checked against ``ring.simulate`` on the GPU
(benchmarks/bench_tax_ab.py, its "kernel" check)."""

from __future__ import annotations

import numpy as np
import pytest

from domino_prof.emulation.profile import load_profile, parse_profile
from domino_prof.emulation.ring import (
    FIFO,
    PROTOCOLS,
    READ_SRC,
    VEC,
    WRITE_DST,
    paced_plan,
    protocol_of,
    ring_steps,
    ring_traffic,
    simulate,
)
from domino_prof.errors import ConfigError


def _plan(coll, R, r, *, n_chunk_vec=48, protocol="Simple", ctas=3, threads=4, fifo=None):
    src = n_chunk_vec * VEC * (R if coll in ("all_reduce", "reduce_scatter") else 1)
    dst = n_chunk_vec * VEC * (R if coll in ("all_reduce", "all_gather") else 1)
    return paced_plan(coll, ranks=R, rank=r, src_bytes=src, dst_bytes=dst, ctas=ctas,
                      threads=threads, protocol=protocol, dur_ns=1000, fifo_bytes=fifo)


@pytest.mark.parametrize("R", [2, 3, 4, 8])
@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("protocol", ["Simple", "LL"])
def test_step_table_moves_the_derived_bytes(R, coll, protocol):
    p = _plan(coll, R, R - 1, protocol=protocol)
    size = p.chunk_vec * VEC * R  # nccl-tests' S: AR the tensor, RS input, AG output
    ff = PROTOCOLS[protocol][0]
    rd, wr = ring_traffic(coll, ranks=R, size_bytes=size, fifo_factor=ff)
    if protocol == "LL":  # the peer's FIFO writes are not done by the stand-in's SMs
        steps = 2 * (R - 1) if coll == "all_reduce" else R - 1
        wr -= steps * (size // R) * ff
    assert p.peer_writes == (protocol != "LL")
    assert p.traffic() == (rd, wr)


def test_the_table_by_hand():
    # all_reduce, R = 8, Simple: reads = S + 2*7*S/8 = 2.75 S, writes the same: 5.5 S in all
    S = 8 * 1000
    assert ring_traffic("all_reduce", ranks=8, size_bytes=S) == (22000, 22000)
    # LL doubles the FIFO part: S + 2*7*(S/8)*2 = 4.5 S each way
    assert ring_traffic("all_reduce", ranks=8, size_bytes=S, fifo_factor=2) == (36000, 36000)
    # R = 2 all-reduce: S + 2*1*S/2 = 2 S each way; RS: S + S/2 read, S/2 + S/2 written
    assert ring_traffic("all_reduce", ranks=2, size_bytes=S) == (16000, 16000)
    assert ring_traffic("reduce_scatter", ranks=2, size_bytes=S) == (12000, 8000)
    assert ring_traffic("all_gather", ranks=2, size_bytes=S) == (8000, 12000)
    # the step table of rank 1 of 3: reduce steps on chunks 1, 0, 2, then gathers of 1, 0
    assert ring_steps("all_reduce", ranks=3, rank=1) == (
        (1, -1, READ_SRC), (0, -1, READ_SRC | FIFO), (2, 2, READ_SRC | FIFO | WRITE_DST),
        (-1, 1, FIFO | WRITE_DST), (-1, 0, FIFO | WRITE_DST))


def _values(n_vec, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**32, size=(n_vec, 4), dtype=np.uint32)


def _rows(a):
    return {tuple(x) for x in a.tolist()}


@pytest.mark.parametrize("R,r", [(2, 0), (2, 1), (4, 2), (8, 5)])
def test_kernel_reference_leaves_the_documented_values(R, r):
    n = 37  # vectors per chunk: shares of 13, 13, 11 over 3 CTAs; 2 slices a share
    # all_reduce in place: chunk (r + 1) mod R unchanged, every element some element of t
    p = _plan("all_reduce", R, r, n_chunk_vec=n, fifo=8 * 7 * VEC)
    t = _values(R * n, 1)
    out = simulate(p, t, t)
    k = (r + 1) % R
    assert np.array_equal(out[k * n:(k + 1) * n], t[k * n:(k + 1) * n])
    assert _rows(out) <= _rows(t)
    assert np.array_equal(t, _values(R * n, 1))  # simulate does not touch its inputs
    # reduce_scatter: out = t's own chunk r
    p = _plan("reduce_scatter", R, r, n_chunk_vec=n, fifo=8 * 7 * VEC)
    t = _values(R * n, 2)
    out = simulate(p, t, np.zeros((n, 4), np.uint32))
    assert np.array_equal(out, t[r * n:(r + 1) * n])
    # all_gather: slot r = t, every element of out some element of t
    p = _plan("all_gather", R, r, n_chunk_vec=n, fifo=8 * 7 * VEC)
    t = _values(n, 3)
    out = simulate(p, t, np.zeros((R * n, 4), np.uint32))
    assert np.array_equal(out[r * n:(r + 1) * n], t)
    assert _rows(out) <= _rows(t)


def test_plan_geometry_and_refusals():
    p = _plan("all_reduce", 8, 0, n_chunk_vec=100, ctas=24, threads=544, protocol="LL")
    assert p.share_vec == 5 and p.slices == 1  # ceil(100 / 24); one 32 KiB LL slot holds it
    assert p.slot_vec == 512 * 1024 // 8 // 16 // 2  # LL: 64 KiB slots, half of it data
    assert p.fifo_vec == 24 * 8 * p.slot_vec * 2
    big = _plan("all_reduce", 8, 0, n_chunk_vec=20000, ctas=24, threads=544, protocol="LL")
    assert big.share_vec == 834 and big.slices == 1
    huge = _plan("all_reduce", 8, 0, n_chunk_vec=200000, ctas=24, protocol="LL")
    assert huge.slices == -(-8334 // 2048)  # 5 slots of 2048 data vectors
    # not in whole 16-byte vectors per chunk: None (the burst kernel serves the call)
    assert paced_plan("all_reduce", ranks=8, rank=0, src_bytes=8 * 16 + 8, dst_bytes=136,
                      ctas=1, threads=32, protocol="LL", dur_ns=1) is None
    assert paced_plan("all_reduce", ranks=3, rank=0, src_bytes=64, dst_bytes=64, ctas=1,
                      threads=32, protocol="LL", dur_ns=1) is None
    assert protocol_of("ring/LL") == "LL" and protocol_of("ring/LL128") == "LL128"
    assert protocol_of("ring/Simple") == "Simple" and protocol_of("tree") == "Simple"


def test_shipped_profiles_carry_the_real_kernels_launch_attributes():
    e = load_profile("h200-nvlink-tp2").entry("all_reduce", 2, "bfloat16")
    assert (e.threads, e.registers, e.shared_bytes, e.protocol) == (544, 96, 103808, "LL")
    f = load_profile("h200-nvlink-tp2").entry("all_reduce", 2, "float32")
    assert (f.threads, f.ctas) == (256, 1)  # the fixture's fp32 kernel: one CTA of 256
    e8 = load_profile("h200-nvlink-tp8").entry("all_reduce", 8, "bfloat16")
    assert e8.protocol == "Simple" and e8.threads == 544


def test_cta_curve_interpolates_as_documented():
    e = load_profile("h200-nvlink-tp8").entry("all_reduce", 8, "bfloat16")
    assert e.ctas == 24 and e.busbw_gbps == pytest.approx(330.0, rel=1e-6)
    assert e.busbw_at(8) == pytest.approx(234.0)
    assert e.busbw_at(6) == pytest.approx(133.5 + (234.0 - 133.5) * 2 / 4)  # 183.75
    assert e.busbw_at(16) == pytest.approx(234.0 + (e.busbw_gbps - 234.0) * 8 / 16)
    assert e.busbw_at(24) == e.busbw_at(64) == e.busbw_gbps  # no gain past the real count
    e8 = e.with_ctas(8)
    assert e8.ctas == 8 and e8.algbw_gbps == pytest.approx(234.0 / 1.75)
    assert e8.alpha_us == e.alpha_us and e.with_ctas(None) is e
    # 25.2M bf16 (50.3 MB) at 8 CTAs: 56 + 50331648 / (133.714 * 1e3) us
    assert e8.time_ns(50331648) == pytest.approx((56.0 + 50331648 / (234.0 / 1.75 * 1e3)) * 1e3,
                                                 abs=1)
    ag = load_profile("h200-nvlink-tp4").entry("all_gather", 4, "bfloat16")  # no curve
    with pytest.raises(ConfigError, match="no per-CTA bandwidth curve"):
        ag.with_ctas(8)


def _doc(**extra):
    e = {"collective": "all_reduce", "ranks": 2, "dtype": "bfloat16", "alpha_us": 1.0,
         "algbw_GBps": 100.0, "ctas": 8, "algorithm": "ring/LL", "source": "hand"}
    e.update(extra)
    return {"schema": "domino-prof/comm-profile", "version": 1, "name": "x", "entries": [e]}


@pytest.mark.parametrize("extra,msg", [
    ({"threads": 16}, "'threads' must be an integer >= 32"),
    ({"registers": 0}, "'registers' must be an integer >= 1"),
    ({"shared_bytes": -1}, "'shared_bytes' must be an integer >= 0"),
    ({"fifo_bytes": True}, "'fifo_bytes' must be an integer"),
    ({"cta_busbw_GBps": [[1, 10.0], [8, 20.0]]}, "stay below the entry's ctas"),
    ({"cta_busbw_GBps": [[2, 10.0], [1, 20.0]]}, "must rise"),
    ({"cta_busbw_GBps": [[1, 30.0], [2, 20.0]]}, "not fall"),
    ({"cta_busbw_GBps": [1, 2]}, "list of \\[ctas, busbw_GBps\\] pairs"),
])
def test_bad_launch_attributes_are_one_line(extra, msg):
    with pytest.raises(ConfigError, match=msg) as ei:
        parse_profile(_doc(**extra), where="p.json")
    assert "\n" not in str(ei.value) and str(ei.value).startswith("p.json: entry 0")


def test_launch_attributes_round_trip():
    d = _doc(threads=544, registers=96, shared_bytes=103808, fifo_bytes=4096,
             cta_busbw_GBps=[[1, 10.0], [4, 30.0]])
    p = parse_profile(d)
    assert parse_profile(p.to_json()) == p
    e = p.entries[0]
    assert e.cta_busbw == ((1, 10.0), (4, 30.0)) and e.fifo_bytes == 4096
    assert e.busbw_at(2) == pytest.approx(10.0 + 20.0 / 3)


def test_pacing_points_by_hand():
    # tp 8, 25.2M bf16 all-reduce, Simple: chunk 393216 vectors, 16384 a CTA of 24; passes
    # of 544 x 6 = 3264 vectors: ceil(16384 / 3264) = 6 a step, 15 ring steps: K = 90
    p = paced_plan("all_reduce", ranks=8, rank=0, src_bytes=50331648, dst_bytes=50331648,
                   ctas=24, threads=544, protocol="Simple", dur_ns=322_900)
    assert (p.chunk_vec, p.share_vec, p.slot_vec) == (393216, 16384, 32768)
    assert (p.passes_per_step, p.pacing_points) == (6, 90)
    # tp 2, 6.29 MB, LL: chunk 196608, share 8192 (4 LL slots of 2048 data vectors):
    # ceil(8192 / 3264) = 3 passes a step, 3 steps: K = 9
    q = paced_plan("all_reduce", ranks=2, rank=0, src_bytes=6291456, dst_bytes=6291456,
                   ctas=24, threads=544, protocol="LL", dur_ns=40_928)
    assert (q.share_vec, q.slices, q.passes_per_step, q.pacing_points) == (8192, 4, 3, 9)
