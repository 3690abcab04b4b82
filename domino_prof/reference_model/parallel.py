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

Communication lives in exactly two places here:

* ``ColumnParallelFn`` — Megatron's *f*: forward identity, backward all-reduce of
  the input gradient. Its backward computes dgrad, **launches** the all-reduce,
  then computes wgrad, so the all-reduce overlaps the wgrad GEMM; the reduced
  dgrad is handed to the schedule through a :class:`GradBox`, never returned to
  autograd while the collective may still be writing it (autograd could copy it
  on the compute stream before the collective finished). The schedule calls
  ``GradBox.wait()`` before the first use: correct by construction.
* ``TPComm.all_reduce`` — Megatron's *g* (after row-parallel ``wo``/``w2``),
  issued by the schedule on the detached partial sums; its backward is the
  identity (the incoming gradient is already replicated), so the schedule passes
  the gradient of the sub-layer output straight to the partial sums.

Stream hazards (NCCL): ``all_reduce(async_op=True)`` runs on the process group's
NCCL stream, which first waits for the current (compute) stream, so the input
is complete; ``work.wait()`` makes the *current* stream wait for the NCCL
stream without blocking the host; the tensor is kept alive by the work object.
Rows of the table are mutated in place by :func:`shard_model`: it replaces the
Linear modules listed above with smaller ones and divides the modules'
``n_heads``/``n_kv_heads``/``ffn_dim`` by R (said here, as STYLE.md asks).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from domino_prof.reference_model.config import ModelConfig
from domino_prof.reference_model.model import Transformer


class TPComm:
    """The TP process group. ``enabled=False`` skips every collective (``nocomm``
    mode: a throughput upper bound whose numbers are meaningless)."""

    def __init__(self, group=None, *, enabled: bool = True) -> None:
        self.group = group
        self.enabled = enabled
        self.size = dist.get_world_size(group) if dist.is_initialized() else 1
        self.rank = dist.get_rank(group) if dist.is_initialized() else 0

    def all_reduce(self, t: torch.Tensor, *, async_op: bool, op=dist.ReduceOp.SUM):
        """In-place all-reduce; returns a work handle when ``async_op`` (else None)."""
        if not self.enabled or self.size == 1:
            return None
        return dist.all_reduce(t, op=op, group=self.group, async_op=async_op)


# --- profiler ranges that run where backward runs -----------------------------------
# CUDA backward runs on autograd's device thread, not on the thread that called
# backward(), so a record_function around backward() would not enclose the kernel
# launches. These identity functions open/close a range from inside backward.


def _range_enter(name: str):
    return torch.ops.profiler._record_function_enter_new(name, None)


def _range_exit(handle) -> None:
    torch.ops.profiler._record_function_exit._RecordFunction(handle)


@dataclass
class GradBox:
    """Pending input gradient of one column-parallel projection (one unit, one
    micro-batch), plus the backward profiler range of that unit.

    ``sync=True``: the all-reduce is waited for inside backward, before wgrad
    (synchronous Megatron TP). ``sync=False``: launched before wgrad and waited
    for by the schedule when the gradient is first needed (Domino).
    """

    sync: bool
    name: str = ""
    dx: torch.Tensor | None = None
    work: object | None = None
    _ranges: list = field(default_factory=list)

    def open_range(self) -> None:
        self._ranges.append(_range_enter(self.name))

    def close_range(self) -> None:
        if self._ranges:
            _range_exit(self._ranges.pop())

    def wait(self) -> torch.Tensor:
        assert self.dx is not None, "column-parallel backward has not run"
        if self.work is not None:
            self.work.wait()
            self.work = None
        dx, self.dx = self.dx, None
        return dx


class _BwdRangeMark(torch.autograd.Function):
    """Identity; its backward opens (``opening``) or closes ``box``'s profiler range.
    Placed at a piece's output it runs first in backward; at its input, last."""

    @staticmethod
    def forward(ctx, x, box: GradBox, opening: bool):
        ctx.box, ctx.opening = box, opening
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        if ctx.opening:
            ctx.box.open_range()
        else:
            ctx.box.close_range()
        return g, None, None


def bwd_range_open(x: torch.Tensor, box: GradBox) -> torch.Tensor:
    return _BwdRangeMark.apply(x, box, True)


def bwd_range_close(x: torch.Tensor, box: GradBox) -> torch.Tensor:
    return _BwdRangeMark.apply(x, box, False)


class ColumnParallelFn(torch.autograd.Function):
    """y = x Wᵀ with W split by output rows (Megatron *f* + column-parallel linear).

    x  [..., K]        replicated on every rank (K = in_features)
    W  [N / R, K]      this rank's rows
    y  [..., N / R]    this rank's slice of the output
    backward, given gy [..., N / R]:
      dgrad  dx = gy W        [..., K]   partial sum over ranks -> all-reduce (launched here)
      wgrad  dW = gyᵀ x       [N / R, K] local, overlaps the all-reduce
    The reduced dx goes to ``box`` (see module docstring); x's autograd gradient is
    None, so x must be a detached tensor when ``box`` is given.
    ``local=True`` (CUDA-graph pieces): no collective here at all; the *partial* dx
    is returned to autograd and the schedule reduces it outside the graph.
    """

    @staticmethod
    def forward(ctx, x, weight, comm: TPComm, box: GradBox | None, local: bool):
        ctx.save_for_backward(x, weight)
        ctx.comm, ctx.box, ctx.local = comm, box, local
        return x @ weight.t()

    @staticmethod
    def backward(ctx, gy):
        x, weight = ctx.saved_tensors
        comm, box = ctx.comm, ctx.box
        dx = gy @ weight  # [..., K] partial over TP ranks
        if ctx.local:
            dw = gy.flatten(0, -2).t() @ x.flatten(0, -2)
            return dx, dw, None, None, None
        if box is None or box.sync:
            comm.all_reduce(dx, async_op=False)
            work = None
        else:
            work = comm.all_reduce(dx, async_op=True)
        dw = gy.flatten(0, -2).t() @ x.flatten(0, -2)  # [N/R, K]
        if box is None:
            return dx, dw, None, None, None
        box.dx, box.work = dx, work
        box.close_range()  # the unit's backward range ends with its last GEMM
        return None, dw, None, None, None


class ColumnParallelLinear(nn.Module):
    """An ``nn.Linear`` (no bias) holding rows of the full weight; ``grad_box`` is
    set by the schedule before each forward call."""

    def __init__(self, weight: torch.Tensor, comm: TPComm) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.comm = comm
        self.grad_box: GradBox | None = None
        self.local_dgrad = False  # set while capturing CUDA-graph pieces

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ColumnParallelFn.apply(x, self.weight, self.comm, self.grad_box, self.local_dgrad)


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Sum of token cross-entropies / ``denom`` from vocab-sharded logits.

    logits  [T, V / R] fp32, this rank's vocab slice [v0, v0 + V/R)
    targets [T]        replicated
    Three small synchronous all-reduces (max, sum of exp, target logit); the
    backward is local: (softmax − onehot) · g / denom.
    """

    @staticmethod
    def forward(ctx, logits, targets, v0: int, comm: TPComm, denom: float):
        m = logits.max(dim=-1).values  # [T]
        comm.all_reduce(m, async_op=False, op=dist.ReduceOp.MAX)
        z = logits - m[:, None]
        e = z.exp()
        s = e.sum(-1)  # [T]
        comm.all_reduce(s, async_op=False)
        vl = logits.shape[-1]
        in_shard = (targets >= v0) & (targets < v0 + vl)
        idx = (targets - v0).clamp(0, vl - 1)
        tl = z.gather(1, idx[:, None]).squeeze(1) * in_shard  # [T]
        comm.all_reduce(tl, async_op=False)
        loss = (s.log() - tl).sum() / denom
        e.div_(s[:, None])  # softmax, in place
        ctx.save_for_backward(e, idx, in_shard)
        ctx.denom = denom
        return loss

    @staticmethod
    def backward(ctx, g):
        sm, idx, in_shard = ctx.saved_tensors
        grad = sm.clone()
        grad[torch.arange(grad.shape[0], device=grad.device), idx] -= in_shard.to(grad.dtype)
        grad.mul_(g / ctx.denom)
        return grad, None, None, None, None


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
    cfg: ModelConfig, comm: TPComm, *, seed: int, device="cpu", dtype=torch.float32
) -> Transformer:
    """Build this rank's shard of ``Transformer(cfg)``: every full weight is
    initialised (deterministically, on ``device``) and only this rank's part kept."""
    tp, rank = comm.size, comm.rank
    with torch.device("meta"):
        model = Transformer(cfg)
    full_shapes = {n: p.shape for n, p in model.named_parameters()}

    def col(lin: nn.Linear) -> ColumnParallelLinear:
        return ColumnParallelLinear(
            torch.empty(lin.out_features // tp, lin.in_features, device="meta"), comm
        )

    def row(lin: nn.Linear) -> nn.Linear:
        # row-parallel needs no collective of its own (its g is issued by the schedule)
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
