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


def _mb_slot(t: torch.Tensor, N: int, bi: int, buf, width: int):
    """The all-reduce schedules keep what a unit's weight gradients need, for all N
    micro-batches, in one [N, T, width] buffer (allocated by the micro-batch that comes
    first), so the weight gradient is one GEMM over N·T rows, not N GEMMs that each
    write (and re-read) the whole weight-sized gradient. Returns (buffer, slot bi)."""
    if N == 1:
        return None, None
    if buf is None:
        buf = t.new_empty((N, t.shape[0], width))
    return buf, buf[bi]


def seg_fwd(kind: str, h, y, w_norm, w_in, w_out, rope, b: int, dims: U.Dims, N: int, bi: int, xs):
    """All-reduce TP forward of one layer for micro-batch ``bi`` of N: residual, norm,
    core. ``xs``: the unit's (n, x) buffers from the micro-batch that came first (None
    for it). Returns (a, h, rstd, n_all, x_all, *core_saved); ``a`` is partial over ranks."""
    K = LAYER_KINDS[kind]
    if y is not None:
        h = h + y  # [T, d]
    n, rstd = U.norm_fwd(h, w_norm, dims.eps)
    n_all, x_all = xs if xs is not None else (None, None)
    n_all, slot = _mb_slot(n, N, bi, n_all, n.shape[1])
    if slot is not None:
        n = slot.copy_(n)
    x_all, x_slot = _mb_slot(n, N, bi, x_all, K.x_width(dims))
    a, saved, x = K.core_fwd(n, w_in, w_out, rope, b, dims, x_out=x_slot)
    if N == 1:
        n_all, x_all = n[None], x[None]
    return (a, h, rstd, n_all, x_all) + saved


def seg_norm(h, y, w_norm, eps: float):
    """Residual + norm only (SP: on the sequence shard). Returns (n, h, rstd)."""
    if y is not None:
        h = h + y
    n, rstd = U.norm_fwd(h, w_norm, eps)
    return n, h, rstd


def seg_core_fwd(kind: str, n, w_in, w_out, rope, b: int, dims: U.Dims):
    """SP forward core on the gathered sequence. Returns (a, *core_saved)."""
    a, saved, _ = LAYER_KINDS[kind].core_fwd(n, w_in, w_out, rope, b, dims)
    return (a,) + saved


def seg_norm_bwd(g, dn, h, rstd, w_norm, w_norm_grad, first: bool):
    """Norm backward of a unit + the residual: d loss / d (the unit's input).
    ``g`` is the gradient of the unit's output (None for the head)."""
    dx = U.norm_bwd(dn, h, rstd, w_norm, w_norm_grad, first)
    return (dx if g is None else g + dx,)


def seg_dgrad(
    kind: str, g, pend, saved, w_in, w_out, rope_conj, b: int, dims: U.Dims, N: int, bi: int, gs
):
    """All-reduce TP backward of micro-batch ``bi``: the pending norm backward of the
    unit above (``pend`` = its reduced dn, h, rstd, norm weight, grad, first) + residual,
    then this unit's core backward to dn. ``gs``: the unit's (g, dy) buffers from the
    micro-batch that came first (None for it). Returns (dn, g_all, dy_all, g);
    ``dn`` is partial over ranks, ``g`` (d loss / d the unit's output) goes on down."""
    K = LAYER_KINDS[kind]
    g_all, dy_all = gs if gs is not None else (None, None)
    if pend is not None:
        dn_up, h, rstd, w_norm, w_norm_grad, first = pend
        dx = U.norm_bwd(dn_up, h, rstd, w_norm, w_norm_grad, first)
        g_all, slot = _mb_slot(dx, N, bi, g_all, dx.shape[1])
        if g is None:
            g = dx if slot is None else slot.copy_(dx)
        else:  # residual: written straight into the micro-batch's slot
            g = g + dx if slot is None else torch.add(g, dx, out=slot)
    else:
        g_all, slot = _mb_slot(g, N, bi, g_all, g.shape[1])
        if slot is not None:
            g = slot.copy_(g)
    dy_all, dy_slot = _mb_slot(g, N, bi, dy_all, K.dy_width(dims))
    dn, dy, _ = K.core_dgrad(g, saved, w_in, w_out, rope_conj, b, dims, dy_out=dy_slot)
    if N == 1:
        g_all, dy_all = g[None], dy[None]
    return dn, g_all, dy_all, g


def seg_wgrad_all(kind: str, g_all, dy_all, x_all, n_all, w_in_grad, w_out_grad):
    """A unit's weight gradients over all micro-batches at once ([N, T, ·] -> N·T rows)."""
    g, dy, x, n = (t.flatten(0, 1) for t in (g_all, dy_all, x_all, n_all))
    LAYER_KINDS[kind].wgrad(g, dy, x, n, w_in_grad, w_out_grad, True)
    return ()


def seg_core_dgrad(kind: str, g, saved, w_in, w_out, rope_conj, b: int, dims: U.Dims):
    """SP backward core on the gathered output gradient ``g``. Returns (dn, *wgrad_inputs)."""
    return tuple(LAYER_KINDS[kind].core_dgrad(g, saved, w_in, w_out, rope_conj, b, dims))


def seg_wgrad(kind: str, g, wg, n, w_in_grad, w_out_grad, first: bool):
    LAYER_KINDS[kind].wgrad(g, *wg, n, w_in_grad, w_out_grad, first)
    return ()


def seg_head_logits(h, y, w_norm, w_out, eps: float, sp: bool, N: int, bi: int, n_all):
    """Head forward to the row max. AR TP: residual + norm + logits; SP: ``h`` is the
    gathered norm output already (norm ran on the shard). ``n_all``: the [N, T, d]
    buffer of the head's normed inputs (AR TP, from the micro-batch that came first;
    see _mb_slot). Returns (m, logits, n_all, h, rstd)."""
    if sp:
        n, rstd = h, None
    else:
        if y is not None:
            h = h + y
        n, rstd = U.norm_fwd(h, w_norm, eps)
    if sp:
        n_all = n[None]
    else:
        n_all, slot = _mb_slot(n, N, bi, n_all, n.shape[1])
        if slot is None:
            n_all = n[None]
        else:
            n = slot.copy_(n)
    logits, m = U.head_logits(n, w_out)
    return m, logits, n_all, h, rstd


def seg_head_stats(logits, m, tgt, v0: int):
    return U.head_stats(logits, m, tgt, v0)  # (stats, e, idx, in_shard)


def seg_head_loss(stats, denom: float):
    return U.head_loss(stats, denom)  # (loss, r)


def seg_head_dgrad(e, r, idx, in_shard, w_out, denom: float, N: int, bi: int, dl_all):
    """Returns (dn, dl_all): d loss / d logits kept in micro-batch ``bi``'s slot of
    ``dl_all`` (see _mb_slot; allocated by the micro-batch that comes first)."""
    slot = None
    if N > 1:
        if dl_all is None:
            dl_all = torch.empty((N,) + e.shape, dtype=w_out.dtype, device=e.device)
        slot = dl_all[bi]
    dn, dl = U.head_dgrad(e, r, idx, in_shard, w_out, denom, dl_out=slot)
    return dn, (dl[None] if N == 1 else dl_all)


def seg_head_wgrad(dl_all, n_all, w_out_grad, first: bool):
    U.head_wgrad(dl_all.flatten(0, 1), n_all.flatten(0, 1), w_out_grad, first)
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
