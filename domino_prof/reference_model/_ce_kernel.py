"""The copy-engine stand-in's kernels (``--comm-engine ce``; emulation/ce.py), compiled
with NVRTC and launched with ``cuLaunchKernel`` as the paced stand-in's are
(``_paced_kernel``), no shared memory: a start and a wait of one thread each, and the
reduction.

* ``emulated_<coll>_ce_start(u64 *t0)``: writes %globaltimer to ``*t0`` (the call's clock);
* ``emulated_<coll>_ce_start_link(u64 *t0, u64 *link, long long busy)``: the start where
  two comm streams share one link (``EmulatedComm.lane_sibling``): ``*t0`` = max(now,
  ``*link``), and ``*link`` = ``*t0 + busy`` (an atomic compare-and-swap loop), so a call
  holds the link for its modelled time from when it is ready and the link is free;
* ``emulated_<coll>_link_gate(u64 *link, long long busy)``: the same link taken before an
  SM stand-in's call, then a sleep until the call's slot starts;
* ``emulated_<coll>_ce_wait(const u64 *t0, long long due)``: sleeps (``__nanosleep``, no
  issue-slot spin) until ``*t0 + due``: a copy may not end before its modelled end;
* ``emulated_<coll>_ce_reduce_{bf16x8,bf16,f32}(ws, out, n, R)``: a reduce-scatter's
  reduction, out[i] = mean over r of ws[r n + i] (float accumulation; bf16x8: 16-byte
  vectors, n counted in vectors), 256 threads a CTA, grid-stride. Named in the emulated
  family so the analyzer counts the reduction as the collective's, as it is (torch's
  ``at::native::reduce_kernel`` of ``torch.mean``, used before 2026-12-04, counted as
  compute: 4.3 ms a headline step of "compute" only domino ran).

Named ``emulated_allreduce_...`` etc. so the analyzer's emulated family counts them as comm
(emulation/marker.py); the copies between them are same-device copies on the same stream,
which the analyzer counts as comm when they lie inside a call (after a kernel of the family,
before a wait: docs/METRICS.md "Device activity"). Imported lazily by ``emulate.py`` (needs
CUDA).
"""

from __future__ import annotations

import ctypes
from typing import Any

from domino_prof.reference_model import _paced_kernel as pk

_SHORT = {"all_reduce": "allreduce", "reduce_scatter": "reducescatter",
          "all_gather": "allgather"}  # fmt: skip

SOURCE = r"""
typedef unsigned long long u64;
__device__ __forceinline__ u64 now_ns() {
  u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}
// the link's slot of a call ready now: from max(now, the link's free time), for busy ns
// (a compare-and-swap loop: two streams' calls never take the same slot)
__device__ __forceinline__ u64 take_link(u64* link, long long busy) {
  const u64 now = now_ns();
  u64 old = *((volatile u64*)link), s;
  while (true) {
    s = old > now ? old : now;
    const u64 seen = atomicCAS(link, old, s + (u64)busy);
    if (seen == old) return s;
    old = seen;
  }
}
#define PAIR(C)                                                                          \
  extern "C" __global__ void __launch_bounds__(32) emulated_##C##_ce_start(u64* t0) {    \
    if (threadIdx.x == 0) *((volatile u64*)t0) = now_ns();                               \
  }                                                                                      \
  extern "C" __global__ void __launch_bounds__(32) emulated_##C##_ce_start_link(         \
      u64* t0, u64* link, long long busy) {                                              \
    if (threadIdx.x == 0) {                                                              \
      const u64 s = take_link(link, busy);                                               \
      *((volatile u64*)t0) = s;                                                          \
    }                                                                                    \
  }                                                                                      \
  extern "C" __global__ void __launch_bounds__(32) emulated_##C##_link_gate(            \
      u64* link, long long busy) {                                                       \
    if (threadIdx.x == 0) {                                                              \
      const u64 s = take_link(link, busy);                                               \
      while (now_ns() < s) __nanosleep(500);                                             \
    }                                                                                    \
  }                                                                                      \
  extern "C" __global__ void __launch_bounds__(32) emulated_##C##_ce_wait(               \
      const u64* t0, long long due) {                                                    \
    if (threadIdx.x == 0) {                                                              \
      const u64 end = *((volatile const u64*)t0) + (u64)due;                             \
      while (now_ns() < end) __nanosleep(500);                                           \
    }                                                                                    \
  }
__device__ __forceinline__ float bf2f(unsigned short x) {
  return __uint_as_float(((unsigned)x) << 16);
}
__device__ __forceinline__ unsigned short f2bf(float f) {  // round to nearest even
  unsigned u = __float_as_uint(f);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
#define GRID_STRIDE(i, n) \
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); \
       i += (long long)gridDim.x * blockDim.x)
#define REDUCE(C)                                                                        \
  extern "C" __global__ void __launch_bounds__(256) emulated_##C##_ce_reduce_bf16x8(     \
      const uint4* ws, uint4* out, long long n, int R) {                                 \
    const float s = 1.0f / R;                                                            \
    GRID_STRIDE(i, n) {                                                                  \
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};                           \
      for (int r = 0; r < R; ++r) {                                                      \
        uint4 v = ws[r * n + i];                                                         \
        const unsigned short* h = (const unsigned short*)&v;                             \
        for (int j = 0; j < 8; ++j) acc[j] += bf2f(h[j]);                                \
      }                                                                                  \
      uint4 o;                                                                           \
      unsigned short* p = (unsigned short*)&o;                                           \
      for (int j = 0; j < 8; ++j) p[j] = f2bf(acc[j] * s);                               \
      out[i] = o;                                                                        \
    }                                                                                    \
  }                                                                                      \
  extern "C" __global__ void __launch_bounds__(256) emulated_##C##_ce_reduce_bf16(       \
      const unsigned short* ws, unsigned short* out, long long n, int R) {               \
    GRID_STRIDE(i, n) {                                                                  \
      float acc = 0.f;                                                                   \
      for (int r = 0; r < R; ++r) acc += bf2f(ws[r * n + i]);                            \
      out[i] = f2bf(acc / R);                                                            \
    }                                                                                    \
  }                                                                                      \
  extern "C" __global__ void __launch_bounds__(256) emulated_##C##_ce_reduce_f32(        \
      const float* ws, float* out, long long n, int R) {                                 \
    GRID_STRIDE(i, n) {                                                                  \
      float acc = 0.f;                                                                   \
      for (int r = 0; r < R; ++r) acc += ws[r * n + i];                                  \
      out[i] = acc / R;                                                                  \
    }                                                                                    \
  }
PAIR(allreduce)
PAIR(reducescatter)
PAIR(allgather)
REDUCE(allreduce)
REDUCE(reducescatter)
"""
REDUCE_THREADS = 256
REDUCE_MAX_CTAS = 4096  # grid-stride beyond it

_FUNCS: dict[str, Any] = {}


def _func(name: str) -> Any:
    if name not in _FUNCS:
        func, mod = pk._compile(name, threads=32, pad=0, max_regs=None, source=SOURCE)
        _FUNCS[name] = (func, mod)  # the module kept loaded with its function
    return _FUNCS[name][0]


class Launch:
    """One prepared launch of a start, wait or reduce kernel (its argument array built
    once)."""

    __slots__ = ("_args", "_array", "_func", "_grid", "_lib", "_threads")

    def __init__(self, func: Any, args: list, *, grid: int = 1, threads: int = 1) -> None:
        self._func, self._args, self._lib = func, args, pk._libcuda()
        self._grid, self._threads = grid, threads
        arr = (ctypes.c_void_p * len(args))()
        for i, a in enumerate(args):
            arr[i] = ctypes.cast(ctypes.byref(a), ctypes.c_void_p)
        self._array = arr

    def set_pointer(self, i: int, ptr: int) -> None:
        """Argument ``i`` (a pointer) for the next launches (a call's own output buffer);
        the driver copies the arguments at launch, and at capture into the graph node."""
        self._args[i].value = ptr

    def __call__(self, stream_handle: int) -> None:
        pk._check(self._lib.cuLaunchKernel(self._func, self._grid, 1, 1, self._threads, 1, 1,
                                           0, ctypes.c_void_p(stream_handle), self._array,
                                           None),
                  "cuLaunchKernel")  # fmt: skip


def memcpy_dtod() -> Any:
    """``cuMemcpyDtoDAsync_v2(dst, src, bytes, stream)`` with its argument types set: the
    device copy torch's ``copy_`` issues for two contiguous same-dtype views, in one
    ctypes call (``DOMINO_PROF_CE_COPY=driver``, emulation/ce.py); returns the CUresult."""
    f = pk._libcuda().cuMemcpyDtoDAsync_v2
    f.argtypes = (ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p)
    f.restype = ctypes.c_int
    return f


def start(collective: str, clock_ptr: int) -> Launch:
    return Launch(_func(f"emulated_{_SHORT[collective]}_ce_start"), [ctypes.c_void_p(clock_ptr)])


def start_link(collective: str, clock_ptr: int, link_ptr: int, busy_ns: int) -> Launch:
    """The call's start where comm streams share one link (``EmulatedComm.lane_sibling``):
    its clock is max(now, the link's free time), and the link is then busy ``busy_ns``
    (the call's modelled duration) from there (one compare-and-swap loop, so two streams'
    starts never take the same slot)."""
    return Launch(_func(f"emulated_{_SHORT[collective]}_ce_start_link"),
                  [ctypes.c_void_p(clock_ptr), ctypes.c_void_p(link_ptr),
                   ctypes.c_longlong(int(busy_ns))])  # fmt: skip


def link_gate(collective: str, link_ptr: int, busy_ns: int) -> Launch:
    """Before an SM stand-in's call where comm streams share one link
    (``EmulatedComm.lane_sibling``): takes the link from max(now, its free time) for
    ``busy_ns`` (the call's modelled duration, as :func:`start_link`) and sleeps until
    then, so the stand-in kernel after it starts when the link is its."""
    return Launch(_func(f"emulated_{_SHORT[collective]}_link_gate"),
                  [ctypes.c_void_p(link_ptr), ctypes.c_longlong(int(busy_ns))])  # fmt: skip


def wait(collective: str, clock_ptr: int, due_ns: int) -> Launch:
    return Launch(_func(f"emulated_{_SHORT[collective]}_ce_wait"),
                  [ctypes.c_void_p(clock_ptr), ctypes.c_longlong(int(due_ns))])  # fmt: skip


def reduce(collective: str, dtype_name: str, *, ws_ptr: int, out_ptr: int, numel: int,
           ranks: int) -> Launch | None:  # fmt: skip
    """The reduction of ``ranks`` chunks of ``numel`` elements at ``ws_ptr`` into
    ``out_ptr`` (argument 1, :meth:`Launch.set_pointer` for another output), or None for a
    dtype without a kernel here (the caller reduces with torch). bf16 runs 16-byte vectors
    when ``numel`` is a multiple of 8 and both buffers are 16-byte aligned."""
    if dtype_name == "bfloat16" and numel % 8 == 0 and ws_ptr % 16 == 0 and out_ptr % 16 == 0:
        kind, n = "bf16x8", numel // 8
    elif dtype_name == "bfloat16":
        kind, n = "bf16", numel
    elif dtype_name == "float32":
        kind, n = "f32", numel
    else:
        return None
    grid = max(1, min(REDUCE_MAX_CTAS, -(-n // REDUCE_THREADS)))
    func = _func(f"emulated_{_SHORT[collective]}_ce_reduce_{kind}")
    return Launch(func, [ctypes.c_void_p(ws_ptr), ctypes.c_void_p(out_ptr),
                         ctypes.c_longlong(n), ctypes.c_int(ranks)],
                  grid=grid, threads=REDUCE_THREADS)  # fmt: skip
