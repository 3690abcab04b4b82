"""The communication model every emulated collective follows (docs/EMULATION.md).

Torch-free. Three collectives, named as in ``torch.distributed``:

==============  ===========================================  =======================
collective      ``size`` (bytes, as nccl-tests' ``S``)         busbw / algbw
==============  ===========================================  =======================
all_reduce      the tensor (input = output)                   2(R-1)/R
reduce_scatter  the full input, R x the output                (R-1)/R
all_gather      the full output, R x the input                (R-1)/R
==============  ===========================================  =======================

Timing: ``t = alpha + size / algbw`` (nccl-tests' ``algbw = S / t``; GB/s = 1e9 B/s).
HBM traffic of one GPU of the ring algorithm: all-reduce reads and writes
``2(R-1)/R x size`` each; reduce-scatter and all-gather ``(R-1)/R x size`` each way.
"""

from __future__ import annotations

COLLECTIVES: tuple[str, ...] = ("all_reduce", "reduce_scatter", "all_gather")

# dtype names as torch spells them (str(torch.bfloat16) without "torch.") -> bytes
DTYPE_BYTES: dict[str, int] = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "float64": 8,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "int8": 1,
}


def bus_factor(collective: str, ranks: int) -> float:
    """busbw / algbw (nccl-tests doc/PERFORMANCE.md)."""
    _check(collective, ranks)
    if collective == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    return (ranks - 1) / ranks


def message_bytes(collective: str, *, numel_in: int, numel_out: int, elem_bytes: int) -> int:
    """The ``size`` of the timing model for one call: all_reduce the tensor,
    reduce_scatter its (larger) input, all_gather its (larger) output."""
    if collective == "all_reduce":
        return numel_in * elem_bytes
    if collective == "reduce_scatter":
        return numel_in * elem_bytes
    if collective == "all_gather":
        return numel_out * elem_bytes
    raise ValueError(f"unknown collective {collective!r}")


def time_us(*, alpha_us: float, algbw_gbps: float, size_bytes: int) -> float:
    """t = alpha + size / algbw, in microseconds (bytes / (GB/s) = bytes / 1e3 us)."""
    return alpha_us + size_bytes / (algbw_gbps * 1e3)


def time_ns(*, alpha_us: float, algbw_gbps: float, size_bytes: int) -> int:
    """The modelled time rounded up to a whole ns (an emulated kernel lasts at least it)."""
    t = time_us(alpha_us=alpha_us, algbw_gbps=algbw_gbps, size_bytes=size_bytes) * 1e3
    n = int(t)
    return n if n >= t else n + 1


def hbm_bytes(collective: str, ranks: int, size_bytes: int) -> int:
    """Bytes one GPU reads from HBM (and, the same number, writes) in the ring algorithm:
    all_reduce 2(R-1)/R x size, reduce_scatter / all_gather (R-1)/R x size. Exact integer
    (size is a multiple of R for RS/AG; for all-reduce the product is floored)."""
    _check(collective, ranks)
    num = 2 * (ranks - 1) if collective == "all_reduce" else ranks - 1
    return (num * size_bytes) // ranks


def _check(collective: str, ranks: int) -> None:
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r} (one of {', '.join(COLLECTIVES)})")
    if ranks < 2:
        raise ValueError(f"a collective needs R >= 2 ranks, got {ranks}")
