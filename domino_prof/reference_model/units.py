"""Explicit forward and backward of the model's pieces on one TP shard: no autograd.

The schedules (``schedule.py``) run a training step as a sequence of *segments*:
straight-line tensor code between two collectives. Each function here is one
such piece of maths with its backward written out, so a step needs no autograd
engine at all: no graph recording in forward, no engine call (and, on CUDA, no
hand-off to autograd's device thread) per piece in backward, no Python
``autograd.Function`` per boundary. What autograd would save, these functions
return as plain tensors; the schedule hands them back to the backward. Every
function is a pure function of tensors (weights are arguments), so the same code
runs eagerly, under ``torch.compile`` and inside a CUDA graph.

Gradient accumulation: ``*_wgrad`` functions and the norm backward write into the
``grad`` tensors they are given: the first micro-batch of a step overwrites
(``first=True``: a plain GEMM into the buffer, no zeroing pass, no read of the old
values), later ones accumulate (``addmm_``: the GEMM adds into the buffer in one
kernel).

Notation (per micro-batch): T tokens (= b·S, or b·S/R for a sequence shard),
d = model dim, R = TP ranks; ``Hl``/``Kl`` = query/kv heads on this rank, D = head dim,
``Fl`` = SwiGLU hidden size on this rank, ``Vl`` = vocab rows on this rank. Weights as
``nn.Linear`` stores them: ``[out_features, in_features]``. Shapes are written
``# x: [T, d]`` beside the tensors (gpt-fast habit).

No communication happens here: where a result is a *partial sum over TP ranks*
(the row-parallel output, the column-parallel input gradient, the vocab-parallel
logits' statistics), the docstring says so and the schedule reduces it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from domino_prof.reference_model import triton_launch
from domino_prof.reference_model.config import (
    ATTENTION_KERNELS,
    NORM_KERNELS,
    ROPE_KERNELS,
    norm_env,
    rope_env,
)
from domino_prof.reference_model.model import apply_rope


@dataclass(frozen=True)
class Dims:
    """This rank's shard of one layer (ints only: constants under torch.compile)."""

    heads: int  # Hl
    kv_heads: int  # Kl
    head_dim: int  # D
    ffn: int  # Fl
    eps: float
    seq_major: bool = False  # token order of [T, d] tensors: (S, b) if True else (b, S)


# --- RMSNorm --------------------------------------------------------------------------

_FUSED_NORM_BWD: dict[str, bool] = {}


def _has_fused_norm_bwd(device: torch.device) -> bool:
    """Whether ``aten._fused_rms_norm_backward`` runs on this device type (CUDA: yes in
    recent PyTorch; CPU 2.13: no). Probed once per device type on a tiny tensor."""
    key = device.type
    if key not in _FUSED_NORM_BWD:
        x = torch.ones(2, 4, device=device)
        try:
            _, rstd = torch.ops.aten._fused_rms_norm(x, [4], None, 1e-5)
            torch.ops.aten._fused_rms_norm_backward(x, x, [4], rstd, x[0], [True, True])
            _FUSED_NORM_BWD[key] = True
        except (NotImplementedError, RuntimeError):
            _FUSED_NORM_BWD[key] = False
    return _FUSED_NORM_BWD[key]


def norm_fwd(x: torch.Tensor, w: torch.Tensor, eps: float):
    """n = x / rms(x) · w. x: [T, d] -> (n [T, d], rstd [T, 1] fp32)."""
    return torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], w, eps)


def _acc(grad: torch.Tensor, value: torch.Tensor, first: bool) -> None:
    if first:
        grad.copy_(value)
    else:
        grad.add_(value)


# --overlap-gemm: the GEMM the segments issued beside a collective use (overlap_gemm.py
# sets it per segment, like --sm-carveout's torch knobs); None: torch's for every GEMM.
# A callable (a, b, out, accumulate) -> the result, or None where torch's is to be used.
_gemm_beside = None


def set_gemm_beside(fn) -> None:
    """The GEMM of the segments issued from now on (None: torch's). Process-wide."""
    global _gemm_beside
    _gemm_beside = fn


def _mm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """a @ b (into ``out`` when given) with the GEMM in force (set_gemm_beside)."""
    f = _gemm_beside
    if f is not None:
        r = f(a, b, out, False)
        if r is not None:
            return r
    return torch.mm(a, b) if out is None else torch.mm(a, b, out=out)


def _acc_mm(grad: torch.Tensor, a: torch.Tensor, b: torch.Tensor, first: bool) -> None:
    """grad (=|+=) a @ b in one GEMM."""
    if first:
        _mm(a, b, out=grad)
        return
    f = _gemm_beside
    if f is None or f(a, b, grad, True) is None:
        grad.addmm_(a, b)


def _acc_mm_in(grad: torch.Tensor, dy: torch.Tensor, n, first: bool) -> None:
    """The column-parallel weight's gradient: grad (=|+=) dyᵀ n. ``n`` [ΣT, d]: one GEMM
    over every micro-batch's rows; or (``--wgrad-in accumulate``) the micro-batches'
    norm outputs where the norm wrote them, ((row offset, n_b [T_b, d]), ...): one GEMM
    per micro-batch, dy's rows [off, off + T_b) against n_b, accumulated into grad."""
    if isinstance(n, torch.Tensor):
        _acc_mm(grad, dy.t(), n, first)
        return
    for i, (off, nb) in enumerate(n):
        _acc_mm(grad, dy[off : off + nb.shape[0]].t(), nb, first and i == 0)


def norm_bwd(dn, x, rstd, w, w_grad, first: bool = False) -> torch.Tensor:
    """dx for n = rmsnorm(x)·w given dn; accumulates dw into ``w_grad``.

    x̂ = x·rstd;  dw = Σ_T dn·x̂;  dx = rstd · (dn·w − x̂ · mean_d(dn·w·x̂))
    """
    if not torch.compiler.is_compiling() and _has_fused_norm_bwd(x.device):
        dx, dw = torch.ops.aten._fused_rms_norm_backward(
            dn, x, [x.shape[-1]], rstd, w, [True, True]
        )
        _acc(w_grad, dw, first)
        return dx
    xh = x.float() * rstd  # [T, d]
    gw = dn.float() * w.float()  # [T, d]
    _acc(w_grad, (dn.float() * xh).sum(0).to(w_grad.dtype), first)
    dx = rstd * (gw - xh * (gw * xh).mean(-1, keepdim=True))
    return dx.to(x.dtype)


_NORM = triton_launch.Switch(NORM_KERNELS, norm_env, "domino_prof.reference_model.norm_kernel",
                            "norm", "aten's add and norm")  # fmt: skip


def set_norm(kind: str | None) -> None:
    """Which residual add and norm :func:`add_norm` issues, over the environment's
    DOMINO_PROF_NORM (config.norm_env, read until this is called; None: read it again):
    ``auto`` (the default): norm_kernel.py's one Triton launch on CUDA where Triton
    imports and the kernel passes its self-check, else aten's; ``aten``: ``h + y``,
    ``_fused_rms_norm`` and, where the output is kept in a joint buffer's rows, a copy
    there (the A/B reference); ``triton``: the kernel on any device (CPU only under
    TRITON_INTERPRET=1: the tests). Process-wide."""
    _NORM.set(kind)


def norm_kernel(device: torch.device) -> str:
    """``triton`` or ``aten``: the residual add and norm the schedules' steps on ``device``
    issue (run.json ``norm``)."""
    return _NORM.kernel(device)


def add_norm(h: torch.Tensor, y: torch.Tensor | None, w: torch.Tensor, eps: float,
             out: torch.Tensor | None = None):  # fmt: skip
    """The residual stream's next value and its norm: (s, n, rstd), s = h + y
    (:func:`residual_add`: y [T, d] or a [K, T, d/K] chunk buffer; None: s = h), n =
    rmsnorm(s)·w, written into ``out`` (rows of a joint buffer) where given. Eager or
    graphed on a device where :func:`norm_kernel` says triton: one launch
    (norm_kernel.py); else aten's add, norm and, with ``out``, a copy."""
    if not torch.compiler.is_compiling() and norm_kernel(h.device) == "triton":
        from domino_prof.reference_model import norm_kernel as NK

        return NK.add_rms_norm(h, y, w, eps, n_out=out)
    s = residual_add(h, y)
    n, rstd = norm_fwd(s, w, eps)
    if out is not None:
        n = out.copy_(n)
    return s, n, rstd


# --- rotary embedding -----------------------------------------------------------------


def rope_table(freqs: torch.Tensor) -> torch.Tensor:
    """model.rope_tables' complex [S, D/2] as real [S, D/2, 2] (cos, sin), contiguous."""
    return torch.view_as_real(freqs).contiguous()


_ROPE = triton_launch.Switch(ROPE_KERNELS, rope_env, "domino_prof.reference_model.rope_kernel",
                            "rotary", "aten's rotation")  # fmt: skip


def set_rope(kind: str | None) -> None:
    """Which rotation the schedules' eager and graphed steps use, over the environment's
    DOMINO_PROF_ROPE (config.rope_env, read until this is called; None: read it again):
    ``auto`` (the default): the Triton kernel (rope_kernel.py, one launch) on CUDA where
    Triton imports, else aten's complex multiply; ``aten``: aten's everywhere (the A/B
    reference); ``triton``: the kernel on any device (CPU only under TRITON_INTERPRET=1:
    the tests). Process-wide."""
    _ROPE.set(kind)


def rope_kernel(device: torch.device) -> str:
    """``triton`` or ``aten``: the rotation eager steps on ``device`` use (run.json ``rope``)."""
    return _ROPE.kernel(device)


def _triton_rope(x: torch.Tensor):
    """rope_kernel.py's module where the kernel rotates ``x`` (eager or graphed, on a
    device where :func:`rope_kernel` says triton), else None: the one place the forward
    and the backward import it from (lazily: Triton only where it serves)."""
    if torch.compiler.is_compiling() or rope_kernel(x.device) != "triton":
        return None
    from domino_prof.reference_model import rope_kernel as RK

    return RK


def rope_rotate(x: torch.Tensor, cs: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs of x [b, S, n, D] by the angles of ``cs`` [S, D/2, 2]
    (model.apply_rope's maths; its backward is the rotation by −θ, i.e. ``cs`` with the
    sine negated). Eager on CUDA: rope_kernel.py's one launch (:func:`set_rope`); else the
    complex multiply (3 kernels); compiled: the same in real arithmetic, which inductor
    fuses into one kernel (it generates no complex code)."""
    if (RK := _triton_rope(x)) is not None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        RK.rotate(x, None, cs, out)
        return out
    if not torch.compiler.is_compiling():
        return apply_rope(x, torch.view_as_complex(cs))
    xf = x.float().unflatten(-1, (-1, 2))  # [b, S, n, D/2, 2]
    x0, x1 = xf[..., 0], xf[..., 1]
    c, s = cs[None, :, None, :, 0], cs[None, :, None, :, 1]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).flatten(-2).type_as(x)


# --- attention kernels ----------------------------------------------------------------


_attention = "auto"  # set_attention(); process-wide, like torch.backends' flags


def set_attention(kind: str) -> None:
    """Which fused attention kernel the schedules use on CUDA in bf16/fp16 (``run
    --attention``): ``flash`` (PyTorch's flash attention), ``cudnn`` (cuDNN's SDPA) or
    ``auto``: cuDNN on Hopper (compute capability 9.x, cuDNN >= 9), where it was measured
    (one H200, llama3-3b heads, seq 1024 and 4096: forward + backward 1.6-1.7x faster than
    flash, ``benchmarks/bench_attention.py``), else flash. CPU always uses PyTorch's CPU
    flash kernel and fp32 on CUDA the math path, whatever is set."""
    if kind not in ATTENTION_KERNELS:
        raise ValueError(f"attention kernel must be one of {ATTENTION_KERNELS}, got {kind!r}")
    global _attention
    _attention = kind


# device index (None: the current device) -> cuDNN SDPA on Hopper. Filled eagerly
# (train.worker calls attention_kernel before the first step): under torch.compile a
# traced fill would call torch.backends.cudnn.is_available(), which Dynamo cannot put in
# a graph ("torch.* op returned non-Tensor"); a filled entry is a constant to it.
_cudnn_ok: dict[int | None, bool] = {}


def _cudnn_hopper(device: torch.device) -> bool:
    i = device.index
    if i not in _cudnn_ok:
        d = i if i is not None else torch.cuda.current_device()
        ver = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        _cudnn_ok[i] = (
            torch.cuda.get_device_capability(d)[0] == 9
            and (ver or 0) >= 90000
            and hasattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention")
        )
    return _cudnn_ok[i]


def attention_kernel(device, dtype) -> str:
    """The attention kernel the schedules use for tensors of this device and dtype."""
    return attn_backend(torch.empty(0, device=device, dtype=dtype))


def attn_backend(q: torch.Tensor) -> str:
    """``flash`` where PyTorch's flash kernel takes these inputs natively, GQA included
    (CPU: any float dtype; CUDA: fp16/bf16), ``cudnn`` instead on CUDA when
    :func:`set_attention` asks for it (or ``auto`` on Hopper), else ``math`` (e.g. fp32
    on CUDA, where SDPA itself falls back to its math path for GQA)."""
    if q.device.type == "cpu":
        return "flash"
    if q.device.type == "cuda" and q.dtype in (torch.float16, torch.bfloat16):
        if _attention == "cudnn" or (_attention == "auto" and _cudnn_hopper(q.device)):
            return "cudnn"
        return "flash"
    return "math"


def sdpa_fwd(q, k, v):
    """Causal attention. q: [b, Hl, S, D]; k, v: [b, Kl, S, D] (GQA: Hl % Kl == 0).
    Returns (o [b, Hl, S, D], ctx) where ctx is what :func:`sdpa_bwd` needs."""
    kind = attn_backend(q)
    if kind == "flash" and q.device.type == "cpu":
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)
        return o, (lse,)
    if kind == "flash":
        o, lse, cq, ck, mq, mk, rng, unused, _ = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, 0.0, True, False
        )
        return o, (lse, cq, ck, mq, mk, rng, unused)
    if kind == "cudnn":  # GQA natively (k, v keep their Kl heads)
        o, lse, cq, ck, mq, mk, seed, off, _ = torch.ops.aten._scaled_dot_product_cudnn_attention(
            q, k, v, None, True, 0.0, True, False
        )
        return o, (lse, cq, ck, mq, mk, seed, off)
    return _math_fwd(q, k, v)


def sdpa_bwd(do, q, k, v, o, ctx):
    """(dq, dk, dv) of :func:`sdpa_fwd` given do: [b, Hl, S, D]."""
    kind = attn_backend(q)
    if kind == "flash" and q.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            do, q, k, v, o, ctx[0], 0.0, True
        )
    if kind == "flash":
        lse, cq, ck, mq, mk, rng, unused = ctx
        return torch.ops.aten._scaled_dot_product_flash_attention_backward(
            do, q, k, v, o, lse, cq, ck, mq, mk, 0.0, True, rng, unused
        )
    if kind == "cudnn":
        lse, cq, ck, mq, mk, seed, off = ctx
        # attn_bias (a Tensor in the schema): None passes an undefined tensor, "no bias";
        # an empty tensor would be broadcast to [b, h, S, S] and fail
        return torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
            do, q, k, v, o, lse, seed, off, None, cq, ck, mq, mk, 0.0, True
        )
    return _math_bwd(do, q, k, v, ctx)


def _expand_kv(t: torch.Tensor, groups: int) -> torch.Tensor:
    return t if groups == 1 else t.repeat_interleave(groups, dim=1)


def _math_fwd(q, k, v):
    # softmax(q kᵀ / √D + causal mask) v, kv heads repeated for GQA (as SDPA's math path)
    groups = q.shape[1] // k.shape[1]
    ke, ve = _expand_kv(k, groups), _expand_kv(v, groups)
    S = q.shape[-2]
    s = (q @ ke.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))  # [b, Hl, S, S]
    mask = torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1)
    p = s.masked_fill(mask, float("-inf")).softmax(-1)
    return p @ ve, (p,)


def _math_bwd(do, q, k, v, ctx):
    (p,) = ctx
    b, Hl, S, D = q.shape
    Kl = k.shape[1]
    groups = Hl // Kl
    ke, ve = _expand_kv(k, groups), _expand_kv(v, groups)
    dv = p.transpose(-1, -2) @ do  # [b, Hl, S, D]
    dp = do @ ve.transpose(-1, -2)  # [b, Hl, S, S]
    ds = p * (dp - (dp * p).sum(-1, keepdim=True)) * (1.0 / math.sqrt(D))
    dq = ds @ ke
    dk = ds.transpose(-1, -2) @ q
    if groups > 1:
        dk = dk.view(b, Kl, groups, S, D).sum(2)
        dv = dv.view(b, Kl, groups, S, D).sum(2)
    return dq, dk, dv


# --- attention sub-layer core (column-parallel wqkv ... row-parallel wo) --------------


def _tokens_to_bshd(t: torch.Tensor, b: int, S: int, dims: Dims) -> torch.Tensor:
    """[T, n·D] in the schedule's token order -> a [b, S, n, D] view."""
    if dims.seq_major:
        return t.view(S, b, -1, dims.head_dim).transpose(0, 1)
    return t.view(b, S, -1, dims.head_dim)


def _bshd_to_tokens(t: torch.Tensor, dims: Dims) -> torch.Tensor:
    """[b, S, n, D] -> [T, n·D] in the schedule's token order (a copy only if needed)."""
    if dims.seq_major:
        t = t.transpose(0, 1)
    return t.reshape(-1, t.shape[-2] * t.shape[-1])


def attn_fwd(n, wqkv, wo, rope, b: int, dims: Dims, o2_out=None):
    """Attention core of one micro-batch. n: [T, d] (the normed input, T = b·S, the
    whole sequence). Returns (a, saved): a [T, d] = this rank's heads' output
    projected by its wo columns: a *partial sum over TP ranks* (Megatron's g reduces it).
    ``o2_out`` [T, Hl·D]: where to keep the attention output (wo's input, saved for
    the weight gradient), e.g. this micro-batch's slice of a buffer shared by all.
    """
    Hl, Kl = dims.heads, dims.kv_heads
    S = n.shape[0] // b
    qkv = _mm(n, wqkv.t())  # [T, (Hl + 2Kl)·D]  column-parallel
    qkv4 = _tokens_to_bshd(qkv, b, S, dims)  # [b, S, Hl + 2Kl, D]
    qk = rope_rotate(qkv4[:, :, : Hl + Kl], rope)  # [b, S, Hl + Kl, D]: q and k, rotated
    q = qk[:, :, :Hl].transpose(1, 2)  # [b, Hl, S, D]
    k = qk[:, :, Hl:].transpose(1, 2)  # [b, Kl, S, D]
    v = qkv4[:, :, Hl + Kl :].transpose(1, 2)  # [b, Kl, S, D]
    o, ctx = sdpa_fwd(q, k, v)  # o: [b, Hl, S, D]
    o2 = _bshd_to_tokens(o.transpose(1, 2), dims)  # [T, Hl·D]
    if o2_out is not None:
        o2 = o2_out.copy_(o2)
    # [T, d]  row-parallel: partial over ranks (wo None: the column split's chunks)
    a = None if wo is None else _mm(o2, wo.t())
    return a, (q, k, v, o, o2) + tuple(ctx)


def attn_dgrad(da, saved, wqkv, wo, rope_conj, b: int, dims: Dims, dqkv_out=None):
    """Backward of :func:`attn_fwd` up to the input gradient. da: [T, d] (replicated).
    Returns (dn, dqkv, o2): dn [T, d] is a *partial sum over ranks* (Megatron's f
    all-reduces it); dqkv, o2 (with the saved norm output n) are what
    :func:`attn_wgrad` needs."""
    q, k, v, o, o2 = saved[:5]
    ctx = saved[5:]
    S = da.shape[0] // b
    do2 = _mm(da, wo)  # [T, Hl·D]
    do = _tokens_to_bshd(do2, b, S, dims).transpose(1, 2)  # [b, Hl, S, D]
    dq, dk, dv = sdpa_bwd(do, q, k, v, o, ctx)
    if (RK := _triton_rope(dq)) is not None:  # dq, dk rotated into their slot, dv copied
        Hl, Kl = dims.heads, dims.kv_heads
        dqkv = dqkv_out
        if dqkv is None:
            dqkv = da.new_empty((da.shape[0], (Hl + 2 * Kl) * dims.head_dim))
        d4 = _tokens_to_bshd(dqkv, b, S, dims)  # [b, S, Hl + 2Kl, D] (a view)
        RK.rotate(dq.transpose(1, 2), dk.transpose(1, 2), rope_conj, d4[:, :, : Hl + Kl])
        d4[:, :, Hl + Kl :].copy_(dv.transpose(1, 2))
        dn = None if wqkv is None else _mm(dqkv, wqkv)  # [T, d]  partial over ranks
        return dn, dqkv, o2
    dqk = torch.cat([dq, dk], 1).transpose(1, 2)  # [b, S, Hl + Kl, D]
    dqk = rope_rotate(dqk, rope_conj)  # rotation back: the inverse of the forward's
    parts = [dqk, dv.transpose(1, 2)]  # [b, S, Hl + Kl, D], [b, S, Kl, D]
    if dqkv_out is not None and not dims.seq_major and not torch.compiler.is_compiling():
        # eager / a graph: concatenated straight into the kept slot, no copy of dqkv
        # (a token-major slot is the [b, S, Hl + 2Kl, D] tensor itself, contiguous)
        dqkv = dqkv_out
        torch.cat(parts, 2, out=dqkv_out.view(b, S, -1, dims.head_dim))
    else:
        dqkv = _bshd_to_tokens(torch.cat(parts, 2), dims)  # [T, (Hl + 2Kl)·D]
        if dqkv_out is not None:
            dqkv = dqkv_out.copy_(dqkv)
    dn = None if wqkv is None else _mm(dqkv, wqkv)  # [T, d]  partial over ranks
    return dn, dqkv, o2


def attn_wgrad(da, dqkv, o2, n, wqkv_grad, wo_grad, first: bool) -> None:
    """dWo += daᵀ o2 (row-parallel, local); dWqkv += dqkvᵀ n (column-parallel, local)."""
    _acc_mm(wo_grad, da.t(), o2, first)  # [d, Hl·D]
    _acc_mm_in(wqkv_grad, dqkv, n, first)  # [(Hl + 2Kl)·D, d]


# --- SwiGLU sub-layer core (column-parallel w13 ... row-parallel w2) ------------------


def mlp_fwd(n, w13, w2, dims: Dims, p_out=None):
    """a = w2(silu(n w1) * (n w3)) for this rank's Fl hidden units. n: [T, d].
    Returns (a [T, d] partial over ranks, saved). ``p_out`` [T, Fl]: where to keep w2's
    input (saved for the weight gradient)."""
    F = dims.ffn
    gu = _mm(n, w13.t())  # [T, 2Fl]  column-parallel
    g, u = gu[:, :F], gu[:, F:]
    s = torch.nn.functional.silu(g)  # [T, Fl]
    p = s * u if p_out is None else torch.mul(s, u, out=p_out)  # [T, Fl]
    a = None if w2 is None else _mm(p, w2.t())  # [T, d]  row-parallel: partial over ranks
    return a, (gu, s, p)


def mlp_dgrad(da, saved, w13, w2, dims: Dims, dgu_out=None):
    """Backward of :func:`mlp_fwd` up to the input gradient (dn partial over ranks).
    Returns (dn, dgu, p)."""
    gu, s, p = saved
    F = dims.ffn
    g, u = gu[:, :F], gu[:, F:]
    dp = _mm(da, w2)  # [T, Fl]
    if torch.compiler.is_compiling():  # one fused kernel; dynamo takes no strided out=
        dgu = torch.cat([torch.ops.aten.silu_backward(dp * u, g), dp * s], -1)
        if dgu_out is not None:
            dgu = dgu_out.copy_(dgu)
    else:  # eager: write both halves in place, no concatenation copy
        dgu = torch.empty_like(gu) if dgu_out is None else dgu_out  # [T, 2Fl]
        torch.ops.aten.silu_backward(dp * u, g, grad_input=dgu[:, :F])  # d gate
        torch.mul(dp, s, out=dgu[:, F:])  # d up
    dn = None if w13 is None else _mm(dgu, w13)  # [T, d]  partial over ranks
    return dn, dgu, p


def mlp_wgrad(da, dgu, p, n, w13_grad, w2_grad, first: bool) -> None:
    _acc_mm(w2_grad, da.t(), p, first)  # [d, Fl]
    _acc_mm_in(w13_grad, dgu, n, first)  # [2Fl, d]


# --- LM head: vocab-parallel logits and cross-entropy ---------------------------------
# logits [T, Vl] fp32 hold this rank's vocab slice [v0, v0 + Vl). The loss needs three
# statistics over the whole vocabulary, i.e. over ranks: the row max (all-reduce MAX),
# then the sum of exponentials and the target's logit (one all-reduce SUM of both).


def head_logits(n, w_out):
    """n: [T, d] -> (logits [T, Vl] fp32, row max [T] (to all-reduce with MAX))."""
    logits = _mm(n, w_out.t()).float()  # [T, Vl]
    return logits, logits.amax(-1)


def head_stats(logits, m, targets, v0: int):
    """After the max is reduced: z = logits − m in place, then per token the sum of
    exp(z) over this rank's slice and the target's z if it lies in this slice.
    Returns (stats [2, T] (to all-reduce with SUM), e = exp(z) [T, Vl], idx, in_shard)."""
    vl = logits.shape[-1]
    z = logits.sub_(m[:, None])  # [T, Vl]
    in_shard = (targets >= v0) & (targets < v0 + vl)  # [T]
    idx = (targets - v0).clamp(0, vl - 1)  # [T]
    tl = z.gather(1, idx[:, None]).squeeze(1) * in_shard  # [T]
    e = z.exp_()
    return torch.stack([e.sum(-1), tl]), e, idx, in_shard


def head_loss(stats, denom: float):
    """Sum over tokens of (log Σexp − target logit) / denom, and 1/(denom·Σexp) per
    token for the backward. stats: [2, T] reduced."""
    s, tl = stats[0], stats[1]
    return (s.log() - tl).sum() / denom, (1.0 / denom) / s


def head_dgrad(e, r, idx, in_shard, w_out, denom: float, dl_out=None, with_dn: bool = True):
    """d loss / d logits = (softmax − onehot) / denom, computed in place on e, then
    dn = dlogits w_out: [T, d] *partial over ranks*. Returns (dn, dlogits); dn None
    without ``with_dn`` (the column split computes it in chunks: :func:`chunk_mm`)."""
    e.mul_(r[:, None])  # softmax / denom
    e.scatter_add_(1, idx[:, None], (in_shard.to(e.dtype) * (-1.0 / denom))[:, None])
    dl = e.to(w_out.dtype) if dl_out is None else dl_out.copy_(e)  # [T, Vl]
    return (_mm(dl, w_out) if with_dn else None), dl


# --- Domino's column split: a GEMM's output columns in K chunks -----------------------


def chunk_buffer(x: torch.Tensor, width: int, K: int) -> torch.Tensor:
    """The [K, T, width/K] buffer of a GEMM's K column chunks (x: its [T, ·] input).
    Layout: each chunk is contiguous (what an all-reduce needs) and written by its GEMM
    directly; the [T, width] tensor is the view ``buf.transpose(0, 1)`` as [T, K, width/K]
    (:func:`residual_add` reads it so; :func:`joined` copies it)."""
    return x.new_empty((K, x.shape[0], width // K))


def chunk_mm(x: torch.Tensor, w: torch.Tensor, buf: torch.Tensor, k: int) -> torch.Tensor:
    """buf[k] = chunk k of the output columns of x @ w: x [T, in] @ w[:, k·c:(k+1)·c]
    ([in, c] strided columns of w [in, width], c = width/K: no copy of the weight), one
    GEMM into its contiguous slot. Forward: w = w_out.t() (row-parallel output); backward:
    w = w_in (the column-parallel input gradient) or the LM head's weight."""
    c = buf.shape[-1]
    return _mm(x, w[:, k * c : (k + 1) * c], out=buf[k])


def residual_add(h: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
    """h + y for the residual stream: y [T, d], or a [K, T, d/K] chunk buffer read
    through its strided view (runs of d/K contiguous elements; no copy of y). The sum is
    laid out as h, contiguous [T, d]."""
    if y is None:
        return h
    if y.dim() == 2:
        return h + y
    K, T, c = y.shape
    return (h.view(T, K, c) + y.transpose(0, 1)).reshape(T, K * c)


def joined(t: torch.Tensor) -> torch.Tensor:
    """A [K, T, d/K] chunk buffer as the contiguous [T, d] it stands for: one copy of
    [T, d] (eager; under ``torch.compile`` inductor reads the strided view inside the
    consumer's kernel instead). A [T, d] tensor is returned as it is."""
    if t.dim() == 2:
        return t
    K, T, c = t.shape
    return t.transpose(0, 1).reshape(T, K * c)


def head_wgrad(dl, n, w_out_grad, first: bool) -> None:
    _acc_mm(w_out_grad, dl.t(), n, first)  # [Vl, d]
