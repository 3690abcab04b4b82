"""The schedules: each an ordering of a step's events over (unit, micro-batch).

A schedule is ``fn(s, n)``: ``s`` is the step's operations (``tp_step.AllReduceStep``
or ``sp_step.ShardedStep``, per ``modes.ScheduleSpec.sequence_parallel``), ``n`` the
number of micro-batches (``--splits`` for a micro-batched schedule, else 1). It says
only *when* each segment runs, each collective is launched (``async_op``) and each is
waited for; the operations hold the data flow, the executor how a segment runs (eager,
compiled, CUDA graph; the stream). Every wait is a line here, in program order: a
reduced tensor is read only after its wait.

There is no autograd engine in the step: the backward of every segment is written out
(``units.py``), so the host issues the kernels and nothing else. Units per micro-batch:
the embedding E, then ``attn`` and ``mlp`` of every layer, then the head H. Notation
below: F(u, b) forward segment, D(u, b) backward segment, ▷ launch, ⧖ wait, W(u)
weight gradients (deferred into the next segment), ``|`` one unit's row.
A new schedule: write ``fn(s, n)`` and ``modes.register_schedule`` / ``register_mode``.

**Work done once for all micro-batches.** The weight gradients W(u) run once per unit
for every micro-batch (their inputs sit in [ΣT, ·] buffers): per micro-batch, each
weight-gradient GEMM would read and write the whole weight-sized gradient again, a
cost that grows with the micro-batches, not with their tokens. The other kernels
that wait on no collective were looked at (issue 34) and are left per micro-batch:

* the embedding rows E(b) and the embedding gradient's scatter E'(b): their cost is
  proportional to their rows, so one call for all micro-batches saves a launch each
  (nothing at all under CUDA graphs) and no bytes;
* the first unit's forward F(0, b) and the head's backward D(H, b) wait on no
  collective either, but run once for all micro-batches they would leave the first
  all-reduce (forward: of unit 0, backward: of the head's dn) with nothing to hide
  behind: exactly the compute the other micro-batches' segments give it now;
* the norm weights' gradients are a reduction inside the norm-backward kernel itself,
  no kernel of their own.

With uneven micro-batches (``--split-sizes``, TokenWeave's cheaper split: e.g. 3,1
puts the small one last, so its all-reduces are the exposed ones) nothing changes in
the orderings: each micro-batch has its own T, and the shared buffers their rows.
"""

from __future__ import annotations


def tp(s, n: int) -> None:
    """Synchronous Megatron TP: one micro-batch, every all-reduce waited for at once.

        fwd:  E | F(0) ▷⧖ | F(1) ▷⧖ | ... | H (its two small all-reduces inside)
        bwd:  D(H) ▷⧖ | W(H) D(L) ▷⧖ | W(L) D(L−1) ▷⧖ | ... | W(0) E'
    """
    with s.at("fwd", s.embedding, 0):
        s.embed(0)
    for u in s.layers:
        with s.at("fwd", u, 0):
            s.forward(u, 0)
            s.launch(0, async_op=False)
    with s.at("fwd", s.head, 0):
        s.forward(s.head, 0)
    for u in [s.head, *reversed(s.layers)]:
        with s.at("bwd", u, 0):
            s.dgrad(u, 0)
            s.launch(0, async_op=False)
        s.wgrad(u)
    with s.at("bwd", s.embedding, 0):
        s.embed_bwd(0)


def domino(s, n: int) -> None:
    """Domino (arXiv 2409.15241): n micro-batches; each all-reduce is launched async and
    waited for right before the next unit of the same micro-batch, i.e. after the other
    micro-batches' segments of this unit were issued: every all-reduce has n − 1
    segments of compute to hide behind, across layer boundaries too. In backward a
    unit's weight gradients W(u) run once for all micro-batches, as the first part of
    the segment after the last D(u, ·), so they overlap the last all-reduce.

        fwd (n = 2):  E0 E1 | ⧖0 F(u,0) ▷0  ⧖1 F(u,1) ▷1 | ⧖0 F(u+1,0) ▷0 ...
                      | ⧖0 H0 ⧖1 H1
        bwd:          D(H,1) ▷1 D(H,0) ▷0 | W(H) ⧖1 D(L,1) ▷1 ⧖0 D(L,0) ▷0 | W(L) ...
                      | W(0) ⧖1 E'1 ⧖0 E'0

    Domino's second split (``s.col_splits`` K > 1, ``--col-splits``): the row-parallel
    GEMM that ends F(u, b) (and the input-gradient GEMM that ends D(u, b)) computes
    only its output's column chunk 0; chunk k is G(u, b, k), its own segment; each
    chunk's all-reduce ▷b,k is launched right after its GEMM, so it runs while the next
    chunk computes, with no smaller micro-batch; ⧖b waits for all K (their first use
    reads every column). n = 1 is then a schedule of its own: the chunks' GEMMs are the
    compute the all-reduces hide behind.

        fwd (n = 2, K = 2):  ⧖0 F(u,0) ▷0,0 G(u,0,1) ▷0,1  ⧖1 F(u,1) ▷1,0 G(u,1,1) ▷1,1 | ...
        bwd:                 ⧖1 D(u,1) ▷1,0 G(u,1,1) ▷1,1  ⧖0 D(u,0) ▷0,0 G(u,0,1) ▷0,1 | ...
    """
    for b in range(n):
        with s.at("fwd", s.embedding, b):
            s.embed(b)
    K = s.col_splits
    for u in s.layers:
        for b in range(n):
            with s.at("fwd", u, b):
                s.wait(b)  # first use of the previous unit's reduced output (all chunks)
                s.forward(u, b)
                s.launch(b, async_op=True)
                for k in range(1, K):  # the column split: chunk k while k − 1 reduces
                    s.out_chunk(b, k)
                    s.launch(b, async_op=True)
    for b in range(n):
        with s.at("fwd", s.head, b):
            s.wait(b)
            s.forward(s.head, b)
    for u in [s.head, *reversed(s.layers)]:
        for b in reversed(range(n)):
            with s.at("bwd", u, b):
                s.wait(b)  # the reduced input gradient of the unit above (head: none)
                s.dgrad(u, b)
                s.launch(b, async_op=True)
                for k in range(1, K):
                    s.out_chunk(b, k)
                    s.launch(b, async_op=True)
        s.wgrad(u)
    for b in reversed(range(n)):
        with s.at("bwd", s.embedding, b):
            s.wait(b)
            s.embed_bwd(b)


def sp(s, n: int) -> None:
    """Megatron sequence parallelism, synchronous: per unit the chain N (reduce-scatter
    ⧖, residual + norm on the sequence shard, all-gather ▷⧖), then the core C on the
    gathered sequence and its reduce-scatter ▷; backward the transposes (B: the norm
    backward on the shard between the reduce-scatter of dn and the all-gathers of the
    output gradient and of the saved norm input of the unit below).

        fwd:  E N(0) | C(0) ▷ | N(1) | C(1) ▷ | ... | N(H) | H
        bwd:  D(H) ▷ | B(H) | W(H) D(L) ▷ | B(L) | ... | W(0) E'
    """
    with s.at("fwd", s.embedding, 0):
        s.embed(0)
        s.norm(s.layers[0], 0, async_op=False)
    for u, nxt in zip(s.layers, [*s.layers[1:], s.head]):
        with s.at("fwd", u, 0):
            s.core(u, 0)
            s.scatter(u, 0, async_op=False)
        with s.at("fwd", u, 0):
            s.norm(nxt, 0, async_op=False)
    with s.at("fwd", s.head, 0):
        s.head_forward(0)
    for u in [s.head, *reversed(s.layers)]:
        with s.at("bwd", u, 0):
            s.head_dgrad(0) if u is s.head else s.core_dgrad(u, 0)
            s.scatter_bwd(u, 0, async_op=False)
        with s.at("bwd", u, 0):
            s.norm_bwd(u, 0, async_op=False)
    with s.at("bwd", s.embedding, 0):
        s.embed_bwd(0)


def domino_sp(s, n: int) -> None:
    """Domino over sequence parallelism: each micro-batch's chain (reduce-scatter ->
    norm -> all-gather, N / B) overlaps the next micro-batch's core; on CUDA the chains'
    small segments run on a side stream, so neither stream waits for the other's
    compute. Weight gradients are per micro-batch, deferred into the next segment.

        fwd (n = 2):  E0 N(0,0) E1 N(0,1) | C(0,0) ▷0  C(0,1) N(1,0) ▷1  N(1,1) | ...
        bwd:          D(H,1) ▷1  D(H,0) B(H,1) ▷0  B(H,0) | W D(L,1) ▷1  W D(L,0) B(L,1) ▷0
                      B(L,0) | ... | W E'1  E'0
    """
    units = [*s.layers, s.head]
    for b in range(n):
        with s.at("fwd", s.embedding, b):
            s.embed(b)
            s.norm(units[0], b, async_op=True)
    for u, nxt in zip(s.layers, units[1:]):
        for b in range(n):
            with s.at("fwd", u, b):
                s.core(u, b)
                if b > 0:  # the previous micro-batch's chain overlaps this core
                    s.norm(nxt, b - 1, async_op=True)
                s.scatter(u, b, async_op=True)
        with s.at("fwd", u, n - 1):
            s.norm(nxt, n - 1, async_op=True)
    for b in range(n):
        with s.at("fwd", s.head, b):
            s.head_forward(b)
    for u in reversed(units):
        for b in reversed(range(n)):
            with s.at("bwd", u, b):
                s.head_dgrad(b) if u is s.head else s.core_dgrad(u, b)
                if b + 1 < n:  # the micro-batch done just before (reversed order)
                    s.norm_bwd(u, b + 1, async_op=True)
                s.scatter_bwd(u, b, async_op=True)
        with s.at("bwd", u, 0):
            s.norm_bwd(u, 0, async_op=True)
    for b in reversed(range(n)):
        with s.at("bwd", s.embedding, b):
            s.embed_bwd(b)
