"""Copy-engine collectives (``run --comm-engine ce``): the plan of one rank's side of a
TP-R all-gather, reduce-scatter or all-reduce whose data moves by copies, not by an SM
kernel (issue 34). Torch-free: ``reference_model.emulate`` plays the plan on one GPU.

What it stands for: torch's symmetric-memory "low-contention" collectives
(``torch.ops.symm_mem._low_contention_all_gather`` / ``_low_contention_reduce_scatter``:
``cudaMemcpyAsync`` of each peer's chunk over NVLink between two symmetric-memory barriers;
the reduce-scatter pushes every peer its chunk into a workspace, then reduces the R chunks
it received with an SM kernel) and NCCL 2.28's copy-engine collectives (its blog: "CEs ...
drive NVLink transfers, reducing compute-resource contention for SMs"). An all-reduce is a
reduce-scatter then an all-gather of the reduced chunk (torch has no low-contention
all-reduce; this is the composition).

Time model, per rank (the copies of one collective run one after another on one stream, as
torch's loop issues them): a barrier, then R copies of a chunk of ``n`` bytes: the rank's
own (local: ``copy_alpha_us`` only) and R-1 over NVLink at ``bw_GBps`` each
(``copy_alpha_us + n / bw``), then a barrier; a reduce-scatter then reduces the R chunks
(an SM kernel that runs: reads R n, writes n, modelled at ``reduce_GBps`` of HBM traffic
plus ``reduce_alpha_us``). One clock per call: every time is from the call's start, so an
all-reduce's gather phase is due after the reduce-scatter's modelled end, its reduction
included. Copy ``k`` may not end before its modelled end (``Step.due_ns``), a phase not
before ``end_ns``, its reduction not before ``reduce_end_ns``: the stand-in takes the
model's time, or longer where its own kernels and graph nodes take longer (a lag absorbed
by the next step's slack, not added to every later one: before 2026-12-04 each phase
restarted the clock, and a graph-captured all-reduce of [4096, 3072] bf16 took 236 µs
against a 185.5 µs model that left the reduction out).

The figures are **modelled, not measured** (no machine with 2+ GPUs was lent):
``bw_GBps`` 330 GB/s per direction is NCCL's measured ring all-reduce bus bandwidth on
the same NVLink4 links (the h200-nvlink-tp8 profile; line rate 450, ~370 effective for
copies per the NCCL maintainer cited there), so a copy-engine collective here is no faster
on the wire than NCCL's and an A/B isolates the SMs the collective holds. ``copy_alpha_us``
2 and ``barrier_us`` 5: a copy's launch-to-start on the copy engine and a symmetric-memory
barrier (a one-CTA kernel signalling R-1 peers), both order-of-magnitude estimates.
``reduce_GBps`` 3678 is measured: a 25 MB same-device copy on the lent H200, 1839 GB/s each
way (reports/emulated-h200-2026-12-04c/probe_ce_copy.jsonl); ``reduce_alpha_us`` 2, a kernel's
launch-to-start in a graph. ``DOMINO_PROF_CE_GBPS`` overrides ``bw_GBps`` for sensitivity runs (a diagnostic).

How the stand-in holds a call to the model (``pace``, ``DOMINO_PROF_CE_PACE``): ``copy``
waits after every copy until its ``due_ns`` (the copies' traffic spread as the wire would
spread it; two graph nodes a copy), ``phase`` only at a phase's end and after a reduction
(the copies run at the local copy's speed, then one wait: the graph nodes of torch's op,
a barrier, R copies and a barrier a phase, 21 an all-reduce against ``copy``'s 37).
``phase`` is the default, by measurement (reports/emulated-h200-2026-12-04d, one H200, the
headline with ``--cuda-graphs``, one session): domino 76.98 against ``copy``'s 77.18 ms,
domino-sp 78.25 against 79.41, llama3-8b domino-sp 128.49 against 131.78; a graph of 20
all-reduces 218 against 231 µs each (model 195).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from domino_prof.errors import ConfigError

BW_GBPS = 330.0
COPY_ALPHA_US = 2.0
BARRIER_US = 5.0
REDUCE_GBPS = 3678.0  # HBM read + write of a copy kernel, measured (module doc)
REDUCE_ALPHA_US = 2.0
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
PACES = ("copy", "phase")
PACE = "phase"  # measured: reports/emulated-h200-2026-12-04d (module doc)
# how the stand-in issues its copies (DOMINO_PROF_CE_COPY): "torch", a tensor copy_ each
# (~10 us of host a copy: eager runs are host-bound), or "driver", cuMemcpyDtoDAsync
# through ctypes on precomputed addresses (the same device copy, a fraction of the host:
# 150 against 252 us of host an all-reduce on an H100 host, benchmarks/probe_ce_copier.py;
# eager ce domino stays host-bound with it, 0.52 of nocomm: reports/emulated-h100-2026-12-06,
# so torch stays the default, bit-equal either way)
COPIERS = ("torch", "driver")
COPIER = "torch"


def _choice_env(name: str, choices: tuple[str, ...], default: str) -> str:
    """The value of environment variable ``name`` (unset or empty: ``default``), one of
    ``choices``, else a one-line ConfigError."""
    v = os.environ.get(name)
    if not v:
        return default
    if v not in choices:
        raise ConfigError(f"{name}={v!r}: one of {', '.join(choices)}; unset it for {default}")
    return v


@dataclass(frozen=True)
class CeParams:
    bw_gbps: float = BW_GBPS
    copy_alpha_us: float = COPY_ALPHA_US
    barrier_us: float = BARRIER_US
    reduce_gbps: float = REDUCE_GBPS
    reduce_alpha_us: float = REDUCE_ALPHA_US
    pace: str = PACE
    copier: str = COPIER

    @staticmethod
    def from_env() -> CeParams:
        kw: dict = {}
        v = os.environ.get("DOMINO_PROF_CE_GBPS")
        if v:
            try:
                bw = float(v)
            except ValueError:
                bw = -1.0
            if not bw > 0:
                raise ConfigError(f"DOMINO_PROF_CE_GBPS={v!r} is not a bandwidth in GB/s > 0; "
                                  "unset it or give e.g. 250")  # fmt: skip
            kw["bw_gbps"] = bw
        kw["pace"] = _choice_env("DOMINO_PROF_CE_PACE", PACES, PACE)
        kw["copier"] = _choice_env("DOMINO_PROF_CE_COPY", COPIERS, COPIER)
        return CeParams(**kw)


@dataclass(frozen=True)
class Step:
    """One copy: ``count`` elements from buffer ``src`` at element ``src_off`` to ``dst``
    at ``dst_off`` (buffers: ``t`` the input, ``out`` the output, ``ws`` the R-chunk
    workspace, ``red`` the reduced chunk); it may not end before ``due_ns`` after the
    call started."""

    src: str
    src_off: int
    dst: str
    dst_off: int
    count: int
    due_ns: int


@dataclass(frozen=True)
class Phase:
    """The copies of one phase, the time it may not end before (its closing barrier
    included), and whether the R workspace chunks are then reduced (into ``reduce_to``
    at ``reduce_off``), not before ``reduce_end_ns``. Times from the call's start."""

    steps: tuple[Step, ...]
    end_ns: int
    reduce_to: str | None = None
    reduce_off: int = 0
    reduce_end_ns: int | None = None

    @property
    def done_ns(self) -> int:
        """When the phase is done by the model: its reduction's end, else its own."""
        return self.end_ns if self.reduce_end_ns is None else self.reduce_end_ns


def _copies(src: str, src_offs: list[int], dst: str, dst_offs: list[int], count: int, *,
            rank: int, ranks: int, elem_bytes: int, p: CeParams, t0_ns: int) -> Phase:  # fmt: skip
    """R copies in torch's order (step s: peer (rank - s) mod R; s = 0 the own chunk),
    after a barrier; due times cumulative from ``t0_ns`` (the call's clock)."""
    remote_ns = p.copy_alpha_us * 1e3 + count * elem_bytes / p.bw_gbps  # B / (GB/s) = ns
    t = t0_ns + p.barrier_us * 1e3
    steps = []
    for s in range(ranks):
        peer = (rank - s) % ranks
        t += p.copy_alpha_us * 1e3 if s == 0 else remote_ns
        steps.append(Step(src, src_offs[peer], dst, dst_offs[peer], count, round(t)))
    return Phase(tuple(steps), round(t + p.barrier_us * 1e3))


def plan(collective: str, *, ranks: int, rank: int, numel_in: int, numel_out: int,
         elem_bytes: int, params: CeParams | None = None) -> tuple[Phase, ...]:  # fmt: skip
    """The phases of one call. all_gather: t [n] -> out [R n], peer p's chunk into out's
    slot p (here: t copied there; the values are meaningless, the bytes are the real
    ones). reduce_scatter: t [R n] -> out [n]: t's chunk p pushed to peer p's workspace
    slot ``rank`` (here: ws slot p), then ws [R, n] reduced into out. all_reduce: t [N]:
    the reduce-scatter of t into ``red`` [N / R], then the all-gather of red into t."""
    p = params or CeParams()
    if collective not in COLLECTIVES:
        raise ValueError(f"copy-engine collective {collective!r}; one of {COLLECTIVES}")
    if ranks < 2 or not 0 <= rank < ranks:
        raise ValueError(f"rank {rank} of {ranks}")
    kw = {"rank": rank, "ranks": ranks, "elem_bytes": elem_bytes, "p": p}
    if collective == "all_gather":
        if numel_out != ranks * numel_in:
            raise ValueError("all_gather: out must hold R x t")
        n = numel_in
        return (_copies("t", [0] * ranks, "out", [i * n for i in range(ranks)], n,
                        t0_ns=0, **kw),)  # fmt: skip
    if collective == "reduce_scatter":
        if numel_in != ranks * numel_out:
            raise ValueError("reduce_scatter: t must hold R x out")
        n = numel_out
        ph = _copies("t", [i * n for i in range(ranks)], "ws", [i * n for i in range(ranks)],
                     n, t0_ns=0, **kw)  # fmt: skip
        return (_reduced(ph, "out", n, ranks=ranks, elem_bytes=elem_bytes, p=p),)
    if numel_in % ranks:
        raise ConfigError(f"--comm-engine ce: an all-reduce of {numel_in} elements does not "
                          f"split into {ranks} equal chunks; use --comm-engine sm")  # fmt: skip
    n = numel_in // ranks
    offs = [i * n for i in range(ranks)]
    rs = _reduced(_copies("t", offs, "ws", offs, n, t0_ns=0, **kw), "red", n, ranks=ranks,
                  elem_bytes=elem_bytes, p=p)  # fmt: skip
    ag = _copies("red", [0] * ranks, "t", offs, n, t0_ns=rs.done_ns, **kw)
    return (rs, ag)


def _reduced(ph: Phase, to: str, n: int, *, ranks: int, elem_bytes: int, p: CeParams) -> Phase:
    """``ph`` followed by the reduction of its R chunks of ``n`` elements into ``to``:
    R n read and n written at ``reduce_gbps``, plus ``reduce_alpha_us``."""
    reduce_ns = p.reduce_alpha_us * 1e3 + (ranks + 1) * n * elem_bytes / p.reduce_gbps
    return Phase(ph.steps, ph.end_ns, reduce_to=to, reduce_end_ns=round(ph.end_ns + reduce_ns))


def total_ns(phases: tuple[Phase, ...]) -> int:
    """The modelled duration of a call, from its start to its last phase's end (the
    reductions included)."""
    return phases[-1].done_ns
