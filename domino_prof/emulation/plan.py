"""What an emulated collective's kernel copies (torch-free, so its byte count is tested
on CPU): at most two streaming copies whose reads and writes add up to the HBM-bytes
model (``model.hbm_bytes``), arranged so the outputs hold the values documented in
docs/EMULATION.md (meaningless as results, and labelled so):

- all_reduce (t [N], in place): t is read and written back unchanged, wrapping around it
  until 2(R-1)/R x N elements have moved;
- all_gather (t [n] -> out [R n], rank r): t is copied into out's own slot r, then into
  the next slots (r+1, ... mod R) for (R-1) n elements in all; the one slot before r
  keeps what ``out`` held (at R = 2: the peer's slot);
- reduce_scatter (t [R n] -> out [n], rank r): out = t's own rows r n .. (r+1) n, then
  the other rows of t are read and written back unchanged for (R-2) n more elements.

A :class:`Copy` moves ``count`` elements: element k reads
``src[src_lo + (src_off + k) % src_len]`` and writes ``dst[dst_lo + (dst_off + k) % dst_len]``.
Counts are elements; the bytes are ``count x element bytes`` (= the model's when R divides
the element count; otherwise floored, less than one element off).
"""

from __future__ import annotations

from dataclasses import dataclass

from domino_prof.emulation.model import COLLECTIVES


@dataclass(frozen=True, kw_only=True)
class Copy:
    src: str  # "t" | "out"
    src_lo: int
    src_len: int
    src_off: int
    dst: str
    dst_lo: int
    dst_len: int
    dst_off: int
    count: int


def plan(collective: str, *, ranks: int, rank: int, numel_t: int) -> tuple[Copy, ...]:
    """The copies of one emulated call; ``numel_t`` is t's element count (all_reduce:
    the tensor; all_gather: the local input n; reduce_scatter: the full input R n)."""
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}")
    if ranks < 2 or not 0 <= rank < ranks:
        raise ValueError(f"rank {rank} of {ranks}: need R >= 2 and 0 <= rank < R")
    R, r = ranks, rank
    if collective == "all_reduce":
        n = numel_t
        count = (2 * (R - 1) * n) // R
        return (_identity("t", 0, n, 0, count),) if count else ()
    if collective == "all_gather":
        n = numel_t
        return (Copy(src="t", src_lo=0, src_len=n, src_off=0,
                     dst="out", dst_lo=0, dst_len=R * n, dst_off=r * n, count=(R - 1) * n),)  # fmt: skip
    if numel_t % R:
        raise ValueError(f"reduce_scatter input of {numel_t} elements is not divisible by R={R}")
    n = numel_t // R
    own = Copy(src="t", src_lo=r * n, src_len=n, src_off=0,
               dst="out", dst_lo=0, dst_len=n, dst_off=0, count=n)  # fmt: skip
    rest = (R - 2) * n
    return (own, _identity("t", 0, R * n, ((r + 1) % R) * n, rest)) if rest else (own,)


def _identity(t: str, lo: int, length: int, off: int, count: int) -> Copy:
    return Copy(src=t, src_lo=lo, src_len=length, src_off=off,
                dst=t, dst_lo=lo, dst_len=length, dst_off=off, count=count)  # fmt: skip


def moved_elements(copies: tuple[Copy, ...]) -> int:
    """Elements read (= written) by the copies."""
    return sum(c.count for c in copies)
