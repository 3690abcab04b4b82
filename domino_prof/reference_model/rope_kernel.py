"""The rotary embedding as one Triton kernel: what eager CUDA steps issue instead of aten's
complex multiply (``units.rope_rotate``; ``DOMINO_PROF_ROPE=aten`` keeps aten's).

Why (issue 34, eager domino-sp host-bound): aten's rotation of the interleaved pairs is
10 dispatched ops and 3 kernels (``x.float()``, unflatten, two ``view_as_complex``, two
``unsqueeze``, the complex ``mul``, ``view_as_real``, flatten, ``type_as``), and the
backward's is the same between two concatenations (dq with dk, then with dv into the kept
dqkv slot): about 25 of the ~100 ops a layer and micro-batch issues (an H100 trace of the
headline, reports/emulated-h100-2026-12-07d). Here the forward is one launch, and the
backward one launch that reads dq and dk where cuDNN wrote them and writes the rotated
rows straight into their slot, plus one copy of dv: no float copies of the
activations, no concatenation.

The maths is model.apply_rope's in fp32: pairs (x0, x1) of the last dimension, the table
``cs`` [S, D/2, 2] = (cos, sin) per position and pair (``units.rope_table``; the backward
passes the table with the sine negated), out = (x0·c − x1·s, x0·s + x1·c) rounded to the
output's dtype once. Any strides with a unit last stride (the head slices of the qkv
buffer, cuDNN's gradients, a sequence-major slot's transposed view). One program per
token: its heads' rows of D are loaded and stored whole (contiguous, vectorised), the
pairs split and joined in registers.

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
    def rope_pairs(a_ptr, b_ptr, cs_ptr, o_ptr, S, NA, NB,
                   a_sb, a_ss, a_sh, b_sb, b_ss, b_sh, o_sb, o_ss, o_sh,
                   HALF: tl.constexpr, BLOCK_H: tl.constexpr, TWO: tl.constexpr):  # fmt: skip
        # one program per (batch row, position): every head's D = 2·HALF values of that
        # token, loaded and stored as contiguous rows of D; the pairs split in registers
        row = tl.program_id(0)
        bi = (row // S).to(tl.int64)
        si = (row % S).to(tl.int64)
        h = tl.arange(0, BLOCK_H)[:, None]
        d = tl.arange(0, 2 * HALF)[None, :]
        cs = tl.load(cs_ptr + si * (2 * HALF) + tl.arange(0, 2 * HALF))  # (cos, sin) pairs
        c, s = tl.split(tl.reshape(cs, (HALF, 2)))
        in_a = h < NA
        x = tl.load(a_ptr + bi * a_sb + si * a_ss + h * a_sh + d, mask=in_a, other=0.0)
        if TWO:  # heads [NA, NA + NB) come from the second source
            in_b = (h >= NA) & (h < NA + NB)
            pb = b_ptr + bi * b_sb + si * b_ss + (h - NA) * b_sh + d
            x = tl.where(in_b, tl.load(pb, mask=in_b, other=0.0), x)
        x0, x1 = tl.split(tl.reshape(x.to(tl.float32), (BLOCK_H, HALF, 2)))
        y = tl.reshape(tl.join(x0 * c - x1 * s, x0 * s + x1 * c), (BLOCK_H, 2 * HALF))
        keep = h < NA + NB
        po = o_ptr + bi * o_sb + si * o_ss + h * o_sh + d
        tl.store(po, y.to(o_ptr.dtype.element_ty), mask=keep)

    return rope_pairs


def available() -> bool:
    """Whether Triton imports here (the kernel's compiler; CUDA is the caller's check)."""
    return triton_launch.available(_kernel)


_launchers: dict[tuple, Any] = {}  # argument signature -> the compiled kernel's launcher


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def rotate(a, b, cs, out) -> None:
    """out[..., :na, :] = a rotated, out[..., na:na + nb, :] = b rotated (``b`` None:
    nb = 0). a: [B, S, na, D], b: [B, S, nb, D], out: [B, S, na + nb, D] (out may be a
    strided view; every last stride 1); cs: [S, D/2, 2] fp32, contiguous."""
    B, S, na, D = a.shape
    nb = 0 if b is None else b.shape[2]
    bb = a if b is None else b
    if a.stride(3) != 1 or bb.stride(3) != 1 or out.stride(3) != 1:  # the kernel adds d
        raise ValueError("rope_kernel.rotate needs rows of D with unit stride (last stride 1)")
    ints = (S, na, nb, a.stride(0), a.stride(1), a.stride(2),
            bb.stride(0), bb.stride(1), bb.stride(2),
            out.stride(0), out.stride(1), out.stride(2))  # fmt: skip
    consts = {"HALF": D // 2, "BLOCK_H": _next_pow2(na + nb), "TWO": b is not None}
    key = (ints, tuple(consts.values()), a.dtype, bb.dtype, out.dtype, a.device.index,
           a.data_ptr() % 16 == 0, bb.data_ptr() % 16 == 0, cs.data_ptr() % 16 == 0,
           out.data_ptr() % 16 == 0, B)  # fmt: skip
    triton_launch.launch(_launchers, _kernel, (B * S,), key, (a, bb, cs, out) + ints, consts,
                         a.device)  # fmt: skip


def self_check(device) -> str | None:
    """Compile and run the kernel once on ``device`` against aten's rotation (one source,
    and two into a strided slot, on bf16 rows of D = 128): None where it agrees to within
    one bf16 rounding, else why not (a compile error on this GPU's Triton, or a wrong
    value). ``units.rope_kernel`` calls it before the first CUDA step, so a kernel that
    cannot serve falls back to aten's with a warning instead of stopping the run."""
    import torch

    from domino_prof.reference_model.model import apply_rope, rope_tables

    try:
        S, D = 8, 128
        freqs = rope_tables(D, S, 10000.0, device)
        cs = torch.view_as_real(freqs).contiguous()
        g = torch.Generator(device=device).manual_seed(0)
        buf = torch.randn(2, S, 5, D, device=device, generator=g).bfloat16()
        want = apply_rope(buf[:, :, :4], freqs)
        one = torch.empty_like(want)
        rotate(buf[:, :, :4], None, cs, one)
        two = torch.zeros(S, 2, 5, D, device=device, dtype=buf.dtype).transpose(0, 1)
        rotate(buf[:, :, :3], buf[:, :, 3:4], cs, two[:, :, :4])
        tol = want.float().abs() * 2.0**-7 + 1e-6  # one bf16 rounding apart at most
        for got in (one, two[:, :, :4]):
            if not bool(((got.float() - want.float()).abs() <= tol).all()):
                return "its rotation differs from aten's beyond one bf16 rounding"
        if bool(two[:, :, 4:].abs().sum() != 0):
            return "it wrote outside the heads it was given"
    except Exception as e:  # noqa: BLE001 - any failure means: use aten's rotation
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None
