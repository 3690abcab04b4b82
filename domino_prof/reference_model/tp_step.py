"""The operations of an all-reduce TP step (tp, domino), over (unit, micro-batch).

A schedule (``schedules.py``) calls them in its order; each one runs one segment
(``segments.py``) or launches / waits for one collective through the executor, and
keeps what the next operation of that micro-batch needs in this step's state:

* ``embed(b)``, then per unit ``wait(b)`` (the all-reduce of the previous unit's
  output), ``forward(u, b)`` (residual + norm + core: F(u, b); the head's forward is
  its three segments and the cross-entropy's two small synchronous all-reduces) and
  ``launch(b, async_op=...)`` (the all-reduce of the partial sums ``a``);
* backward, units reversed: ``wait(b)`` (the reduced input gradient of the unit
  above), ``dgrad(u, b)`` (D(u, b): the unit above's norm backward + residual, then
  u's core backward to the partial input gradient ``dn``), ``launch(b, ...)``; after
  the last micro-batch of a unit, ``wgrad(u)``: the unit's weight gradients for all
  micro-batches at once (their inputs sit in [N, T, ·] buffers), deferred into the
  next segment so they overlap the last micro-batch's all-reduce; last ``embed_bwd(b)``.

Each micro-batch has one pending collective at a time (``wait(b)`` waits for it).
A unit's norm-weight gradient is overwritten by the first micro-batch the schedule
runs through that unit in backward and accumulated by the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from domino_prof.reference_model import segments as S
from domino_prof.reference_model.executor import Deferred, Pending
from domino_prof.reference_model.layers import Head, Unit
from domino_prof.reference_model.step_base import StepBase


@dataclass(slots=True)
class LayerActs:
    """What F(u, b) leaves for D(u, b)."""

    h: torch.Tensor  # [T, d] the unit's input (residual stream)
    rstd: torch.Tensor  # [T, 1] fp32, the norm's
    core: tuple  # the core's saved tensors (layers.Layer.core_fwd)


class AllReduceStep(StepBase):
    def __init__(self, runner, tokens: torch.Tensor, targets: torch.Tensor, n: int) -> None:
        super().__init__(runner, tokens, targets, n)
        self.cur: list = [None] * n  # b -> (h, y): the next unit's input is h + y
        self.out: list = [None] * n  # b -> (key, the partial sums to all-reduce next)
        self.work: list[Pending | None] = [None] * n  # b -> its pending all-reduce
        self.g: list = [None] * n  # b -> d loss / d (output of the unit in backward)
        self.pend: list = [None] * n  # b -> (dn, h, rstd, w_norm, grad, first) of the unit above
        self.acts: dict[tuple[int, int], LayerActs] = {}  # (unit, b)

    # -- collectives ---------------------------------------------------------------------
    def launch(self, b: int, *, async_op: bool) -> None:
        """All-reduce micro-batch b's partial sums (forward: ``a``; backward: ``dn``)."""
        key, t = self.out[b]
        self.work[b] = self.ex.launch(key, "all_reduce", t, async_op=async_op)

    def wait(self, b: int) -> None:
        """Wait for micro-batch b's pending all-reduce (right before its first use)."""
        self.ex.wait(self.work[b])
        self.work[b] = None

    # -- forward -------------------------------------------------------------------------
    def embed(self, b: int) -> None:
        w_emb = self.embedding.weights[0]
        (h,) = self.ex.run(("emb", 0, b), S.seg_embed, self.tok[b], w_emb, 0, self.T)
        self.cur[b] = (h, None)

    def forward(self, u: Unit, b: int) -> None:
        h, y = self.cur[b]
        if isinstance(u, Head):
            self.losses.append(self._head_forward(b, h, y))
            return
        w_norm, w_in, w_out = u.weights
        a, h, rstd, n_all, x_all, *core = self.ex.run(
            ("F", u.index, b), S.seg_fwd, u.kind, h, y, w_norm, w_in, w_out, self.rope,
            self.b_mb, self.dims, self.n, b, self.xs.get(u.index),
        )  # fmt: skip
        self.xs[u.index] = (n_all, x_all)
        self.acts[u.index, b] = LayerActs(h=h, rstd=rstd, core=tuple(core))
        self.out[b] = (("y", u.index, b), a)
        self.cur[b] = (h, a)

    # -- backward ------------------------------------------------------------------------
    def dgrad(self, u: Unit, b: int) -> None:
        first = self._first(u.index)
        if isinstance(u, Head):
            dn, self.gs[u.index] = self._head_dgrad(b)
            a = self.head_acts.pop(b)
            w_norm = u.weights[0]
            self.pend[b] = (dn, a.h, a.rstd, w_norm, w_norm.grad, first)
            self.out[b] = (("dn", u.index, b), dn)
            return
        w_norm, w_in, w_out = u.weights
        a = self.acts.pop((u.index, b))
        dn, g_all, dy_all, gb = self.ex.run(
            ("D", u.index, b), S.seg_dgrad, u.kind, self.g[b], self.pend[b], a.core, w_in,
            w_out, self.rope_conj, self.b_mb, self.dims, self.n, b, self.gs.get(u.index),
            pre=self._take_pre(),
        )  # fmt: skip
        self.gs[u.index] = (g_all, dy_all)
        self.g[b] = gb
        self.pend[b] = (dn, a.h, a.rstd, w_norm, w_norm.grad, first)
        self.out[b] = (("dn", u.index, b), dn)

    def wgrad(self, u: Unit) -> None:
        """u's weight gradients over all micro-batches, deferred into the next segment."""
        i = u.index
        if isinstance(u, Head):
            args = (self.gs.pop(i), self.xs.pop(i), u.weights[1].grad, True)
            self.pre = Deferred(("W", i, 0), S.seg_head_wgrad, args)
            return
        n_all, x_all = self.xs.pop(i)
        g_all, dy_all = self.gs.pop(i)
        _, w_in, w_out = u.weights
        args = (u.kind, g_all, dy_all, x_all, n_all, w_in.grad, w_out.grad)
        self.pre = Deferred(("W", i, 0), S.seg_wgrad_all, args)

    def embed_bwd(self, b: int) -> None:
        """Unit 0's norm backward + residual, then the embedding's gradient rows."""
        self.ex.run(
            ("E", 0, b), S.seg_embed_bwd, self.g[b], self.pend[b], self.tok[b],
            self.embedding.weights[0].grad, keep=0, pre=self._take_pre(),
        )  # fmt: skip
