"""A plain Triton GEMM for the GEMMs that run beside a collective (``--overlap-gemm``).

Why (issue 34; measured on one H200, ``benchmarks/bench_overlap_gemm.py``,
reports/emulated-h200-2026-12-04/): torch's cuBLAS GEMMs at the headline shape are
*persistent* kernels sized to the whole GPU (grid 128-132 CTAs, one per SM) launched in
thread-block *clusters* (1x2, 2x4, ...). A collective kernel that holds 24 SMs, spread
over the GPU's GPCs, leaves 108 SMs, but a cluster must fit in one GPC's free SMs: the
CTAs that find no room run as a second wave, and the GEMM takes 1.3-2x its time alone
(that is most of domino's *overlap tax*: 26.6 -> 37.6 ms of GEMM time per step).
torch's SM carveout does not cure it (the Lt kernels it picks keep their clusters).

A non-persistent kernel, one CTA per output tile and no clusters, just runs its tiles
on whichever SMs are free: alone it is somewhat slower than cuBLAS, beside the
collective it can be faster. Which of the two wins is per GEMM shape and measured:
``CONFIGS`` holds, per (M, N, K) of the headline shard, the tile configuration that won
beside the emulated all-reduce, or ``None`` where cuBLAS won (those stay on
``torch.mm``). A shape not in the table stays on cuBLAS too: over the 15 measured shapes
no one tile won on the whole (the best, 128x128x64 with 4 warps: 0.96x cuBLAS beside on
the geometric mean, 1.28x alone), so an unmeasured shape is not bet on; measure yours
with the benchmark and add its line.

The kernel is the textbook tiled GEMM (Triton's matmul tutorial: grouped tile order,
fp32 accumulation), on any strides, so ``x @ w.t()`` and ``dyᵀ @ x`` need no copy, with
an accumulate flag (``c += a @ b``: the weight gradients of later micro-batches).
Triton is imported on first use only: CPU runs, the analysis and the tests without a
GPU never need it (``available()`` says whether it can run here).
"""

from __future__ import annotations

from typing import NamedTuple


class Tile(NamedTuple):
    """One launch configuration: output tile BM x BN, K step BK, pipeline stages, warps."""

    bm: int
    bn: int
    bk: int
    stages: int
    warps: int

    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}/s{self.stages}w{self.warps}"


DEFAULT = Tile(128, 128, 64, 4, 8)

# The tiles a sweep tries (bench_overlap_gemm.py): the usual Hopper bf16 candidates
# (inductor's mm templates hold the same kinds), shared memory <= 192 KB.
SWEEP = (
    Tile(128, 128, 64, 3, 8),
    Tile(128, 128, 64, 4, 8),
    Tile(128, 128, 64, 4, 4),
    Tile(128, 256, 64, 3, 8),
    Tile(256, 128, 64, 3, 8),
    Tile(128, 64, 64, 4, 4),
    Tile(64, 128, 64, 4, 4),
    Tile(64, 256, 64, 4, 8),
    Tile(128, 128, 128, 3, 8),
    Tile(64, 64, 64, 5, 4),
)

# (M, N, K) -> the tile that won beside the collective by > 3 % (bench_overlap_gemm.py's
# MARGIN), or None: cuBLAS did (torch.mm). Measured 2026-12-04 on one H200 (torch 2.11,
# emulated h200-nvlink-tp8 all-reduce beside; reports/emulated-h200-2026-12-04/
# bench_overlap_gemm.json): llama3-3b at TP 8, micro-batches of 4096 tokens, weight
# gradients over 8192. Beside / alone µs, cuBLAS -> this tile, in the comments.
CONFIGS: dict[tuple[int, int, int], Tile | None] = {
    (4096, 640, 3072): Tile(128, 128, 64, 3, 8),  # qkv: 42.9 -> 40.2 (alone 22.2 -> 40.1)
    (4096, 3072, 384): None,  # wo: 29.0, best tile 30.5
    (4096, 2048, 3072): Tile(128, 128, 64, 3, 8),  # w13: 127.4 -> 106.8 (65.6 -> 85.9)
    (4096, 3072, 1024): None,  # w2: 59.0, best tile 60.6
    (4096, 16032, 3072): None,  # head: 538.6, best tile 670.4
    (4096, 3072, 640): None,  # qkv.dgrad: 42.1, best tile 40.9 (inside the margin)
    (4096, 384, 3072): Tile(64, 128, 64, 4, 4),  # wo.dgrad: 30.6 -> 23.0 (14.5 -> 19.5)
    (4096, 3072, 2048): Tile(256, 128, 64, 3, 8),  # w13.dgrad: 111.0 -> 103.0 (67.1 -> 78.4)
    (4096, 1024, 3072): Tile(128, 128, 64, 4, 4),  # w2.dgrad: 64.9 -> 56.1 (34.0 -> 38.4)
    (4096, 3072, 16032): Tile(128, 128, 64, 4, 8),  # head.dgrad: 616.6 -> 572.7 (490 -> 557)
    (640, 3072, 8192): None,  # qkv.wgrad: 85.5, best tile 86.2
    (3072, 384, 8192): Tile(64, 128, 64, 4, 4),  # wo.wgrad: 64.1 -> 46.4 (32.3 -> 48.8)
    (2048, 3072, 8192): Tile(128, 128, 64, 4, 4),  # w13.wgrad: 221.5 -> 183.7 (133 -> 141)
    (3072, 1024, 8192): Tile(128, 128, 64, 4, 4),  # w2.wgrad: 126.9 -> 93.5 (65.5 -> 89.8)
    (16032, 3072, 8192): None,  # head.wgrad: 1065.7, best tile 1130.0
}

_kernel = None


def available() -> bool:
    """Whether the Triton GEMM can run here: Triton importable and a CUDA device."""
    try:
        import torch
        import triton  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


def tile_for(m: int, n: int, k: int) -> Tile | None:
    """The tile for an (M, N, K) GEMM, or None where torch's cuBLAS is to be used."""
    return CONFIGS.get((m, n, k))


def beside(a, b, out=None, accumulate: bool = False):
    """The GEMM of a segment issued beside a collective (units.set_gemm_beside): this
    kernel where ``CONFIGS`` holds a tile for the shape and the operands are CUDA
    bf16/fp16 matrices of one dtype, else None (the caller uses torch's)."""
    if a.dim() != 2 or b.dim() != 2 or not a.is_cuda or a.dtype != b.dtype:
        return None
    if a.dtype.itemsize != 2 or (out is not None and out.dtype != a.dtype):
        return None
    t = tile_for(a.shape[0], b.shape[1], a.shape[1])
    if t is None:
        return None
    return mm(a, b, out=out, accumulate=accumulate, tile=t)


def _build():
    import triton
    import triton.language as tl

    @triton.jit
    def mm_kernel(
        a_ptr, b_ptr, c_ptr, M, N, K,
        s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
        ACC: tl.constexpr, EVEN_K: tl.constexpr, EVEN_MN: tl.constexpr,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr,
    ):  # fmt: skip
        # grouped order: GM row tiles share their B columns while they are in L2
        pid = tl.program_id(0)
        tiles_m = tl.cdiv(M, BM)
        tiles_n = tl.cdiv(N, BN)
        per_group = GM * tiles_n
        first_m = (pid // per_group) * GM
        rows = min(tiles_m - first_m, GM)
        pid_m = first_m + (pid % per_group) % rows
        pid_n = (pid % per_group) // rows
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        if EVEN_MN:  # whole tiles: tell the compiler the rows/columns are aligned runs,
            # so the loads along a contiguous M or N (dyᵀ, dy @ W) are vectorised (without
            # the hints those forms ran 10-20x slower than cuBLAS, 2026-12-04)
            am = tl.max_contiguous(tl.multiple_of(rm, BM), BM)
            bn = tl.max_contiguous(tl.multiple_of(rn, BN), BN)
        else:  # out-of-range rows/columns read a wrapped row/column (valid), never stored
            am = rm % M
            bn = rn % N
        a = a_ptr + am[:, None] * s_am + rk[None, :] * s_ak
        b = b_ptr + rk[:, None] * s_bk + bn[None, :] * s_bn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            if EVEN_K:
                x = tl.load(a)
                y = tl.load(b)
            else:
                x = tl.load(a, mask=(k0 + rk)[None, :] < K, other=0.0)
                y = tl.load(b, mask=(k0 + rk)[:, None] < K, other=0.0)
            acc = tl.dot(x, y, acc)
            a += BK * s_ak
            b += BK * s_bk
        c = c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn
        inside = (rm[:, None] < M) & (rn[None, :] < N)
        if ACC:
            acc += tl.load(c, mask=inside, other=0.0).to(tl.float32)
        tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=inside)

    return mm_kernel


def mm(a, b, out=None, accumulate: bool = False, tile: Tile | None = None):
    """``out = a @ b`` (``accumulate``: ``out += a @ b``) with the Triton kernel.
    a: [M, K], b: [K, N], any strides; out: [M, N] (allocated when None, a's dtype).
    ``tile``: the launch configuration (default: ``tile_for``'s, or DEFAULT where the
    table has none: a caller that asks for this kernel gets it)."""
    import torch

    global _kernel
    if _kernel is None:
        _kernel = _build()
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise ValueError(f"mm: inner sizes differ, {tuple(a.shape)} @ {tuple(b.shape)}")
    if out is None:
        if accumulate:
            raise ValueError("mm: accumulate needs an out tensor")
        out = torch.empty(m, n, device=a.device, dtype=a.dtype)
    t = tile or tile_for(m, n, k) or DEFAULT
    grid = (((m + t.bm - 1) // t.bm) * ((n + t.bn - 1) // t.bn),)
    _kernel[grid](
        a, b, out, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        ACC=accumulate, EVEN_K=k % t.bk == 0, EVEN_MN=m % t.bm == 0 and n % t.bn == 0,
        BM=t.bm, BN=t.bn, BK=t.bk, GM=8,
        num_stages=t.stages, num_warps=t.warps,
    )  # fmt: skip
    return out
