"""The residual add and the RMSNorm as one Triton kernel that writes the norm's output
where the caller says: what every schedule's eager and graphed CUDA steps issue
(``units.add_norm``; ``DOMINO_PROF_NORM=aten`` keeps aten's add, ``_fused_rms_norm`` and
copy, the A/B reference).

Why (issue 34, the split's own cost): with micro-batches, a layer's norm output is kept
for the column-parallel weight gradient in one [ΣT, d] buffer (segments._mb_slot), so
that gradient is one GEMM over every micro-batch's rows. aten's fused norm takes no
``out=``, so each micro-batch's output is copied into its rows: 112 of the 229
device-to-device copies of a tp-1 domino graph step (llama3-3b, seq 1024, mbs 2:
reports/emulated-h100-2026-12-07g, call3), each a kernel boundary of the graph. Here the
residual sum h + y, the norm and that store are one launch (and one read of h, not
three): eager, three aten ops become one.

Measured (one H100, reports/emulated-h100-2026-12-08, call 2): the add and norm of a
[T, 3072] bf16 row block in a graph, aten's against this: 9.09 -> 3.31 us at T 512, 14.78
-> 5.78 at 1024, 30.00 -> 17.30 at 2048, 60.03 -> 35.63 at 4096; the emulated TP-8
headline's graph steps 1.2 ms faster for tp and nocomm, 2.7 ms for domino (its copies),
0.2-0.3 ms for the SP modes (their norms run on the sequence shard, beside the GEMMs).

The maths is aten's: s = h + y rounded to the activations' dtype (the residual stream
``h + y`` keeps), then in fp32 rstd = 1 / sqrt(mean_d(s²) + eps) and
n = s · rstd · w rounded once; rstd [T, 1] fp32 as ``_fused_rms_norm`` returns it (the
backward, ``_fused_rms_norm_backward``, takes it as is). ``y`` is a [T, d] tensor with
unit last stride, or the column split's [K, T, d/K] chunk buffer (read as aten's
``residual_add`` reads its transposed view: element (t, k·c + i) at y[k, t, i]). One
program per token row: the row of d is loaded whole, reduced in registers.

Launch cost: one JIT call per argument signature, a kept launcher after it
(triton_launch.launch). Triton is imported on first use only.
"""

from __future__ import annotations

import functools
from typing import Any

from domino_prof.reference_model import triton_launch


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _add(a, b):
        return a + b

    # Triton resolves a kernel's names in its module's globals (no closures): the combine
    # is made here, with the kernel, so it is an interpreted function when the kernel is
    global _sum_combine
    _sum_combine = _add

    @triton.jit
    def add_rms_norm(h_ptr, y_ptr, w_ptr, s_ptr, n_ptr, r_ptr, D, C, h_st, y_sk, y_st,
                     s_st, n_st, eps, BLOCK: tl.constexpr, ADD: tl.constexpr,
                     CHUNKED: tl.constexpr):  # fmt: skip
        # one program per token row: its d values loaded whole, the sum of squares reduced
        # in registers; the residual sum stored (ADD) and the norm written to its slot
        row = tl.program_id(0).to(tl.int64)
        j = tl.arange(0, BLOCK)
        m = j < D
        x = tl.load(h_ptr + row * h_st + j, mask=m, other=0.0)
        if ADD:
            if CHUNKED:  # [K, T, c] chunk buffer: element (row, k·c + i) at [k, row, i]
                py = y_ptr + (j // C) * y_sk + row * y_st + (j % C)
            else:
                py = y_ptr + row * y_st + j
            yv = tl.load(py, mask=m, other=0.0)
            # rounded to nearest even, as aten's bf16 add (Triton's interpreter truncates)
            x = (x.to(tl.float32) + yv.to(tl.float32)).to(s_ptr.dtype.element_ty,
                                                          fp_downcast_rounding="rtne")
            tl.store(s_ptr + row * s_st + j, x, mask=m)
        xf = x.to(tl.float32)
        # tl.reduce with this module's combine, not tl.sum: the library's jit functions
        # are made when Triton is imported, so under an interpreter switched on later
        # (the tests) they would not run
        r = 1.0 / tl.sqrt(tl.reduce(xf * xf, 0, _sum_combine) / D + eps)
        w = tl.load(w_ptr + j, mask=m, other=0.0).to(tl.float32)
        n = (xf * r * w).to(n_ptr.dtype.element_ty, fp_downcast_rounding="rtne")
        tl.store(n_ptr + row * n_st + j, n, mask=m)
        tl.store(r_ptr + row, r)

    return add_rms_norm


def available() -> bool:
    """Whether Triton imports here (the kernel's compiler; CUDA is the caller's check)."""
    return triton_launch.available(_kernel)


_launchers: dict[tuple, Any] = {}  # argument signature -> the compiled kernel's launcher


def _warps(block: int) -> int:
    return 4 if block <= 2048 else (8 if block <= 8192 else 16)


def add_rms_norm(h, y, w, eps: float, n_out=None):
    """(s, n, rstd): s = h + y (``y`` None: s is ``h``, nothing added or stored), n =
    rmsnorm(s)·w written into ``n_out`` where given (a [T, d] view with unit last
    stride, e.g. rows of a larger buffer), else into a new tensor; rstd [T, 1] fp32.
    h: [T, d], y: [T, d] or [K, T, d/K] (the column split's chunk buffer), ``n_out``:
    each with unit last stride; w: [d] contiguous."""
    import torch

    T, D = h.shape
    if h.stride(1) != 1 or w.stride(0) != 1:
        raise ValueError("norm_kernel.add_rms_norm needs h and w with unit last stride")
    chunked = y is not None and y.dim() == 3
    if chunked:
        K, _, C = y.shape
        if y.stride(2) != 1 or K * C != D:
            raise ValueError("norm_kernel.add_rms_norm: a chunk buffer must be [K, T, d/K] "
                             "with unit last stride")  # fmt: skip
        y_sk, y_st = y.stride(0), y.stride(1)
    elif y is not None:
        if y.shape != h.shape or y.stride(1) != 1:
            raise ValueError("norm_kernel.add_rms_norm: y must be [T, d] with unit last stride")
        C, y_sk, y_st = D, 0, y.stride(0)
    else:
        C, y_sk, y_st = D, 0, 0
    s = h if y is None else torch.empty((T, D), dtype=h.dtype, device=h.device)
    n = torch.empty((T, D), dtype=h.dtype, device=h.device) if n_out is None else n_out
    if n.shape != (T, D) or n.stride(1) != 1:
        raise ValueError("norm_kernel.add_rms_norm: n_out must be [T, d] with unit last stride")
    rstd = torch.empty((T, 1), dtype=torch.float32, device=h.device)
    yy = h if y is None else y
    ints = (D, C, h.stride(0), y_sk, y_st, s.stride(0), n.stride(0))
    block = 1 << max(0, (D - 1).bit_length())
    consts = {"BLOCK": block, "ADD": y is not None, "CHUNKED": chunked}  # constexprs
    pos = (h, yy, w, s, n, rstd) + ints + (float(eps),)
    aligned = tuple(t.data_ptr() % 16 == 0 for t in (h, yy, w, s, n, rstd))
    key = (ints, tuple(consts.values()), float(eps), h.dtype, yy.dtype, w.dtype, n.dtype,
           h.device.index, T, aligned)  # fmt: skip
    triton_launch.launch(_launchers, _kernel, (T,), key, pos, consts, h.device,
                         num_warps=_warps(block))  # fmt: skip
    return s, n, rstd


def self_check(device, dtype=None) -> str | None:
    """Compile and run the kernel once on ``device`` against aten's add and norm (a [T, d]
    residual into rows of a larger buffer, and the same residual as a chunk buffer; d =
    320, ``dtype`` bf16 unless given): None where the sum is aten's and the norm within one
    rounding of the dtype, else why not. ``units.norm_kernel`` calls it before the first
    CUDA step, so a kernel that cannot serve falls back to aten's with a warning instead
    of stopping the run. (Triton's CPU interpreter rounds bf16 by truncation, so the tests
    check it in fp32.)"""
    import torch

    dtype = torch.bfloat16 if dtype is None else dtype
    try:
        T, D, K = 6, 320, 4
        g = torch.Generator(device=device).manual_seed(0)
        h, y = (torch.randn(T, D, device=device, generator=g).to(dtype) for _ in range(2))
        w = torch.randn(D, device=device, generator=g).to(dtype)
        want_s = h + y
        want_n, want_r = torch.ops.aten._fused_rms_norm(want_s, [D], w, 1e-5)
        buf = torch.zeros(T + 3, D, device=device, dtype=h.dtype)
        # twice: the first call compiles through the JIT, the second (same signature)
        # launches through the kept launcher, as every later step does
        got = [add_rms_norm(h, y, w, 1e-5, n_out=buf[1 : T + 1]) for _ in range(2)]
        yc = y.view(T, K, D // K).transpose(0, 1).contiguous()  # the same y as chunks
        got.append(add_rms_norm(h, yc, w, 1e-5))
        tol = want_n.float().abs() * torch.finfo(dtype).eps + 1e-6  # one rounding at most
        for got_s, got_n, got_r in got:
            if not torch.equal(got_s, want_s):
                return "its residual sum differs from aten's"
            if not bool(((got_n.float() - want_n.float()).abs() <= tol).all()):
                return "its norm differs from aten's beyond one rounding"
            if got_r.shape != want_r.shape or not torch.allclose(got_r, want_r, rtol=1e-5):
                return "its rstd differs from aten's"
        if bool(buf[0].abs().sum() != 0) or bool(buf[T + 1 :].abs().sum() != 0):
            return "it wrote outside the rows it was given"
    except Exception as e:  # noqa: BLE001 - any failure means: use aten's norm
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None
