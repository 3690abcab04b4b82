"""The rotary embedding's Triton kernel (reference_model/rope_kernel.py) against aten's
complex multiply, and the switch between them (``units.set_rope``, run.json ``rope``).

The kernel runs here under Triton's CPU interpreter (TRITON_INTERPRET=1), which computes
in numpy fp32 as aten does on CPU: the two agree exactly on fp32 inputs, and a whole
step's gradients with it equal aten's. Those cases are skipped where Triton is not
installed (CI installs no Triton; a GPU run checks the kernel compiled:
benchmarks/bench_rope_ab.py, benchmarks/gpu_verify.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernel_steps import kernel_against_aten  # noqa: E402

from domino_prof.reference_model import units  # noqa: E402


@pytest.fixture
def rope_reset():
    yield
    units.set_rope(None)  # back to DOMINO_PROF_ROPE's reading (config.rope_env)


def test_rope_setting(rope_reset):
    """auto: aten on CPU (the kernel is CUDA's); aten everywhere when asked; a bad kind
    is refused with the kinds named."""
    cpu = torch.device("cpu")
    units.set_rope("auto")
    assert units.rope_kernel(cpu) == "aten"
    units.set_rope("aten")
    assert units.rope_kernel(cpu) == "aten"
    with pytest.raises(ValueError, match="auto.*aten.*triton"):
        units.set_rope("fused")


@pytest.fixture
def interpreted(monkeypatch, rope_reset):
    """The kernel under Triton's interpreter, compiled afresh (and dropped after)."""
    pytest.importorskip("triton")
    from domino_prof.reference_model import rope_kernel as RK

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    RK._kernel.cache_clear()
    units.set_rope("triton")
    assert units.rope_kernel(torch.device("cpu")) == "triton"
    yield RK
    RK._kernel.cache_clear()


def _table(S: int, D: int):
    from domino_prof.reference_model.model import rope_tables

    return units.rope_table(rope_tables(D, S, 10000.0))


def test_rotation_equals_aten(interpreted):
    """One source (the forward: q and k heads sliced out of the qkv buffer) and two
    sources written into a strided slot (the backward: dq and dk into a sequence-major
    dqkv view), against aten's rotation of the same values; the slot's other heads are
    left as they were."""
    g = torch.Generator().manual_seed(3)
    S, D = 6, 16
    cs = _table(S, D)
    buf = torch.randn(2, S, 7, D, generator=g)
    x = buf[:, :, :5]  # 5 of 7 heads: strides (S·7·D, 7·D, D, 1)
    got = units.rope_rotate(x, cs)
    units.set_rope("aten")
    want = units.rope_rotate(x, cs)
    assert got.shape == want.shape == (2, S, 5, D)
    assert torch.equal(got, want)

    a = torch.randn(2, 3, S, D, generator=g).transpose(1, 2)  # [b, S, 3, D], head-major
    b = torch.randn(2, 1, S, D, generator=g).transpose(1, 2)
    slot = torch.full((S, 2, 6, D), 7.0).transpose(0, 1)  # a sequence-major [b, S, 6, D]
    interpreted.rotate(a, b, cs, slot[:, :, :4])
    assert torch.equal(slot[:, :, :4], units.rope_rotate(torch.cat([a, b], 2), cs))
    assert torch.equal(slot[:, :, 4:], torch.full((2, S, 2, D), 7.0))
    with pytest.raises(ValueError, match="last stride 1"):  # a row of D must be contiguous
        interpreted.rotate(buf.transpose(2, 3)[:, :, :, :5], None, cs, got)


def test_rotation_rounds_once_in_bf16(interpreted):
    """bf16 in and out: the maths in fp32, rounded once to bf16, as aten's path (float,
    complex multiply, type_as). Within one bf16 step of aten's: the interpreter's
    downcast truncates where the GPU's rounds to nearest (bench_rope_ab.py measures the
    compiled kernel's agreement on the GPU)."""
    g = torch.Generator().manual_seed(4)
    S, D = 5, 8
    cs = _table(S, D)
    x = torch.randn(1, S, 3, D, generator=g).bfloat16()
    got = units.rope_rotate(x, cs)
    units.set_rope("aten")
    want = units.rope_rotate(x, cs)
    assert got.dtype == want.dtype == torch.bfloat16
    step = want.float().abs() * 2.0**-7  # one bf16 ulp is 2^-7 of the value or less
    assert bool(((got.float() - want.float()).abs() <= step).all())
    assert not torch.equal(got, x)  # rotated at all (positions 1.. move)


@pytest.mark.parametrize("schedule", ["tp", "domino", "sp", "domino-sp"])
def test_step_gradients_with_the_kernel_equal_aten(interpreted, monkeypatch, schedule):
    """A step of rank 1 of a tp-2 tiny model (SkipComm: no process group) with the kernel
    gives aten's loss and gradients, and launched it twice per layer and micro-batch
    (forward and backward): tiny has 2 layers; domino splits into 2 micro-batches."""
    launches, splits = kernel_against_aten(
        schedule, interpreted, "rotate", lambda: units.set_rope("aten"), monkeypatch)
    assert launches == 2 * 2 * splits

def test_self_check_passes_a_right_kernel_and_names_a_wrong_one(interpreted, monkeypatch):
    """rope_kernel.self_check: None for the kernel as it is; a kernel that writes wrong
    values, or one that raises (a compile error on some GPU's Triton), gets its reason,
    and units.rope_kernel then falls back to aten with one warning line."""
    cpu = torch.device("cpu")
    assert interpreted.self_check(cpu) is None
    real = interpreted.rotate

    def wrong(a, b, cs, out):
        real(a, b, cs, out)
        out.mul_(1.5)

    monkeypatch.setattr(interpreted, "rotate", wrong)
    assert "differs from aten's" in interpreted.self_check(cpu)

    def broken(*args):
        raise RuntimeError("PTX assembly failed\nmore detail")

    monkeypatch.setattr(interpreted, "rotate", broken)
    assert interpreted.self_check(cpu) == "RuntimeError: PTX assembly failed"


def test_a_kernel_that_cannot_serve_cuda_falls_back_to_aten(interpreted, monkeypatch, capsys):
    """On CUDA the kernel is checked once before use (here the check fails: this box has
    no CUDA device, or the patched reason): aten's rotation, and one warning saying why."""
    monkeypatch.setattr(interpreted, "self_check", lambda device: "RuntimeError: no PTX")
    units.set_rope("auto")
    assert units.rope_kernel(torch.device("cuda")) == "aten"
    err = capsys.readouterr().err
    assert err.count("warning: the Triton rotary kernel cannot serve here") == 1
    assert "RuntimeError: no PTX" in err
