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
  micro-batches at once (their inputs sit in [ΣT, ·] buffers), deferred into the
  next segment so they overlap the last micro-batch's all-reduce; last ``embed_bwd(b)``.

Each micro-batch has one pending collective at a time (``wait(b)`` waits for it), or
with Domino's column split (``col_splits`` K > 1, ``--col-splits``) the K all-reduces
of one partial sum's column chunks: ``forward`` / ``dgrad`` compute chunk 0 (the
segment's last GEMM), ``out_chunk(b, k)`` chunk k (one GEMM, its own segment), each
``launch(b, ...)`` the all-reduce of the next chunk computed, and ``wait(b)`` waits for
all of them, right before their first use (the next unit's residual / norm backward,
which read every column).

**The chunks' layout** (``units.chunk_buffer``): chunk k of a [T, d] partial sum is
slot k of a [K, T, d/K] buffer, so every chunk is contiguous for its all-reduce and
its GEMM writes it in place (``torch.mm(out=buf[k])``, w's columns as a strided view:
no copy of the weight, none of the activation). The consumer reads the [T, d] through
the strided view ``buf.transpose(0, 1)``: in forward the next unit's residual add does
(``units.residual_add``: its reads are runs of d/K contiguous elements; the sum is a
new contiguous [T, d], as without the split), so the forward costs nothing extra. In
backward the norm backward reads the reduced input gradient: eager, ``units.joined``
copies it into a contiguous [T, d] first (one elementwise copy of T·d per unit and
micro-batch: the fused norm-backward kernel takes contiguous rows); under
``--compile`` inductor reads the view inside the norm backward's kernel, no copy. (The
transposed product a^T = w_out x^T, chunks as row blocks of a [d, T] buffer, would
also be contiguous, but every consumer would read [T, d] transposed: one stride-T
access per element, worse on a GPU than d/K-long runs.)

A unit's norm-weight gradient is overwritten by the first micro-batch the schedule
runs through that unit in backward and accumulated by the others.

**Micro-batch lanes** (``--mb-streams 2``, 2 micro-batches; ``StepBase.at`` switches the
lane, the executor holds the streams). Each micro-batch's blocks run on a CUDA stream of
its own, so the GPU runs one micro-batch's kernels in the SMs the other's leave idle
(attention's grid of one sequence at a few heads a rank, kernel tails, the gaps between
kernels) instead of one after the other; each still waits for its own all-reduces. The
micro-batch a phase issues first (forward 0, backward the last) is the *leader*, on the
high-priority lane: its all-reduces start as early as on one stream. The other, the
*follower*, takes what the leader leaves. What the two share is ordered by events:

* forward: the unit's [ΣT, ·] buffers (both write their rows) are allocated on the
  leader's lane before its segment, and the follower's segment waits for that point;
* backward: the follower's segment of a unit waits for the end of the leader's (which
  allocated the unit's gradient buffers and wrote the norm weight's gradient first), and
  the weight gradients W(u), which read both micro-batches' rows, run in micro-batch 0's
  segments (the follower's), not in the next segment issued;
* between forward and backward the micro-batches change lanes: each lane waits for the
  other's forward; at the end the step's stream joins both.

Every tensor a lane's segment or collective touches is held by the executor until the
join (a block freed on one stream could otherwise be handed to the other while it still
reads it): more memory, measured in run.json's peak. Gradients are bit-equal to one
stream's (tests/test_mb_streams.py).

The lanes' collectives go through one comm stream, the group's, in the order issued
(``DOMINO_PROF_LANE_COMM=shared``, the default), or each lane's through a comm of its own
(``own``: the executor's ``lane_comms``; real NCCL, a second group of the same ranks;
emulated, ``EmulatedComm.lane_sibling``, two comm streams sharing one link), so the
leader's all-reduce never waits in stream order behind the slowed follower's.

Measured (reports/emulated-h100-2026-12-06) the backward lanes run in phase: the leader's
next segment waits for its own all-reduce only, runs beside the follower's, and the two
finish and all-reduce together while both wait. ``DOMINO_PROF_LANE_LOCK=dgrad`` holds them
apart: the leader's segment also waits for the end of the follower's previous dgrad, and
each unit's weight gradients, not deferred into the follower's next segment, run as a
segment of their own on its lane right after it launched its all-reduce. The input
gradients then alternate as on one stream, each lane's all-reduce behind the other's
dgrad, and the weight gradients share the SMs with the leader's. It is the default
(``off`` restores the unlocked lanes): on one H100, emulated TP 8, it took the SM
stand-in's lanes from 0.736 to 0.763-0.768 of nocomm, past one stream's 0.744
(reports/emulated-h100-2026-12-06b).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from domino_prof.reference_model import segments as S
from domino_prof.reference_model.executor import Deferred, Pending
from domino_prof.reference_model.layers import LAYER_KINDS, Head, Unit
from domino_prof.reference_model.step_base import StepBase


@dataclass(slots=True)
class LayerActs:
    """What F(u, b) leaves for D(u, b)."""

    h: torch.Tensor  # [T, d] the unit's input (residual stream)
    rstd: torch.Tensor  # [T, 1] fp32, the norm's
    core: tuple  # the core's saved tensors (layers.Layer.core_fwd)


class AllReduceStep(StepBase):
    def __init__(self, runner, tokens: torch.Tensor, targets: torch.Tensor,
                 sizes: tuple[int, ...]) -> None:  # fmt: skip
        super().__init__(runner, tokens, targets, sizes)
        n = self.n
        self.col_splits: int = runner.col_splits  # K: column chunks of each partial sum
        # "joint": w_in's gradient one GEMM over the [ΣT, d] buffer of norm outputs;
        # "accumulate": one GEMM per micro-batch, the norm outputs not copied (seg_fwd)
        self.wgrad_in: str = runner.wgrad_in
        self.cur: list = [None] * n  # b -> (h, y): the next unit's input is h + y
        # b -> (key, the partial sums to all-reduce next: [T, d], or K > 1 its chunk buffer)
        self.out: list = [None] * n
        self.src: list = [None] * n  # b -> (segment name, unit, GEMM input, weight, transpose)
        self.made: list[int] = [0] * n  # b -> chunks of out[b] computed so far
        self.sent: list[int] = [0] * n  # b -> chunks of out[b] launched so far
        self.work: list[list[Pending]] = [[] for _ in range(n)]  # b -> its pending all-reduces
        self.g: list = [None] * n  # b -> d loss / d (output of the unit in backward)
        self.pend: list = [None] * n  # b -> (dn, h, rstd, w_norm, grad, first) of the unit above
        self.acts: dict[tuple[int, int], LayerActs] = {}  # (unit, b)
        self._lead_ev = None  # micro-batch lanes: the leader's last event (module doc)
        self._lanes_fwd = self.lanes and "fwd" in self.lane_phases
        self._lanes_bwd = self.lanes and "bwd" in self.lane_phases
        # DOMINO_PROF_LANE_LOCK=dgrad (module doc): the follower's last dgrad end, which the
        # leader's next segment waits for; the weight gradients run at once, not deferred
        self._lock = self._lanes_bwd and self.lane_lock == "dgrad"
        self._fol_ev = None

    def _partial(self, b: int, key, t, src) -> None:
        """Micro-batch b's next partial sums (chunk 0 computed) and their chunks' source."""
        self.out[b], self.src[b] = (key, t), src
        self.made[b], self.sent[b] = 1, 0

    # -- collectives ---------------------------------------------------------------------
    def launch(self, b: int, *, async_op: bool) -> None:
        """All-reduce micro-batch b's partial sums (forward: ``a``; backward: ``dn``); with
        the column split, its next chunk computed (key + (k,))."""
        key, t = self.out[b]
        if self.col_splits > 1:
            k = self.sent[b]
            assert k < self.made[b], f"chunk {k} of {key} launched before it is computed"
            self.sent[b] = k + 1
            key, t = key + (k,), t[k]
        self.work[b].append(self.ex.launch(key, "all_reduce", t, async_op=async_op))

    def wait(self, b: int) -> None:
        """Wait for micro-batch b's pending all-reduces (right before their first use)."""
        for p in self.work[b]:
            self.ex.wait(p)
        self.work[b] = []

    def out_chunk(self, b: int, k: int) -> None:
        """Chunk k of micro-batch b's partial sums (Domino's column split): one GEMM, its
        own segment, so the all-reduce of chunk k − 1 runs while it computes."""
        assert k == self.made[b] < self.col_splits, (b, k, self.made[b])
        name, i, x_all, w, transpose = self.src[b]
        _, buf = self.out[b]
        self.ex.run((name, i, b, k), S.seg_out_chunk, x_all, self.rows[b], w, buf, k, transpose,
                    keep=0)  # fmt: skip
        self.made[b] = k + 1

    # -- forward -------------------------------------------------------------------------
    def embed(self, b: int) -> None:
        w_emb = self.embedding.weights[0]
        (h,) = self.ex.run(("emb", 0, b), S.seg_embed, self.tok[b], w_emb, 0, self.T[b])
        self.cur[b] = (h, None)

    def forward(self, u: Unit, b: int) -> None:
        h, y = self.cur[b]
        keep_n = self.wgrad_in == "accumulate" and self.rows[b] is not None
        if self._lanes_fwd:
            self._lanes_fwd_order(u, b, h, keep_n)
        if isinstance(u, Head):
            self.losses.append(self._head_forward(b, h, y))
            return
        w_norm, w_in, w_out = u.weights
        xs = self.xs.get(u.index)
        ns = ()
        if keep_n and xs is not None:  # the micro-batches' own norm outputs so far
            ns, xs = xs[0], (None, xs[1])
        a, h, rstd, n_all, x_all, *core = self.ex.run(
            ("F", u.index, b), S.seg_fwd, u.kind, h, y, w_norm, w_in, w_out, self.rope,
            self.b_mb[b], self.dims, self.rows[b], xs, self.col_splits, keep_n,
        )  # fmt: skip
        if keep_n:  # ((row offset, n_b), ...) for units.attn_wgrad / mlp_wgrad
            n_all = (*ns, (self.rows[b][0], n_all))
        self.xs[u.index] = (n_all, x_all)
        self.acts[u.index, b] = LayerActs(h=h, rstd=rstd, core=tuple(core))
        self._partial(b, ("y", u.index, b), a, ("Y", u.index, x_all, w_out, True))
        self.cur[b] = (h, a)

    def _lanes_fwd_order(self, u: Unit, b: int, h: torch.Tensor, keep_n: bool) -> None:
        """Micro-batch lanes, forward (module doc): before the leader's segment, the
        unit's [ΣT, ·] buffers that both micro-batches write are allocated on its lane
        and an event marks that point; the follower's segment waits for it. The
        allocator may give those buffers a block that earlier work on the leader's lane
        still used; the follower must not write it before that work is done."""
        if b != 0:
            self.ex.lane_wait(1, self._lead_ev)
            return
        i = u.index
        if i not in self.xs:
            T_all, d = self.rows[b][1], h.shape[1]
            if isinstance(u, Head):
                self.xs[i] = h.new_empty((T_all, d))
            else:
                x_all = h.new_empty((T_all, LAYER_KINDS[u.kind].x_width(self.dims)))
                self.xs[i] = (() if keep_n else h.new_empty((T_all, d)), x_all)
        self._lead_ev = self.ex.lane_record(0)

    # -- backward ------------------------------------------------------------------------
    def dgrad(self, u: Unit, b: int) -> None:
        """D(u, b). Micro-batch lanes (module doc): the follower's segment waits for the
        leader's of the same unit (it allocated the unit's [ΣT, ·] gradient buffers, and
        it wrote first the norm weight's gradient that the follower adds to)."""
        if self._lanes_bwd:
            self._after_leader(b)
        self._dgrad(u, b)
        if self._lanes_bwd:
            self._leader_done(b)

    def _after_leader(self, b: int) -> None:
        """Lanes, backward: the follower's next segment waits for the leader's last; with
        the lock, the leader's for the follower's last dgrad."""
        if b != self.n - 1:
            self.ex.lane_wait(1, self._lead_ev)
        elif self._lock and self._fol_ev is not None:
            self.ex.lane_wait(0, self._fol_ev)

    def _leader_done(self, b: int) -> None:
        """Lanes, backward: after the leader's segment, the point the follower waits for;
        with the lock, after the follower's, the point the leader waits for."""
        if b == self.n - 1:
            self._lead_ev = self.ex.lane_record(0)
        elif self._lock:
            self._fol_ev = self.ex.lane_record(1)

    def _dgrad(self, u: Unit, b: int) -> None:
        first = self._first(u.index)
        if isinstance(u, Head):
            dn, dl_all = self._head_dgrad(b, cols=self.col_splits)
            self.gs[u.index] = dl_all
            a = self.head_acts.pop(b)
            w_norm, w_out = u.weights
            self.pend[b] = (dn, a.h, a.rstd, w_norm, w_norm.grad, first)
            self._partial(b, ("dn", u.index, b), dn, ("DN", u.index, dl_all, w_out, False))
            return
        w_norm, w_in, w_out = u.weights
        a = self.acts.pop((u.index, b))
        dn, g_all, dy_all, gb = self.ex.run(
            ("D", u.index, b), S.seg_dgrad, u.kind, self.g[b], self.pend[b], a.core, w_in,
            w_out, self.rope_conj, self.b_mb[b], self.dims, self.rows[b], self.gs.get(u.index),
            self.col_splits, pre=self._take_pre(b),
        )  # fmt: skip
        self.gs[u.index] = (g_all, dy_all)
        self.g[b] = gb
        self.pend[b] = (dn, a.h, a.rstd, w_norm, w_norm.grad, first)
        self._partial(b, ("dn", u.index, b), dn, ("DN", u.index, dy_all, w_in, False))

    def wgrad(self, u: Unit) -> None:
        """u's weight gradients over all micro-batches, deferred into the next segment
        (with the lane lock: a segment of their own, now, on the follower's lane)."""
        i = u.index
        if isinstance(u, Head):
            args = (self.gs.pop(i), self.xs.pop(i), u.weights[1].grad, True)
            w = Deferred(("W", i, 0), S.seg_head_wgrad, args)
        else:
            n_all, x_all = self.xs.pop(i)
            g_all, dy_all = self.gs.pop(i)
            _, w_in, w_out = u.weights
            args = (u.kind, g_all, dy_all, x_all, n_all, w_in.grad, w_out.grad)
            w = Deferred(("W", i, 0), S.seg_wgrad_all, args)
        if not self._lock:
            self.pre = w
            return
        with self.at("bwd", u, 0):  # micro-batch 0's lane: after its dgrad of u
            self.ex.run(w.key, w.fn, *w.args, keep=0, compiled=False)

    def embed_bwd(self, b: int) -> None:
        """Unit 0's norm backward + residual, then the embedding's gradient rows (lanes:
        the follower after the leader, as in :meth:`dgrad`: both add into that gradient
        and into unit 0's norm weight's)."""
        if self._lanes_bwd:
            self._after_leader(b)
        self.ex.run(
            ("E", 0, b), S.seg_embed_bwd, self.g[b], self.pend[b], self.tok[b],
            self.embedding.weights[0].grad, keep=0, pre=self._take_pre(b),
        )  # fmt: skip
        if self._lanes_bwd:
            self._leader_done(b)
