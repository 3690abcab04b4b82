"""The paced stand-in's plan: what one GPU of NCCL's ring algorithm does to its own HBM,
step by step, and how the emulated kernel spreads it over the collective's modelled time
(docs/EMULATION.md §3b). Torch-free, so every byte count is tested on CPU; the CUDA
kernel (``reference_model/_paced_kernel.py``) executes exactly the step table built here.

One GPU (rank r) of a ring collective over R ranks, the message cut into R chunks of
``c = S / R`` bytes, moves through its **local HBM** (remote NVLink traffic excluded, the
peers' writes into this GPU's receive FIFO included):

==============  ===================================  ===================================
collective      reads                                writes
==============  ===================================  ===================================
all_reduce      S + 2(R-1) c p   (input, FIFO)       S + 2(R-1) c p   (output, FIFO)
reduce_scatter  S + (R-1) c p                        c + (R-1) c p
all_gather      c + (R-1) c p                        S + (R-1) c p
==============  ===================================  ===================================

``S`` is nccl-tests' size (all_reduce: the tensor; reduce_scatter: its input; all_gather:
its output); ``p`` is the protocol's FIFO factor: the bytes a FIFO line carries per byte of
data (Simple 1, LL 2: 8 B of data with 8 B of flags per 16-B line, LL128 128/120, taken
as 1 here, 6.7 % of the FIFO bytes left out). Derivation (ring all-reduce = reduce-scatter
then all-gather, 2R-1 steps): step 0 reads this rank's own input chunk and sends it; each
of the R-1 reduce steps receives a chunk into the FIFO (a peer's NVLink write: c p written
here), reads it back (c p), reads the matching input chunk (c) and sends the sum on (a
remote write: nothing here); the last of them also writes the reduced chunk to the output
(c); each of the R-1 gather steps receives a chunk (c p written), reads it (c p) and
writes it to the output (c). At R = 8, p = 1: 2.75 S each way, 5.5 S in all, against the
burst kernel's 1.75 S each way (``model.hbm_bytes``, the bytes on the links).

The stand-in runs that step table itself: one CTA per channel, each CTA its share of
every chunk, cut into slices of one FIFO slot; the incoming write is done by the
stand-in's own SMs (a real peer's SMs do it over NVLink), into a per-CTA FIFO of the
protocol's real size, so the FIFO bytes hit L2 or HBM as the real ones would. A share is
moved in passes of ``threads x UNROLL`` vectors (across FIFO slots, as NCCL keeps up to 8
steps in flight); pass k of the CTA's K
(:attr:`PacedPlan.pacing_points`) starts no earlier than ``k / K`` of the modelled time
after the CTA started, and the CTA spins to the modelled time at the end: the traffic is
paced over the whole collective, as a link-rate-bound ring paces it, instead of a burst
at the start.

Values the collectives leave (meaningless as results, documented so a test can check
the kernel): all_reduce: chunk (r + 1) mod R of t (the last reduce step's) is unchanged,
every other element holds some element of t; reduce_scatter: out = t's own chunk r;
all_gather: out's slot r = t, every other element of out holds some element of t.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from domino_prof.emulation.model import COLLECTIVES

VEC = 16  # bytes a thread moves per access (one 16-byte vector)
NCCL_STEPS = 8  # FIFO slots per channel (NCCL_STEPS)
UNROLL = 6  # vectors a thread keeps in flight per pass (the kernel's U)

# protocol -> (FIFO factor p, FIFO bytes per channel: NCCL's defaults, src/init.cc:
# DEFAULT_LL_BUFFSIZE = 8 lines x 512 threads x 8 steps x 16 B, DEFAULT_LL128_BUFFSIZE =
# 120 x 640 x 8 x 8 B, DEFAULT_BUFFSIZE = 4 MiB)
PROTOCOLS: dict[str, tuple[int, int]] = {
    "LL": (2, 8 * 512 * NCCL_STEPS * 16),
    "LL128": (1, 120 * 640 * NCCL_STEPS * 8),
    "Simple": (1, 1 << 22),
}

# step flags
READ_SRC, FIFO, WRITE_DST = 1, 2, 4


def protocol_of(algorithm: str) -> str:
    """``ring/LL`` -> ``LL``; ``ring/LL128``; ``ring/Simple``; anything else: Simple."""
    tail = algorithm.rsplit("/", 1)[-1].strip().lower()
    return {"ll": "LL", "ll128": "LL128"}.get(tail, "Simple")


def ring_steps(collective: str, *, ranks: int, rank: int) -> tuple[tuple[int, int, int], ...]:
    """The ring step table of one GPU: per step (src chunk, dst chunk, flags), a chunk
    index or -1. Chunks: all_reduce t's R chunks (src = dst = t); reduce_scatter the
    input's R chunks (src) and out (dst chunk 0); all_gather t (src chunk 0) and out's
    R slots (dst)."""
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}")
    R, r = ranks, rank
    if R < 2 or not 0 <= r < R:
        raise ValueError(f"rank {r} of {R}: need R >= 2 and 0 <= rank < R")
    steps: list[tuple[int, int, int]] = []
    if collective == "all_reduce":
        for s in range(R):  # reduce-scatter phase: chunk (r - s) mod R
            k = (r - s) % R
            flags = READ_SRC | (FIFO if s else 0) | (WRITE_DST if s == R - 1 else 0)
            steps.append((k, k if s == R - 1 else -1, flags))
        for s in range(1, R):  # all-gather phase: the other R - 1 chunks
            k = (r + 1 - s) % R
            steps.append((-1, k, FIFO | WRITE_DST))
    elif collective == "reduce_scatter":
        for s in range(R):  # ends on this rank's own chunk r
            k = (r + 1 + s) % R
            flags = READ_SRC | (FIFO if s else 0) | (WRITE_DST if s == R - 1 else 0)
            steps.append((k, 0 if s == R - 1 else -1, flags))
    else:  # all_gather: own slot first, then the R - 1 slots received
        steps.append((0, r, READ_SRC | WRITE_DST))
        for s in range(1, R):
            steps.append((-1, (r - s) % R, FIFO | WRITE_DST))
    return tuple(steps)


def ring_traffic(collective: str, *, ranks: int, size_bytes: int, fifo_factor: int = 1
                 ) -> tuple[int, int]:  # fmt: skip
    """(bytes read, bytes written) of one GPU's local HBM: the module table, exact when R
    divides ``size_bytes``."""
    R, p, S = ranks, fifo_factor, size_bytes
    c = S // R
    if collective == "all_reduce":
        return S + 2 * (R - 1) * c * p, S + 2 * (R - 1) * c * p
    if collective == "reduce_scatter":
        return S + (R - 1) * c * p, c + (R - 1) * c * p
    if collective == "all_gather":
        return c + (R - 1) * c * p, S + (R - 1) * c * p
    raise ValueError(f"unknown collective {collective!r}")


@dataclass(frozen=True, kw_only=True)
class PacedPlan:
    """Everything the paced kernel is given for one call (vectors of :data:`VEC` bytes)."""

    collective: str
    steps: tuple[tuple[int, int, int], ...]
    chunk_vec: int  # vectors per chunk (src and dst chunks have the same length)
    src_vec: int  # vectors of the src buffer
    dst_vec: int  # vectors of the dst buffer
    ctas: int
    threads: int
    slot_vec: int  # data vectors per FIFO slot (per CTA)
    fifo_factor: int  # FIFO lines written and read per data vector
    dur_ns: int
    # the peer's FIFO writes done by the stand-in's own SMs (not for LL: its FIFO stays in
    # L2 and those writes are the peer's SMs' work; docs/EMULATION.md §3b)
    peer_writes: bool = True

    @property
    def share_vec(self) -> int:
        """Vectors of each chunk one CTA handles (the last CTA may have fewer)."""
        return -(-self.chunk_vec // self.ctas)

    @property
    def slices(self) -> int:
        """Slices per step (of one CTA's share); the kernel paces K = steps x slices."""
        return max(1, -(-self.share_vec // self.slot_vec))

    @property
    def passes_per_step(self) -> int:
        """Passes of ``threads x UNROLL`` vectors over one CTA's share of a chunk (a pass
        may span several FIFO slots: NCCL keeps up to 8 steps in flight)."""
        return max(1, -(-self.share_vec // (self.threads * UNROLL)))

    @property
    def pacing_points(self) -> int:
        """K: the passes of one CTA over the whole call, each started on schedule."""
        return len(self.steps) * self.passes_per_step

    @property
    def fifo_vec(self) -> int:
        """FIFO vectors the kernel's scratch buffer needs (all CTAs)."""
        return self.ctas * NCCL_STEPS * self.slot_vec * self.fifo_factor

    def traffic(self) -> tuple[int, int]:
        """(bytes read, bytes written) the kernel moves: the step table over every chunk
        element once (FIFO lines x the protocol factor; the peer's FIFO writes only with
        ``peer_writes``)."""
        n = self.chunk_vec
        rd = wr = 0
        for src, dst, fl in self.steps:
            if fl & READ_SRC:
                rd += n
            if fl & FIFO:
                rd += n * self.fifo_factor
                if self.peer_writes:
                    wr += n * self.fifo_factor
            if fl & WRITE_DST:
                wr += n
        return rd * VEC, wr * VEC


def paced_plan(collective: str, *, ranks: int, rank: int, src_bytes: int, dst_bytes: int,
               ctas: int, threads: int, protocol: str, dur_ns: int,
               fifo_bytes: int | None = None) -> PacedPlan | None:  # fmt: skip
    """The plan of one call, or None when the buffers do not cut into whole 16-byte
    vectors per chunk (then the caller uses the burst kernel; TP shapes always cut)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r} (one of {', '.join(PROTOCOLS)})")
    p, fifo_default = PROTOCOLS[protocol]
    fifo = fifo_default if fifo_bytes is None else fifo_bytes
    R = ranks
    if src_bytes % VEC or dst_bytes % VEC:
        return None
    if collective == "all_reduce":
        if src_bytes != dst_bytes or (src_bytes // VEC) % R:
            return None
        chunk = src_bytes // VEC // R
    elif collective == "reduce_scatter":
        if src_bytes != R * dst_bytes:
            return None
        chunk = dst_bytes // VEC
    elif collective == "all_gather":
        if dst_bytes != R * src_bytes:
            return None
        chunk = src_bytes // VEC
    else:
        raise ValueError(f"unknown collective {collective!r}")
    slot = max(1, fifo // NCCL_STEPS // VEC // p)  # data vectors per slot
    return PacedPlan(collective=collective, steps=ring_steps(collective, ranks=R, rank=rank),
                     chunk_vec=chunk, src_vec=src_bytes // VEC, dst_vec=dst_bytes // VEC,
                     ctas=ctas, threads=threads, slot_vec=slot, fifo_factor=p,
                     dur_ns=dur_ns, peer_writes=protocol != "LL")  # fmt: skip


def step_table(plan: PacedPlan) -> np.ndarray:
    """The int32 [steps, 4] table the kernel reads: src chunk, dst chunk, flags, 0."""
    t = np.zeros((len(plan.steps), 4), np.int32)
    for i, (s, d, f) in enumerate(plan.steps):
        t[i, :3] = (s, d, f)
    return t


def simulate(plan: PacedPlan, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """What the kernel leaves in ``dst`` (a copy; ``src``/``dst`` are [n, 4] uint32 arrays
    of 16-byte vectors, the same array for an in-place all-reduce): the kernel's loops
    with each CTA's per-thread registers as one array, a register j holding the vector
    at offset j of the current pass (thread j % threads, lane j // threads). The CPU
    reference of the kernel (tests, and the GPU benchmark's output check)."""
    inplace = src is dst
    out = dst.copy()
    s_arr = out if inplace else src
    span = plan.threads * UNROLL
    n = plan.chunk_vec
    for b in range(plan.ctas):
        lo = b * plan.share_vec
        hi = min(lo + plan.share_vec, n)
        regs = np.zeros((span, 4), np.uint32)
        for sc, dc, fl in plan.steps:
            for base in range(lo, max(lo, hi), span):
                m = min(span, hi - base)
                if fl & READ_SRC:
                    regs[:m] = s_arr[sc * n + base: sc * n + base + m]
                # FIFO: written from the registers and read back; the output is written
                # from the registers (the FIFO holds the same values)
                if fl & WRITE_DST:
                    out[dc * n + base: dc * n + base + m] = regs[:m]
    return out
