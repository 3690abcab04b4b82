"""How a segment runs: eagerly, ``torch.compile``d, or as a CUDA graph (captured once,
replayed after), on the compute stream or a side stream; and how a collective is
launched and waited for. Knows nothing of schedules or of the model.

CUDA graphs (``graphs=True``): the first step captures every segment, in program
order, into one shared memory pool (one more pool for side-stream segments), and later
steps replay them. Graph memory therefore equals the eager step's working set: what a
segment frees, a later segment's capture reuses, and replays run in capture order.
Collectives stay outside the graphs; every tensor a collective or another stream
touches is a *kept* segment output (never freed, so never reused under a graph).
During replay only the kept outputs are returned (the rest are None): a segment's
other outputs may only be passed on to later segments, whose graphs captured them.

Whole-step graphs (``graph_scope="step"``, ``--graph-scope step``): the first step is
warmed up eagerly, then captured as ONE graph, collectives included (the emulated
collectives' kernels and their stream forks and joins are captured like any other work;
domino-sp's side stream forks from and joins the capture stream), and every later step
copies its inputs into the captured ones and replays that graph: no boundaries between
segment graphs, one launch per step, no in-flight cap. Segments run as in eager mode
inside the capture. A tensor a collective reads or writes is held from its launch until
the compute stream waits for it (the side stream: until the streams join), so the
capture's allocator does not hand its block to a later kernel while the comm stream can
still touch it (outside a capture the collective's Work holds it until waited for: c10d's
NCCL backend since PyTorch 2.7, and the emulator). The profiler
sees one graph launch per step: kernels keep their names and grids but not the
``record_function`` range they were issued in.

Side stream (domino-sp's chains): the executor keeps the step's compute stream and the
side stream as objects (read once per step), switches between them with one
``set_stream`` call each way (:meth:`SegmentExecutor.side_ctx`; re-entrant, so a whole
chain of wait / segment / buffer / launch is one switch), records the events that order
the two streams from a pool reused every step, on a known stream (no
``current_stream()`` lookup), and makes a stream wait for one directly. On CPU there is
no side stream; tests swap in ``streams.CountingStreams`` to run and count that path.

Micro-batch lanes (``mb_lanes``, ``--mb-streams 2``; the rules are tp_step.py's): two
compute streams, a high-priority *lead* and a low-priority *follow*, forked from the step's
stream at the first lane block of a step (:meth:`lane`) and joined at its end
(:meth:`join_lanes`); :meth:`lane_record` / :meth:`lane_wait` order them, and every
tensor a segment or collective touches while they are on is held until the join. Eager
or one graph per step (the capture holds both lanes' work as parallel branches, each
kernel node with its stream's priority); not a graph per segment.

With ``record=True`` the executor appends every event it executes to ``events``, in
order: ``("run", key)`` for a segment (its deferred weight gradient first, if any),
``("launch", key)`` for a collective, ``("wait", key)`` for a wait on one, where a key
is ``(name, unit index, micro-batch)``.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch

from domino_prof.reference_model.comm import Comm, NoComm
from domino_prof.reference_model.config import GRAPH_SCOPES
from domino_prof.reference_model.streams import CudaStreams, LaneCtx, SideCtx

_NULL = contextlib.nullcontext()
_NO_COMM = NoComm()

Key = tuple  # (segment or collective name, unit index, micro-batch)
_STEP_KEY = ("step",)


def _profiling() -> bool:
    return torch._C._autograd._profiler_enabled()


@dataclass(frozen=True, slots=True)
class Deferred:
    """A segment to run first, inside the next segment that takes it (``pre=``): a
    weight gradient, deferred so it overlaps a collective and adds no graph of its own
    (never compiled: GEMMs into gradient buffers)."""

    key: Key
    fn: object
    args: tuple


@dataclass(frozen=True, slots=True)
class Pending:
    """A launched collective: what a schedule waits on (``work`` None: done already)."""

    key: Key
    work: object
    held: tuple = ()  # a whole-step capture: its tensors, until it is waited for


class EventWork:
    """The work handle of a collective that ran inline (tp 1, nocomm) on a stream:
    ``wait()`` orders the current stream after it, as c10d's work does (the executor
    waits on it through its streams, without looking the current stream up)."""

    __slots__ = ("ev",)

    def __init__(self, ev) -> None:
        self.ev = ev

    def wait(self) -> None:
        torch.cuda.current_stream().wait_event(self.ev)


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


class SegmentExecutor:
    """Runs segments and collectives for one runner. ``mode`` is ``"eager"`` (also
    while warming up), ``"capture"`` or ``"replay"``, set only by :meth:`step`."""

    def __init__(
        self,
        comm: Comm,
        *,
        device: torch.device,
        graphs: bool = False,
        compile: bool = False,
        side_stream: bool = False,
        graph_inflight: int = 8,
        record: bool = False,
        carveout=None,
        graph_scope: str = "segment",
        overlap_gemm=None,
        mb_lanes: bool = False,
        lane_comms: tuple | None = None,
        bwd_comm: Comm | None = None,
    ) -> None:
        if graph_scope not in GRAPH_SCOPES:
            raise ValueError(f"graph_scope {graph_scope!r} is not one of {GRAPH_SCOPES}")
        if mb_lanes and side_stream:
            raise ValueError("micro-batch lanes and a side stream do not go together")
        if mb_lanes and graphs and graph_scope == "segment":
            raise ValueError("micro-batch lanes need eager segments or one graph per step "
                             "(graph_scope='step'), not a graph per segment")  # fmt: skip
        self.comm, self.graphs, self.compile = comm, graphs, compile
        # --comm-ctas-scope bwd: the collectives launched while the phase is "bwd" go
        # through this comm (the same group and comm stream on other CTAs), else ``comm``
        self.bwd_comm = bwd_comm
        self.graph_scope = graph_scope
        self._step_in: tuple = ()  # whole-step graph: its captured inputs
        self._step_capture = False  # inside the whole-step capture
        # --sm-carveout (carveout.Carveout): told before each issued segment whether an
        # async collective is in flight (launched, not yet waited for: ``_open``)
        self.carveout = carveout
        # --overlap-gemm (overlap_gemm.OverlapGemm): told the same, picks the GEMM kernels
        self.overlap_gemm = overlap_gemm
        self._open: dict = {}
        # the schedule's phase of the segments issued now ("fwd" / "bwd"; StepBase.at sets
        # it), for --carveout-scope fwd
        self.phase: str | None = None
        self.cuda = device.type == "cuda"
        self.graph_inflight = graph_inflight
        self.host_wait_s = 0.0  # time the host spent held back by the in-flight cap
        self.events: list | None = [] if record else None
        self.mode = "eager"
        self.graph_store: dict = {}  # key -> (graph, kept outputs)
        self._n_launch = 0
        self._inflight: list = []
        self._compiled: dict = {}
        self._graph_key = None
        self._pool = self._side_pool = None
        self._cap_stream = None
        self._statics: dict = {}
        self._bufs: dict = {}
        # a side stream for segments that must not wait for the compute stream's work
        self._streams = CudaStreams(device) if (self.cuda and side_stream) else None
        self.side = None if self._streams is None else self._streams.side
        self._main = None  # the step's compute stream (read at the start of each step)
        self._on_side = False  # inside side_ctx()
        self._side_ctx = SideCtx(self)
        self._ev_pool: list = []  # events ordering the two streams, reused every step
        self._ev_n = 0  # of the pool, used so far this step
        self._held: list = []  # eager side-stream tensors (in tuples), until streams join
        # --mb-streams 2 (module doc, "Micro-batch lanes"): lead and follow streams, None
        # without them (or on CPU, unless a test swaps some in)
        # (their calls are the side stream's, self._streams, which they exclude: its event
        # pool too; the step's stream, self._main, is the one they fork from and join)
        self.lanes = None
        if mb_lanes and self.cuda:
            self._streams = CudaStreams(device, side=False)
            self.lanes = self._streams.lanes()
        self._forked = False
        self._lane_ctx = LaneCtx(self)
        # DOMINO_PROF_LANE_COMM=own: lane i's collectives through lane_comms[i] (a comm
        # stream each; None: every collective through ``comm``); _lane: the lane entered
        self.lane_comms = lane_comms if mb_lanes else None
        self._lane: int | None = None

    def use_streams(self, streams) -> None:
        """Replace the side-stream backend (tests: ``streams.CountingStreams`` on CPU)."""
        self._streams, self.side = streams, streams.side
        self._main = None

    def use_lane_streams(self, streams) -> None:
        """Replace the micro-batch lanes' backend (tests: ``streams.CountingStreams``)."""
        self._streams, self.lanes = streams, streams.lanes()

    # -- a step: eager, or capture once then replay ---------------------------------------
    def step(self, key, run, *inputs):
        """``run(*inputs)`` issues one step (gradient buffers prepared, schedule run).
        Eager; with graphs: captured on the first call for this ``key`` (input shapes),
        replayed on every call (``graph_scope`` step: one graph, fed ``inputs``). The
        carveout is off after it: a runner without one (--carveout-auto gives domino-sp
        its own) must not issue its GEMMs under the one this step left on."""
        try:
            return self._step(key, run, inputs)
        finally:
            if self.carveout is not None:
                self.carveout.off()

    def _step(self, key, run, inputs):
        if not self.graphs:
            self._begin()
            return run(*inputs)
        if self.graph_scope == "step":
            return self._step_graph(key, run, inputs)
        if self._graph_key != key:
            self._capture(lambda: run(*inputs), key)
        self.mode = "replay"
        try:
            self._begin()
            return run(*inputs)
        finally:
            self.mode = "eager"

    def _step_graph(self, key, run, inputs):
        """The whole-step graph (module doc): captured for a new ``key``, then replayed
        with ``inputs`` copied into the captured inputs. Returns the step's output (the
        captured tensor, rewritten by each replay)."""
        if self._graph_key != key:
            self._capture_step(run, key, inputs)
        for s, x in zip(self._step_in, inputs):
            s.copy_(x)
        g, out = self.graph_store[_STEP_KEY]
        g.replay()
        return out

    def _capture_step(self, run, key, inputs) -> None:
        self.graph_store.clear()
        self._graph_key = None
        self._step_in = tuple(x.clone() for x in inputs)
        step_in = self._step_in
        if not self.cuda:  # tests: the CPU stand-in replays the step on these inputs

            def body():
                self._begin()
                return (run(*step_in),)

            out = body()[0]
            self.graph_store[_STEP_KEY] = (_EmulatedGraph(body, (out,)), out)
            self._graph_key = key
            return
        cap = self._warm_up(lambda: run(*step_in))  # also the comm's plans
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(cap):
            # thread_local: another thread's CUDA calls (c10d's watchdog) stay legal
            g.capture_begin(pool=torch.cuda.graph_pool_handle(),
                            capture_error_mode="thread_local")  # fmt: skip
            self._step_capture = True
            try:
                self._begin()
                out = run(*step_in)
            finally:
                self._step_capture = False
                g.capture_end()
        torch.cuda.current_stream().wait_stream(cap)
        torch.cuda.synchronize()
        self._held.clear()
        self.graph_store[_STEP_KEY] = (g, out)
        self._graph_key = key

    def _begin(self) -> None:
        """A step starts: its compute stream is the current one; the event pool restarts
        (every event of the last step was recorded, and waited for, before this one)."""
        if self._streams is not None:
            self._main = self._streams.current()
            self._ev_n = 0
        self._forked = False
        self._open.clear()
        if self.overlap_gemm is not None:
            self.overlap_gemm.reset()

    def _warm_up(self, run):
        """One eager step on a new stream (lazy library init), synchronized, the cache
        emptied (its blocks cannot serve a graph's pool). Returns the stream, which the
        capture then uses."""
        cap = torch.cuda.Stream()
        cap.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(cap):
            self._begin()
            run()
        torch.cuda.current_stream().wait_stream(cap)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return cap

    def _capture(self, run, key) -> None:
        """Warm up eagerly (lazy library init), then capture every segment in order."""
        self.graph_store.clear()
        self._statics.clear()
        self._bufs.clear()
        if self.cuda:
            self._cap_stream = self._warm_up(run)
            self._pool = torch.cuda.graph_pool_handle()
            self._side_pool = torch.cuda.graph_pool_handle()
        self.mode = "capture"
        try:
            self._begin()
            run()
        finally:
            self.mode = "eager"
        if self.cuda:
            torch.cuda.synchronize()
        self._graph_key = key

    # -- segments -------------------------------------------------------------------------
    def range(self, name: str):
        """A profiler range, opened only while a profiler runs."""
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

    def run(
        self, key: Key, fn, *args, keep: int = 1, side: bool = False, pre: Deferred | None = None,
        compiled: bool = True,
    ):
        """Run segment ``fn(*args)`` eagerly, or capture / replay it as a graph. The
        first ``keep`` outputs are *kept* (returned in replay mode too); the rest are
        returned only while capturing (replay: None) and may only be passed on to
        other segments. ``pre``: a deferred segment run first, in the same graph.
        ``side``: run on the side stream. ``compiled=False``: never ``torch.compile``d
        (a weight gradient run as a segment of its own, as a ``Deferred`` is)."""
        if self.events is not None:
            if pre is not None:
                self.events.append(("run", pre.key))
            self.events.append(("run", key))
        side = side and self.side is not None
        mode = self.mode
        if mode != "replay":  # a replay's GEMMs are captured
            if self.carveout is not None:
                self.carveout.segment(bool(self._open), self.phase)
            if self.overlap_gemm is not None:
                self.overlap_gemm.segment(bool(self._open))
        if mode == "replay":
            g, kept = self.graph_store[key]
            with self.side_ctx(side):
                self._throttle()
                g.replay()
            return kept
        f = self._fn(fn) if compiled else fn
        if self.lanes is not None:  # held until the lanes join
            self._held.append(args)
            if pre is not None:
                self._held.append(pre.args)
        if mode == "eager":
            if side:
                return self._run_side(f, args, pre)
            if pre is not None:
                pre.fn(*pre.args)
            outs = f(*args)
            if self.lanes is not None:
                self._held.append(outs)
            return outs

        def body():
            if pre is not None:
                pre.fn(*pre.args)
            return f(*args)

        # capture
        if self.cuda:
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
        self.graph_store[key] = (g, tuple(outs[:keep]) + (None,) * (len(outs) - keep))
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
        if self.graph_inflight <= 0 or not self.cuda:
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

    def _run_side(self, f, args, pre):
        """Eager side-stream segment. Its inputs come from the compute stream and its
        outputs go back to it, so none of them may be recycled by the allocator while
        the other stream can still touch them: they are held (``_held``, the argument and
        output tuples as they are) until the end of the step, after the two streams have
        joined (:meth:`join_side`). (``record_stream`` would do the same per tensor, but
        it makes every later allocation poll an event per recorded block: measured
        several times slower host issue on H200.)"""
        self._held.append(args)
        if self._on_side:  # inside a chain's side_ctx() already
            if pre is not None:
                pre.fn(*pre.args)
            outs = f(*args)
        else:
            with self._side_ctx:
                if pre is not None:
                    pre.fn(*pre.args)
                outs = f(*args)
        self._held.append(outs)
        return outs

    def side_ctx(self, side: bool = True):
        """``with``: the side stream is current (a no-op without one, or when it already
        is: a chain enters it once, and its steps' own ``side=True`` switch nothing)."""
        if side and self.side is not None and not self._on_side:
            return self._side_ctx
        return _NULL

    def join_side(self) -> None:
        """The compute stream waits for the side stream; held tensors are released (both
        streams' uses are ordered before what follows)."""
        if self.side is not None:
            self._streams.join(self._main, self.side)
            self._held.clear()

    # -- micro-batch lanes (--mb-streams 2) ---------------------------------------------------
    def lane(self, i: int, inner=_NULL):
        """``with``: lane ``i`` (0 lead, 1 follow) is the current stream, ``inner`` (a
        profiler range) entered inside; back to the step's stream after. The first lane
        entered in a step forks both lanes from the step's stream (so they are ordered
        after everything issued there before the schedule: the gradient zeroing, the
        inputs). Without lane streams (CPU), just ``inner``."""
        if self.lanes is None:
            return inner
        ctx = self._lane_ctx
        ctx.i, ctx.inner = i, inner
        return ctx

    def _fork(self) -> None:
        ev = self._record(stream=self._main)
        for s in self.lanes:
            self._streams.wait(ev, s)
        self._forked = True

    def lane_record(self, i: int):
        """An event recorded on lane ``i`` after what was issued there so far (None
        without lane streams)."""
        if self.lanes is None:
            return None
        return self._record(stream=self.lanes[i])

    def lane_wait(self, i: int, ev) -> None:
        """Lane ``i`` waits for ``ev`` (a :meth:`lane_record` of the other lane)."""
        if ev is not None:
            self._streams.wait(ev, self.lanes[i])

    def lanes_barrier(self) -> None:
        """Each lane waits for everything issued on the other so far (forward ->
        backward: the micro-batches change lanes, see ``tp_step``)."""
        if self.lanes is None or not self._forked:
            return
        a, b = self.lanes
        ea, eb = self._record(stream=a), self._record(stream=b)
        self._streams.wait(eb, a)
        self._streams.wait(ea, b)

    def join_lanes(self) -> None:
        """The step's stream waits for both lanes; the held tensors are released (every
        use on either lane is ordered before what follows)."""
        if self.lanes is None or not self._forked:
            return
        for s in self.lanes:
            self._streams.join(self._main, s)
        self._held.clear()
        self._forked = False

    # -- tensors fed from outside, buffers collectives write ------------------------------
    def static(self, name: str, b: int, t: torch.Tensor) -> torch.Tensor:
        """A graph input fed from outside (tokens, targets): one fixed buffer."""
        if self.mode == "eager":
            return t
        key = (name, b)
        if self.mode == "capture":
            self._statics[key] = t.clone()
        else:
            self._statics[key].copy_(t)
        return self._statics[key]

    def buffer(self, key: Key, shape, dtype, device, side: bool = False) -> torch.Tensor:
        """A buffer a collective writes (all-gather / reduce-scatter output). Graph mode:
        allocated once at capture and kept, so its address is fixed for every replay.
        ``side``: written on the side stream, read on the compute stream: allocated on
        the side stream (so no compute-stream work still using a recycled block can race
        the write) and held until the streams join at the end of the step (so it is not
        recycled under the compute stream)."""
        if self.mode == "replay":
            return self._bufs[key]
        if side and self.side is not None:
            if self._on_side:
                t = torch.empty(shape, dtype=dtype, device=device)
            else:
                with self._side_ctx:
                    t = torch.empty(shape, dtype=dtype, device=device)
            self._held.append(t)  # see _run_side
        else:
            t = torch.empty(shape, dtype=dtype, device=device)
        if self.mode == "capture":
            self._bufs[key] = t
        return t

    # -- collectives ----------------------------------------------------------------------
    def launch(self, key: Key, collective: str, *args, async_op: bool, side: bool = False,
               ordered: bool = False, **kw) -> Pending:  # fmt: skip
        """Launch ``comm.<collective>(*args)`` (none while capturing: the capture pass only
        records graphs, on garbage, and no collective may be pending while a graph is
        captured). ``side``: issued from the side stream. ``ordered``: if it ran inline
        (no work: tp 1, nocomm) and a side stream exists, the handle is an event on the
        issuing stream, so the other stream still orders after it."""
        if self.events is not None:
            self.events.append(("launch", key))
        comm = self.comm
        if self._lane is not None and self.lane_comms is not None:
            comm = self.lane_comms[self._lane]  # the lane's own comm stream
        elif self.bwd_comm is not None and self.phase == "bwd":
            comm = self.bwd_comm  # --comm-ctas-scope bwd
        call = getattr(_NO_COMM if self.mode == "capture" else comm, collective)
        if side and self.side is not None and not self._on_side:
            with self._side_ctx:
                w = call(*args, async_op=async_op, **kw)
        else:
            w = call(*args, async_op=async_op, **kw)
        if ordered and w is None and self.side is not None:
            w = EventWork(self._record(side))
        held = ()
        if self._step_capture:  # held until waited for (module doc)
            if async_op:
                held = args
            elif (side or self._on_side) and self.side is not None:  # waited on the side
                self._held.append(args)
        if self.lanes is not None:  # held until the lanes join
            self._held.append(args)
        p = Pending(key, w, held)
        if async_op:  # in flight until waited for (every mode: the capture pass too)
            self._open[id(p)] = p
            if self.overlap_gemm is not None:  # triton-covered: how long it covers
                est = getattr(self.comm, "expected_ns", None)  # the real comm's, even
                self.overlap_gemm.launched(id(p), est(collective, *args) if est else None)
        return p

    def mark(self, w=None):
        """``w``, or (if None and a side stream exists) an event on the current stream."""
        if w is None and self.side is not None:
            return EventWork(self._record())
        return w

    def _record(self, side: bool = False, stream=None):
        """An event of the pool, recorded on the current stream (``side``: on the side
        stream; ``stream``: on that one, a micro-batch lane or the step's)."""
        i = self._ev_n
        self._ev_n = i + 1
        pool = self._ev_pool
        if i == len(pool):
            pool.append(self._streams.event())
        ev = pool[i]
        if stream is None:
            stream = self.side if (side or self._on_side) else self._main
        self._streams.record(ev, stream)
        return ev

    def wait(self, p: Pending | None, *, side: bool = False) -> None:
        """Wait for a launched collective (``side``: the side stream waits; else the
        current stream)."""
        if p is None:
            return
        self._open.pop(id(p), None)
        if self.overlap_gemm is not None:
            self.overlap_gemm.waited(id(p))
        if self.events is not None:
            self.events.append(("wait", p.key))
        if p.held and (side or self._on_side) and self.side is not None:
            self._held.append(p.held)  # the compute stream is ordered only at the join
        w = p.work
        if w is None:
            return
        if type(w) is EventWork:  # ordered inline collective: a stream waits for an event
            on_side = self._on_side or (side and self.side is not None)
            self._streams.wait(w.ev, self.side if on_side else self._main)
            return
        with self.side_ctx(side):
            w.wait()
