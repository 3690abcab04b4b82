"""The training-step schedules: synchronous Megatron TP and Domino.

Both run the same sharded model (``parallel.shard_model``) as a list of *units*:
``attn`` and ``mlp`` sub-layers of every layer, then the ``head`` (final norm,
vocab-parallel LM head and loss). A unit on micro-batch b is

    x_leaf ─ norm ─ n ─(detach)─ core ─ partial ─(all-reduce g)─ y ;  out = x_leaf + y

and is executed as two autograd pieces with a detached boundary at ``n``, so the
schedule, not the autograd engine's node order, decides where every wait goes:

* forward: ``core`` ends in a row-parallel GEMM whose partial sums are all-reduced
  (async). The reduced ``y`` is first needed by the *next* unit of the same
  micro-batch, so the schedule waits right before that unit, after the other
  micro-batches' units were issued: with N micro-batches every all-reduce has
  N − 1 units of compute to hide behind, across layer boundaries too.
* backward (reverse unit order): ``core``'s backward launches the column-parallel
  input-gradient all-reduce between dgrad and wgrad (``ColumnParallelFn``) and
  stores it in the unit's ``GradBox``; the norm piece, which needs the reduced
  gradient, is run only right before the next (earlier) unit of that micro-batch,
  i.e. after the other micro-batches' core backward was issued.

Correct by construction: a reduced tensor is only read after ``wait()`` on it,
in program order, and NCCL's ``wait()`` orders the compute stream after the
collective. ``tp`` is the same machinery with one micro-batch, every collective
waited for at once and the backward all-reduce waited for before wgrad
(synchronous Megatron TP); ``nocomm`` is ``tp`` with collectives skipped.

CUDA graphs (``graphs=True``, CUDA only): every attn/mlp ``core`` of every
micro-batch becomes its own graphed callable (``torch.cuda.make_graphed_callables``,
forward and backward graphs, captured in schedule order and replayed in it), so
the host launches one graph per piece instead of dozens of kernels. The graphs
hold no collective: the column-parallel dgrad comes out of the backward graph
unreduced and the schedule all-reduces it (async for Domino, so it overlaps the
next piece; the overlap with the piece's own wgrad is given up). Norms, the
head and all collectives stay eager.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.profiler import record_function

from domino_prof.reference_model.model import Transformer, rope_tables
from domino_prof.reference_model.parallel import (
    ColumnParallelLinear,
    GradBox,
    TPComm,
    VocabParallelCrossEntropy,
    bwd_range_close,
    bwd_range_open,
)


@dataclass(frozen=True)
class Unit:
    kind: str  # "attn" | "mlp" | "head"
    layer: int  # -1 for the head

    def range_name(self, phase: str, b: int) -> str:
        if self.kind == "head":
            return f"{phase}.head_batch_{b}"
        return f"{phase}.layer_{self.kind}_{self.layer}_batch_{b}"


@dataclass
class _State:
    """What one (unit, micro-batch) keeps between forward and backward."""

    x_leaf: torch.Tensor
    n: torch.Tensor  # norm output (graph back to x_leaf)
    n_in: torch.Tensor  # the core's input: n detached (a grad leaf in graph mode)
    out: torch.Tensor  # partial sums (attn/mlp) or the loss (head); graph back to n.detach()
    box: GradBox  # core backward range + pending input gradient
    norm_box: GradBox  # norm piece backward range


class _Piece(torch.nn.Module):
    """A distinct module per graphed (unit, micro-batch) around a shared core."""

    def __init__(self, core: torch.nn.Module, *, with_rope: bool) -> None:
        super().__init__()
        self.core, self.with_rope = core, with_rope

    def forward(self, x, rope=None):
        return self.core(x, rope) if self.with_rope else self.core(x)


def units_of(model: Transformer) -> list[Unit]:
    us = []
    for i in range(len(model.layers)):
        us += [Unit("attn", i), Unit("mlp", i)]
    return us + [Unit("head", -1)]


class StepRunner:
    """Runs forward + backward of one batch through a sharded model.

    ``splits``: micro-batches (1 for tp/nocomm); ``overlap``: Domino ordering and
    async collectives (False: every collective is waited for immediately).
    """

    def __init__(
        self, model: Transformer, comm: TPComm, *, splits: int, overlap: bool, graphs: bool = False
    ) -> None:
        self.model, self.comm = model, comm
        self.splits, self.overlap, self.graphs = splits, overlap, graphs
        self.units = units_of(model)
        cfg = model.cfg
        self.vocab_start = comm.rank * (cfg.vocab_size // comm.size)
        self._rope: dict = {}
        self._graphed: dict | None = None  # (unit, b) -> graphed core
        self._graph_shape = None

    def _capture(self, mb_shape: tuple, rope: torch.Tensor, dtype) -> None:
        """Capture one graphed core per (attn/mlp unit, micro-batch), in schedule order."""
        keys = [(u, b) for u in self.units if u.kind != "head" for b in range(self.splits)]
        pieces, args = [], []
        for u, b in keys:
            core = self._norm_and_core(u)[1]
            pieces.append(_Piece(core, with_rope=(u.kind == "attn")))
            x = torch.zeros(mb_shape, device=rope.device, dtype=dtype, requires_grad=True)
            args.append((x, rope) if u.kind == "attn" else (x,))
        cols = [self._col(u) for u, _ in keys]
        for c in cols:
            c.local_dgrad = True
        try:
            graphed = torch.cuda.make_graphed_callables(tuple(pieces), tuple(args))
        finally:
            for c in cols:
                c.local_dgrad = False
        self._graphed = dict(zip(keys, graphed))
        self._graph_shape = mb_shape

    # -- pieces --------------------------------------------------------------------------
    def _norm_and_core(self, u: Unit):
        m = self.model
        if u.kind == "head":
            return m.norm, m.output
        blk = m.layers[u.layer]
        if u.kind == "attn":
            return blk.attention_norm, blk.attention
        return blk.ffn_norm, blk.feed_forward

    def _col(self, u: Unit) -> ColumnParallelLinear:
        m = self.model
        if u.kind == "head":
            return m.output
        blk = m.layers[u.layer]
        return blk.attention.wqkv if u.kind == "attn" else blk.feed_forward.w13

    def _forward_unit(
        self, u: Unit, b: int, x: torch.Tensor, targets: torch.Tensor, denom: float, rope
    ) -> _State:
        norm, core = self._norm_and_core(u)
        sync = not self.overlap
        box = GradBox(sync=sync, name=u.range_name("bwd", b))
        norm_box = GradBox(sync=sync, name=u.range_name("bwd", b))
        x_leaf = x.detach().requires_grad_()
        n = bwd_range_open(norm(bwd_range_close(x_leaf, norm_box)), norm_box)
        n_in = n.detach()
        col = self._col(u)
        col.grad_box = box
        try:
            if self._graphed is not None and u.kind != "head":
                # the core's backward range closes after the graph, where dgrad is ready
                n_in.requires_grad_()
                args = (bwd_range_close(n_in, box),) + ((rope,) if u.kind == "attn" else ())
                out = self._graphed[(u, b)](*args)
            elif u.kind == "attn":
                out = core(n_in, rope)
            elif u.kind == "mlp":
                out = core(n_in)
            else:  # head: vocab-parallel logits and loss
                logits = core(n_in).flatten(0, 1).float()  # [T, V/R]
                out = VocabParallelCrossEntropy.apply(
                    logits, targets.flatten(), self.vocab_start, self.comm, denom
                )
        finally:
            col.grad_box = None
        out = bwd_range_open(out, box)
        return _State(x_leaf=x_leaf, n=n, n_in=n_in, out=out, box=box, norm_box=norm_box)

    # -- the step ------------------------------------------------------------------------
    def step(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Forward and backward; gradients accumulate into ``.grad``. Returns the
        loss (mean token cross-entropy over the whole batch), detached."""
        model, comm, N = self.model, self.comm, self.splits
        B, S = tokens.shape
        key = (S, tokens.device)
        if key not in self._rope:
            self._rope[key] = rope_tables(
                model.cfg.head_dim, S, model.cfg.rope_theta, tokens.device
            )
        rope = self._rope[key]
        denom = float(B * S)
        tok_mb, tgt_mb = tokens.chunk(N, 0), targets.chunk(N, 0)
        mb_shape = (B // N, S, model.cfg.dim)
        if self.graphs and self._graph_shape != mb_shape:
            self._capture(mb_shape, rope, model.tok_embeddings.weight.dtype)
        order = [(u, b) for u in self.units for b in range(N)]

        # ---- forward ----
        x0 = []  # embedding outputs (graph to the embedding table)
        cur: list[torch.Tensor] = []
        pending: list[tuple | None] = [None] * N  # b -> (x_leaf, y, work) awaiting the g-reduce
        states: dict[tuple[Unit, int], _State] = {}
        for b in range(N):
            with record_function(f"fwd.embedding_batch_{b}"):
                e = model.tok_embeddings(tok_mb[b])  # [B/N, S, dim]
            x0.append(e)
            cur.append(e)
        loss = torch.zeros((), device=tokens.device)
        for u, b in order:
            with record_function(u.range_name("fwd", b)):
                if pending[b] is not None:  # first use of the previous unit's reduced output
                    x_leaf, y, work = pending[b]
                    if work is not None:
                        work.wait()
                    cur[b] = x_leaf.detach() + y
                    pending[b] = None
                st = self._forward_unit(u, b, cur[b], tgt_mb[b], denom, rope)
                states[(u, b)] = st
                if u.kind == "head":
                    loss = loss + st.out.detach()
                else:
                    y = st.out.detach()  # partial sums [B/N, S, dim]
                    work = comm.all_reduce(y, async_op=self.overlap)
                    pending[b] = (st.x_leaf, y, work)
                    if not self.overlap:  # synchronous: finish now
                        cur[b] = st.x_leaf.detach() + y
                        pending[b] = None

        # ---- backward ----
        grads: list[torch.Tensor | None] = [None] * N  # d loss / d (current unit's output)
        waiting: list[tuple[Unit, _State] | None] = [None] * N

        def finish(b: int) -> None:
            u, st = waiting[b]
            dx = st.box.wait()  # reduced gradient of the norm output
            torch.autograd.backward(st.n, dx)
            g = st.x_leaf.grad
            grads[b] = g if u.kind == "head" else g + grads[b]
            waiting[b] = None

        for u, b in reversed(order):
            if waiting[b] is not None:
                finish(b)
            st = states.pop((u, b))
            if u.kind == "head":
                torch.autograd.backward(st.out)
            else:
                # out = x_leaf + g(partial): d out / d partial is the identity
                torch.autograd.backward(st.out, grads[b])
                if self._graphed is not None:  # graphs return dgrad unreduced: reduce here
                    with record_function(u.range_name("bwd", b)):
                        st.box.dx = st.n_in.grad
                        st.box.work = comm.all_reduce(st.box.dx, async_op=self.overlap)
            waiting[b] = (u, st)
            if not self.overlap:
                finish(b)
        for b in range(N):
            if waiting[b] is not None:
                finish(b)
        with record_function("bwd.embedding"):
            torch.autograd.backward(x0, grads)
        return loss
