"""The operations of a sequence-parallel step (Megatron SP: sp, domino-sp), over
(unit, micro-batch).

Token order is sequence-major, (s, b), so a rank's sequence shard is a contiguous
block of rows: rank r holds rows [r·T/R, (r+1)·T/R) of every [T, d] activation; norms,
residuals and their gradients live on that shard only (1/R of the memory), the cores
on the gathered sequence. A unit is

    h_s ─ norm ─ n_s ─ all-gather ─ n ─ core ─ a ─ reduce-scatter ─ y_s ;  h_s + y_s

* forward: ``norm(u, b)`` = the *chain*: wait for unit u−1's reduce-scatter, residual +
  norm of u on the shard, launch the all-gather of its output; ``core(u, b)`` = wait
  for that all-gather, the core on the whole sequence; ``scatter(u, b)`` = launch the
  reduce-scatter of the core's partial sums; ``head_forward(b)``. With ``--sp-residual
  fold`` (the default; ``chain``, Megatron's order, adds h_s + y_s in the chain) the core
  adds u's input shard into its partial sums at this rank's rows before the
  reduce-scatter, which then returns the next residual itself: the chain is the norm
  alone, one kernel fewer between the two collectives. The add moves to the compute
  stream, the shorter of a domino-sp forward's two (reports/emulated-h100-2026-12-07c).
* backward: ``head_dgrad(b)`` / ``core_dgrad(u, b)`` (waits for the all-gathered output
  gradient, runs the deferred weight gradient of the micro-batch before, then u's core
  backward; its own weight gradient is deferred into the next segment; with several
  micro-batches see "Joint weight gradients" below), then
  ``scatter_bwd(u, b)`` (reduce-scatter of dn) and ``norm_bwd(u, b)`` = the chain back:
  wait for that reduce-scatter, u's norm backward + residual on the shard, launch the
  all-gathers of that gradient and of unit u−1's saved norm output (the weight gradient's
  input: saved as its shard, gathered again, as Megatron does; with ``--sp-wgrad-input
  keep`` the forward's gathered copy is kept instead and that all-gather is not issued:
  the backward's collectives per unit go from three to two); ``embed_bwd(b)``.

On CUDA with a side stream (domino-sp) the chains run on it, so neither stream waits
for the other's compute; on CPU they run inline. Norm weights see only this rank's
rows: :meth:`finish` sums their gradients over ranks.

**Joint weight gradients** (several micro-batches, ``--wgrad-in joint``, the default):
as in the all-reduce schedules (segments._mb_slot), a unit's weight gradients W(u) are
one GEMM each over every micro-batch's rows, not one per micro-batch that each re-read
and re-write the weight-sized gradient at half the rows. What they read sits in [ΣT, ·]
buffers, micro-batch b's rows one block: w_out's input x (the core forward writes it
there), the gradient dy at w_in's output (the core backward), and the all-gathered
output gradient g and norm output n (the chain's all-gathers write into the block). W(u)
runs once the last micro-batch's D(u, ·) is done, as a segment of its own issued before
the next D waits for its all-gathered gradient, so it runs while that chain's
collectives do. ``--wgrad-in accumulate`` keeps one W per micro-batch, deferred into the
next segment (the schedule before 2026-12-06). The head's weight gradient stays one per
micro-batch. Measured: reports/emulated-h100-2026-12-06c.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from domino_prof.reference_model import segments as S
from domino_prof.reference_model.executor import Deferred, Pending
from domino_prof.reference_model.layers import Layer, Unit
from domino_prof.reference_model.step_base import StepBase


@dataclass(slots=True)
class ShardActs:
    """What the chain and the core of (u, b) leave for the backward."""

    h: torch.Tensor  # [Ts, d] the unit's input shard (residual stream)
    rstd: torch.Tensor  # [Ts, 1] fp32
    n: torch.Tensor | None  # [Ts, d] the norm output shard (gathered again for the wgrad)
    core: tuple | None = None  # the core's saved tensors
    n_full: torch.Tensor | None = None  # [T, d] the forward's gathered norm output (keep)


class ShardedStep(StepBase):
    def __init__(self, runner, tokens: torch.Tensor, targets: torch.Tensor,
                 sizes: tuple[int, ...]) -> None:  # fmt: skip
        super().__init__(runner, tokens, targets, sizes, seq_major=True)
        n = self.n
        R, self.r = runner.comm.size, runner.comm.rank
        self.Ts = [t // R for t in self.T]  # b -> this rank's rows of micro-batch b
        self.d = self.model.cfg.dim
        w = self.embedding.weights[0]
        self.dt, self.dev = w.dtype, tokens.device
        self.norm_grads = runner.sp_norm_grad_flat
        self.units: list[Unit] = [*self.layers, self.head]
        self.x: list = [None] * n  # b -> (h_s, y_s, reduce-scatter): next norm input h_s + y_s
        self.ag: list = [None] * n  # b -> (gathered norm output, all-gather) for the next core
        self.a: list = [None] * n  # b -> the core's partial sums (forward) or dn (backward)
        self.acts: dict[tuple[int, int], ShardActs] = {}  # (unit, b)
        self.g_s: list = [None] * n  # b -> gradient of the residual-stream shard
        self.gag: list = [None] * n  # b -> (g gathered, its all-gather, n gathered, its all-gather)
        self.rs: list = [None] * n  # b -> (dn shard, reduce-scatter) for the next chain
        self.pre_wait: Pending | None = None  # the all-gather the deferred wgrad reads
        # joint weight gradients (module doc): unit -> its [ΣT, ·] buffers x, dy, g, n
        self.joint = n > 1 and runner.wgrad_in == "joint"
        self.x_all: dict[int, torch.Tensor] = {}
        self.dy_all: dict[int, torch.Tensor] = {}
        self.wn_all: dict[int, list[Pending]] = {}  # unit -> the all-gathers of its n
        self.wn_pending: list[Pending] | None = None  # those the pending W(u) reads
        self.jbuf: dict[tuple[str, int], torch.Tensor] = {}  # (name, unit) -> [ΣT, d]
        # --sp-wgrad-input keep: the forward's gathered norm outputs feed the weight
        # gradients (module doc), none gathered again
        self.keep_n = runner.sp_wgrad_input == "keep"
        # --sp-residual fold: each core adds the residual shard into its partial sums, so
        # the reduce-scatter returns the next residual and the chain is the norm alone
        self.fold = runner.sp_residual == "fold"

    def _buf(self, name: str, u: Unit, b: int, rows: int, side: bool = False) -> torch.Tensor:
        return self.ex.buffer((name, u.index, b), (rows, self.d), self.dt, self.dev, side)

    def _joint_buf(self, name: str, i: int, b: int) -> torch.Tensor:
        """Micro-batch b's rows of unit i's [ΣT, d] buffer ``name`` (joint weight
        gradients), which the micro-batch that comes first allocates (on the side stream:
        the chain's all-gathers write it)."""
        off, total = self.rows[b]
        buf = self.jbuf.get((name, i))
        if buf is None:
            buf = self.jbuf[name, i] = self.ex.buffer((name, i, -1), (total, self.d), self.dt,
                                                      self.dev, side=True)  # fmt: skip
        return buf[off : off + self.T[b]]

    # -- forward -------------------------------------------------------------------------
    def embed(self, b: int) -> None:
        (h_s,) = self.ex.run(
            ("emb", 0, b), S.seg_embed, self.tok[b], self.embedding.weights[0],
            self.r * self.Ts[b], (self.r + 1) * self.Ts[b],
        )  # fmt: skip
        self.x[b] = (h_s, None, Pending(("emb", 0, b), self.ex.mark()))

    def norm(self, u: Unit, b: int, *, async_op: bool) -> None:
        """Unit u−1's reduce-scatter -> residual + norm of u on the shard -> all-gather of
        the norm output (the chain; on the side stream where there is one)."""
        ex = self.ex
        h_s, y_s, w = self.x[b]
        with ex.side_ctx():  # the whole chain: one switch to the side stream and back
            ex.wait(w, side=True)
            n_s, h_s, rstd = ex.run(
                ("N", u.index, b), S.seg_norm, h_s, y_s, u.weights[0], self.dims.eps, side=True
            )
            keep = self.keep_n and u is not self.head  # the head keeps its own (head_n)
            if keep and self.joint:  # straight into the weight gradient's [ΣT, d] block
                n_full = self._joint_buf("nagW", u.index, b)
            else:
                n_full = self._buf("ag", u, b, self.T[b], side=True)
            p = ex.launch(("ag", u.index, b), "all_gather", n_full, n_s, async_op=async_op,
                          side=True, ordered=True)  # fmt: skip
        # keep: the gathered copy for the weight gradient, no shard to gather again
        self.acts[u.index, b] = ShardActs(h=h_s, rstd=rstd, n=None if keep else n_s,
                                          n_full=n_full if keep else None)  # fmt: skip
        self.ag[b] = (n_full, p)

    def core(self, u: Layer, b: int) -> None:
        n_full, p = self.ag[b]
        self.ex.wait(p)
        _, w_in, w_out = u.weights
        rows = self.rows[b] if self.joint else None
        resid = self.acts[u.index, b].h if self.fold else None  # --sp-residual fold
        a, x_all, *core = self.ex.run(
            ("C", u.index, b), S.seg_core_fwd, u.kind, n_full, w_in, w_out, self.rope,
            self.b_mb[b], self.dims, rows, self.x_all.get(u.index), resid, self.r * self.Ts[b],
        )  # fmt: skip
        if self.joint and u.index not in self.x_all:
            self.x_all[u.index] = x_all
        self.acts[u.index, b].core = tuple(core)
        self.a[b] = a

    def scatter(self, u: Layer, b: int, *, async_op: bool) -> None:
        """Reduce-scatter of the core's partial sums: the next norm's residual input (with
        ``--sp-residual fold``, the next residual itself)."""
        y_s = self._buf("rs", u, b, self.Ts[b])
        p = self.ex.launch(("rs", u.index, b), "reduce_scatter", y_s, self.a[b],
                           async_op=async_op, ordered=True)  # fmt: skip
        if self.fold:  # the core added the residual: y_s is the next unit's input already
            self.x[b] = (y_s, None, p)
        else:
            self.x[b] = (self.acts[u.index, b].h, y_s, p)

    def head_forward(self, b: int) -> None:
        n_full, p = self.ag[b]
        self.ex.wait(p)
        self.losses.append(self._head_forward(b, n_full, None, sp=True))

    # -- backward ------------------------------------------------------------------------
    def head_dgrad(self, b: int) -> None:
        dn, dl = self._head_dgrad(b, sp=True)
        del self.head_acts[b]
        w_out = self.head.weights[1]
        args = (dl, self.head_n.pop(b), w_out.grad, self._first(("w", self.head.index)))
        self.pre = Deferred(("W", self.head.index, b), S.seg_head_wgrad, args)
        self.pre_wait = None
        self.a[b] = dn

    def core_dgrad(self, u: Layer, b: int) -> None:
        g_full, wg, n_full, wn = self.gag[b]
        if self.joint:
            self._run_pre()
        self.ex.wait(wg)
        self.ex.wait(self.pre_wait)  # the deferred weight gradient's gathered input
        _, w_in, w_out = u.weights
        acts = self.acts[u.index, b]
        rows = self.rows[b] if self.joint else None
        dn, dy_all, *wgi = self.ex.run(
            ("D", u.index, b), S.seg_core_dgrad, u.kind, g_full, acts.core, w_in, w_out,
            self.rope_conj, self.b_mb[b], self.dims, rows, self.dy_all.get(u.index),
            pre=self._take_pre(),
        )  # fmt: skip
        acts.core = None
        self.a[b] = dn
        if self.joint:  # W(u) once the last micro-batch's D(u, ·) is done (module doc)
            self.dy_all.setdefault(u.index, dy_all)
            if b == 0:
                self._joint_wgrad(u)
            return
        first = self._first(("w", u.index))
        args = (u.kind, g_full, tuple(wgi), n_full, w_in.grad, w_out.grad, first)
        self.pre = Deferred(("W", u.index, b), S.seg_wgrad, args)
        self.pre_wait = wn

    def _joint_wgrad(self, u: Layer) -> None:
        """W(u) over every micro-batch's rows, pending until :meth:`_run_pre`."""
        i = u.index
        _, w_in, w_out = u.weights
        g_all = self.jbuf.pop(("gagW", i))
        n_all = self.jbuf.pop(("nagW", i))
        wg = (self.dy_all.pop(i), self.x_all.pop(i))
        args = (u.kind, g_all, wg, n_all, w_in.grad, w_out.grad, self._first(("w", i)))
        self.pre = Deferred(("W", i, -1), S.seg_wgrad, args)
        self.pre_wait = None
        self.wn_pending = self.wn_all.pop(i, None)  # none with --sp-wgrad-input keep

    def _run_pre(self) -> None:
        """The pending weight gradient as a segment of its own, now (joint weight
        gradients: before the next wait for an all-gathered gradient, which it does not
        read), after the all-gathers of the norm outputs it reads."""
        if self.pre is None:
            return
        for p in self.wn_pending or ():
            self.ex.wait(p)
        self.wn_pending = None
        self.ex.wait(self.pre_wait)
        self.pre_wait = None
        pre, self.pre = self.pre, None
        self.ex.run(pre.key, pre.fn, *pre.args, keep=0, compiled=False)

    def scatter_bwd(self, u: Unit, b: int, *, async_op: bool) -> None:
        """Reduce-scatter of dn (d loss / d u's norm output, partial over ranks)."""
        dn_s = self._buf("rsb", u, b, self.Ts[b])
        p = self.ex.launch(("rsb", u.index, b), "reduce_scatter", dn_s, self.a[b],
                           async_op=async_op, ordered=True)  # fmt: skip
        self.rs[b] = (dn_s, p)

    def norm_bwd(self, u: Unit, b: int, *, async_op: bool) -> None:
        """u's reduce-scattered dn -> its norm backward + residual on the shard ->
        all-gathers of that gradient and of unit u−1's saved norm output."""
        ex = self.ex
        dn_s, w = self.rs[b]
        acts = self.acts.pop((u.index, b))
        w_norm = u.weights[0]
        with ex.side_ctx():  # the whole chain: one switch to the side stream and back
            ex.wait(w, side=True)
            (g_s,) = ex.run(
                ("B", u.index, b), S.seg_norm_bwd, self.g_s[b], dn_s, acts.h, acts.rstd,
                w_norm, w_norm.grad, self._first(("norm", u.index)), side=True,
            )  # fmt: skip
            below = u.index - 1  # the unit whose output gradient and W input these are
            if self.joint and below >= 0:
                g_full = self._joint_buf("gagW", below, b)
            else:
                g_full = self._buf("gag", u, b, self.T[b], side=True)
            wg = ex.launch(("gag", u.index, b), "all_gather", g_full, g_s, async_op=async_op,
                           side=True, ordered=True)  # fmt: skip
            n_full = wn = None
            if u.index > 0 and self.keep_n:  # the forward's gathered copy, kept
                n_full = self.acts[below, b].n_full
            elif u.index > 0:  # unit u-1's norm output, the input of its weight gradient
                if self.joint:
                    n_full = self._joint_buf("nagW", below, b)
                else:
                    n_full = self._buf("nag", u, b, self.T[b], side=True)
                wn = ex.launch(("nag", u.index, b), "all_gather", n_full,
                               self.acts[u.index - 1, b].n, async_op=async_op, side=True,
                               ordered=True)  # fmt: skip
                if self.joint:
                    self.wn_all.setdefault(below, []).append(wn)
                    wn = None  # waited for by the joint W(u − 1), not by the next D
        self.g_s[b] = g_s
        self.gag[b] = (g_full, wg, n_full, wn)

    def embed_bwd(self, b: int) -> None:
        g_full, wg, _, _ = self.gag[b]
        if self.joint:
            self._run_pre()
        self.ex.wait(wg)
        self.ex.wait(self.pre_wait)
        self.pre_wait = None
        self.ex.run(
            ("E", 0, b), S.seg_scatter_add, self.tok[b], g_full, self.embedding.weights[0].grad,
            keep=0, pre=self._take_pre(),
        )  # fmt: skip

    def finish(self) -> torch.Tensor:
        self.ex.join_side()  # both streams' uses are ordered before what follows
        # norm weights saw only this rank's rows: sum their gradients over ranks
        self.ex.launch(("norm-grads", -1, 0), "all_reduce", self.norm_grads, async_op=False)
        return super().finish()
