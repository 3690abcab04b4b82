"""Megatron-style tensor parallelism for ``model.Transformer``, applied from outside.

Which rank holds what (R = tp ranks, r = this rank; shapes of *weights* as
``nn.Linear`` stores them, ``[out_features, in_features]``):

=====================  ===========================  ==========================================
parameter              full shape                   rank r holds
=====================  ===========================  ==========================================
attention.wqkv         [(H + 2Hkv)·D, dim]          rows of q heads r·H/R.., k and v heads
                                                     r·Hkv/R.. (column-parallel: output split)
attention.wo           [dim, H·D]                   columns of its q heads (row-parallel)
feed_forward.w13       [2F, dim]                    rows r·F/R.. of w1 and of w3 (column)
feed_forward.w2        [dim, F]                     columns r·F/R.. (row-parallel)
output (LM head)       [V, dim]                     rows r·V/R.. (column-parallel over vocab)
norms, tok_embeddings  -                            replicated (identical on every rank)
=====================  ===========================  ==========================================

The sharded model is a *parameter container*: its modules hold this rank's
weights under the unsharded names (so gradients compare name by name with the
unsharded model), but nothing calls its ``forward``. The schedules
(``schedules.py``, through ``layers.py`` / ``segments.py``) compute with these weights
through the explicit pieces of ``units.py`` and issue every collective themselves
through a ``comm.Comm``, whose ``size`` and ``rank`` are the R and r sharded for here:

* all-reduce TP — Megatron's *g* after the row-parallel ``wo``/``w2`` (forward,
  partial sums -> full) and *f* before the column-parallel ``wqkv``/``w13``/LM head
  (backward, the input gradient's partial sums -> full);
* sequence parallelism — all-gather of the normed sequence shard before a
  column-parallel GEMM, reduce-scatter of the row-parallel output after it, and
  the transposes in backward (all-gather of the output gradient, reduce-scatter of
  the input gradient); norm weights' gradients are summed over ranks once per step;
* the vocab-parallel cross-entropy's two small all-reduces (row max; sum of
  exponentials with the target logit).

Rows of the table are mutated in place by :func:`shard_model`: it replaces the
Linear modules listed above with smaller ones and divides the modules'
``n_heads``/``n_kv_heads``/``ffn_dim`` by R (said here, as STYLE.md asks).
"""

from __future__ import annotations

import zlib

import torch
from torch import nn

from domino_prof.reference_model.comm import Comm, make_comm
from domino_prof.reference_model.config import ModelConfig
from domino_prof.reference_model.model import Transformer

def TPComm(group=None, *, enabled: bool = True) -> Comm:
    """The old name (kept for callers of before ``comm.py``): the process group's Comm,
    or with ``enabled=False`` the same group's :class:`~comm.SkipComm` (``nocomm``)."""
    return make_comm("process-group" if enabled else "skip", group)


# --- sharding ---------------------------------------------------------------------------


def shard_tensor(
    name: str, full: torch.Tensor, *, cfg: ModelConfig, rank: int, tp: int
) -> torch.Tensor:
    """This rank's part of the full parameter ``name`` (see the module table)."""
    if tp == 1:
        return full
    hd = cfg.head_dim
    if name.endswith("attention.wqkv.weight"):
        q, k, v = full.split([cfg.n_heads * hd, cfg.n_kv_heads * hd, cfg.n_kv_heads * hd], 0)
        return torch.cat([t.chunk(tp, 0)[rank] for t in (q, k, v)], 0)
    if name.endswith("feed_forward.w13.weight"):
        w1, w3 = full.split([cfg.ffn_dim, cfg.ffn_dim], 0)
        return torch.cat([w1.chunk(tp, 0)[rank], w3.chunk(tp, 0)[rank]], 0)
    if name.endswith(("attention.wo.weight", "feed_forward.w2.weight")):
        return full.chunk(tp, 1)[rank]
    if name == "output.weight":
        return full.chunk(tp, 0)[rank]
    return full


def init_param(name: str, shape, *, seed: int, device, dtype=torch.float32) -> torch.Tensor:
    """Deterministic full-size initial value of one parameter, independent of the
    order parameters are visited in: N(0, 0.02) (norm weights: 1)."""
    if name.endswith("norm.weight"):
        return torch.ones(shape, device=device, dtype=dtype)
    g = torch.Generator(device=device).manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    return (torch.randn(shape, generator=g, device=device) * 0.02).to(dtype)


def build_reference(
    cfg: ModelConfig, *, seed: int, device="cpu", dtype=torch.float32
) -> Transformer:
    """The unsharded single-device model with the same initial weights as every shard."""
    with torch.device("meta"):
        model = Transformer(cfg)
    model.to_empty(device=device).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(init_param(name, p.shape, seed=seed, device=device, dtype=dtype))
    return model


def shard_model(
    cfg: ModelConfig, comm: Comm, *, seed: int, device="cpu", dtype=torch.float32
) -> Transformer:
    """Build this rank's shard of ``Transformer(cfg)`` for ``comm.size`` ranks, rank
    ``comm.rank`` (torch.distributed is not asked): every full weight is initialised
    (deterministically, on ``device``) and only this rank's part kept."""
    tp, rank = comm.size, comm.rank
    with torch.device("meta"):
        model = Transformer(cfg)
    full_shapes = {n: p.shape for n, p in model.named_parameters()}

    def col(lin: nn.Linear) -> nn.Linear:  # rows of the full weight
        return nn.Linear(lin.in_features, lin.out_features // tp, bias=False, device="meta")

    def row(lin: nn.Linear) -> nn.Linear:  # columns of the full weight
        return nn.Linear(lin.in_features // tp, lin.out_features, bias=False, device="meta")

    for blk in model.layers:
        att, ff = blk.attention, blk.feed_forward
        att.wqkv, att.wo = col(att.wqkv), row(att.wo)
        att.n_heads //= tp
        att.n_kv_heads //= tp
        ff.w13, ff.w2 = col(ff.w13), row(ff.w2)
        ff.ffn_dim //= tp
    model.output = col(model.output)
    model.to_empty(device=device).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            full = init_param(name, full_shapes[name], seed=seed, device=device, dtype=dtype)
            p.copy_(shard_tensor(name, full, cfg=cfg, rank=rank, tp=tp))
            del full
    return model
