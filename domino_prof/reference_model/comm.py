"""Communication behind one small interface: the three collectives a schedule issues.

A schedule never calls ``torch.distributed``: it launches a collective through a
:class:`Comm` (asynchronously or not), keeps the :class:`Work` handle and waits on it
where the reduced tensor is first read. ``size`` and ``rank`` are the TP degree R the
model is sharded for and this process's place in it: sharding (``parallel.shard_model``)
and the vocab-parallel head take them from the Comm, never from ``torch.distributed``,
so a Comm may stand for a TP group that this one process only pretends to be in.

Implementations:

* :class:`ProcessGroupComm` — a torch.distributed process group (NCCL, gloo);
* :class:`SkipComm` — every collective skipped (``nocomm``: a throughput upper bound
  whose numbers are meaningless); the output buffers of a gather / scatter are still
  written (a copy), so shapes and data flow are those of the real step. Works with
  R > 1 in one process without ``torch.distributed`` initialised (rank r's shard).
* ``emulate.EmulatedComm`` — every collective an emulated GPU kernel on a comm stream
  that lasts as long as a comm profile says (``run --comm emulate``: one process, rank
  0's shard of tp R; docs/EMULATION.md). Imported lazily (torch + Triton).
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.distributed as dist

_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}


class Work(Protocol):
    def wait(self) -> None: ...


class Comm(Protocol):
    size: int  # the TP degree R the model is sharded for
    rank: int  # this process's rank in the TP group
    label: str  # "nccl" | "gloo" | "skip" | "emulated comm (profile NAME)"
    emulated: bool  # the collectives' *timing* is a stand-in (an emulator)
    meaningful_numerics: bool  # the step's numbers (loss, gradients) are the real ones

    def all_reduce(self, t: torch.Tensor, *, async_op: bool, op: str = "sum") -> Work | None:
        """In place: t <- Σ_ranks t (``op="max"``: the elementwise max)."""
        ...

    def all_gather(self, out: torch.Tensor, t: torch.Tensor, *, async_op: bool) -> Work | None:
        """out [R·n, ...] <- rank-ordered concatenation of every rank's t [n, ...]."""
        ...

    def reduce_scatter(
        self, out: torch.Tensor, t: torch.Tensor, *, async_op: bool
    ) -> Work | None:
        """out [n, ...] <- rows [r·n, (r+1)·n) of Σ_ranks t [R·n, ...]."""
        ...


class ProcessGroupComm:
    """A TP process group (``None``: the default group; torch.distributed not
    initialised: one rank, every collective a no-op or a copy).

    Each method returns a work handle when ``async_op`` (else None, done). Stream
    hazards (NCCL): an async collective runs on the group's NCCL stream, which first
    waits for the *current* stream, so its input is complete; ``work.wait()`` makes
    the current stream wait for the NCCL stream without blocking the host; c10d keeps
    the tensors alive (and recorded on its stream) until then. gloo: the collective
    runs on gloo's threads and ``wait()`` blocks the host.
    """

    emulated = False
    meaningful_numerics = True

    def __init__(self, group=None) -> None:
        self.group = group
        init = dist.is_initialized()
        self.size = dist.get_world_size(group) if init else 1
        self.rank = dist.get_rank(group) if init else 0
        self.label = dist.get_backend(group) if init else "none"
        self._sibling: ProcessGroupComm | None = None  # lane_sibling's, made once

    def lane_sibling(self, pg_options=None) -> ProcessGroupComm:
        """The comm of the second micro-batch lane (``DOMINO_PROF_LANE_COMM=own``): a new
        group of the same ranks and backend (``pg_options``: NCCL's, as the first group's),
        so its collectives run on a stream (NCCL: a communicator) of their own. Every rank
        must call it, in the same order (``dist.new_group``); made once and kept. One rank
        (no torch.distributed): itself."""
        if self._sibling is not None:
            return self._sibling
        if not dist.is_initialized():
            return self
        kw = {} if pg_options is None else {"pg_options": pg_options}
        group = dist.new_group(ranks=dist.get_process_group_ranks(self.group or dist.group.WORLD),
                               backend=dist.get_backend(self.group), **kw)  # fmt: skip
        self._sibling = ProcessGroupComm(group)
        return self._sibling

    def all_reduce(self, t: torch.Tensor, *, async_op: bool, op: str = "sum"):
        if self.size == 1:
            return None
        return dist.all_reduce(t, op=_OPS[op], group=self.group, async_op=async_op)

    def all_gather(self, out: torch.Tensor, t: torch.Tensor, *, async_op: bool):
        if self.size == 1:
            out.copy_(t)
            return None
        return _all_gather(out, t, group=self.group, async_op=async_op)

    def reduce_scatter(self, out: torch.Tensor, t: torch.Tensor, *, async_op: bool):
        """gloo (CPU) has reduce_scatter_tensor in the torch versions we pin, built inside
        gloo from an all-reduce: CPU traces show it as ``gloo:all_reduce``
        (docs/METRICS.md)."""
        if self.size == 1:
            out.copy_(t)
            return None
        return _reduce_scatter(out, t, group=self.group, async_op=async_op)


class SkipComm:
    """Every collective skipped (``nocomm``). all-reduce: nothing. On a GPU all-gather and
    reduce-scatter write nothing either: ``out`` keeps what the allocator gave it (numbers
    meaningless, as every skip mode's), since a real collective's writes are its own
    kernel's work, which a no-comm step must not charge to compute (the copies would move
    7.7 GB a step of the emulated TP-8 headline's domino-sp: about 2.6 ms of an H100's HBM,
    some 30 % of its gap to nocomm). On CPU: ``t`` copied into every rank's rows of ``out``
    (one broadcast copy; R = 1: ``out = t``), and this rank's rows of ``t`` for a
    reduce-scatter, so no step reads uninitialised memory (whose denormals would slow the
    CPU's arithmetic; a CPU step's time is no performance figure). Nothing here needs
    torch.distributed, so R > 1 runs in one process (rank ``rank``'s shard of a tp-R
    step)."""

    label = "skip"
    emulated = False
    meaningful_numerics = False

    def __init__(self, size: int = 1, rank: int = 0) -> None:
        if not 0 <= rank < size:
            raise ValueError(f"SkipComm: rank {rank} is not in a group of {size}")
        self.size, self.rank = size, rank

    def lane_sibling(self) -> SkipComm:
        """Nothing is issued: the second lane's comm is this one."""
        return self

    def all_reduce(self, t: torch.Tensor, *, async_op: bool, op: str = "sum"):
        return None

    def expected_ns(self, collective: str, *args) -> int:
        """A skipped collective covers nothing (--overlap-gemm triton-covered)."""
        return 0

    def all_gather(self, out: torch.Tensor, t: torch.Tensor, *, async_op: bool):
        if out.is_cuda:
            return None
        if self.size == 1:
            out.copy_(t)
        else:
            out.view(self.size, *t.shape).copy_(t.unsqueeze(0))
        return None

    def reduce_scatter(self, out: torch.Tensor, t: torch.Tensor, *, async_op: bool):
        if out.is_cuda:
            return None
        n = out.shape[0]
        out.copy_(t[self.rank * n : (self.rank + 1) * n])
        return None


class NoComm:
    """Issues nothing, writes nothing (the executor's graph-capture pass: it only records
    graphs, on garbage; no collective may be pending while a graph is captured)."""

    def all_reduce(self, t, *, async_op: bool, op: str = "sum"):
        return None

    def all_gather(self, out, t, *, async_op: bool):
        return None

    def reduce_scatter(self, out, t, *, async_op: bool):
        return None


def pg_options(cfg, dist_module=dist):
    """The NCCL process group's options, or None for the defaults: a high-priority
    stream (``--high-priority-comm``) and every collective on exactly ``--comm-ctas`` N
    CTAs (NCCL's ``min_ctas = max_ctas = N``: its config, set when the group is created;
    ``launcher.check_torch_knobs`` checked that this torch has them). ``cfg``: a RunConfig
    (train.worker creates the group with them; a lane sibling's group takes the same)."""
    if not cfg.high_priority_comm and cfg.comm_ctas is None:
        return None
    opts = dist_module.ProcessGroupNCCL.Options()
    if cfg.high_priority_comm:  # collectives on a high-priority stream (docs/GUIDE.md)
        opts.is_high_priority_stream = True
    if cfg.comm_ctas is not None:
        opts.config.min_ctas = cfg.comm_ctas
        opts.config.max_ctas = cfg.comm_ctas
    return opts


def make_comm(choice: str, group=None, *, size: int | None = None, rank: int = 0,
              emulate=None, device=None, high_priority: bool = False,
              ctas: int | None = None, engine: str = "sm") -> Comm:  # fmt: skip
    """The Comm a mode's ``comm`` choice names (``modes.Mode.comm``): ``"process-group"``
    or ``"skip"`` (R and rank of the process group, or ``size`` / ``rank`` if given).

    ``emulate`` (a comm profile: shipped name, file or ``emulation.Profile``): this one
    process stands in for rank ``rank`` of a TP group of ``size`` with no process group:
    ``"process-group"`` becomes ``emulate.EmulatedComm(profile, size, rank, device)`` (on
    a high-priority stream with ``high_priority``, as NCCL's option; its kernels on
    ``ctas`` CTAs when given: ``run --comm-ctas``; moving data with copies when ``engine``
    is ``"ce"``: ``run --comm-engine``), ``"skip"`` a ``SkipComm(size, rank)``.
    (A real group's CTAs are its process-group options, set where it is created:
    ``pg_options``.)"""
    if emulate is not None:
        if size is None:
            raise ValueError("make_comm(emulate=...) needs size (the emulated TP degree)")
        if choice == "process-group":
            from domino_prof.reference_model import emulate as _emulate

            stream = None
            if high_priority:
                stream = torch.cuda.Stream(device, priority=-1)
            # ctas= only when asked for: an EmulatedComm without the keyword still works
            kw = {} if ctas is None else {"ctas": ctas}
            if engine != "sm":  # likewise: only when asked for
                kw["engine"] = engine
            return _emulate.EmulatedComm(emulate, size=size, rank=rank, device=device,
                                         stream=stream, **kw)  # fmt: skip
        if choice == "skip":
            return SkipComm(size, rank)
    if choice == "process-group":
        return ProcessGroupComm(group)
    if choice == "skip":
        if size is None:
            pg = ProcessGroupComm(group)
            size, rank = pg.size, pg.rank
        return SkipComm(size, rank)
    raise ValueError(f"unknown comm choice {choice!r}; use process-group or skip")
