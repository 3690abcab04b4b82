"""The copy-engine stand-in's two tiny kernels (``--comm-engine ce``; emulation/ce.py):
compiled with NVRTC and launched with ``cuLaunchKernel`` as the paced stand-in's are
(``_paced_kernel``), one thread each, no shared memory.

* ``emulated_<coll>_ce_start(u64 *t0)``: writes %globaltimer to ``*t0`` (a phase's clock);
* ``emulated_<coll>_ce_wait(const u64 *t0, long long due)``: sleeps (``__nanosleep``, no
  issue-slot spin) until ``*t0 + due``: a copy may not end before its modelled end.

Named ``emulated_allreduce_...`` etc. so the analyzer's emulated family counts them as comm
(emulation/marker.py); the copies between them are same-device copies on the same stream,
which the analyzer counts as comm on a stream that runs emulated comm kernels
(docs/METRICS.md "Device activity"). Imported lazily by ``emulate.py`` (needs CUDA).
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
#define PAIR(C)                                                                          \
  extern "C" __global__ void __launch_bounds__(32) emulated_##C##_ce_start(u64* t0) {    \
    if (threadIdx.x == 0) *((volatile u64*)t0) = now_ns();                               \
  }                                                                                      \
  extern "C" __global__ void __launch_bounds__(32) emulated_##C##_ce_wait(               \
      const u64* t0, long long due) {                                                    \
    if (threadIdx.x == 0) {                                                              \
      const u64 end = *((volatile const u64*)t0) + (u64)due;                             \
      while (now_ns() < end) __nanosleep(500);                                           \
    }                                                                                    \
  }
PAIR(allreduce)
PAIR(reducescatter)
PAIR(allgather)
"""

_FUNCS: dict[str, Any] = {}


def _func(name: str) -> Any:
    if name not in _FUNCS:
        func, mod = pk._compile(name, threads=32, pad=0, max_regs=None, source=SOURCE)
        _FUNCS[name] = (func, mod)  # the module kept loaded with its function
    return _FUNCS[name][0]


class Launch:
    """One prepared launch of a start or wait kernel (its argument array built once)."""

    __slots__ = ("_args", "_array", "_func", "_lib")

    def __init__(self, func: Any, args: list) -> None:
        self._func, self._args, self._lib = func, args, pk._libcuda()
        arr = (ctypes.c_void_p * len(args))()
        for i, a in enumerate(args):
            arr[i] = ctypes.cast(ctypes.byref(a), ctypes.c_void_p)
        self._array = arr

    def __call__(self, stream_handle: int) -> None:
        pk._check(self._lib.cuLaunchKernel(self._func, 1, 1, 1, 1, 1, 1, 0,
                                           ctypes.c_void_p(stream_handle), self._array, None),
                  "cuLaunchKernel")  # fmt: skip


def start(collective: str, clock_ptr: int) -> Launch:
    return Launch(_func(f"emulated_{_SHORT[collective]}_ce_start"), [ctypes.c_void_p(clock_ptr)])


def wait(collective: str, clock_ptr: int, due_ns: int) -> Launch:
    return Launch(_func(f"emulated_{_SHORT[collective]}_ce_wait"),
                  [ctypes.c_void_p(clock_ptr), ctypes.c_longlong(int(due_ns))])  # fmt: skip
