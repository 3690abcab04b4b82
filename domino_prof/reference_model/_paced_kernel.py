"""The paced stand-in's CUDA kernels (docs/EMULATION.md §3b): compiled at run time with
NVRTC through torch (``torch.cuda._utils._nvrtc_compile``), launched with ``cuLaunchKernel``
through ctypes, so the launch sets what Triton cannot: the real kernel's block size (544
threads for NCCL's ``AllReduce_bf16_RING_LL``), its dynamic shared memory (reserved, not
used: what keeps other kernels' CTAs off the SM) and a register count padded up to the
real kernel's. Imported lazily by ``emulate.py`` (needs CUDA).

Each CTA is one channel: it runs the ring step table of ``emulation.ring`` over its share
of every chunk, one FIFO slot per slice, and waits before slice k until k / K of the
modelled time has passed since it started (``%globaltimer``), then to the modelled time.
The FIFO is written with ``st.volatile`` and read back with ``ld.volatile`` (NCCL's LL
accesses), so neither is folded away; the reads are folded into a register that is never
stored, so no output waits for them (the FIFO holds the values the output gets anyway);
source and destination use plain 16-byte accesses. A peer's writes into the FIFO are
done by this GPU's SMs (``pw``) except for LL: its FIFOs (512 KiB a channel) stay in L2
and its peer's writes are the peer's SMs' work; done here they made the LL stand-in 1.3x
(6.3 MB) to 1.9x (50 MB) longer than the model on the H200, its 24 CTAs' accesses the
limit. The waits sleep (``__nanosleep``) between clock reads: a spin that kept the SM's
issue slots busy made a memory-bound kernel's CTAs on those SMs crawl (SiLU on [4096,
4096] 36x slower beside it on the H200, 1.09x beside a real NCCL kernel polling). A pass moves ``threads x 6`` vectors
of the CTA's share across FIFO slots, as NCCL keeps up to 8 steps in flight (6 vectors
a thread: the most that stay in 96 registers, the real kernel's count, without spills).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

NAMES = {
    "all_reduce": "emulated_allreduce_paced",
    "reduce_scatter": "emulated_reducescatter_paced",
    "all_gather": "emulated_allgather_paced",
}

SOURCE = r"""
#define U 6
typedef unsigned long long u64;

__device__ __forceinline__ u64 now_ns() {
  u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}
__device__ __forceinline__ void st_vol(uint4* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ uint4 ld_vol(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void paced_body(
    const uint4* __restrict__ src, uint4* dst, uint4* fifo, const int* __restrict__ steps,
    int n_steps, long long chunk, long long slot, int ff, long long dur, int pw, int never) {
  extern __shared__ uint4 reserved[];  // the real kernel's shared memory: reserved only
  const long long T = blockDim.x, tid = threadIdx.x, G = gridDim.x, b = blockIdx.x;
  const long long share = (chunk + G - 1) / G;
  const long long lo = b * share;
  const long long hi = (lo + share < chunk) ? lo + share : chunk;
  const long long span = T * U;  // vectors of one pass of the CTA's threads
  long long pps = (share + span - 1) / span;  // passes per step
  if (pps < 1) pps = 1;
  const long long K = (long long)n_steps * pps;  // pacing points
  uint4* my_fifo = fifo + b * 8 * slot * ff;
  uint4 r[U];
#pragma unroll
  for (int u = 0; u < U; ++u) { r[u].x = 0u; r[u].y = 0u; r[u].z = 0u; r[u].w = 0u; }
  unsigned sink = 0u;  // what the FIFO reads returned (kept alive, never written)
#if PAD > 0
  unsigned pad[PAD];
#pragma unroll
  for (int i = 0; i < PAD; ++i)  // each a clock read: not recomputable, so kept in a register
    asm volatile("mov.u32 %0, %%clock;" : "=r"(pad[i]));
#endif
  const u64 t0 = now_ns();
  long long k = 0;
  for (int s = 0; s < n_steps; ++s) {
    const int sc = steps[4 * s], dc = steps[4 * s + 1], fl = steps[4 * s + 2];
    for (long long pi = 0; pi < pps; ++pi, ++k) {
      const u64 due = t0 + (u64)((k * dur) / K);  // pass k of K starts at k/K of dur
      while (now_ns() < due) __nanosleep(64);  // wait without taking issue slots
      const long long base = lo + pi * span;
      if (base >= hi) continue;
      // lane u of this thread: position base + u*T + tid (32-bit offsets from here)
      const long long b0 = base + tid;
      const long long lim64 = hi - b0;
      const int lim = lim64 > 0x7fffffffLL ? 0x7fffffff : (int)lim64;
      const int iT = (int)T;
      if (fl & 1) {
        const uint4* sp = src + sc * chunk + b0;
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (u * iT < lim) r[u] = sp[u * iT];
      }
      if (fl & 2) {  // a peer's write into this GPU's FIFO, and its read: 8 slots a CTA
        const int ring = (int)(8 * slot);
        int f0 = (int)((b0 - lo) % ring);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (pw && u * iT < lim) {  // pw: the peer's write done here (not for LL, below)
            int fr = f0 + u * iT;
            fr = fr >= ring ? fr % ring : fr;
            for (int q = 0; q < ff; ++q) st_vol(my_fifo + (long long)fr * ff + q, r[u]);
          }
        }
        for (int q = 0; q < ff; ++q) {  // every read issued before any is consumed
          unsigned got[U];
#pragma unroll
          for (int u = 0; u < U; ++u) {
            got[u] = 0u;
            if (u * iT < lim) {
              int fr = f0 + u * iT;
              fr = fr >= ring ? fr % ring : fr;
              got[u] = ld_vol(my_fifo + (long long)fr * ff + q).x;
            }
          }
#pragma unroll
          for (int u = 0; u < U; ++u) sink ^= got[u];
        }
      }
      if (fl & 4) {  // the output: the values read (the FIFO's are the same values)
        uint4* dp = dst + dc * chunk + b0;
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (u * iT < lim) dp[u * iT] = r[u];
      }
    }
  }
  const u64 end = t0 + (u64)dur;
  while (now_ns() < end) __nanosleep(64);
  if (never) {  // never true: keeps the pad registers (and reserved[]) alive
    unsigned acc = reserved[0].x ^ sink;  // pad[] is live to here: it holds registers
#if PAD > 0
#pragma unroll
    for (int i = 0; i < PAD; ++i) acc ^= pad[i];
#endif
    dst[0].x = acc;
  }
}

#define KERNEL(NAME)                                                                    \
  extern "C" __global__ void __launch_bounds__(MAX_THREADS) NAME(                         \
      const uint4* src, uint4* dst, uint4* fifo, const int* steps, int n_steps,          \
      long long chunk, long long slot, int ff, long long dur, int pw, int never) {       \
    paced_body(src, dst, fifo, steps, n_steps, chunk, slot, ff, dur, pw, never);         \
  }
KERNEL(emulated_allreduce_paced)
KERNEL(emulated_reducescatter_paced)
KERNEL(emulated_allgather_paced)
"""

CU_FUNC_ATTRIBUTE_NUM_REGS = 4
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


@dataclass
class Kernel:
    """One compiled kernel: its function handle and what the driver says of it."""

    name: str
    func: Any  # ctypes.c_void_p
    module: Any
    registers: int
    threads: int
    shared_bytes: int


_LIBS: dict[str, Any] = {}


def _libcuda():
    if "cuda" not in _LIBS:
        _LIBS["cuda"] = ctypes.CDLL("libcuda.so.1")
    return _LIBS["cuda"]


def _libnvrtc():
    """NVRTC: the one torch loads (its CUDA wheels ship it), else the system's."""
    if "nvrtc" not in _LIBS:
        lib = None
        try:
            import torch.cuda._utils as cu

            for name in ("_get_gpu_rtc_library", "_get_nvrtc_library"):
                if hasattr(cu, name):
                    lib = getattr(cu, name)()
                    break
        except Exception:  # noqa: BLE001 - a private torch helper: fall back to dlopen
            lib = None
        if lib is None:
            for so in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"):
                try:
                    lib = ctypes.CDLL(so)
                    break
                except OSError:
                    continue
        if lib is None:
            raise OSError("NVRTC (libnvrtc) not found")
        _LIBS["nvrtc"] = lib
    return _LIBS["nvrtc"]


def _check(res: int, what: str) -> None:
    if res != 0:
        raise RuntimeError(f"CUDA driver error {res} in {what}")


def _attr(func, attr: int) -> int:
    v = ctypes.c_int()
    _check(_libcuda().cuFuncGetAttribute(ctypes.byref(v), attr, func), "cuFuncGetAttribute")
    return v.value


def _cubin(options: list[str], source: str = SOURCE) -> bytes:
    """``source`` (SOURCE) compiled by NVRTC to a CUBIN for the current device."""
    import torch

    nv = _libnvrtc()
    major, minor = torch.cuda.get_device_capability()
    opts = [f"--gpu-architecture=sm_{major}{minor}", *options]
    prog = ctypes.c_void_p()
    if nv.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"paced.cu", 0, None, None):
        raise RuntimeError("nvrtcCreateProgram failed")
    try:
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        if nv.nvrtcCompileProgram(prog, len(opts), arr):
            n = ctypes.c_size_t()
            nv.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            log = ctypes.create_string_buffer(n.value)
            nv.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"NVRTC: {log.value.decode(errors='replace')[:500]}")
        n = ctypes.c_size_t()
        if nv.nvrtcGetCUBINSize(prog, ctypes.byref(n)):
            raise RuntimeError("nvrtcGetCUBINSize failed")
        buf = ctypes.create_string_buffer(n.value)
        if nv.nvrtcGetCUBIN(prog, buf):
            raise RuntimeError("nvrtcGetCUBIN failed")
        return buf.raw
    finally:
        nv.nvrtcDestroyProgram(ctypes.byref(prog))


def _cubin_nvcc(options: list[str], source: str = SOURCE) -> bytes:
    """The same CUBIN from ``nvcc`` (the fallback where NVRTC cannot be loaded)."""
    import shutil
    import subprocess
    import tempfile

    import torch

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise OSError("neither NVRTC nor nvcc found")
    major, minor = torch.cuda.get_device_capability()
    with tempfile.TemporaryDirectory() as d:
        src, out = f"{d}/paced.cu", f"{d}/paced.cubin"
        with open(src, "w") as f:
            f.write(source)
        r = subprocess.run([nvcc, "-cubin", f"-arch=sm_{major}{minor}", *options, src, "-o", out],
                           capture_output=True, text=True)  # fmt: skip
        if r.returncode:
            raise RuntimeError(f"nvcc: {r.stderr[:500]}")
        with open(out, "rb") as f:
            return f.read()


def _compile(name: str, *, threads: int, pad: int, max_regs: int | None,
             source: str = SOURCE) -> tuple[Any, Any]:  # fmt: skip
    import torch

    opts = [f"-DPAD={pad}", f"-DMAX_THREADS={threads}"]
    if max_regs:
        opts.append(f"--maxrregcount={max_regs}")
    key = ("cubin", tuple(opts), hash(source))
    if key not in _LIBS:
        try:
            _LIBS[key] = _cubin(opts, source)
        except (OSError, RuntimeError) as e:
            _LIBS[key] = _cubin_nvcc(opts, source)
            _LIBS.setdefault("nvrtc_error", str(e))
    cubin = _LIBS[key]
    torch.cuda.init()
    torch.cuda.synchronize()  # a runtime call: torch's primary context is current here
    mod, func = ctypes.c_void_p(), ctypes.c_void_p()
    _check(_libcuda().cuModuleLoadData(ctypes.byref(mod), cubin), "cuModuleLoadData")
    _check(_libcuda().cuModuleGetFunction(ctypes.byref(func), mod, name.encode()),
           "cuModuleGetFunction")  # fmt: skip
    return func, mod


def build(collective: str, *, threads: int, registers: int | None, shared_bytes: int) -> Kernel:
    """Compile the collective's kernel for ``threads`` per CTA; when ``registers`` is given,
    pad the kernel's live registers up to it (compile once without padding, then with the
    difference; the driver's count is what :class:`Kernel` reports) and cap it there."""
    name = NAMES[collective]
    func, mod = _compile(name, threads=threads, pad=0, max_regs=registers)
    got = _attr(func, CU_FUNC_ATTRIBUTE_NUM_REGS)
    pad = 0
    for _ in range(3):  # the pad adds about one register each; ptxas rounds: up to 3 tries
        if not registers or got >= registers:
            break
        pad += registers - got
        func, mod = _compile(name, threads=threads, pad=pad, max_regs=registers)
        got = _attr(func, CU_FUNC_ATTRIBUTE_NUM_REGS)
    if shared_bytes >= 48 * 1024:
        _check(_libcuda().cuFuncSetAttribute(
            func, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes),
            "cuFuncSetAttribute(max dynamic shared memory)")  # fmt: skip
    return Kernel(name=name, func=func, module=mod, registers=got, threads=threads,
                  shared_bytes=shared_bytes)  # fmt: skip


class Launcher:
    """A kernel's argument array, built once per prepared collective; only the src / dst
    pointers change per call (``launch``)."""

    __slots__ = ("_args", "_array", "_grid", "_kernel", "_lib")

    def __init__(self, kernel: Kernel, *, ctas: int, fifo_ptr: int, steps_ptr: int,
                 n_steps: int, chunk: int, slot: int, ff: int, dur_ns: int,
                 peer_writes: bool = True) -> None:  # fmt: skip
        self._kernel, self._grid, self._lib = kernel, ctas, _libcuda()
        self._args = [ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_void_p(fifo_ptr),
                      ctypes.c_void_p(steps_ptr), ctypes.c_int(n_steps),
                      ctypes.c_longlong(chunk), ctypes.c_longlong(slot), ctypes.c_int(ff),
                      ctypes.c_longlong(dur_ns), ctypes.c_int(int(peer_writes)),
                      ctypes.c_int(0)]  # fmt: skip
        arr = (ctypes.c_void_p * len(self._args))()
        for i, a in enumerate(self._args):
            arr[i] = ctypes.cast(ctypes.byref(a), ctypes.c_void_p)
        self._array = arr

    def launch(self, src_ptr: int, dst_ptr: int, stream_handle: int) -> None:
        self._args[0].value = src_ptr
        self._args[1].value = dst_ptr
        k = self._kernel
        _check(self._lib.cuLaunchKernel(
            k.func, self._grid, 1, 1, k.threads, 1, 1, k.shared_bytes,
            ctypes.c_void_p(stream_handle), self._array, None), "cuLaunchKernel")  # fmt: skip
