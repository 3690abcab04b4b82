"""Comm emulation, the CPU side (docs/EMULATION.md): the timing and HBM-bytes models, the
copy plan, comm profiles and every bad-profile case, `domino-prof calibrate` (a
hand-built trace with known alpha / algbw; the committed tp-2 fixture reproduces the
shipped profile byte for byte), the trace mark, the llama3-70b preset, and (when Triton
is installed) the emulated kernels under Triton's CPU interpreter."""

from __future__ import annotations

import gzip
import importlib
import json
import re
from pathlib import Path

import pytest
from tracegen import TraceBuilder
from typer.testing import CliRunner

from domino_prof.cli import app
from domino_prof.emulation import (
    FAMILY,
    KERNEL_PATTERN,
    SHIPPED,
    bus_factor,
    comm_marker,
    hbm_bytes,
    load_profile,
    mark_trace_file,
    message_bytes,
    plan,
    time_ns,
    time_us,
    trace_marker,
)
from domino_prof.emulation.fit import low_percentile, parse_kernel_name
from domino_prof.emulation.plan import moved_elements
from domino_prof.emulation.profile import shipped_path
from domino_prof.errors import ConfigError, TraceError

runner = CliRunner()
FIXTURE = Path(__file__).parent / "data" / "h200_llama3_3b_2layers_tp2"
AR_BF16 = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


# --------------------------------------------------------------------------- the models
def test_timing_model_is_alpha_plus_size_over_algbw():
    # 1 MB at 250 GB/s = 4 us; + 10 us
    assert time_us(alpha_us=10.0, algbw_gbps=250.0, size_bytes=1_000_000) == 14.0
    assert time_ns(alpha_us=10.0, algbw_gbps=250.0, size_bytes=1_000_000) == 14_000
    # never less than the model: 0.5 ns rounds up to 1
    assert time_ns(alpha_us=0.0005, algbw_gbps=1e9, size_bytes=0) == 1
    e = load_profile("h200-nvlink-tp8").entry("all_reduce", 8, "bfloat16")
    # 56 us + 67108864 B / 188.5714 GB/s = 56 + 355.88037 us = 411880.37 ns, rounded up
    assert e.time_ns(67_108_864) == 411_881


@pytest.mark.parametrize(
    ("coll", "R", "factor"),
    [("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
     ("reduce_scatter", 2, 0.5), ("reduce_scatter", 8, 0.875), ("all_gather", 4, 0.75)],
)  # fmt: skip
def test_bus_factor_and_bytes_model(coll, R, factor):
    assert bus_factor(coll, R) == factor
    # one GPU of the ring reads (and writes) factor x size
    assert hbm_bytes(coll, R, 8_000_000) == int(factor * 8_000_000)


def test_message_size_is_nccl_tests_S():
    # all_reduce: the tensor; reduce_scatter: its R x larger input; all_gather: its output
    assert message_bytes("all_reduce", numel_in=100, numel_out=100, elem_bytes=2) == 200
    assert message_bytes("reduce_scatter", numel_in=800, numel_out=100, elem_bytes=2) == 1600
    assert message_bytes("all_gather", numel_in=100, numel_out=800, elem_bytes=4) == 3200


@pytest.mark.parametrize("R", [2, 4, 8])
@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "all_gather"])
def test_plan_moves_exactly_the_model_bytes(coll, R):
    n = 4096  # elements per rank's slot
    numel_t = {"all_reduce": R * n, "reduce_scatter": R * n, "all_gather": n}[coll]
    size_elems = R * n  # the S of each collective, in elements
    for rank in range(R):
        copies = plan(coll, ranks=R, rank=rank, numel_t=numel_t)
        assert moved_elements(copies) * 2 == hbm_bytes(coll, R, size_elems * 2)
    if coll == "reduce_scatter":  # out = the own rows
        own = plan(coll, ranks=R, rank=R - 1, numel_t=numel_t)[0]
        assert (own.src, own.src_lo, own.count, own.dst) == ("t", (R - 1) * n, n, "out")
    if coll == "all_gather":  # own slot first, then the next ones
        (c,) = plan(coll, ranks=R, rank=1, numel_t=numel_t)
        assert (c.dst, c.dst_off, c.dst_len, c.count) == ("out", n, R * n, (R - 1) * n)


# --------------------------------------------------------------------------- profiles
def test_shipped_profiles_load_with_their_published_figures():
    assert SHIPPED == ("h200-nvlink-tp2", "h200-nvlink-tp4", "h200-nvlink-tp8")
    p8 = load_profile("h200-nvlink-tp8")
    assert p8.label == "emulated comm (profile h200-nvlink-tp8)"
    ar, rs, ag = (p8.entry(c, 8, "bfloat16") for c in
                  ("all_reduce", "reduce_scatter", "all_gather"))  # fmt: skip
    assert (round(ar.busbw_gbps, 3), round(rs.busbw_gbps, 3), round(ag.busbw_gbps, 3)) == (
        330.0, 360.0, 350.0)  # fmt: skip
    assert (ar.alpha_us, rs.alpha_us) == (56.0, 32.2)  # 8.4 + 14 x 3.4, 8.4 + 7 x 3.4
    p4 = load_profile("h200-nvlink-tp4")
    assert p4.entry("all_reduce", 4, "float32").algbw_gbps == 220.0  # 330 x 4 / 6
    p2 = load_profile("h200-nvlink-tp2")
    e = p2.entry("all_reduce", 2, "bfloat16")
    assert (e.alpha_us, e.algbw_gbps, e.ctas, e.algorithm) == (21.472, 323.3684, 24, "ring/LL")
    assert p2.entry("all_reduce", 2, "float32").ctas == 1
    assert p2.entry("reduce_scatter", 2, "bfloat16").algbw_gbps == 720.0
    for name in SHIPPED:
        assert all(x.source for x in load_profile(name).entries)


def test_a_profile_without_R_is_one_line():
    with pytest.raises(ConfigError) as e:
        load_profile("h200-nvlink-tp2").entry("all_reduce", 8, "bfloat16")
    msg = str(e.value)
    assert "\n" not in msg
    assert "no entries for R=8 (it covers R=2)" in msg
    with pytest.raises(ConfigError, match="no all_reduce for R=2 dtype float16 "
                       r"\(only bfloat16, float32\)"):  # fmt: skip
        load_profile("h200-nvlink-tp2").entry("all_reduce", 2, "float16")


def _good_entry(**kw) -> dict:
    e = {"collective": "all_reduce", "ranks": 2, "dtype": "bfloat16", "alpha_us": 10.0,
         "algbw_GBps": 100.0, "ctas": 8, "algorithm": "ring/LL", "source": "test"}  # fmt: skip
    e.update(kw)
    return e


def _doc(entries=None, **kw) -> dict:
    d = {"schema": "domino-prof/comm-profile", "version": 1, "name": "bad",
         "entries": [_good_entry()] if entries is None else entries}  # fmt: skip
    d.update(kw)
    return d


BAD = [
    ("missing", None, "no such comm profile file"),
    ("invalid-json", "{ not json", "invalid JSON at line 1 column 3"),
    ("array", "[]", "a comm profile is a JSON object, got list"),
    ("schema", _doc(schema="x"), "not a comm profile"),
    ("version", _doc(version=9), "comm profile version 9 is not supported"),
    ("no-name", _doc(name=""), "non-empty string \"name\""),
    ("no-entries", _doc(entries=[]), "non-empty \"entries\" list"),
    ("collective", _doc([_good_entry(collective="all_to_all")]),
     "entry 0: unknown collective 'all_to_all'; use one of all_reduce, reduce_scatter"),
    ("ranks", _doc([_good_entry(ranks=1)]), "'ranks' must be an integer >= 2, got 1"),
    ("dtype", _doc([_good_entry(dtype="fp8")]), "unknown dtype 'fp8'"),
    ("algbw-zero", _doc([_good_entry(algbw_GBps=0)]), "'algbw_GBps' must be > 0, got 0.0"),
    ("algbw-neg", _doc([_good_entry(algbw_GBps=-5)]), "'algbw_GBps' must be > 0, got -5.0"),
    ("algbw-str", _doc([_good_entry(algbw_GBps="fast")]), "'algbw_GBps' must be a number"),
    ("alpha-neg", _doc([_good_entry(alpha_us=-1)]), "'alpha_us' must be >= 0"),
    ("ctas", _doc([_good_entry(ctas=0)]), "'ctas' must be an integer >= 1, got 0"),
    ("source", _doc([_good_entry(source="")]), "'source' must be a non-empty string"),
    ("unknown-key", _doc([_good_entry(speed=1)]), "unknown key 'speed'"),
    ("busbw", _doc([_good_entry(busbw_GBps=200)]),
     "busbw_GBps 200 disagrees with algbw_GBps 100 x 2(R-1)/R = 100.0000"),
    ("duplicate", _doc([_good_entry(), _good_entry()]), "entry 1: a second all_reduce for R=2"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "content", "what"), BAD, ids=[b[0] for b in BAD])
def test_every_bad_profile_is_one_line_exit_2(tmp_path, case, content, what):
    prof = tmp_path / "p.json"
    if content is not None:
        prof.write_text(content if isinstance(content, str) else json.dumps(content))
    out = tmp_path / "out.json"
    res = runner.invoke(app, ["calibrate", str(FIXTURE), "--merge", str(prof), "-o", str(out)])
    assert res.exit_code == 2, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"domino-prof: error: {prof}")
    assert what in lines[0]
    assert "Traceback" not in res.output
    assert not out.exists() and list(tmp_path.iterdir()) == ([prof] if content else [])


# --------------------------------------------------------------------------- calibrate
def test_kernel_names_and_the_low_percentile():
    k = parse_kernel_name(AR_BF16)
    assert (k.collective, k.algorithm, k.dtype) == ("all_reduce", "ring/LL", "bfloat16")
    k = parse_kernel_name("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    assert (k.collective, k.algorithm, k.dtype) == ("all_gather", "ring/LL", None)
    k = parse_kernel_name("ncclKernel_ReduceScatter_RING_SIMPLE_Sum_float(ncclWorkElem)")
    assert (k.collective, k.algorithm, k.dtype) == ("reduce_scatter", "ring/Simple", "float32")
    assert parse_kernel_name("sm90_xmma_gemm_bf16") is None
    # nearest rank: ceil(0.1 n)-th smallest
    assert low_percentile([5, 1, 4, 2, 3]) == 1  # ceil(0.5) = 1
    assert low_percentile(list(range(100, 0, -1))) == 10  # ceil(10) = 10
    assert low_percentile(list(range(1, 12))) == 2  # ceil(1.1) = 2


ALPHA_US, ALGBW = 12.5, 250.0  # the hand-built traces' truth


def _synthetic(tmp_path: Path, sizes_elems=(1_000_000, 4_000_000, 16_000_000)) -> Path:
    """2 ranks, 10 all-reduces per size; per instance one rank is the last to arrive
    (duration = the model) and the other waited (model + 40..400 us)."""
    d = tmp_path / "traces"
    d.mkdir()
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2)
        t = 0.0
        for n in sizes_elems:
            model = ALPHA_US + 2 * n / (ALGBW * 1e3)
            for i in range(10):
                late = (i % 2) == rank
                dur = model if late else model + 40.0 * (i + 1)
                b.kernel(AR_BF16, stream=13, start=t, dur=dur, grid=[16, 1, 1],
                         block=[544, 1, 1], dtype="BFloat16", **{"In msg nelems": n,
                         "Out msg nelems": n, "Group size": 2, "Collective name": "allreduce"})  # fmt: skip
                t += dur + 10.0
        b.write(d / f"rank{rank}.pt.trace.json")
    return d


def test_calibrate_recovers_a_known_alpha_and_algbw(tmp_path):
    out = tmp_path / "fit.json"
    res = runner.invoke(app, ["calibrate", str(_synthetic(tmp_path)), "-o", str(out),
                              "--name", "synthetic"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    (e,) = doc["entries"]
    assert (e["collective"], e["ranks"], e["dtype"], e["ctas"], e["algorithm"]) == (
        "all_reduce", 2, "bfloat16", 16, "ring/LL")  # fmt: skip
    assert e["alpha_us"] == pytest.approx(ALPHA_US, rel=0.01)
    assert e["algbw_GBps"] == pytest.approx(ALGBW, rel=0.01)
    # exact: p10 of 20 samples = the 2nd smallest = the model; three collinear points
    assert e["fit"]["low_us"] == [20.5, 44.5, 140.5]  # 12.5 + 2n B / 250 GB/s
    assert e["fit"]["n_kernels"] == [20, 20, 20]
    assert (e["alpha_us"], e["algbw_GBps"]) == (12.5, 250.0)
    assert doc["name"] == "synthetic" and "p10" in e["source"]
    assert "fitted" in res.stdout


def test_calibrate_on_the_fixture_reproduces_the_shipped_tp2_profile(tmp_path):
    out = tmp_path / "tp2.json"
    res = runner.invoke(app, ["calibrate", str(FIXTURE), "--merge", "h200-nvlink-tp2",
                              "-o", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert out.read_bytes() == shipped_path("h200-nvlink-tp2").read_bytes()


def test_calibrate_needs_two_sizes(tmp_path):
    out = tmp_path / "fit.json"
    res = runner.invoke(app, ["calibrate", str(_synthetic(tmp_path, (1_000_000,))), "-o", str(out)])
    assert res.exit_code == 2
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and "no (collective, R, dtype) has kernels of two or more" in lines[0]
    assert not out.exists()


def test_calibrate_without_collectives_is_one_line(tmp_path):
    b = TraceBuilder(rank=0, world_size=1)
    b.kernel("sm90_gemm", stream=7, start=0, dur=5)
    b.write(tmp_path / "rank0.json")
    res = runner.invoke(app, ["calibrate", str(tmp_path / "rank0.json"), "-o",
                              str(tmp_path / "o.json")])  # fmt: skip
    assert res.exit_code == 2
    assert len(res.stderr.splitlines()) == 1 and "no NCCL all-reduce" in res.stderr
    assert not (tmp_path / "o.json").exists()


def test_calibrate_bad_percentile_is_one_line(tmp_path):
    res = runner.invoke(app, ["calibrate", str(FIXTURE), "-o", str(tmp_path / "o.json"),
                              "--percentile", "90"])  # fmt: skip
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "domino-prof: error: --percentile 90 is not in (0, 50]; the default is 10"
    )


# --------------------------------------------------------------------------- the trace mark
def test_trace_mark_round_trip(tmp_path):
    assert trace_marker({"traceEvents": []}) is None
    assert trace_marker({"domino_prof": {"comm": "nccl"}}) is None
    top = {"domino_prof": comm_marker("h200-nvlink-tp8", ranks=8)}
    assert trace_marker(top) == "emulated comm (profile h200-nvlink-tp8)"
    with pytest.raises(TraceError, match="names no profile"):
        trace_marker({"domino_prof": {"comm": "emulated"}})
    b = TraceBuilder(rank=0, world_size=1)
    b.kernel("emulated_allreduce_kernel", stream=13, start=0, dur=5)
    p = b.write(tmp_path / "rank0.pt.trace.json.gz")
    mark_trace_file(p, comm_marker("h200-nvlink-tp2", ranks=2))
    doc = json.loads(gzip.decompress(p.read_bytes()))
    assert trace_marker(doc) == "emulated comm (profile h200-nvlink-tp2)"
    assert [e["name"] for e in doc["traceEvents"]] == ["emulated_allreduce_kernel"]
    from domino_prof.trace import load_trace  # the loader still reads a marked trace

    assert list(load_trace(p).events["name"].astype(str)) == ["emulated_allreduce_kernel"]


def test_emulated_kernels_are_named_as_the_comm_family():
    rx = re.compile(KERNEL_PATTERN, re.IGNORECASE)
    for n in ("emulated_allreduce_kernel", "emulated_reducescatter_kernel",
              "emulated_allgather_kernel"):  # fmt: skip
        assert rx.search(n)
    assert not rx.search(AR_BF16) and not rx.search("my_emulated_allreduce_kernel")
    from domino_prof.analysis.config import CommFamily

    assert CommFamily(*FAMILY).key == "emulated"


# --------------------------------------------------------------------------- llama3-70b
def test_llama3_70b_preset():
    from domino_prof.reference_model.config import RunConfig, preset

    m = preset("llama3-70b")
    assert (m.dim, m.ffn_dim, m.n_heads, m.n_kv_heads, m.n_layers, m.vocab_size) == (
        8192, 28672, 64, 8, 80, 128256)  # fmt: skip
    # attn 8192*(64+16)*128 + 64*128*8192 = 150994944; mlp 3*8192*28672 = 704643072;
    # + 2 norms 16384 = 855654400 per layer; + final norm 8192 + LM head 128256*8192
    assert m.n_params(embedding=False) == 80 * 855_654_400 + 8192 + 1_050_673_152
    assert m.flops_per_token(4096) == 6 * 69_503_033_344 + 12 * 80 * 8192 * 4096
    m8 = preset("llama3-70b", layers=8)
    assert m8.flops_per_token(4096) == 50_596_724_736
    RunConfig(model=m8, tp=8, seq=4096, mbs=2, modes=("tp", "domino")).validate()
    with pytest.raises(ConfigError, match="does not divide"):
        RunConfig(model=m8, tp=3, seq=4096).validate()


# --------------------------------------------------------------------------- the kernels
def _interpreter_index_shim(monkeypatch) -> None:
    """Triton's interpreter (3.6 at least) holds a scalar as a one-element 1-D array and
    indexes it with ``int(array)``, which NumPy 2.4 refuses ("only 0-dimensional arrays
    can be converted"): every ``range`` over a program id then fails under the
    interpreter, while the compiled kernel is fine. Index such a scalar by its one
    element instead, for this test only (the interpreter restores the attribute after
    each launch)."""
    interp = importlib.import_module("triton.runtime.interpreter")
    patch = getattr(interp, "_patch_lang_tensor", None)
    if patch is None:  # another Triton's interpreter: nothing to mend
        return

    def patched(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    monkeypatch.setattr(interp, "_patch_lang_tensor", patched)


def test_emulated_kernels_under_the_triton_interpreter(monkeypatch):
    """Output values and shapes of the three kernels (copies only: the interpreter has
    no %globaltimer). Skipped where Triton is not installed (CI)."""
    pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    import sys

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    _interpreter_index_shim(monkeypatch)
    sys.modules.pop("domino_prof.reference_model._emulate_kernels", None)
    emulate = importlib.import_module("domino_prof.reference_model.emulate")
    try:
        p = load_profile("h200-nvlink-tp4")
        run = {"spin": False, "block": 64, "num_warps": 4}
        t = torch.arange(2 * 64, dtype=torch.float32)  # all_gather: n = 128, aligned
        out = torch.full((4 * 128,), -1.0)
        ln = emulate.plan_launch(p, "all_gather", ranks=4, rank=1, t=t, out=out, block=64)
        assert ln.aligned and ln.moved_bytes == hbm_bytes("all_gather", 4, 4 * 128 * 4)
        emulate.launch_kernel(ln, t, out, **run)
        o = out.view(4, -1)
        assert [bool((o[i] == t).all()) for i in range(4)] == [False, True, True, True]
        assert bool((o[0] == -1).all())  # the slot before the own one keeps out's values
        t2 = torch.arange(4 * 100, dtype=torch.float32)  # reduce_scatter, n = 100: unaligned
        out2 = torch.zeros(100)
        ln = emulate.plan_launch(p, "reduce_scatter", ranks=4, rank=2, t=t2, out=out2, block=64)
        assert not ln.aligned and ln.moved_bytes == 3 * 100 * 4
        before = t2.clone()
        emulate.launch_kernel(ln, t2, out2, **run)
        assert torch.equal(out2, t2[200:300]) and torch.equal(t2, before)
        t3 = torch.arange(1000, dtype=torch.float32)
        before = t3.clone()
        ln = emulate.plan_launch(p, "all_reduce", ranks=4, rank=0, t=t3, out=t3, block=64)
        assert ln.moved_bytes == 1500 * 4 and ln.dur_ns == 28_819  # 28.8 us + 4000 B / 220
        emulate.launch_kernel(ln, t3, t3, **run)
        assert torch.equal(t3, before)  # all_reduce leaves t as it was
        # aligned (N = 3 blocks) with a tail: 1.5 N = 4.5 blocks, wrapping over t once
        t4 = torch.arange(192, dtype=torch.float32)
        before = t4.clone()
        ln = emulate.plan_launch(p, "all_reduce", ranks=4, rank=0, t=t4, out=t4, block=64)
        assert ln.aligned and ln.moved_bytes == 288 * 4
        emulate.launch_kernel(ln, t4, t4, **run)
        assert torch.equal(t4, before)
        # all_gather aligned with a tail: n = 96 (not a block multiple) -> unaligned path
        t5 = torch.arange(96, dtype=torch.float32)
        out5 = torch.full((2 * 96,), -1.0)
        p2 = load_profile("h200-nvlink-tp2")
        ln = emulate.plan_launch(p2, "all_gather", ranks=2, rank=1, t=t5, out=out5, block=64)
        assert not ln.aligned
        emulate.launch_kernel(ln, t5, out5, **run)
        assert torch.equal(out5[96:], t5) and bool((out5[:96] == -1).all())
    finally:
        sys.modules.pop("domino_prof.reference_model._emulate_kernels", None)


def test_emulated_comm_refuses_cpu_in_one_line():
    pytest.importorskip("torch")
    from domino_prof.reference_model.emulate import EmulatedComm

    with pytest.raises(ConfigError, match="device cpu is not CUDA"):
        EmulatedComm("h200-nvlink-tp2", size=2, device="cpu")
    with pytest.raises(ConfigError, match="no entries for R=4"):
        EmulatedComm("h200-nvlink-tp2", size=4, device="cpu")


def test_emulated_kernels_compile_for_hopper(tmp_path, monkeypatch):
    """The kernels compile to an sm_90 cubin (Triton ships ptxas; no GPU needed): the
    spin reads %globaltimer, and the aligned path's full blocks are 16-byte vector
    accesses. Written against Triton 3.9's ASTSource API; skipped without it (CI)."""
    triton = pytest.importorskip("triton")
    if not triton.__version__.startswith("3.9"):
        pytest.skip(f"ASTSource form written for Triton 3.9, have {triton.__version__}")
    import sys

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    sys.modules.pop("domino_prof.reference_model._emulate_kernels", None)
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        from domino_prof.reference_model._emulate_kernels import KERNELS

        args = [f"{c}_{f}" for c in "ab" for f in
                ("src", "src_lo", "src_len", "src_off", "dst", "dst_lo", "dst_len", "dst_off",
                 "count")] + ["dur_ns"]  # fmt: skip
        sig = {n: "*bf16" if n.endswith(("src", "dst")) else "i64" for n in args}
        sig |= {"BLOCK": "constexpr", "SPIN": "constexpr", "ALIGNED": "constexpr"}
        ptrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(args) if sig[n] == "*bf16"}
        src = ASTSource(fn=KERNELS["all_reduce"], signature=sig, attrs=ptrs,
                        constexprs={"BLOCK": 4096, "SPIN": True, "ALIGNED": True})  # fmt: skip
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 16})
        ptx = k.asm["ptx"]
        assert "%globaltimer" in ptx and k.asm["cubin"]
        assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx
        assert k.name == "emulated_allreduce_kernel"
    finally:
        sys.modules.pop("domino_prof.reference_model._emulate_kernels", None)


# --------------------------------------------------------------------------- the host path
@pytest.mark.parametrize(
    ("coll", "R", "n_t", "n_out"),
    [("all_reduce", 8, 4096 * 64, 4096 * 64), ("all_reduce", 2, 1000, 1000),
     ("all_gather", 4, 96, 4 * 96), ("reduce_scatter", 8, 8 * 300, 300)],  # fmt: skip
)
def test_a_prepared_launch_passes_the_jit_launchs_arguments(coll, R, n_t, n_out):
    """The fast path's argument list (prepared once per key, filled per call) is the JIT
    launch's: the 19 runtime arguments with this call's tensors where the copies read and
    write, then the constexprs BLOCK, SPIN, ALIGNED in signature order."""
    torch = pytest.importorskip("torch")
    from domino_prof.reference_model import emulate

    p = load_profile(f"h200-nvlink-tp{R}")
    t = torch.zeros(n_t, dtype=torch.bfloat16)
    out = t if coll == "all_reduce" else torch.zeros(n_out, dtype=torch.bfloat16)
    ln = emulate.plan_launch(p, coll, ranks=R, rank=0, t=t, out=out)
    prep = emulate.Prepared(ln)
    t2 = torch.ones(n_t, dtype=torch.bfloat16)  # another call's tensors, same key
    out2 = t2 if coll == "all_reduce" else torch.ones(n_out, dtype=torch.bfloat16)
    got = prep.fill(t2, out2)
    want = emulate.kernel_args(ln, t2, out2) + [emulate.BLOCK, True, ln.aligned]
    assert len(got) == 22 == len(want)
    assert all(a is b if isinstance(b, torch.Tensor) else a == b for a, b in zip(got, want))
    assert got[18] == ln.dur_ns == p.entry(coll, R, "bfloat16").time_ns(ln.size_bytes)
    # filling never changes the prepared template: a later call gets its own tensors
    again = prep.fill(t, out)
    assert [i for i, a in enumerate(again) if a is t] == [i for i, a in enumerate(got) if a is t2]
    assert not any(a is emulate._T or a is emulate._OUT for a in again)
    assert sum(a is emulate._T for a in prep.args) == len(prep.t_at) >= 1


def test_the_event_ring_reuses_events_and_refuses_a_stale_wait():
    from domino_prof.reference_model.emulate import EventRing

    log: list = []

    class Ev:
        def __init__(self) -> None:
            self.i = len(made)
            made.append(self)

        def record(self, stream) -> None:
            log.append(("record", self.i, stream))

        def wait(self, stream) -> None:
            log.append(("wait", self.i, stream))

    made: list = []
    ring = EventRing(Ev, size=3)
    works = [ring.record("comm") for _ in range(3)]
    assert works == [(0, 1), (1, 1), (2, 1)] and len(made) == 3
    ring.wait(*works[0], "main")
    assert log[-1] == ("wait", 0, "main")
    fourth = ring.record("comm")  # slot 0 comes round again: no new event
    assert fourth == (0, 2) and len(made) == 3 and log[-1] == ("record", 0, "comm")
    with pytest.raises(RuntimeError, match="waited after 3 later collectives"):
        ring.wait(*works[0], "main")
    ring.wait(*fourth, "side")
    ring.wait(*works[2], "main")  # not reused yet: waits on its own event
    assert log[-2:] == [("wait", 0, "side"), ("wait", 2, "main")]


# --------------------------------------------------------------------------- the host path
def test_current_stream_is_kept_per_raw_handle(monkeypatch):
    """EmulatedComm._current_stream: torch.cuda.current_stream's Python layer once per
    stream the device has been current on (two lookups a collective, 919 an eager
    domino-sp step at the headline, reports/emulated-h100-2026-12-07f), the kept Stream
    of the raw handle after; a torch without the binding asks torch each time. CUDA
    stand-ins: a fake raw-handle binding and current_stream."""
    torch = pytest.importorskip("torch")
    from domino_prof.reference_model.emulate import EmulatedComm

    state = {"raw": 111, "dev": 0}
    asked = []

    def current_stream(device=None):
        asked.append((state["raw"], device))
        return object()  # a new Stream object per call, as torch's

    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: state["dev"])
    raw_seen = []

    def raw_of(index):
        raw_seen.append(index)
        return state["raw"]

    c = object.__new__(EmulatedComm)  # no CUDA here: only what _current_stream reads
    c.device, c._raw_stream, c._cur_streams = torch.device("cuda", 1), raw_of, {}
    first = c._current_stream()
    assert c._current_stream() is first and len(asked) == 1
    state["raw"] = 222  # another stream made current (a side stream, a graph's capture)
    other = c._current_stream()
    assert other is not first and len(asked) == 2
    state["raw"] = 111
    assert c._current_stream() is first and len(asked) == 2
    assert set(raw_seen) == {1}  # the comm's own device index
    c.device, c._cur_streams = torch.device("cuda"), {}  # no index: the current device's
    state["dev"] = 3
    on3 = c._current_stream()
    assert raw_seen[-1] == 3
    state["dev"] = 4  # the same raw handle on another device (each default stream is 0)
    assert c._current_stream() is not on3 and raw_seen[-1] == 4
    c._raw_stream = None  # no binding: torch's lookup every time
    n = len(asked)
    c._current_stream(), c._current_stream()
    assert len(asked) == n + 2
