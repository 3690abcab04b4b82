"""Segments: the straight-line tensor code a step runs between two collectives.

Module-level pure functions of tensors (weights are arguments), so the executor can
run each one eagerly, ``torch.compile`` it or capture it as a CUDA graph. A layer's
kind-specific maths comes from ``layers.LAYER_KINDS[kind]`` (``kind`` is a string
constant: one compiled variant per kind). Returned tuples start with the *kept*
outputs (what a collective or the host reads; ``executor.SegmentExecutor.run``).
"""

from __future__ import annotations

import torch

from domino_prof.reference_model import units as U
from domino_prof.reference_model.layers import LAYER_KINDS


def seg_embed(tok, w_emb, lo: int, hi: int):
    """Embedding rows of the tokens [lo, hi) of ``tok`` (flattened in the schedule's
    token order). Returns (h [hi − lo, d],)."""
    return (torch.embedding(w_emb, tok[lo:hi]),)


def _mb_slot(t: torch.Tensor, rows, buf, width: int):
    """The all-reduce schedules keep what a unit's weight gradients need, for all
    micro-batches, in one [ΣT, width] buffer (allocated by the micro-batch that comes
    first; micro-batch b's rows one contiguous block), so the weight gradient is one GEMM
    over ΣT rows, not one GEMM per micro-batch that each write (and re-read) the whole
    weight-sized gradient. ``rows``: (this micro-batch's first row, ΣT), or None with
    one micro-batch (no buffer: the tensor itself is kept). Returns (buffer, slot)."""
    if rows is None:
        return None, None
    off, total = rows
    if buf is None:
        buf = t.new_empty((total, width))
    return buf, buf[off : off + t.shape[0]]


def _rows_of(t_all, rows, T: int):
    """Micro-batch rows [off, off + T) of a [ΣT, ·] buffer (``rows`` None: all of it)."""
    return t_all if rows is None else t_all[rows[0] : rows[0] + T]


def seg_fwd(kind: str, h, y, w_norm, w_in, w_out, rope, b: int, dims: U.Dims, rows, xs,
            cols: int = 1, keep_n: bool = False):  # fmt: skip
    """All-reduce TP forward of one layer for one micro-batch (``rows``: its rows of the
    [ΣT, ·] buffers, see _mb_slot): residual, norm, core. ``xs``: the unit's (n, x)
    buffers from the micro-batch that came first (None for it). Returns (a, h, rstd,
    n_all, x_all, *core_saved); ``a`` is partial over ranks: [T, d], or with ``cols``
    K > 1 the [K, T, d/K] buffer of the row-parallel GEMM's column chunks with chunk 0
    computed (the others: :func:`seg_out_chunk`). ``keep_n`` (``--wgrad-in
    accumulate``): the norm output is not kept in a [ΣT, d] buffer (with aten's norm,
    which takes no ``out=``, that saves one [T, d] copy per unit and micro-batch;
    norm_kernel.py writes into the buffer's rows directly); ``n_all`` is this
    micro-batch's own n, and w_in's gradient is one GEMM per micro-batch."""
    K = LAYER_KINDS[kind]
    n_all, x_all = xs if xs is not None else (None, None)
    slot = None
    if not keep_n:  # the norm's output goes straight into its rows of the [ΣT, d] buffer
        n_all, slot = _mb_slot(h, rows, n_all, h.shape[1])
    h, n, rstd = U.add_norm(h, y, w_norm, dims.eps, out=slot)  # h: [T, d]
    if keep_n:
        n_all = n
    x_all, x_slot = _mb_slot(n, rows, x_all, K.x_width(dims))
    a, saved, x = K.core_fwd(n, w_in, w_out if cols == 1 else None, rope, b, dims, x_out=x_slot)
    if cols > 1:
        a = U.chunk_buffer(x, w_out.shape[0], cols)
        U.chunk_mm(x, w_out.t(), a, 0)
    if rows is None:
        n_all, x_all = n, x
    return (a, h, rstd, n_all, x_all) + saved


def seg_out_chunk(src_all, rows, w, buf, k: int, transpose: bool):
    """Chunk k of Domino's column split (arXiv 2409.15241): buf[k] = the micro-batch's rows
    of ``src_all`` @ W's columns of chunk k, W = ``w.t()`` (``transpose``: the forward's
    row-parallel w_out) or ``w`` (backward: the column-parallel w_in's, or the LM head's,
    input gradient). ``buf``: the [K, T, d/K] buffer the segment before allocated; the
    all-reduce of buf[k] follows (kept: the buffer is that segment's kept output)."""
    x = _rows_of(src_all, rows, buf.shape[1])
    U.chunk_mm(x, w.t() if transpose else w, buf, k)
    return ()


def seg_norm(h, y, w_norm, eps: float):
    """Residual + norm only (SP: on the sequence shard). Returns (n, h, rstd)."""
    h, n, rstd = U.add_norm(h, y, w_norm, eps)
    return n, h, rstd


def seg_core_fwd(kind: str, n, w_in, w_out, rope, b: int, dims: U.Dims, rows=None,
                 x_all=None, resid=None, lo: int = 0):  # fmt: skip
    """SP forward core on the gathered sequence. ``rows`` (see _mb_slot): w_out's input
    kept in micro-batch b's rows of ``x_all``, the unit's [ΣT, x_width] buffer (None
    for the micro-batch that comes first: allocated here). ``resid`` (``--sp-residual
    fold``): this rank's residual shard, added into rows [lo, lo + its rows) of the
    partial sums, so their reduce-scatter returns the next residual. Returns (a, x_all,
    *core_saved) (``x_all`` None without ``rows``)."""
    K = LAYER_KINDS[kind]
    x_all, x_slot = _mb_slot(n, rows, x_all, K.x_width(dims))
    a, saved, _ = K.core_fwd(n, w_in, w_out, rope, b, dims, x_out=x_slot)
    if resid is not None:
        a[lo : lo + resid.shape[0]].add_(resid)
    return (a, x_all) + saved


def seg_norm_bwd(g, dn, h, rstd, w_norm, w_norm_grad, first: bool):
    """Norm backward of a unit + the residual: d loss / d (the unit's input).
    ``g`` is the gradient of the unit's output (None for the head). ``dn``: [T, d], or
    the column split's [K, T, d/K] chunks (``units.joined``)."""
    dx = U.norm_bwd(U.joined(dn), h, rstd, w_norm, w_norm_grad, first)
    return (dx if g is None else g + dx,)


def seg_dgrad(kind: str, g, pend, saved, w_in, w_out, rope_conj, b: int, dims: U.Dims, rows,
              gs, cols: int = 1):  # fmt: skip
    """All-reduce TP backward of one micro-batch (``rows``: see seg_fwd): the pending
    norm backward of the unit above (``pend`` = its reduced dn, h, rstd, norm weight,
    grad, first) + residual, then this unit's core backward to dn. ``gs``: the unit's
    (g, dy) buffers from the micro-batch that came first (None for it). Returns (dn,
    g_all, dy_all, g); ``dn`` is partial over ranks ([T, d], or with ``cols`` K > 1 the
    [K, T, d/K] chunk buffer with chunk 0 computed), ``g`` (d loss / d the unit's
    output) goes on down."""
    K = LAYER_KINDS[kind]
    g_all, dy_all = gs if gs is not None else (None, None)
    if pend is not None:
        dn_up, h, rstd, w_norm, w_norm_grad, first = pend
        dx = U.norm_bwd(U.joined(dn_up), h, rstd, w_norm, w_norm_grad, first)
        g_all, slot = _mb_slot(dx, rows, g_all, dx.shape[1])
        if g is None:
            g = dx if slot is None else slot.copy_(dx)
        else:  # residual: written straight into the micro-batch's slot
            g = g + dx if slot is None else torch.add(g, dx, out=slot)
    else:
        g_all, slot = _mb_slot(g, rows, g_all, g.shape[1])
        if slot is not None:
            g = slot.copy_(g)
    dy_all, dy_slot = _mb_slot(g, rows, dy_all, K.dy_width(dims))
    dn, dy, _ = K.core_dgrad(g, saved, w_in if cols == 1 else None, w_out, rope_conj, b, dims,
                             dy_out=dy_slot)  # fmt: skip
    if cols > 1:
        dn = U.chunk_buffer(dy, w_in.shape[1], cols)
        U.chunk_mm(dy, w_in, dn, 0)
    if rows is None:
        g_all, dy_all = g, dy
    return dn, g_all, dy_all, g


def seg_wgrad_all(kind: str, g_all, dy_all, x_all, n_all, w_in_grad, w_out_grad):
    """A unit's weight gradients over all micro-batches at once ([ΣT, ·] buffers)."""
    LAYER_KINDS[kind].wgrad(g_all, dy_all, x_all, n_all, w_in_grad, w_out_grad, True)
    return ()


def seg_core_dgrad(kind: str, g, saved, w_in, w_out, rope_conj, b: int, dims: U.Dims,
                   rows=None, dy_all=None):  # fmt: skip
    """SP backward core on the gathered output gradient ``g``. ``rows``: the gradient at
    w_in's output kept in micro-batch b's rows of ``dy_all``, the unit's [ΣT, dy_width]
    buffer (None for the micro-batch that comes first). Returns (dn, dy_all,
    *wgrad_inputs) (``dy_all`` None without ``rows``)."""
    K = LAYER_KINDS[kind]
    dy_all, dy_slot = _mb_slot(g, rows, dy_all, K.dy_width(dims))
    dn, *wgi = K.core_dgrad(g, saved, w_in, w_out, rope_conj, b, dims, dy_out=dy_slot)
    return (dn, dy_all, *wgi)


def seg_wgrad(kind: str, g, wg, n, w_in_grad, w_out_grad, first: bool):
    LAYER_KINDS[kind].wgrad(g, *wg, n, w_in_grad, w_out_grad, first)
    return ()


def seg_head_logits(h, y, w_norm, w_out, eps: float, sp: bool, rows, n_all):
    """Head forward to the row max. AR TP: residual + norm + logits; SP: ``h`` is the
    gathered norm output already (norm ran on the shard). ``n_all``: the [ΣT, d]
    buffer of the head's normed inputs (AR TP, from the micro-batch that came first;
    see _mb_slot). Returns (m, logits, n_all, h, rstd)."""
    if sp:
        n, rstd = h, None
        n_all = n
    else:
        n_all, slot = _mb_slot(h, rows, n_all, h.shape[1])
        h, n, rstd = U.add_norm(h, y, w_norm, eps, out=slot)
        if slot is None:
            n_all = n
    logits, m = U.head_logits(n, w_out)
    return m, logits, n_all, h, rstd


def seg_head_stats(logits, m, tgt, v0: int):
    return U.head_stats(logits, m, tgt, v0)  # (stats, e, idx, in_shard)


def seg_head_loss(stats, denom: float):
    return U.head_loss(stats, denom)  # (loss, r)


def seg_head_dgrad(e, r, idx, in_shard, w_out, denom: float, rows, dl_all, cols: int = 1):
    """Returns (dn, dl_all): d loss / d logits kept in the micro-batch's rows of
    ``dl_all`` (see _mb_slot; allocated by the micro-batch that comes first); dn [T, d]
    partial over ranks, or with ``cols`` K > 1 its [K, T, d/K] chunk buffer, chunk 0
    computed (the others: :func:`seg_out_chunk`)."""
    slot = None
    if rows is not None:
        if dl_all is None:
            dl_all = torch.empty((rows[1], e.shape[1]), dtype=w_out.dtype, device=e.device)
        slot = dl_all[rows[0] : rows[0] + e.shape[0]]
    dn, dl = U.head_dgrad(e, r, idx, in_shard, w_out, denom, dl_out=slot, with_dn=cols == 1)
    if cols > 1:
        dn = U.chunk_buffer(dl, w_out.shape[1], cols)
        U.chunk_mm(dl, w_out, dn, 0)
    return dn, (dl if rows is None else dl_all)


def seg_head_wgrad(dl_all, n_all, w_out_grad, first: bool):
    U.head_wgrad(dl_all, n_all, w_out_grad, first)
    return ()


def seg_embed_bwd(g, pend, tok, w_emb_grad):
    """Norm backward of unit 0 + residual, then the embedding's gradient rows."""
    if pend is not None:
        (g,) = seg_norm_bwd(g, *pend)
    w_emb_grad.index_add_(0, tok, g)
    return ()


def seg_scatter_add(tok, g, w_emb_grad):
    w_emb_grad.index_add_(0, tok, g)
    return ()
