"""The emulated collectives' Triton kernels (imported lazily by ``emulate.py``; needs
Triton, which torch's CUDA builds ship).

One body, three names (the name is what a trace shows and what the analyzer counts as
comm: ``emulated_allreduce_*``, ``emulated_reducescatter_*``, ``emulated_allgather_*``).
Launched with the profile's CTA count; each CTA streams its share of up to two copies
(``domino_prof.emulation.plan``: the bytes of the ring algorithm's HBM traffic), then,
with ``SPIN``, reads %globaltimer until ``dur_ns`` have passed since it started, so the
kernel lasts at least the modelled time, never less. ``SPIN=False`` (the CPU
interpreter, TRITON_INTERPRET=1, has no %globaltimer) only copies.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _now():
    return tl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
    )


@triton.jit
def _copy(src_ptr, src_lo, src_len, src_off, dst_ptr, dst_lo, dst_len, dst_off, count,
          pid, nprog, BLOCK: tl.constexpr, ALIGNED: tl.constexpr):  # fmt: skip
    # element k: dst[dst_lo + (dst_off + k) % dst_len] = src[src_lo + (src_off + k) % src_len]
    lane = tl.arange(0, BLOCK).to(tl.int64)
    if ALIGNED:
        # every lo/len/off is a multiple of BLOCK: a block never wraps, so its addresses
        # are one scalar base + lane; full blocks are unmasked (a mask of unknown
        # alignment would keep the accesses scalar), the tail block is masked, one CTA
        n_full = count // BLOCK
        for b in range(pid, n_full, nprog):
            start = b * BLOCK
            sb = tl.multiple_of(src_lo + (src_off + start) % src_len, BLOCK)
            db = tl.multiple_of(dst_lo + (dst_off + start) % dst_len, BLOCK)
            v = tl.load(src_ptr + sb + lane)
            tl.store(dst_ptr + db + lane, v)
        start = n_full * BLOCK
        if (start < count) & (pid == n_full % nprog):
            m = start + lane < count
            sb = src_lo + (src_off + start) % src_len
            db = dst_lo + (dst_off + start) % dst_len
            v = tl.load(src_ptr + sb + lane, mask=m)
            tl.store(dst_ptr + db + lane, v, mask=m)
    else:
        for start in range(pid * BLOCK, count, nprog * BLOCK):
            k = start + lane
            m = k < count
            v = tl.load(src_ptr + src_lo + (src_off + k) % src_len, mask=m)
            tl.store(dst_ptr + dst_lo + (dst_off + k) % dst_len, v, mask=m)


@triton.jit
def _body(a_src, a_src_lo, a_src_len, a_src_off, a_dst, a_dst_lo, a_dst_len, a_dst_off, a_count,
          b_src, b_src_lo, b_src_len, b_src_off, b_dst, b_dst_lo, b_dst_len, b_dst_off, b_count,
          dur_ns, BLOCK: tl.constexpr, SPIN: tl.constexpr, ALIGNED: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    if SPIN:
        t0 = _now()
    _copy(a_src, a_src_lo, a_src_len, a_src_off, a_dst, a_dst_lo, a_dst_len, a_dst_off, a_count,
          pid, nprog, BLOCK, ALIGNED)  # fmt: skip
    _copy(b_src, b_src_lo, b_src_len, b_src_off, b_dst, b_dst_lo, b_dst_len, b_dst_off, b_count,
          pid, nprog, BLOCK, ALIGNED)  # fmt: skip
    if SPIN:
        t = _now()
        while t - t0 < dur_ns:
            t = _now()


@triton.jit
def emulated_allreduce_kernel(a_src, a_src_lo, a_src_len, a_src_off, a_dst, a_dst_lo, a_dst_len,
                              a_dst_off, a_count, b_src, b_src_lo, b_src_len, b_src_off, b_dst,
                              b_dst_lo, b_dst_len, b_dst_off, b_count, dur_ns,
                              BLOCK: tl.constexpr, SPIN: tl.constexpr,
                              ALIGNED: tl.constexpr):  # fmt: skip
    _body(a_src, a_src_lo, a_src_len, a_src_off, a_dst, a_dst_lo, a_dst_len, a_dst_off, a_count,
          b_src, b_src_lo, b_src_len, b_src_off, b_dst, b_dst_lo, b_dst_len, b_dst_off, b_count,
          dur_ns, BLOCK, SPIN, ALIGNED)  # fmt: skip


@triton.jit
def emulated_reducescatter_kernel(a_src, a_src_lo, a_src_len, a_src_off, a_dst, a_dst_lo,
                                  a_dst_len, a_dst_off, a_count, b_src, b_src_lo, b_src_len,
                                  b_src_off, b_dst, b_dst_lo, b_dst_len, b_dst_off, b_count,
                                  dur_ns, BLOCK: tl.constexpr, SPIN: tl.constexpr,
                              ALIGNED: tl.constexpr):  # fmt: skip
    _body(a_src, a_src_lo, a_src_len, a_src_off, a_dst, a_dst_lo, a_dst_len, a_dst_off, a_count,
          b_src, b_src_lo, b_src_len, b_src_off, b_dst, b_dst_lo, b_dst_len, b_dst_off, b_count,
          dur_ns, BLOCK, SPIN, ALIGNED)  # fmt: skip


@triton.jit
def emulated_allgather_kernel(a_src, a_src_lo, a_src_len, a_src_off, a_dst, a_dst_lo, a_dst_len,
                              a_dst_off, a_count, b_src, b_src_lo, b_src_len, b_src_off, b_dst,
                              b_dst_lo, b_dst_len, b_dst_off, b_count, dur_ns,
                              BLOCK: tl.constexpr, SPIN: tl.constexpr,
                              ALIGNED: tl.constexpr):  # fmt: skip
    _body(a_src, a_src_lo, a_src_len, a_src_off, a_dst, a_dst_lo, a_dst_len, a_dst_off, a_count,
          b_src, b_src_lo, b_src_len, b_src_off, b_dst, b_dst_lo, b_dst_len, b_dst_off, b_count,
          dur_ns, BLOCK, SPIN, ALIGNED)  # fmt: skip


KERNELS = {
    "all_reduce": emulated_allreduce_kernel,
    "reduce_scatter": emulated_reducescatter_kernel,
    "all_gather": emulated_allgather_kernel,
}
