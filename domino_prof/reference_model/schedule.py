"""The training-step schedules: synchronous Megatron TP, Domino, and both over
sequence parallelism — written as explicit forward and backward code.

A step is a fixed sequence of **segments** (straight-line tensor code from
``units.py``, between two collectives) and **collectives** (launched by the
schedule, waited for by the schedule). There is no autograd engine in the step:
the backward of every segment is written out, so the host issues the kernels and
nothing else — no graph recording, no per-piece ``backward()`` call (on CUDA each
one hands work to autograd's device thread and waits for it), no Python
``autograd.Function`` at each boundary. Every wait is a line of this file, in
program order: a reduced tensor is read only after ``wait()`` on it.

Units per micro-batch b: ``attn`` and ``mlp`` of every layer, then the ``head``
(final norm, vocab-parallel LM head, cross-entropy). With all-reduce TP a unit is

    h ─ norm ─ n ─ core ─ a (partial sums) ─ all-reduce ─ y ;   h_next = h + y

* forward: segment F(u, b) = residual add of the previous unit's reduced output,
  norm, core; the all-reduce of ``a`` is launched async and waited for right
  before F(u+1, b), i.e. after the other micro-batches' F(u, ·) were issued:
  with N micro-batches every all-reduce has N − 1 segments of compute to hide
  behind, across layer boundaries too (Domino, arXiv 2409.15241).
* backward (units reversed): segment D(u, b) = the norm backward of unit u+1
  (which needs unit u+1's reduced input gradient) + residual, then unit u's core
  backward up to the column-parallel input gradient ``dn`` (a partial sum); the
  all-reduce of ``dn`` is launched and waited for right before D(u−1, b). The
  weight gradients W(u) of unit u run once for all micro-batches (their inputs are
  kept in [N, T, ·] buffers: one GEMM over N·T rows instead of N that each write and
  re-read the weight-sized gradient), as the first part of the segment after the
  last D(u, ·), so they overlap the last micro-batch's all-reduce. SP keeps them per
  micro-batch.
* ``tp``: one micro-batch, every collective waited for at once (synchronous
  Megatron TP). ``nocomm``: ``tp`` with collectives skipped (a throughput upper
  bound whose numbers are meaningless).

With sequence parallelism (``sp=True``; Megatron SP) the residual stream and the
norms hold 1/R of the sequence: a unit is

    h_s ─ norm ─ n_s ─ all-gather ─ n ─ core ─ a ─ reduce-scatter ─ y_s ;  h_s + y_s

and its backward all-gathers the output gradient before the core backward and
reduce-scatters ``dn``; the norm output is saved as its shard and gathered again
for the weight gradient (as Megatron does: that is where SP saves memory).
``domino-sp`` overlaps each micro-batch's reduce-scatter → norm → all-gather chain
with the next micro-batch's core. On CUDA the chain's small norm segment runs on a
side stream, so neither waits for the other's compute; on CPU it runs inline.

Execution modes of a segment (``_seg``): eager; ``torch.compile``d; or a CUDA graph
(``graphs=True``): the first step captures every segment, in program order, into
one shared memory pool (one more pool for side-stream segments), and later steps
replay them. Graph memory therefore equals the eager step's working set: what a
segment frees, a later segment's capture reuses, and replays run in capture order.
Collectives stay outside the graphs; every tensor a collective or another stream
touches is a *kept* segment output (never freed, so never reused under a graph).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from domino_prof.reference_model import units as U
from domino_prof.reference_model.model import Transformer, rope_tables
from domino_prof.reference_model.parallel import TPComm

_NULL = contextlib.nullcontext()


def _profiling() -> bool:
    return torch._C._autograd._profiler_enabled()


@dataclass(frozen=True)
class Unit:
    kind: str  # "attn" | "mlp" | "head"
    layer: int  # -1 for the head

    def range_name(self, phase: str, b: int) -> str:
        if self.kind == "head":
            return f"{phase}.head_batch_{b}"
        return f"{phase}.layer_{self.kind}_{self.layer}_batch_{b}"


def units_of(model: Transformer) -> list[Unit]:
    us = []
    for i in range(len(model.layers)):
        us += [Unit("attn", i), Unit("mlp", i)]
    return us + [Unit("head", -1)]


# --- segments: module-level pure functions of tensors (compile- and graph-friendly) ---
# Returned tuples start with the *kept* outputs (what a collective or the host reads).


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
    """All-reduce TP forward of one attn/mlp unit for micro-batch ``bi`` of N: residual,
    norm, core. ``xs``: the unit's (n, x) buffers from micro-batch 0 (None for it).
    Returns (a, h, rstd, n_all, x_all, *core_saved); ``a`` is partial over ranks."""
    if y is not None:
        h = h + y  # [T, d]
    n, rstd = U.norm_fwd(h, w_norm, dims.eps)
    n_all, x_all = xs if xs is not None else (None, None)
    n_all, slot = _mb_slot(n, N, bi, n_all, n.shape[1])
    if slot is not None:
        n = slot.copy_(n)
    if kind == "attn":
        x_all, x_slot = _mb_slot(n, N, bi, x_all, dims.heads * dims.head_dim)
        a, saved = U.attn_fwd(n, w_in, w_out, rope, b, dims, o2_out=x_slot)
        x = saved[4]  # o2: wo's input
    else:
        x_all, x_slot = _mb_slot(n, N, bi, x_all, dims.ffn)
        a, saved = U.mlp_fwd(n, w_in, w_out, dims, p_out=x_slot)
        x = saved[2]  # p: w2's input
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
    if kind == "attn":
        a, saved = U.attn_fwd(n, w_in, w_out, rope, b, dims)
    else:
        a, saved = U.mlp_fwd(n, w_in, w_out, dims)
    return (a,) + saved


def seg_norm_bwd(g, dn, h, rstd, w_norm, w_norm_grad, first: bool):
    """Norm backward of a unit + the residual: d loss / d (the unit's input).
    ``g`` is the gradient of the unit's output (None for the head)."""
    dx = U.norm_bwd(dn, h, rstd, w_norm, w_norm_grad, first)
    return (dx if g is None else g + dx,)


def _core_dgrad(kind, g, saved, w_in, w_out, rope_conj, b, dims):
    if kind == "attn":
        return U.attn_dgrad(g, saved, w_in, w_out, rope_conj, b, dims)
    return U.mlp_dgrad(g, saved, w_in, w_out, dims)


def seg_dgrad(
    kind: str, g, pend, saved, w_in, w_out, rope_conj, b: int, dims: U.Dims, N: int, bi: int, gs
):
    """All-reduce TP backward of micro-batch ``bi``: the pending norm backward of the
    unit above (``pend`` = its reduced dn, h, rstd, norm weight, grad, first) + residual,
    then this unit's core backward to dn. ``gs``: the unit's (g, dy) buffers from the
    micro-batch that came first (None for it). Returns (dn, g_all, dy_all, g);
    ``dn`` is partial over ranks, ``g`` (d loss / d the unit's output) goes on down."""
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
    if kind == "attn":
        width = (dims.heads + 2 * dims.kv_heads) * dims.head_dim
        dy_all, dy_slot = _mb_slot(g, N, bi, dy_all, width)
        dn, dy, _ = U.attn_dgrad(g, saved, w_in, w_out, rope_conj, b, dims, dqkv_out=dy_slot)
    else:
        dy_all, dy_slot = _mb_slot(g, N, bi, dy_all, 2 * dims.ffn)
        dn, dy, _ = U.mlp_dgrad(g, saved, w_in, w_out, dims, dgu_out=dy_slot)
    if N == 1:
        g_all, dy_all = g[None], dy[None]
    return dn, g_all, dy_all, g


def seg_wgrad_all(kind: str, g_all, dy_all, x_all, n_all, w_in_grad, w_out_grad):
    """A unit's weight gradients over all micro-batches at once ([N, T, ·] -> N·T rows)."""
    g, dy, x, n = (t.flatten(0, 1) for t in (g_all, dy_all, x_all, n_all))
    if kind == "attn":
        U.attn_wgrad(g, dy, x, n, w_in_grad, w_out_grad, True)
    else:
        U.mlp_wgrad(g, dy, x, n, w_in_grad, w_out_grad, True)
    return ()


def seg_core_dgrad(kind: str, g, saved, w_in, w_out, rope_conj, b: int, dims: U.Dims):
    """SP backward core on the gathered output gradient ``g``. Returns (dn, *wgrad_inputs)."""
    return tuple(_core_dgrad(kind, g, saved, w_in, w_out, rope_conj, b, dims))


def seg_wgrad(kind: str, g, wg, n, w_in_grad, w_out_grad, first: bool):
    if kind == "attn":
        U.attn_wgrad(g, *wg, n, w_in_grad, w_out_grad, first)
    else:
        U.mlp_wgrad(g, *wg, n, w_in_grad, w_out_grad, first)
    return ()


def seg_head_logits(h, y, w_norm, w_out, eps: float, sp: bool, N: int, bi: int, n_all):
    """Head forward to the row max. AR TP: residual + norm + logits; SP: ``h`` is the
    gathered norm output already (norm ran on the shard). ``n_all``: the [N, T, d]
    buffer of the head's normed inputs (AR TP, from micro-batch 0; see _mb_slot).
    Returns (m, logits, n_all, h, rstd)."""
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


# --- graph capture -----------------------------------------------------------------


class _EmulatedGraph:
    """CPU stand-in for ``torch.cuda.CUDAGraph`` (tests only): capture runs the segment
    and remembers its input tensors; replay runs it again on those same tensors and
    copies the results into the captured outputs, i.e. fixed addresses as in a real
    graph. Lets the CPU tests check the schedule's data flow under graph semantics."""

    def __init__(self, body, outs) -> None:
        self.body, self.outs = body, outs

    def replay(self) -> None:
        new = self.body()
        for o, n in zip(self.outs, new):
            if isinstance(o, torch.Tensor):
                o.copy_(n)


class StepRunner:
    """Runs forward + backward of one batch through a sharded model.

    ``splits``: micro-batches (1 for tp/nocomm/sp); ``overlap``: Domino ordering and
    async collectives (False: every collective is waited for at once); ``sp``:
    sequence parallelism (reduce-scatter / all-gather instead of all-reduce);
    ``graphs``: CUDA graphs of every segment (CPU: an emulation, for tests);
    ``compile``: ``torch.compile`` every segment function.

    ``step`` *overwrites* ``.grad`` of every parameter with this batch's gradient
    (the buffers are the runner's own, zeroed at the start of each step, so graphs
    can write into them); callers need no ``zero_grad``.
    """

    def __init__(
        self,
        model: Transformer,
        comm: TPComm,
        *,
        splits: int,
        overlap: bool,
        graphs: bool = False,
        compile: bool = False,
        sp: bool = False,
        graph_inflight: int = 8,
    ) -> None:
        self.model, self.comm = model, comm
        self.graph_inflight = graph_inflight
        self.host_wait_s = 0.0  # time the host spent held back by the in-flight cap
        self._n_launch = 0
        self._inflight: list = []
        self.splits, self.overlap, self.graphs, self.sp = splits, overlap, graphs, sp
        self.compile = compile
        self.units = units_of(model)
        cfg = model.cfg
        R = comm.size
        self.vocab_start = comm.rank * (cfg.vocab_size // R)
        blk = model.layers[0]
        self.dims = U.Dims(
            heads=blk.attention.n_heads,
            kv_heads=blk.attention.n_kv_heads,
            head_dim=cfg.head_dim,
            ffn=blk.feed_forward.ffn_dim,
            eps=cfg.norm_eps,
            seq_major=sp,
        )
        self.params = [p for p in model.parameters()]
        self._grads: list[torch.Tensor] | None = None
        self._rope: dict = {}
        self._compiled: dict = {}
        # graph state: mode None (eager) | "capture" | "replay"
        self._gmode: str | None = None
        self._graphs: dict = {}
        self._graph_key = None
        self._pool = self._side_pool = None
        self._cap_stream = None
        self._statics: dict = {}
        self._bufs: dict = {}
        dev = model.tok_embeddings.weight.device
        self._cuda = dev.type == "cuda"
        # domino-sp: the reduce-scatter -> norm -> all-gather chain on a side stream
        self._side = torch.cuda.Stream(dev) if (self._cuda and sp and overlap) else None
        self._sp_norm_grad_flat: torch.Tensor | None = None
        self._held: list[torch.Tensor] = []  # eager side-stream tensors, until streams join

    # -- plumbing ---------------------------------------------------------------------
    def _rng(self, name: str):
        return torch.profiler.record_function(name) if _profiling() else _NULL

    def _fn(self, fn):
        if not self.compile:
            return fn
        c = self._compiled.get(fn)
        if c is None:
            # one compiled variant per (unit kind, micro-batch role, first/last ...):
            # more than dynamo's default 8 per function
            for knob in ("recompile_limit", "cache_size_limit"):
                if hasattr(torch._dynamo.config, knob):
                    setattr(
                        torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob))
                    )
            c = self._compiled[fn] = torch.compile(fn, fullgraph=True, dynamic=False)
        return c

    def _seg(self, key, fn, *args, keep: int = 1, side: bool = False, pre=None):
        """Run segment ``fn(*args)`` eagerly, or capture / replay it as a graph. The
        first ``keep`` outputs are *kept* (returned in replay mode too); the rest are
        returned only while capturing (replay: None) and may only be passed on to
        other segments. ``pre``: a deferred ``(fn, args)`` (a weight gradient) run first,
        in the same graph (never compiled: it is GEMMs into gradient buffers).
        ``side``: run on the side stream (domino-sp chain)."""
        mode = self._gmode
        stream = self._side if side else None
        if mode == "replay":
            g, kept = self._graphs[key]
            with torch.cuda.stream(stream) if stream is not None else _NULL:
                self._throttle()
                g.replay()
            return kept
        f = self._fn(fn)

        def body():
            if pre is not None:
                pre[0](*pre[1])
            return f(*args)

        if mode is None:
            if stream is None:
                return body()
            return self._on_side(body, args)
        # capture
        if self._cuda:
            # capture_begin/end rather than `with torch.cuda.graph(...)`, which runs
            # gc.collect() and empty_cache() around each of the hundreds of captures
            g = torch.cuda.CUDAGraph()
            with torch.cuda.stream(self._cap_stream):
                # thread_local: another thread's CUDA calls (c10d's watchdog) stay legal
                g.capture_begin(
                    pool=self._side_pool if side else self._pool, capture_error_mode="thread_local"
                )
                try:
                    outs = body()
                finally:
                    g.capture_end()
        else:
            outs = body()
            g = _EmulatedGraph(body, outs)
        self._graphs[key] = (g, tuple(outs[:keep]) + (None,) * (len(outs) - keep))
        return outs

    def _throttle(self) -> None:
        """Keep at most about ``graph_inflight`` graph launches queued ahead of the GPU.
        Measured on H200 (torch 2.11, CUDA 13; reports/schedule-h200/README.md): the
        deeper the queue of pending graph launches, the later each graph starts after its
        predecessor ends — 40 → 70 µs idle per boundary as the queue grew, ~200 µs with
        ~200 queued — while the host had long finished. A host that waits for the graph
        launched ``graph_inflight`` ago loses nothing (that much work is still queued)
        and avoids the stalls: domino with graphs + compile went from 100 to 84 ms/step.
        The wait is counted in ``host_wait_s`` (it is not host work)."""
        if self.graph_inflight <= 0 or not self._cuda:
            return
        every = max(1, self.graph_inflight // 4)  # an event every `every` launches
        self._n_launch += 1
        if self._n_launch % every:
            return
        ev = torch.cuda.Event()
        ev.record()
        self._inflight.append(ev)
        if len(self._inflight) > 4:
            t0 = time.perf_counter()
            self._inflight.pop(0).synchronize()
            self.host_wait_s += time.perf_counter() - t0

    def _on_side(self, body, args):
        """Eager side-stream segment. Its inputs come from the compute stream and its
        outputs go back to it, so none of them may be recycled by the allocator while
        the other stream can still touch them: they are held (``_held``) until the end
        of the step, after the two streams have joined. (``record_stream`` would do the
        same per tensor, but it makes every later allocation poll an event per recorded
        block: measured several times slower host issue on H200.)"""
        self._held.extend(_tensors(args))
        with torch.cuda.stream(self._side):
            outs = body()
        self._held.extend(o for o in outs if isinstance(o, torch.Tensor))
        return outs

    def _static(self, name: str, b: int, t: torch.Tensor) -> torch.Tensor:
        """A graph input fed from outside (tokens, targets): one fixed buffer."""
        if self._gmode is None:
            return t
        key = (name, b)
        if self._gmode == "capture":
            self._statics[key] = t.clone()
        else:
            self._statics[key].copy_(t)
        return self._statics[key]

    def _comm(self):
        """The collectives to issue: none while capturing (the capture pass only records
        graphs, on garbage; no NCCL work may be pending while a graph is captured), the
        process group's otherwise."""
        return _SKIP_COMM if self._gmode == "capture" else self.comm

    def _wait(self, work) -> None:
        if work is not None:
            work.wait()

    def _prepare_grads(self) -> None:
        """One gradient buffer per parameter, re-attached if a caller replaced ``.grad``
        (a graph has these addresses baked in). Every buffer is overwritten by the
        step's first micro-batch (``first=True``), except the embedding's, whose rows
        are scattered: that one is zeroed here."""
        if self._grads is None:
            self._grads = [torch.empty_like(p) for p in self.params]
            if self.sp:  # SP: norm weights' grads are partial over ranks: one flat buffer
                names = [n for n, _ in self.model.named_parameters()]
                norms = [i for i, n in enumerate(names) if n.endswith("norm.weight")]
                flat = torch.empty(
                    sum(self.params[i].numel() for i in norms),
                    dtype=self.params[0].dtype,
                    device=self.params[0].device,
                )
                off = 0
                for i in norms:
                    n_el = self.params[i].numel()
                    self._grads[i] = flat[off : off + n_el].view_as(self.params[i])
                    off += n_el
                self._sp_norm_grad_flat = flat
        for p, g in zip(self.params, self._grads):
            if p.grad is not g:
                p.grad = g
        self.model.tok_embeddings.weight.grad.zero_()

    def _rope_for(self, S: int, device):
        key = (S, device)
        if key not in self._rope:
            cs = U.rope_table(
                rope_tables(self.model.cfg.head_dim, S, self.model.cfg.rope_theta, device)
            )
            cs_conj = cs.clone()
            cs_conj[..., 1].neg_()
            self._rope[key] = (cs, cs_conj)
        return self._rope[key]

    def _layer_weights(self, u: Unit):
        blk = self.model.layers[u.layer]
        if u.kind == "attn":
            return blk.attention_norm.weight, blk.attention.wqkv.weight, blk.attention.wo.weight
        return blk.ffn_norm.weight, blk.feed_forward.w13.weight, blk.feed_forward.w2.weight

    # -- the step -----------------------------------------------------------------------
    def step(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Forward and backward of one batch; gradients into ``.grad`` (overwritten).
        Returns the loss (mean token cross-entropy over the whole batch), detached."""
        with torch.no_grad():
            if not self.graphs:
                self._prepare_grads()
                return self._run(tokens, targets)
            key = (tuple(tokens.shape), tokens.device)
            if self._graph_key != key:
                self._capture(tokens, targets, key)
            self._prepare_grads()
            self._gmode = "replay"
            try:
                return self._run(tokens, targets)
            finally:
                self._gmode = None

    def _capture(self, tokens, targets, key) -> None:
        """Warm up eagerly (lazy library init), then capture every segment in order."""
        self._graphs.clear()
        self._statics.clear()
        self._bufs.clear()
        if self._cuda:
            self._cap_stream = torch.cuda.Stream()
            self._cap_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self._cap_stream):
                self._prepare_grads()
                self._run(tokens, targets)
            torch.cuda.current_stream().wait_stream(self._cap_stream)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # the warm-up's cached blocks cannot serve the pools
            self._pool = torch.cuda.graph_pool_handle()
            self._side_pool = torch.cuda.graph_pool_handle()
        self._prepare_grads()
        self._gmode = "capture"
        try:
            self._run(tokens, targets)
        finally:
            self._gmode = None
        if self._cuda:
            torch.cuda.synchronize()
        self._graph_key = key

    def _run(self, tokens, targets) -> torch.Tensor:
        if self.sp:
            return self._run_sp(tokens, targets)
        return self._run_allreduce(tokens, targets)

    # -- all-reduce TP (tp, domino, nocomm) ---------------------------------------------
    def _run_allreduce(self, tokens, targets) -> torch.Tensor:
        model, comm, N, dims = self.model, self._comm(), self.splits, self.dims
        rng, seg, wait = self._rng, self._seg, self._wait
        B, S = tokens.shape
        b_mb = B // N
        T = b_mb * S
        rope, rope_conj = self._rope_for(S, tokens.device)
        denom = float(B * S)
        overlap = self.overlap
        tok = [self._static("tok", b, t.reshape(-1)) for b, t in enumerate(tokens.chunk(N, 0))]
        tgt = [self._static("tgt", b, t.reshape(-1)) for b, t in enumerate(targets.chunk(N, 0))]
        w_emb = model.tok_embeddings.weight

        # ---- forward ----
        cur = [None] * N  # b -> (h, y): the next unit's input is h + y
        work = [None] * N  # b -> pending all-reduce of y
        saved: dict = {}
        for b in range(N):
            with rng(f"fwd.embedding_batch_{b}"):
                (h,) = seg(("emb", b), seg_embed, tok[b], w_emb, 0, T)
            cur[b] = (h, None)
        losses = []
        for ui, u in enumerate(self.units):
            xs = None  # the unit's [N, T, ·] buffers of weight-gradient inputs
            for b in range(N):
                with rng(u.range_name("fwd", b)):
                    wait(work[b])  # first use of the previous unit's reduced output
                    h, y = cur[b]
                    if u.kind == "head":
                        losses.append(self._head_fwd(b, h, y, tgt[b], denom, saved))
                        continue
                    w_norm, w_in, w_out = self._layer_weights(u)
                    a, h, rstd, n_all, x_all, *core = seg(
                        ("F", ui, b),
                        seg_fwd,
                        u.kind,
                        h,
                        y,
                        w_norm,
                        w_in,
                        w_out,
                        rope,
                        b_mb,
                        dims,
                        N,
                        b,
                        xs,
                    )
                    xs = (n_all, x_all)
                    saved[ui, b] = (h, rstd, tuple(core))
                    saved[ui] = xs
                    work[b] = comm.all_reduce(a, async_op=overlap)
                    cur[b] = (h, a)

        # ---- backward (micro-batches in reverse order) ----
        # A unit's weight gradients run once for all micro-batches (``pre``: deferred
        # into the next segment, so they overlap the last micro-batch's all-reduce and
        # add no graph of their own).
        g = [None] * N  # d loss / d (output of the unit being processed)
        pend = [None] * N  # b -> (dn, h, rstd, w_norm, w_norm_grad, first) of the unit above
        pre = None  # deferred weight gradients: (fn, args)
        for ui in reversed(range(len(self.units))):
            u = self.units[ui]
            gs = None
            for b in reversed(range(N)):
                first = b == N - 1
                with rng(u.range_name("bwd", b)):
                    if u.kind == "head":
                        dn, dl_all = self._head_bwd(b, saved, denom, pre, gs)
                        pre, gs = None, dl_all
                        work[b] = comm.all_reduce(dn, async_op=overlap)
                        h, rstd = saved.pop(("hn", b))
                        pend[b] = (dn, h, rstd, model.norm.weight, model.norm.weight.grad, first)
                        if b == 0:
                            pre = (
                                seg_head_wgrad,
                                (gs, saved.pop(("hx",)), model.output.weight.grad, True),
                            )
                        continue
                    wait(work[b])  # the reduced dn of the unit above
                    w_norm, w_in, w_out = self._layer_weights(u)
                    h, rstd, core = saved.pop((ui, b))
                    dn, g_all, dy_all, gb = seg(
                        ("D", ui, b),
                        seg_dgrad,
                        u.kind,
                        g[b],
                        pend[b],
                        core,
                        w_in,
                        w_out,
                        rope_conj,
                        b_mb,
                        dims,
                        N,
                        b,
                        gs,
                        pre=pre,
                    )
                    pre, gs = None, (g_all, dy_all)
                    work[b] = comm.all_reduce(dn, async_op=overlap)
                    g[b] = gb
                    pend[b] = (dn, h, rstd, w_norm, w_norm.grad, first)
            if u.kind != "head":
                n_all, x_all = saved.pop(ui)
                pre = (seg_wgrad_all, (u.kind, gs[0], gs[1], x_all, n_all, w_in.grad, w_out.grad))
        for b in reversed(range(N)):
            with rng(f"bwd.embedding_batch_{b}"):
                wait(work[b])
                seg(("E", b), seg_embed_bwd, g[b], pend[b], tok[b], w_emb.grad, keep=0, pre=pre)
                pre = None
        return torch.stack(losses).sum()

    def _head_fwd(self, b, h, y, tgt, denom, saved, sp: bool = False):
        """Head forward of one micro-batch: (norm,) logits, the two small synchronous
        vocab all-reduces of the cross-entropy, the loss (kept). SP: ``h`` is the
        gathered norm output (the norm ran on the shard)."""
        m_ = self.model
        seg, comm = self._seg, self._comm()
        N = 1 if sp else self.splits
        m, logits, n_all, hh, rstd = seg(
            ("H1", b),
            seg_head_logits,
            h,
            y,
            m_.norm.weight,
            m_.output.weight,
            self.dims.eps,
            sp,
            N,
            b,
            saved.get(("hx",)),
        )
        comm.all_reduce(m, async_op=False, op=dist.ReduceOp.MAX)
        stats, e, idx, ins = seg(("H2", b), seg_head_stats, logits, m, tgt, self.vocab_start)
        comm.all_reduce(stats, async_op=False)
        loss, r = seg(("H3", b), seg_head_loss, stats, denom)
        saved["ce", b] = (e, r, idx, ins)
        saved["hn", b] = (hh, rstd)
        if sp:
            saved["hx", b] = n_all
        else:
            saved["hx",] = n_all
        return loss

    def _head_bwd(self, b, saved, denom, pre, dl_all, sp: bool = False):
        """Cross-entropy and LM-head backward to dn (kept; partial over ranks), after the
        deferred ``pre``. Returns (dn, dl_all) (see seg_head_dgrad)."""
        e, r, idx, ins = saved.pop(("ce", b))
        N = 1 if sp else self.splits
        return self._seg(
            ("HD", b),
            seg_head_dgrad,
            e,
            r,
            idx,
            ins,
            self.model.output.weight,
            denom,
            N,
            b,
            dl_all,
            pre=pre,
        )

    # -- sequence parallelism (sp, domino-sp) -------------------------------------------
    def _buf(self, key, shape, like_dtype, device, side: bool = False) -> torch.Tensor:
        """A buffer a collective writes (all-gather / reduce-scatter output). Graph mode:
        allocated once at capture and kept, so its address is fixed for every replay.
        ``side``: written on the side stream, read on the compute stream: allocated on
        the side stream (so no compute-stream work still using a recycled block can race
        the write) and held until the streams join at the end of the step (so it is not
        recycled under the compute stream)."""
        if self._gmode == "replay":
            return self._bufs[key]
        if side and self._side is not None:
            with torch.cuda.stream(self._side):
                t = torch.empty(shape, dtype=like_dtype, device=device)
            self._held.append(t)  # see _on_side
        else:
            t = torch.empty(shape, dtype=like_dtype, device=device)
        if self._gmode == "capture":
            self._bufs[key] = t
        return t

    def _side_ctx(self):
        return torch.cuda.stream(self._side) if self._side is not None else _NULL

    def _run_sp(self, tokens, targets) -> torch.Tensor:
        """Megatron SP. Token order is sequence-major, (s, b), so a rank's sequence
        shard is a contiguous block of rows: rank r holds rows [r·T/R, (r+1)·T/R) of
        every [T, d] activation; norms, residuals and their gradients live on that
        shard only (1/R of the memory), the cores on the gathered sequence."""
        model, comm, N, dims = self.model, self._comm(), self.splits, self.dims
        rng, seg, wait, buf = self._rng, self._seg, self._wait, self._buf
        R, r = self.comm.size, self.comm.rank
        B, S = tokens.shape
        b_mb = B // N
        T = b_mb * S
        Ts = T // R  # this rank's rows
        d = model.cfg.dim
        dt, dev = model.tok_embeddings.weight.dtype, tokens.device
        rope, rope_conj = self._rope_for(S, dev)
        denom = float(B * S)
        overlap = self.overlap
        side = self._side is not None
        side_ctx = self._side_ctx
        # [b, S] -> [S, b] -> flat: sequence-major tokens of each micro-batch
        tok = [self._static("tok", b, t.t().reshape(-1)) for b, t in enumerate(tokens.chunk(N, 0))]
        tgt = [self._static("tgt", b, t.t().reshape(-1)) for b, t in enumerate(targets.chunk(N, 0))]
        w_emb = model.tok_embeddings.weight
        units = self.units
        head = len(units) - 1

        def launched(w):
            """A collective's work, or (domino-sp, when it ran inline: tp 1 / nocomm) an
            event on the stream it ran on, so the other stream still orders after it."""
            if w is None and side:
                ev = torch.cuda.Event()
                ev.record()
                return _EventWork(ev)
            return w

        def norm_w(ui):
            return model.norm.weight if ui == head else self._layer_weights(units[ui])[0]

        # ---- forward ----
        x = [None] * N  # b -> (h_s, y_s, reduce-scatter work): next norm input is h_s + y_s
        ag = [None] * N  # b -> (gathered norm output, all-gather work) for the next core
        saved: dict = {}  # (unit, b) -> [h_s, rstd, n_s, core saved]

        def chain_fwd(ui, b):
            """Unit ui−1's reduce-scatter -> residual + norm of unit ui on the shard ->
            all-gather of the norm output. domino-sp on CUDA: all on the side stream."""
            h_s, y_s, w = x[b]
            with side_ctx():
                wait(w)
            n_s, h_s, rstd = seg(("N", ui, b), seg_norm, h_s, y_s, norm_w(ui), dims.eps, side=side)
            saved[ui, b] = [h_s, rstd, n_s, None]
            n_full = buf(("ag", ui, b), (T, d), dt, dev, side)
            with side_ctx():
                ag[b] = (n_full, launched(comm.all_gather(n_full, n_s, async_op=overlap)))

        for b in range(N):
            with rng(f"fwd.embedding_batch_{b}"):
                (h_s,) = seg(("emb", b), seg_embed, tok[b], w_emb, r * Ts, (r + 1) * Ts)
                x[b] = (h_s, None, launched(None))
                chain_fwd(0, b)
        losses = []
        for ui, u in enumerate(units):
            for b in range(N):
                with rng(u.range_name("fwd", b)):
                    n_full, w = ag[b]
                    wait(w)
                    if ui == head:
                        losses.append(
                            self._head_fwd(b, n_full, None, tgt[b], denom, saved, sp=True)
                        )
                        continue
                    _, w_in, w_out = self._layer_weights(u)
                    a, *core = seg(
                        ("C", ui, b), seg_core_fwd, u.kind, n_full, w_in, w_out, rope, b_mb, dims
                    )
                    saved[ui, b][3] = tuple(core)
                    if b > 0:  # the previous micro-batch's chain overlaps this core
                        chain_fwd(ui + 1, b - 1)
                    y_s = buf(("rs", ui, b), (Ts, d), dt, dev)
                    rs_w = launched(comm.reduce_scatter(y_s, a, async_op=overlap))
                    x[b] = (saved[ui, b][0], y_s, rs_w)
            if ui != head:
                with rng(u.range_name("fwd", N - 1)):
                    chain_fwd(ui + 1, N - 1)

        # ---- backward (micro-batches in reverse order; b = N−1 writes each grad first) ----
        gs = [None] * N  # b -> gradient of the residual-stream shard (output of the unit)
        gag = [None] * N  # b -> (g gathered, work, n gathered again, work) for the next core
        rs = [None] * N  # b -> (dn shard, reduce-scatter work) for the next chain

        def chain_bwd(ui, b):
            """Unit ui's reduce-scattered dn -> its norm backward + residual on the shard ->
            all-gathers of that gradient and of unit ui−1's saved norm output."""
            dn_s, w = rs[b]
            with side_ctx():
                wait(w)
            h_s, rstd, _, _ = saved.pop((ui, b))
            w_norm = norm_w(ui)
            (g_s,) = seg(
                ("B", ui, b),
                seg_norm_bwd,
                gs[b],
                dn_s,
                h_s,
                rstd,
                w_norm,
                w_norm.grad,
                b == N - 1,
                side=side,
            )
            gs[b] = g_s
            g_full = buf(("gag", ui, b), (T, d), dt, dev, side)
            with side_ctx():
                wg = launched(comm.all_gather(g_full, g_s, async_op=overlap))
            if ui == 0:
                gag[b] = (g_full, wg, None, None)
                return
            n_full = buf(("nag", ui, b), (T, d), dt, dev, side)
            with side_ctx():
                wn = launched(comm.all_gather(n_full, saved[ui - 1, b][2], async_op=overlap))
            gag[b] = (g_full, wg, n_full, wn)

        pre, pre_wait = None, None  # deferred weight gradients (fn, args) and their input
        for ui in reversed(range(len(units))):
            u = units[ui]
            for b in reversed(range(N)):
                first = b == N - 1
                with rng(u.range_name("bwd", b)):
                    if ui == head:
                        dn, dl = self._head_bwd(b, saved, denom, pre, None, sp=True)
                        saved.pop(("hn", b))
                        pre = (
                            seg_head_wgrad,
                            (dl, saved.pop(("hx", b)), model.output.weight.grad, first),
                        )
                        pre_wait = None
                    else:
                        g_full, wg, n_full, wn = gag[b]
                        wait(wg)
                        wait(pre_wait)  # the deferred weight gradient's gathered input
                        _, w_in, w_out = self._layer_weights(u)
                        dn, *wgi = seg(
                            ("D", ui, b),
                            seg_core_dgrad,
                            u.kind,
                            g_full,
                            saved[ui, b][3],
                            w_in,
                            w_out,
                            rope_conj,
                            b_mb,
                            dims,
                            pre=pre,
                        )
                        saved[ui, b][3] = None
                        pre = (
                            seg_wgrad,
                            (u.kind, g_full, tuple(wgi), n_full, w_in.grad, w_out.grad, first),
                        )
                        pre_wait = wn
                    if b + 1 < N:  # the micro-batch done just before (reversed order)
                        chain_bwd(ui, b + 1)
                    dn_s = buf(("rsb", ui, b), (Ts, d), dt, dev)
                    rs[b] = (dn_s, launched(comm.reduce_scatter(dn_s, dn, async_op=overlap)))
            with rng(u.range_name("bwd", 0)):
                chain_bwd(ui, 0)
        for b in reversed(range(N)):
            with rng(f"bwd.embedding_batch_{b}"):
                g_full, wg, _, _ = gag[b]
                wait(wg)
                wait(pre_wait)
                seg(("E", b), seg_scatter_add, tok[b], g_full, w_emb.grad, keep=0, pre=pre)
                pre, pre_wait = None, None
        if side:
            torch.cuda.current_stream().wait_stream(self._side)
            self._held.clear()  # both streams' uses are ordered before what follows
        # norm weights saw only this rank's rows: sum their gradients over ranks
        comm.all_reduce(self._sp_norm_grad_flat, async_op=False)
        return torch.stack(losses).sum()


class _SkipComm:
    """TPComm's interface, doing nothing (the capture pass)."""

    def all_reduce(self, t, *, async_op, op=None):
        return None

    def all_gather(self, out, t, *, async_op):
        return None

    def reduce_scatter(self, out, t, *, async_op):
        return None


_SKIP_COMM = _SkipComm()


class _EventWork:
    """The work handle of a collective that ran inline (tp 1, nocomm) on a stream:
    ``wait()`` orders the current stream after it, as c10d's work does."""

    def __init__(self, ev) -> None:
        self.ev = ev

    def wait(self) -> None:
        torch.cuda.current_stream().wait_event(self.ev)


def _tensors(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, tuple | list):
            yield from _tensors(a)
