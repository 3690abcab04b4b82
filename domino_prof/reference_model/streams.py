"""The side stream's CUDA calls behind a small interface, so the executor
(``executor.SegmentExecutor``) makes as few of them as a step needs and a CPU test can
count them.

A switch of the current stream is one ``set_stream``; an event is recorded on, and
waited for by, a stream named by the caller. ``torch.cuda.stream(s)`` as a context and
``current_stream()`` are not used per segment: each runs tens of Python calls of
torch.cuda (device index and availability checks, a new Stream object). Eager
domino-sp was host-bound on one H200 (issue 19) and those calls were 85% of its
Python calls per step (151k of 177k at 28 layers; ``benchmarks/bench_sp_host.py``).
"""

from __future__ import annotations

import collections

import torch

from domino_prof.reference_model.config import lane_priorities, side_priority

HIGHEST = -100  # torch maps a priority below the device's range to its highest


class CudaStreams:
    """The CUDA calls behind the side stream: a stream switch is one ``set_stream``; an
    event is recorded on, and waited for by, a stream the executor names. ``side``
    False: no side stream (the micro-batch lanes' calls only, ``SegmentExecutor.lane``)."""

    def __init__(self, device, side: bool = True) -> None:
        # the side stream at the compute stream's priority, or the highest
        # (DOMINO_PROF_SIDE_PRIORITY=high: config.side_priority)
        prio = HIGHEST if side and side_priority() == "high" else 0
        self.side = torch.cuda.Stream(device, priority=prio) if side else None
        self.device = device

    def lanes(self) -> tuple:
        """Two compute streams for the micro-batches (``--mb-streams 2``), at the
        priorities ``DOMINO_PROF_LANE_PRIORITY`` gives as "lead,follow" (default "-100,0":
        the leading one at the device's highest priority, torch maps a number below the
        range to it; the following one at the lowest, the default streams' 0)."""
        lead, follow = lane_priorities()
        return (torch.cuda.Stream(self.device, priority=lead),
                torch.cuda.Stream(self.device, priority=follow))  # fmt: skip

    def current(self):
        """The current stream of the model's device, whichever device is current: the
        step's kernels run on the model's device."""
        return torch.cuda.current_stream(self.device)

    @staticmethod
    def set(stream) -> None:
        torch.cuda.set_stream(stream)

    @staticmethod
    def event():
        return torch.cuda.Event()

    @staticmethod
    def record(ev, stream) -> None:
        ev.record(stream)

    @staticmethod
    def wait(ev, stream) -> None:  # ``stream`` waits for ``ev``
        ev.wait(stream)

    @staticmethod
    def join(main, side) -> None:  # ``main`` waits for everything issued on ``side``
        main.wait_stream(side)


class CountingStreams:
    """CPU stand-in for :class:`CudaStreams` (tests): the streams are names, events are
    plain objects, nothing is ordered; every call is counted in ``calls`` (``set``, ``event``
    (created), ``record``, ``wait``, ``join``) and ``stream`` is the current one, so a test
    runs domino-sp's side-stream path on CPU and counts its host work per step."""

    side = "side"

    def __init__(self) -> None:
        self.calls: collections.Counter = collections.Counter()
        self.stream = "main"

    def lanes(self) -> tuple:
        return ("lead", "follow")

    def current(self):
        return self.stream

    def set(self, stream) -> None:
        self.calls["set"] += 1
        self.stream = stream

    def event(self):
        self.calls["event"] += 1
        return object()

    def record(self, ev, stream) -> None:
        self.calls["record"] += 1

    def wait(self, ev, stream) -> None:
        self.calls["wait"] += 1

    def join(self, main, side) -> None:
        self.calls["join"] += 1


class SideCtx:
    """``with``: the side stream is current; back to the step's compute stream after."""

    __slots__ = ("ex",)

    def __init__(self, ex) -> None:
        self.ex = ex

    def __enter__(self) -> None:
        ex = self.ex
        if ex._main is None:
            ex._main = ex._streams.current()
        ex._streams.set(ex.side)
        ex._on_side = True

    def __exit__(self, *exc) -> None:
        ex = self.ex
        ex._streams.set(ex._main)
        ex._on_side = False


class LaneCtx:
    """``with``: a micro-batch lane is the current stream (``SegmentExecutor.lane``), a
    profiler range inside it; back to the step's stream after."""

    __slots__ = ("ex", "i", "inner")

    def __init__(self, ex) -> None:
        self.ex, self.i, self.inner = ex, 0, None

    def __enter__(self) -> None:
        ex = self.ex
        if not ex._forked:
            ex._fork()
        ex._streams.set(ex.lanes[self.i])
        ex._lane = self.i
        self.inner.__enter__()

    def __exit__(self, *exc) -> None:
        self.inner.__exit__(*exc)
        self.ex._lane = None
        self.ex._streams.set(self.ex._main)
