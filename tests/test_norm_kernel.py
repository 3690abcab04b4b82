"""The residual add and norm's Triton kernel (reference_model/norm_kernel.py) against
aten's add, ``_fused_rms_norm`` and copy, and the switch between them
(``units.set_norm``, ``DOMINO_PROF_NORM``, run.json ``norm``).

The aten path (every CI run) is checked on its own: the norm lands in the rows it is
given and nowhere else. The kernel runs under Triton's CPU interpreter
(TRITON_INTERPRET=1) in fp32, where it agrees with aten to fp32 rounding and a whole
step's gradients with it equal aten's (the interpreter rounds bf16 by truncation where a
GPU rounds to nearest, so bf16 is the GPU's check: norm_kernel.self_check). Those cases
are skipped where Triton is not installed (CI installs none).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernel_steps import kernel_against_aten  # noqa: E402

from domino_prof.reference_model import units  # noqa: E402


@pytest.fixture
def norm_reset():
    yield
    units.set_norm(None)  # back to DOMINO_PROF_NORM's reading (config.norm_env)


def _inputs(T=5, D=24, K=4, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    h, y = (torch.randn(T, D, generator=g, dtype=dtype) for _ in range(2))
    w = torch.randn(D, generator=g, dtype=dtype)
    chunks = y.view(T, K, D // K).transpose(0, 1).contiguous()  # the same y as [K, T, D/K]
    return h, y, chunks, w


def _aten(h, y, w, eps=1e-5):
    s = h if y is None else h + y
    n, r = torch.ops.aten._fused_rms_norm(s, [s.shape[1]], w, eps)
    return s, n, r


def test_norm_setting(monkeypatch, norm_reset):
    """auto is the default, and aten on CPU (the kernel is CUDA's); a bad kind is refused
    with the kinds named (the environment knob: test_triton_launch.py)."""
    cpu = torch.device("cpu")
    monkeypatch.delenv("DOMINO_PROF_NORM", raising=False)
    assert units.norm_kernel(cpu) == "aten"
    units.set_norm("auto")
    assert units.norm_kernel(cpu) == "aten"
    with pytest.raises(ValueError, match="auto.*aten.*triton"):
        units.set_norm("fused")


@pytest.mark.parametrize("kind", ["aten", "triton"])
@pytest.mark.parametrize("resid", ["none", "2d", "chunks"])
def test_add_norm_into_rows_of_a_buffer(kind, resid, norm_reset, monkeypatch):
    """units.add_norm: s = h + y (a [T, d] y or the column split's [K, T, d/K] chunks),
    n = rmsnorm(s)·w written into the rows it is given, rstd [T, 1] fp32, the buffer's
    other rows untouched; with no y, s is h itself."""
    if kind == "triton":
        pytest.importorskip("triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        from domino_prof.reference_model import norm_kernel as NK

        NK._kernel.cache_clear()
        monkeypatch.setattr(NK, "_launchers", {})
    units.set_norm(kind)
    assert units.norm_kernel(torch.device("cpu")) == kind
    h, y, chunks, w = _inputs()
    yy = {"none": None, "2d": y, "chunks": chunks}[resid]
    want_s, want_n, want_r = _aten(h, None if yy is None else y, w)
    buf = torch.full((9, 24), 7.0)
    s, n, r = units.add_norm(h, yy, w, 1e-5, out=buf[2:7])
    assert torch.equal(s, want_s)
    assert (s is h) == (yy is None)
    assert n.data_ptr() == buf[2].data_ptr()
    assert torch.allclose(buf[2:7], want_n, rtol=2e-6, atol=1e-6)
    assert bool((buf[:2] == 7).all()) and bool((buf[7:] == 7).all())
    assert r.shape == (5, 1) and r.dtype == torch.float32
    assert torch.allclose(r, want_r, rtol=2e-6)
    s2, n2, _ = units.add_norm(h, yy, w, 1e-5)  # no out: a new tensor
    assert torch.allclose(n2, want_n, rtol=2e-6, atol=1e-6) and torch.equal(s2, want_s)


@pytest.fixture
def interpreted(monkeypatch, norm_reset):
    """The kernel under Triton's interpreter, compiled afresh (and dropped after)."""
    pytest.importorskip("triton")
    from domino_prof.reference_model import norm_kernel as NK

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    NK._kernel.cache_clear()
    monkeypatch.setattr(NK, "_launchers", {})
    units.set_norm("triton")
    assert units.norm_kernel(torch.device("cpu")) == "triton"
    yield NK
    NK._kernel.cache_clear()


def test_kernel_refuses_a_layout_it_cannot_read(interpreted):
    h, y, chunks, w = _inputs()
    with pytest.raises(ValueError, match="unit last stride"):
        interpreted.add_rms_norm(h, y.t().contiguous().t(), w, 1e-5)
    with pytest.raises(ValueError, match="n_out must be"):
        interpreted.add_rms_norm(h, y, w, 1e-5, n_out=torch.empty(5, 23))


# norm launches per micro-batch of a tiny (2-layer) step: one before each sub-layer and
# one before the head (2·2 + 1); the SP schedules make the head's on the sequence shard too
LAUNCHES = 2 * 2 + 1


@pytest.mark.parametrize("schedule", ["tp", "domino", "sp", "domino-sp"])
def test_step_gradients_with_the_kernel_equal_aten(interpreted, monkeypatch, schedule):
    """A step of rank 1 of a tp-2 tiny model (SkipComm: no process group) with the kernel
    gives aten's loss and gradients, and launched it once per norm and micro-batch."""
    launches, splits = kernel_against_aten(
        schedule, interpreted, "add_rms_norm", lambda: units.set_norm("aten"), monkeypatch)
    assert launches == LAUNCHES * splits

def test_self_check_passes_a_right_kernel_and_names_a_wrong_one(interpreted, monkeypatch):
    """norm_kernel.self_check: None for the kernel as it is (fp32 here: see the module
    docstring); a kernel that writes a wrong norm, one that writes outside its rows, or
    one that raises gets its reason."""
    cpu = torch.device("cpu")
    assert interpreted.self_check(cpu, torch.float32) is None
    real = interpreted.add_rms_norm

    def wrong(h, y, w, eps, n_out=None):
        s, n, r = real(h, y, w, eps, n_out=n_out)
        n.mul_(1.01)
        return s, n, r

    monkeypatch.setattr(interpreted, "add_rms_norm", wrong)
    assert interpreted.self_check(cpu, torch.float32) == (
        "its norm differs from aten's beyond one rounding")

    def spills(h, y, w, eps, n_out=None):
        if n_out is not None:
            n_out = n_out.as_strided((n_out.shape[0] + 1, n_out.shape[1]), n_out.stride())
            s, n, r = real(torch.cat([h, h[:1]]), None if y is None else torch.cat([y, y[:1]]),
                           w, eps, n_out=n_out)  # fmt: skip
            return s[:-1], n[:-1], r[:-1]
        return real(h, y, w, eps)

    monkeypatch.setattr(interpreted, "add_rms_norm", spills)
    assert interpreted.self_check(cpu, torch.float32) == "it wrote outside the rows it was given"

    def broken(*args, **kw):
        raise RuntimeError("PTX assembly failed\nmore detail")

    monkeypatch.setattr(interpreted, "add_rms_norm", broken)
    assert interpreted.self_check(cpu, torch.float32) == "RuntimeError: PTX assembly failed"


def test_a_kernel_that_cannot_serve_cuda_falls_back_to_aten(interpreted, monkeypatch, capsys):
    """On CUDA the kernel is checked once before use (here the check fails: this box has
    no CUDA device, or the patched reason): aten's add and norm, one warning saying why."""
    monkeypatch.setattr(interpreted, "self_check", lambda device: "RuntimeError: no PTX")
    units.set_norm("auto")
    assert units.norm_kernel(torch.device("cuda")) == "aten"
    assert units.norm_kernel(torch.device("cuda")) == "aten"  # checked once
    err = capsys.readouterr().err
    assert err.count("warning: the Triton norm kernel cannot serve here") == 1
    assert "RuntimeError: no PTX" in err

