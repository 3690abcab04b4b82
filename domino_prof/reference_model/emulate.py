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

Stream hazards: ``t`` and ``out`` are used on the comm stream; outside CUDA-graph
capture they are ``record_stream``-ed there (as c10d's NCCL backend does) so the
caching allocator does not hand their memory out before the kernel is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domino_prof.emulation.marker import comm_marker, mark_trace_file
from domino_prof.emulation.model import message_bytes
from domino_prof.emulation.plan import Copy, plan
from domino_prof.emulation.profile import Entry, Profile, load_profile
from domino_prof.errors import ConfigError

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


def plan_launch(profile: Profile, collective: str, *, ranks: int, rank: int, t: Any, out: Any,
                block: int = BLOCK) -> Launch:  # fmt: skip
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


def launch_kernel(launch: Launch, t: Any, out: Any, *, spin: bool = True, block: int = BLOCK,
                  num_warps: int = NUM_WARPS) -> None:  # fmt: skip
    """Enqueue the kernel on the current stream (``spin=False``: copies only, for the
    CPU interpreter, TRITON_INTERPRET=1, which has no %globaltimer)."""
    tensors = {"t": t.view(-1), "out": out.view(-1)}
    args: list[Any] = []
    copies = list(launch.copies) + [None] * (2 - len(launch.copies))
    for c in copies:
        if c is None:  # an empty second copy
            args += [tensors["t"], 0, 1, 0, tensors["t"], 0, 1, 0, 0]
        else:
            args += [tensors[c.src], c.src_lo, c.src_len, c.src_off,
                     tensors[c.dst], c.dst_lo, c.dst_len, c.dst_off, c.count]  # fmt: skip
    kernel = _kernels()[launch.collective]
    kernel[(launch.entry.ctas,)](
        *args, launch.dur_ns, BLOCK=block, SPIN=spin, ALIGNED=launch.aligned, num_warps=num_warps
    )


class EmulatedWork:
    """``wait()``: the current stream waits for the emulated collective (NCCL's Work)."""

    def __init__(self, event: Any, device: Any) -> None:
        self._event = event
        self._device = device

    def wait(self) -> None:
        import torch

        torch.cuda.current_stream(self._device).wait_event(self._event)


class EmulatedComm:
    """Rank ``rank`` of a TP-``size`` group whose collectives are emulated (module doc)."""

    emulated = True
    meaningful_numerics = False  # the collectives' outputs are not the reduced values

    def __init__(self, profile: Profile | str, *, size: int, rank: int = 0, device: Any,
                 stream: Any = None) -> None:  # fmt: skip
        import torch

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
        self.size = size
        self.rank = rank
        self.label = self.profile.label
        self.stream = stream if stream is not None else torch.cuda.Stream(self.device)

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

    # ------------------------------------------------------------------ the launch
    def _run(self, coll: str, t: Any, out: Any, async_op: bool) -> EmulatedWork | None:
        import torch

        if not (t.is_contiguous() and out.is_contiguous()):
            raise ValueError(f"emulated {coll} needs contiguous tensors")
        launch = plan_launch(self.profile, coll, ranks=self.size, rank=self.rank, t=t, out=out)
        cur = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(cur)
        with torch.cuda.stream(self.stream):
            launch_kernel(launch, t, out)
            if not torch.cuda.is_current_stream_capturing():
                t.record_stream(self.stream)
                if out is not t:
                    out.record_stream(self.stream)
            done = torch.cuda.Event()
            done.record(self.stream)
        work = EmulatedWork(done, self.device)
        if async_op:
            return work
        work.wait()
        return None

    # ------------------------------------------------------------------ the trace mark
    def mark_trace(self, path: Any) -> None:
        """Write the emulation mark into an exported trace file (docs/EMULATION.md)."""
        mark_trace_file(path, comm_marker(self.profile.name, ranks=self.size, rank=self.rank))
