"""Emulated collectives: rank ``rank``'s side of a TP-R collective on one GPU
(docs/EMULATION.md). Torch + Triton, imported lazily; nothing in ``trace/``,
``analysis/`` or ``report/`` imports this module.

:class:`EmulatedComm` has the shape of ``reference_model.comm``'s Comm (duck-typed)::

    all_reduce(t, *, async_op, op="sum")   # t [N]            in place
    all_gather(out, t, *, async_op)        # t [n] -> out [R n]
    reduce_scatter(out, t, *, async_op)    # t [R n] -> out [n]

Each call, like NCCL's: the comm stream first waits for the current stream, one kernel
(``emulated_allreduce_kernel`` ...) runs there with the profile's CTA count, reads and
writes the ring algorithm's HBM bytes (``emulation.plan``) and lasts at least
``t = alpha + size / algbw`` (it spins on %globaltimer after its traffic); ``wait()``
makes the current stream wait for it (``async_op=False`` waits before returning).
Values are meaningless and labelled so: all_reduce leaves ``t`` as it was, all_gather
fills ``out``'s own slot and the next R-2 slots with ``t``, reduce_scatter writes t's own
rows into ``out``.

Stream hazards: ``t`` and ``out`` are used on the comm stream, so the Work holds them
until ``wait()`` (after which the current stream is ordered behind the collective), as
c10d's NCCL backend does since PyTorch 2.7 (pytorch/pytorch#148590 removed its
``record_stream`` calls: the tensors are stashed in the Work, unconditionally). A
``record_stream`` per tensor made every later allocation of the step poll the comm's
events in the caching allocator, host work real NCCL no longer does;
``DOMINO_PROF_EMULATE_TENSORS=record_stream`` restores it, for an A/B of the eager host
cost (``config.comm_tensors``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from domino_prof.emulation import ce
from domino_prof.emulation.marker import comm_marker, mark_trace_file
from domino_prof.emulation.model import message_bytes
from domino_prof.emulation.plan import Copy, plan
from domino_prof.emulation.profile import DEFAULT_THREADS, Entry, Profile, load_profile
from domino_prof.emulation.ring import PacedPlan, paced_plan, step_table
from domino_prof.errors import ConfigError
from domino_prof.reference_model.config import COMM_ENGINES, comm_tensors

# the stand-in kernels (docs/EMULATION.md §3 and §3b): "paced", the default, runs the ring
# algorithm's local HBM traffic paced over the modelled time with the real kernel's
# threads, registers and shared memory; "burst" is the first stand-in (Triton: the ring's
# link bytes copied at once, then a spin), kept for A/B runs
KERNELS = ("paced", "burst")
# how a collective moves its data (--comm-engine): "sm", the stand-in kernel on the
# profile's CTAs (NCCL's kernels); "ce", copies paced to a copy-engine time model with no
# CTA held during a copy (emulation/ce.py: torch's symmetric-memory low-contention ops)
ENGINES = COMM_ENGINES

# elements per CTA iteration: 32 KiB of bf16 in flight per CTA (64 B per thread at 16
# warps). With ~0.7 us of HBM latency, 24 CTAs need ~16 KiB each in flight to move the
# 25.2M-element tp-2 all-reduce's 2 x 50 MB inside its modelled 177 us (565 GB/s); a
# smaller block would make the copies, not the model, set the kernel's duration.
BLOCK = 16384
NUM_WARPS = 16  # 512 threads: NCCL_SIMPLE_MAX_NTHREADS / NCCL_LL_MAX_NTHREADS


def _kernels() -> dict:
    try:
        from domino_prof.reference_model import _emulate_kernels
    except ImportError as e:
        raise ConfigError(
            f"--comm emulate needs Triton ({e}); it ships with torch's CUDA wheels "
            "(pip install triton to add it)"
        ) from None
    return _emulate_kernels.KERNELS


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True, kw_only=True)
class Launch:
    """One emulated kernel launch, decided on the host (what the kernel is given)."""

    collective: str
    entry: Entry
    size_bytes: int
    dur_ns: int
    copies: tuple[Copy, ...]
    aligned: bool
    elem_bytes: int

    @property
    def moved_bytes(self) -> int:
        """Bytes the kernel reads (and, the same, writes)."""
        return sum(c.count for c in self.copies) * self.elem_bytes


def plan_launch(profile: Profile | None, collective: str, *, ranks: int, rank: int, t: Any,
                out: Any, block: int = BLOCK, entry: Entry | None = None) -> Launch:  # fmt: skip
    """The launch of one call; ``entry`` (e.g. with --comm-ctas applied) instead of the
    profile's entry for it."""
    if entry is None:
        entry = profile.entry(collective, ranks, dtype_name(t.dtype))
    size = message_bytes(collective, numel_in=t.numel(), numel_out=out.numel(),
                         elem_bytes=t.element_size())  # fmt: skip
    copies = plan(collective, ranks=ranks, rank=rank, numel_t=t.numel())
    aligned = all(
        v % block == 0
        for c in copies
        for v in (c.src_lo, c.src_len, c.src_off, c.dst_lo, c.dst_len, c.dst_off)
    )
    return Launch(collective=collective, entry=entry, size_bytes=size, dur_ns=entry.time_ns(size),
                  copies=copies, aligned=aligned, elem_bytes=t.element_size())  # fmt: skip


def kernel_args(launch: Launch, t: Any, out: Any) -> list[Any]:
    """The kernel's 19 runtime arguments in signature order: two copies (an empty second
    one where the plan has one) and ``dur_ns``; ``t`` / ``out`` where the copies read and
    write (a tensor, or a placeholder the fast path fills per call)."""
    tensors = {"t": t, "out": out}
    args: list[Any] = []
    copies = list(launch.copies) + [None] * (2 - len(launch.copies))
    for c in copies:
        if c is None:  # an empty second copy
            args += [t, 0, 1, 0, t, 0, 1, 0, 0]
        else:
            args += [tensors[c.src], c.src_lo, c.src_len, c.src_off,
                     tensors[c.dst], c.dst_lo, c.dst_len, c.dst_off, c.count]  # fmt: skip
    args.append(launch.dur_ns)
    return args


def launch_kernel(launch: Launch, t: Any, out: Any, *, spin: bool = True, block: int = BLOCK,
                  num_warps: int = NUM_WARPS) -> Any:  # fmt: skip
    """Enqueue the kernel on the current stream through Triton's JIT (``spin=False``:
    copies only, for the CPU interpreter, TRITON_INTERPRET=1, which has no
    %globaltimer). Returns what the JIT launch returns (the compiled kernel)."""
    kernel = _kernels()[launch.collective]
    return kernel[(launch.entry.ctas,)](
        *kernel_args(launch, t.view(-1), out.view(-1)),
        BLOCK=block, SPIN=spin, ALIGNED=launch.aligned, num_warps=num_warps,
    )


# events in EmulatedComm's ring: a collective's "done" event is recorded again only after
# this many later collectives; a Work waited later than that raises (never waits wrongly).
# A step keeps a handful in flight (domino: one per micro-batch and unit).
EVENT_RING = 512

_T, _OUT = object(), object()  # placeholders in a prepared argument list


class Prepared:
    """A collective of one (kind, sizes, dtype, pointer alignment) made ready to launch
    with no per-call planning: the :class:`Launch`, and (fast path) Triton's compiled
    kernel's runner with its argument list, where only ``t`` / ``out`` change per call."""

    __slots__ = ("args", "gate", "launch", "out_at", "paced", "runner", "t_at")

    def __init__(self, launch: Launch, *, block: int = BLOCK, spin: bool = True) -> None:
        self.launch = launch
        self.paced: Any = None  # a _paced_kernel.Launcher when the paced kernel serves it
        self.gate: Any = None  # _ce_kernel.link_gate's launch where the link is shared
        self.runner: Any = None  # set after the first (JIT) launch compiled the kernel
        # runtime arguments, then the constexprs in signature order (BLOCK, SPIN, ALIGNED):
        # Triton's compiled launchers take the bound arguments of the JIT call, constexprs
        # included, and skip the constexpr slots
        args = kernel_args(launch, _T, _OUT) + [block, spin, launch.aligned]
        self.t_at = tuple(i for i, a in enumerate(args) if a is _T)
        self.out_at = tuple(i for i, a in enumerate(args) if a is _OUT)
        self.args = args

    def fill(self, t: Any, out: Any) -> list[Any]:
        a = list(self.args)
        for i in self.t_at:
            a[i] = t
        for i in self.out_at:
            a[i] = out
        return a


class EventRing:
    """The "done" events of a comm's collectives: ``EVENT_RING`` events, reused in turn
    (``new_event()`` makes one the first time its slot comes round). ``record`` returns
    (slot, generation); ``wait`` of a slot whose event was recorded again since raises
    instead of waiting for a later collective."""

    __slots__ = ("_events", "_gen", "_new", "_next", "size")

    def __init__(self, new_event: Any, size: int = EVENT_RING) -> None:
        self._new = new_event
        self.size = size
        self._events: list[Any] = []
        self._gen: list[int] = []
        self._next = 0

    def record(self, stream: Any) -> tuple[int, int]:
        slot = self._next
        self._next = (slot + 1) % self.size
        if slot == len(self._events):
            self._events.append(self._new())
            self._gen.append(0)
        self._gen[slot] += 1
        self._events[slot].record(stream)
        return slot, self._gen[slot]

    def wait(self, slot: int, gen: int, stream: Any) -> None:
        if self._gen[slot] != gen:
            raise RuntimeError(
                f"an emulated collective's Work was waited after {self.size} later "
                "collectives reused its event (raise emulate.EVENT_RING)"
            )
        self._events[slot].wait(stream)


def hold(comm: EmulatedComm, t: Any, out: Any) -> tuple | None:
    """What a collective's Work holds until ``wait()``: (t, out), or None where they were
    ``record_stream``-ed instead (``DOMINO_PROF_EMULATE_TENSORS=record_stream``; never
    under graph capture, whose stream dependencies hold them)."""
    if not comm.record_streams:
        return (t, out)
    import torch

    if not torch.cuda.is_current_stream_capturing():
        t.record_stream(comm.stream)
        if out is not t:
            out.record_stream(comm.stream)
    return None


class EmulatedWork:
    """``wait()``: the current stream waits for the emulated collective (NCCL's Work);
    the collective's tensors (``stash``) are held until then, as c10d's Work holds them
    (module doc), and let go after."""

    __slots__ = ("_comm", "_gen", "_slot", "_stash")

    def __init__(self, comm: EmulatedComm, slot: int, gen: int, stash: tuple | None = None) -> None:
        self._comm, self._slot, self._gen, self._stash = comm, slot, gen, stash

    def wait(self) -> None:
        self._comm._wait(self._slot, self._gen)
        self._stash = None


class EmulatedComm:
    """Rank ``rank`` of a TP-``size`` group whose collectives are emulated (module doc).

    Host cost per collective (issue 20): the launch is decided once per (collective,
    sizes, dtype, pointer alignment) and kept (:class:`Prepared`); after the first JIT
    launch of a key, the kernel is launched through Triton's compiled kernel straight
    onto the comm stream's handle (no stream switch, no argument binding or
    specialisation per call); the stream fork and the "done" marks use events of a ring,
    never a new Event per call. ``fast=False`` keeps the plain path (a plan, a JIT launch
    under ``torch.cuda.stream``, ``wait_stream``, a new Event per call): the reference
    the fast path is checked against (benchmarks/bench_emulate_host.py), and the path
    taken if the compiled launch is refused (another Triton's launcher signature):
    ``launch_path`` says which ran. ``fast=None`` reads DOMINO_PROF_EMULATE_LAUNCH
    (``jit``: the plain path), so a whole run can be A/B-ed."""

    emulated = True
    meaningful_numerics = False  # the collectives' outputs are not the reduced values

    def __init__(self, profile: Profile | str, *, size: int, rank: int = 0, device: Any,
                 stream: Any = None, fast: bool | None = None, kernel: str | None = None,
                 ctas: int | None = None, engine: str = "sm") -> None:  # fmt: skip
        import torch

        if fast is None:  # a diagnostic switch for A/B checks (docs/EMULATION.md)
            fast = os.environ.get("DOMINO_PROF_EMULATE_LAUNCH", "compiled") != "jit"
        if kernel is None:  # the stand-in: DOMINO_PROF_EMULATE_KERNEL=burst for the old one
            kernel = os.environ.get("DOMINO_PROF_EMULATE_KERNEL", "paced")
        if kernel not in KERNELS:
            raise ConfigError(
                f"emulated comm kernel {kernel!r} is not one of {', '.join(KERNELS)}; set "
                "DOMINO_PROF_EMULATE_KERNEL to one of them"
            )
        if ctas is not None and (isinstance(ctas, bool) or not isinstance(ctas, int) or ctas < 1):
            raise ConfigError(f"--comm-ctas must be an integer >= 1, got {ctas!r}")
        if engine not in ENGINES:
            raise ConfigError(f"--comm-engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        if engine == "ce" and ctas is not None:
            raise ConfigError("--comm-ctas sets the CTAs of an SM-driven collective; "
                              "--comm-engine ce moves data with copies (no CTAs): drop one")

        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)
        if size < 2:
            raise ConfigError(f"--comm emulate needs --tp >= 2, got {size}")
        if size not in self.profile.ranks():
            self.profile.entry("all_reduce", size, "bfloat16")  # the one-line "no R" error
        if not 0 <= rank < size:
            raise ConfigError(f"emulated rank {rank} is not in 0..{size - 1}")
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ConfigError(
                f"--comm emulate runs its collectives as GPU kernels; device {self.device} is "
                "not CUDA (on CPU use --comm gloo, or nocomm)"
            )
        _kernels()  # Triton present: fail here, in one line, not at the first collective
        self.kernel = kernel
        self.ctas = ctas  # None: each entry's own CTA count (the real kernel's)
        self.engine = engine  # "sm": the stand-in kernel; "ce": copies (emulation/ce.py)
        self.ce_params = ce.CeParams.from_env() if engine == "ce" else None
        self._ce: dict[tuple, _CePrepared] = {}
        self._clock = torch.zeros(1, dtype=torch.int64, device=self.device) if engine == "ce" else None
        self._link = None  # the link's free time (ns), shared with a lane sibling (lane_sibling)
        self._sibling: EmulatedComm | None = None
        self._phase_sibs: dict[int, EmulatedComm] = {}  # CTAs -> phase_sibling
        self.fallbacks = 0  # paced calls served by the burst kernel (buffers not in vectors)
        self._paced_kernels: dict[tuple, Any] = {}  # (collective, threads, regs, smem)
        self._fifo: dict[int, Any] = {}  # FIFO bytes -> scratch buffer (kept)
        self._tables: list[Any] = []  # device step tables (kept: launches read them)
        if ctas is not None:  # the TP all-reduces have a bandwidth at that count (one line
            for e in self.profile.entries:  # now, not at the first collective)
                if e.ranks == size and e.collective == "all_reduce":
                    e.with_ctas(ctas)
        self.size = size
        self.rank = rank
        self.label = self.profile.label
        self.stream = stream if stream is not None else torch.cuda.Stream(self.device)
        self.fast = fast
        # DOMINO_PROF_EMULATE_TENSORS (config.comm_tensors): record_stream, else held
        self.record_streams = comm_tensors() == "record_stream"
        self.launch_path = "compiled" if fast else "jit"
        self.refused: str | None = None  # why the compiled launch was refused, if it was
        self._prepared: dict[tuple, Prepared] = {}
        self._handle = self.stream.cuda_stream
        self._fork = torch.cuda.Event()
        self._ring = EventRing(torch.cuda.Event)
        # the current stream's Stream object by (device index, raw handle) (_current_stream)
        self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._cur_streams: dict[tuple[int, int], Any] = {}

    def _current_stream(self) -> Any:
        """The current stream of this comm's device: the Stream object kept for its raw
        handle (one C call a lookup). torch.cuda.current_stream runs device-index checks
        and makes a new Stream object on every call; the fast path asks twice a
        collective (the fork before the launch, the wait), 919 times an eager domino-sp
        step at the headline (459 collectives; benchmarks/host_profile.py,
        reports/emulated-h100-2026-12-07f/call4). A raw handle names one stream of its
        device for the process's life: torch's pool streams (every torch.cuda.Stream, a
        graph's capture stream) are never destroyed. The key holds the device index too:
        every device's default stream has the raw handle 0, and a comm made for "cuda"
        (no index) follows the current device."""
        import torch

        raw_of = self._raw_stream
        if raw_of is None:  # a torch without the binding: its Python layer each time
            return torch.cuda.current_stream(self.device)
        idx = self.device.index
        if idx is None:
            idx = torch.cuda.current_device()
        key = (idx, raw_of(idx))
        s = self._cur_streams.get(key)
        if s is None:
            s = self._cur_streams[key] = torch.cuda.current_stream(self.device)
        return s

    def lane_sibling(self) -> EmulatedComm:
        """The comm of the second micro-batch lane (``DOMINO_PROF_LANE_COMM=own``,
        tp_step.py): the same group on a comm stream of its own, so one lane's collectives
        never queue behind the other's in stream order. The two share one link: a call
        starts (its clock) at max(ready, the link's free time) and holds the link for its
        modelled duration (copy engines: ``_ce_kernel.start_link``; the SM stand-in: a
        one-thread ``link_gate`` kernel before it, sleeping until its slot), so two
        streams' collectives never move data faster together than one stream's. That is
        first come, first served by the time a call is ready; real collectives of two
        communicators share the link's bandwidth instead, which ends the earlier of two
        overlapping calls later (by up to the overlap) and the later one at the same
        time, and two real NCCL kernels hold their SMs the whole time (the gated SM
        stand-in holds them only in its slot). Made once and kept (every mode's runner
        uses the same pair)."""
        if self._sibling is not None:
            return self._sibling
        import torch

        sib = self._twin(torch.cuda.Stream(self.device, priority=self.stream.priority),
                         self.ctas)  # fmt: skip
        self._link = sib._link = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._ce.clear()  # prepared starts now take the link (none yet: made before a step)
        self._prepared.clear()
        self._sibling = sib
        return sib

    def sm_ctas(self, dtype: Any) -> int | None:
        """The CTAs the SM stand-in of this group's reduce-scatters and all-gathers holds
        (the more of the two; ``--comm-ctas``'s count where set) for tensors of ``dtype``;
        None with copy engines, which hold none while data moves (carveout.auto_carveout)."""
        if self.engine != "sm":
            return None
        name = dtype_name(dtype)
        return max(self.profile.entry(c, self.size, name).with_ctas(self.ctas).ctas
                   for c in ("reduce_scatter", "all_gather"))  # fmt: skip

    def phase_sibling(self, ctas: int) -> EmulatedComm:
        """This group's collectives on ``ctas`` CTAs (``--comm-ctas N --comm-ctas-scope
        bwd``: the backward's; the forward keeps this comm's), on the SAME comm stream: the
        two run one at a time in issue order, as one communicator's calls do. Its own
        prepared launches (they hold the CTA count); made once and kept."""
        sib = self._phase_sibs.get(ctas)
        if sib is None:
            sib = self._phase_sibs[ctas] = self._twin(self.stream, ctas)
        return sib

    def _twin(self, stream: Any, ctas: int | None) -> EmulatedComm:
        """This group (profile, R, rank, device, launch path, kernel, engine and its
        copy-engine parameters) on ``stream`` with ``ctas`` CTAs: the siblings' common
        part."""
        twin = EmulatedComm(self.profile, size=self.size, rank=self.rank, device=self.device,
                            stream=stream, fast=self.fast, kernel=self.kernel, ctas=ctas,
                            engine=self.engine)  # fmt: skip
        twin.ce_params = self.ce_params
        return twin

    # ------------------------------------------------------------------ the interface
    def all_reduce(self, t: Any, *, async_op: bool, op: str = "sum") -> EmulatedWork | None:
        if op not in ("sum", "avg", "max", "min"):
            raise ValueError(f"all_reduce op {op!r}")
        return self._run("all_reduce", t, t, async_op)

    def all_gather(self, out: Any, t: Any, *, async_op: bool) -> EmulatedWork | None:
        if out.numel() != self.size * t.numel() or out.dtype != t.dtype:
            raise ValueError(f"all_gather out {tuple(out.shape)} != R x t {tuple(t.shape)}")
        return self._run("all_gather", t, out, async_op)

    def reduce_scatter(self, out: Any, t: Any, *, async_op: bool) -> EmulatedWork | None:
        if t.numel() != self.size * out.numel() or out.dtype != t.dtype:
            raise ValueError(f"reduce_scatter t {tuple(t.shape)} != R x out {tuple(out.shape)}")
        return self._run("reduce_scatter", t, out, async_op)

    def expected_ns(self, collective: str, *args: Any) -> int:
        """How long the stand-in of ``collective`` on these tensors (the arguments of
        all_reduce / all_gather / reduce_scatter) runs by the profile's time model
        (--overlap-gemm triton-covered)."""
        t, out = (args[0], args[0]) if collective == "all_reduce" else (args[1], args[0])
        return self._model_ns(collective, t, out)

    def _model_ns(self, coll: str, t: Any, out: Any) -> int:
        """The modelled duration of ``coll`` from ``t`` into ``out`` (expected_ns's, by
        input and output)."""
        if self.engine == "ce":
            return ce.total_ns(self._ce_plan(coll, t, out))
        size = message_bytes(coll, numel_in=t.numel(), numel_out=out.numel(),
                             elem_bytes=t.element_size())  # fmt: skip
        return self._entry(coll, t).time_ns(size)

    # ------------------------------------------------------------------ the launch
    def _run(self, coll: str, t: Any, out: Any, async_op: bool) -> EmulatedWork | None:
        if not (t.is_contiguous() and out.is_contiguous()):
            raise ValueError(f"emulated {coll} needs contiguous tensors")
        if self.engine == "ce":
            return self._run_ce(coll, t, out, async_op)
        if not self.fast:
            return self._run_plain(coll, t, out, async_op)
        key = (coll, t.numel(), out.numel(), t.dtype, t.data_ptr() % 16, out.data_ptr() % 16)
        prep = self._prepared.get(key)
        if prep is None:
            prep = self._prepared[key] = self._prepare(coll, t, out)
        cur = self._current_stream()
        fork = self._fork
        fork.record(cur)  # the comm stream waits for what the current stream issued so far
        self.stream.wait_event(fork)
        if prep.gate is not None:  # a lane sibling's shared link (lane_sibling)
            prep.gate(self._handle)
        if prep.paced is not None:
            prep.paced.launch(t.data_ptr(), out.data_ptr(), self._handle)
        elif prep.runner is not None:
            try:
                prep.runner(*prep.fill(t, out), stream=self._handle)
            except TypeError as e:  # another Triton's launcher signature: the JIT path
                self._refuse(e)  # every prepared runner dropped
                self._launch_jit(prep, t, out)
        else:
            self._launch_jit(prep, t, out)
        work = EmulatedWork(self, *self._ring.record(self.stream), hold(self, t, out))
        if async_op:
            return work
        work.wait()
        return None

    # ------------------------------------------------------------------ copy engines
    def _ce_plan(self, coll: str, t: Any, out: Any) -> tuple:
        return ce.plan(coll, ranks=self.size, rank=self.rank, numel_in=t.numel(),
                       numel_out=out.numel(), elem_bytes=t.element_size(),
                       params=self.ce_params)  # fmt: skip

    def _run_ce(self, coll: str, t: Any, out: Any, async_op: bool) -> EmulatedWork | None:
        """``--comm-engine ce``: the copies of ``emulation.ce.plan`` on the comm stream after
        the call's clock start, each followed by a one-thread wait until its modelled end,
        each phase by a closing wait; a reduce-scatter phase then reduces the workspace's R
        chunks (an SM kernel, as torch's low-contention reduce-scatter does: the stand-in's
        own, named as comm, _ce_kernel.reduce; a mean, not a sum, so the meaningless values
        stay bounded: the same kernel traffic) and waits until the reduction's modelled
        end. With pace "phase" (DOMINO_PROF_CE_PACE) no wait follows a copy."""
        import torch

        # the alignment of the output picks the reduction's vector kernel (_ce_kernel.reduce)
        key = (coll, t.numel(), out.numel(), t.dtype, out.data_ptr() % 16)
        prep = self._ce.get(key)
        if prep is None:
            prep = self._ce[key] = _CePrepared(self, coll, t, out)
        cur = self._current_stream()
        self._fork.record(cur)
        self.stream.wait_event(self._fork)
        h = self._handle
        mc = prep.memcpy
        if mc is None:
            bufs = {"t": t.view(-1), "out": out.view(-1), "ws": prep.ws, "red": prep.red}
        else:  # DOMINO_PROF_CE_COPY=driver: addresses, one driver call a copy
            bufs = {"t": t.data_ptr(), "out": out.data_ptr(), "ws": prep.ws_ptr,
                    "red": prep.red_ptr}  # fmt: skip
        with torch.cuda.stream(self.stream):
            prep.start(h)  # the call's one clock (emulation/ce.py)
            for ph, (waits, end, reduce, reduced), copies in zip(prep.phases, prep.launches,
                                                                   prep.copies):
                for st, w, (d, do, s, so, nb) in zip(ph.steps, waits, copies):
                    if mc is None:
                        bufs[st.dst].narrow(0, st.dst_off, st.count).copy_(
                            bufs[st.src].narrow(0, st.src_off, st.count))
                    elif mc(bufs[d] + do, bufs[s] + so, nb, h):
                        raise RuntimeError(f"cuMemcpyDtoDAsync failed in emulated {coll}")
                    if w is not None:  # pace "copy"
                        w(h)
                end(h)
                if ph.reduce_to is None:
                    continue
                dst = bufs[ph.reduce_to]
                if reduce is not None:
                    reduce.set_pointer(1, dst if mc is not None else dst.data_ptr())
                    reduce(h)
                else:  # a dtype without a kernel of the stand-in's (_ce_kernel.reduce)
                    dst = {"t": t.view(-1), "out": out.view(-1), "red": prep.red}[ph.reduce_to]
                    torch.mean(prep.ws.view(self.size, -1), dim=0, out=dst)
                reduced(h)
        work = EmulatedWork(self, *self._ring.record(self.stream), hold(self, t, out))
        if async_op:
            return work
        work.wait()
        return None

    def _entry(self, coll: str, t: Any) -> Entry:
        return self.profile.entry(coll, self.size, dtype_name(t.dtype)).with_ctas(self.ctas)

    def _prepare(self, coll: str, t: Any, out: Any) -> Prepared:
        """The launch of one (collective, sizes, dtype, alignment): planned once, with the
        paced kernel's launcher when that kernel is chosen and the buffers cut into
        16-byte vectors (else the burst kernel, counted in ``fallbacks``)."""
        entry = self._entry(coll, t)
        launch = plan_launch(None, coll, ranks=self.size, rank=self.rank, t=t, out=out,
                             entry=entry)  # fmt: skip
        prep = Prepared(launch)
        if self._link is not None:  # a lane sibling's shared link (lane_sibling)
            from domino_prof.reference_model import _ce_kernel as ck

            prep.gate = ck.link_gate(coll, self._link.data_ptr(), self._model_ns(coll, t, out))
        if self.kernel != "paced":
            return prep
        pp = self.paced_plan(coll, t, out)
        if pp is None:
            self.fallbacks += 1
            return prep
        prep.paced = self._paced_launcher(entry, pp)
        return prep

    def paced_plan(self, coll: str, t: Any, out: Any) -> PacedPlan | None:
        """What the paced kernel is given for this call (``emulation.ring``), or None when
        the buffers are not 16-byte aligned or do not cut into whole vectors per chunk."""
        if t.data_ptr() % 16 or out.data_ptr() % 16:
            return None
        entry = self._entry(coll, t)
        size = message_bytes(coll, numel_in=t.numel(), numel_out=out.numel(),
                             elem_bytes=t.element_size())  # fmt: skip
        return paced_plan(coll, ranks=self.size, rank=self.rank,
                          src_bytes=t.numel() * t.element_size(),
                          dst_bytes=out.numel() * out.element_size(),
                          ctas=entry.ctas, threads=entry.threads or DEFAULT_THREADS,
                          protocol=entry.protocol, dur_ns=entry.time_ns(size),
                          fifo_bytes=entry.fifo_bytes)  # fmt: skip

    def _paced_launcher(self, entry: Entry, pp: PacedPlan) -> Any:
        import torch

        from domino_prof.reference_model import _paced_kernel as pk

        shared = entry.shared_bytes or 0
        kkey = (pp.collective, pp.threads, entry.registers, shared)
        kern = self._paced_kernels.get(kkey)
        if kern is None:
            try:
                kern = pk.build(pp.collective, threads=pp.threads, registers=entry.registers,
                                shared_bytes=shared)  # fmt: skip
            except (RuntimeError, OSError, AttributeError) as e:
                raise ConfigError(
                    f"the paced comm stand-in could not be compiled with NVRTC ({e}); run "
                    "with DOMINO_PROF_EMULATE_KERNEL=burst (the Triton stand-in)"
                ) from None
            self._paced_kernels[kkey] = kern
        fifo_bytes = pp.fifo_vec * 16
        fifo = self._fifo.get(fifo_bytes)
        if fifo is None:
            fifo = self._fifo[fifo_bytes] = torch.empty(fifo_bytes, dtype=torch.uint8,
                                                        device=self.device)  # fmt: skip
        table = torch.from_numpy(step_table(pp)).to(self.device)
        self._tables.append(table)
        return pk.Launcher(kern, ctas=pp.ctas, fifo_ptr=fifo.data_ptr(),
                           steps_ptr=table.data_ptr(), n_steps=len(pp.steps),
                           chunk=pp.chunk_vec, slot=pp.slot_vec, ff=pp.fifo_factor,
                           dur_ns=pp.dur_ns, peer_writes=pp.peer_writes)  # fmt: skip

    def kernel_facts(self) -> list[dict]:
        """What the paced kernels compiled here are (name, threads, registers per thread
        from the driver, shared bytes reserved): for the run's record and the benchmark."""
        return [{"name": k.name, "threads": k.threads, "registers": k.registers,
                 "shared_bytes": k.shared_bytes} for k in self._paced_kernels.values()]  # fmt: skip

    def _launch_jit(self, prep: Prepared, t: Any, out: Any) -> None:
        """The JIT launch on the comm stream; the first one of a key compiles, and its
        compiled kernel's runner serves the key's later calls."""
        import torch

        with torch.cuda.stream(self.stream):
            compiled = launch_kernel(prep.launch, t, out)
        if self.launch_path == "compiled" and hasattr(compiled, "__getitem__"):
            prep.runner = compiled[(prep.launch.entry.ctas, 1, 1)]

    def _refuse(self, e: Exception) -> None:
        self.launch_path = "jit"
        self.refused = f"{type(e).__name__}: {e}"
        for p in self._prepared.values():
            p.runner = None

    def _wait(self, slot: int, gen: int) -> None:
        self._ring.wait(slot, gen, self._current_stream())

    def _run_plain(self, coll: str, t: Any, out: Any, async_op: bool) -> Any:
        """The plain path (``fast=False``; class doc): what the fast path replaces."""
        import torch

        prep = self._prepare(coll, t, out)
        launch = prep.launch
        cur = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(cur)
        with torch.cuda.stream(self.stream):
            if prep.gate is not None:  # a lane sibling's shared link (lane_sibling)
                prep.gate(self.stream.cuda_stream)
            if prep.paced is not None:
                prep.paced.launch(t.data_ptr(), out.data_ptr(), self.stream.cuda_stream)
            else:
                launch_kernel(launch, t, out)
            done = torch.cuda.Event()
            done.record(self.stream)
        work = _PlainWork(done, self.device, hold(self, t, out))
        if async_op:
            return work
        work.wait()
        return None

    # ------------------------------------------------------------------ the trace mark
    def mark_trace(self, path: Any) -> None:
        """Write the emulation mark into an exported trace file (docs/EMULATION.md)."""
        mark_trace_file(path, comm_marker(self.profile.name, ranks=self.size, rank=self.rank,
                                          kernel=self.kernel, ctas=self.ctas,
                                          engine=self.engine))  # fmt: skip


class _CePrepared:
    """One (collective, sizes, dtype) of ``--comm-engine ce``: its plan, its workspace (the
    R chunks a reduce-scatter receives) and reduced chunk, the start launch of the call
    and, per phase, its waits and its reduction (built once; the clock is the comm's one
    int64: its calls run in stream order, one at a time)."""

    __slots__ = ("copies", "launches", "memcpy", "phases", "red", "red_ptr", "start", "ws",
                 "ws_ptr")

    def __init__(self, comm: EmulatedComm, coll: str, t: Any, out: Any) -> None:
        import torch

        from domino_prof.reference_model import _ce_kernel as ck

        self.phases = comm._ce_plan(coll, t, out)
        n = (t.numel() if coll != "all_gather" else out.numel())
        self.ws = torch.empty(n, dtype=t.dtype, device=comm.device) if coll != "all_gather" else None
        self.red = (torch.empty(n // comm.size, dtype=t.dtype, device=comm.device)
                    if coll == "all_reduce" else None)  # fmt: skip
        self.ws_ptr = 0 if self.ws is None else self.ws.data_ptr()
        self.red_ptr = 0 if self.red is None else self.red.data_ptr()
        es = t.element_size()  # DOMINO_PROF_CE_COPY=driver: each copy in bytes
        self.copies = [[(st.dst, st.dst_off * es, st.src, st.src_off * es, st.count * es)
                        for st in ph.steps] for ph in self.phases]  # fmt: skip
        self.memcpy = ck.memcpy_dtod() if comm.ce_params.copier == "driver" else None
        clock = comm._clock.data_ptr()
        per_copy = comm.ce_params.pace == "copy"
        dtype = dtype_name(t.dtype)
        try:
            self.start = (ck.start(coll, clock) if comm._link is None else
                          ck.start_link(coll, clock, comm._link.data_ptr(),
                                        ce.total_ns(self.phases)))
            self.launches = [
                ([ck.wait(coll, clock, s.due_ns) if per_copy else None for s in ph.steps],
                 ck.wait(coll, clock, ph.end_ns),
                 None if ph.reduce_to is None else ck.reduce(
                     coll, dtype, ws_ptr=self.ws.data_ptr(), numel=n // comm.size,
                     ranks=comm.size, out_ptr=(self.red if coll == "all_reduce" else out).data_ptr()),
                 ck.wait(coll, clock, ph.done_ns))
                for ph in self.phases]  # fmt: skip
        except (RuntimeError, OSError, AttributeError) as e:
            raise ConfigError(f"the copy-engine stand-in's kernels could not be compiled "
                              f"with NVRTC ({e}); use --comm-engine sm") from None


class _PlainWork:
    """The plain path's Work: a new event per collective; holds ``stash`` as
    :class:`EmulatedWork` does."""

    def __init__(self, event: Any, device: Any, stash: tuple | None = None) -> None:
        self._event = event
        self._device = device
        self._stash = stash

    def wait(self) -> None:
        import torch

        torch.cuda.current_stream(self._device).wait_event(self._event)
        self._stash = None
