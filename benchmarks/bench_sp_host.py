"""The host cost of a step, per schedule, on CPU: what eager domino-sp costs the host
beyond domino and sp (issue 19: it was host-bound on one H200).

    python benchmarks/bench_sp_host.py                      # 8 layers, 2 micro-batches
    python benchmarks/bench_sp_host.py --layers 28 --cuda-python
    PYTHONPATH=/path/to/other/checkout python benchmarks/bench_sp_host.py --cuda-python

A tiny-dimension model (dim 64, T = 16 tokens per micro-batch) on one CPU process at
tp 1 (every collective a copy, as in bench_schedule.py): its kernels are cheap, so a
step's time is mostly the host's dispatch and Python. Per schedule and step:

* ``aten``: aten ops dispatched (TorchDispatchMode);
* ``calls``: Python and C function calls (``sys.setprofile``);
* ``side``: (domino-sp) the side stream's calls, by kind;
* ``issue ms``: median and min over ``--reps`` steps, schedules interleaved; ``cpu ms``
  the same in the main thread's CPU time (``time.thread_time``: what the host spent,
  less sensitive than wall time to other processes on a shared machine).

``--cuda-python``: run torch.cuda's real Python layer for domino-sp's side stream
(``torch.cuda.stream`` contexts, ``current_stream()``, ``Event``, ``set_stream``) on
this CPU build, with only the C bindings under it stubbed (device count, current
device, get / set stream, event create / record / wait: each counted). Then the
step's time includes what those wrappers cost the host, which a CPU run otherwise
never executes (without a GPU there is no side stream). It patches torch internals:
a measuring tool only, for the torch it was written against (2.13; CPU build).
Without it, domino-sp runs its side-stream path through ``streams.CountingStreams``
(where the executor has it) or not at all.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from domino_prof.reference_model.comm import ProcessGroupComm  # noqa: E402
from domino_prof.reference_model.config import ModelConfig  # noqa: E402
from domino_prof.reference_model.parallel import shard_model  # noqa: E402
from domino_prof.reference_model.schedule import StepRunner  # noqa: E402
from domino_prof.reference_model.verify import batch  # noqa: E402

try:
    from domino_prof.reference_model.streams import CountingStreams, CudaStreams
except ImportError:  # a checkout from before streams.py (to measure the old code)
    CountingStreams = CudaStreams = None

STUBS: collections.Counter = collections.Counter()  # the stubbed CUDA C calls


class _StreamBase:  # stands for torch._C._CudaStreamBase
    def __new__(cls, priority=0, stream_id=None, device_index=0, device_type=1, **kw):
        STUBS["stream_create"] += stream_id is None
        o = object.__new__(cls)
        o.stream_id = 100 + STUBS["stream_create"] if stream_id is None else stream_id
        o.device_index, o.device_type = device_index, device_type
        return o

    device = property(lambda self: torch.device("cuda", self.device_index))
    cuda_stream = property(lambda self: self.stream_id)

    def __eq__(self, other):
        return isinstance(other, _StreamBase) and other.stream_id == self.stream_id

    def __hash__(self):
        return hash(self.stream_id)


class _EventBase:  # stands for torch._C._CudaEventBase
    def __new__(cls, enable_timing=False, blocking=False, interprocess=False, external=False):
        STUBS["event_create"] += 1
        return object.__new__(cls)

    def record(self, stream=None):
        STUBS["event_record"] += 1

    def wait(self, stream=None):
        STUBS["stream_wait_event"] += 1


def cuda_python_layer() -> None:
    """torch.cuda's Python layer over counted stubs (see the module docstring)."""
    cur = [0]

    def get_stream(index):
        STUBS["get_stream"] += 1
        return (cur[0], 0, 1)

    def set_stream(stream_id, device_index, device_type):
        STUBS["set_stream"] += 1
        cur[0] = stream_id

    torch._C._CudaStreamBase, torch._C._CudaEventBase = _StreamBase, _EventBase
    streams = importlib.reload(torch.cuda.streams)  # Stream / Event over the stand-ins
    torch.cuda.Stream, torch.cuda.Event = streams.Stream, streams.Event
    torch.backends.cuda.is_built = lambda: True
    torch.cuda._is_compiled = lambda: True
    torch.cuda._initialized = True
    torch.cuda._is_in_bad_fork = lambda: False
    torch._C._cuda_getDeviceCount = lambda: 1
    torch._C._cuda_getDevice = lambda: 0
    torch._C._cuda_getCurrentStream = get_stream
    torch._C._cuda_setStream = set_stream


class _AtenOps(TorchDispatchMode):
    n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def _calls(fn) -> int:
    n = 0

    def prof(frame, event, arg):
        nonlocal n
        n += event in ("call", "c_call")

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--splits", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--schedules", default="tp,domino,sp,domino-sp")
    ap.add_argument(
        "--cuda-python",
        action="store_true",
        help="run torch.cuda's Python layer for the side stream (stubbed C calls)",
    )
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = ModelConfig(name="host", dim=64, ffn_dim=128, n_heads=4, n_kv_heads=2,
                      n_layers=a.layers, vocab_size=128)  # fmt: skip
    inp, tgt = batch(cfg, mbs=2, seq=16, seed=7, device="cpu")
    built = {}
    for name in a.schedules.split(","):
        comm = ProcessGroupComm()
        model = shard_model(cfg, comm, seed=1, device="cpu", dtype=torch.float32)
        built[name] = StepRunner(model, comm, schedule=name, splits=a.splits)
    if a.cuda_python:  # after the models are built (their init must not see "CUDA")
        cuda_python_layer()
    runners, side = {}, {}
    for name, r in built.items():
        counting = None
        if r.spec.sequence_parallel and r.spec.micro_batched:  # a side stream on CUDA
            if a.cuda_python:
                if hasattr(r.executor, "use_streams"):
                    r.executor.use_streams(CudaStreams(None))
                else:  # an executor from before use_streams (to measure the old code)
                    r.executor.side = torch.cuda.Stream()
            elif hasattr(r.executor, "use_streams"):
                counting = CountingStreams()
                r.executor.use_streams(counting)
        r.step(inp, tgt)  # warm-up (the event pool, lazy inits)
        STUBS.clear()
        if counting is not None:
            counting.calls.clear()
        with _AtenOps() as ops:
            r.step(inp, tgt)
        side[name] = dict(STUBS) if a.cuda_python else dict(counting.calls if counting else {})
        calls = _calls(lambda r=r: r.step(inp, tgt))
        runners[name] = (r, ops.n, calls)
    times = {n: [] for n in runners}
    cpu = {n: [] for n in runners}
    for _ in range(a.reps):
        for n, (r, _, _) in runners.items():
            c0, t0 = time.thread_time(), time.perf_counter()
            r.step(inp, tgt)
            times[n].append((time.perf_counter() - t0) * 1e3)
            cpu[n].append((time.thread_time() - c0) * 1e3)
    layer = "torch.cuda Python layer over stubs" if a.cuda_python else "no CUDA layer"
    print(f"{a.layers} layers, {a.splits} micro-batches, tp 1, CPU; {layer}")
    print(f"{'schedule':10s} {'aten':>6s} {'calls':>7s} {'issue ms med / min':>19s} "
          f"{'cpu ms med / min':>17s}  side stream per step")  # fmt: skip
    for n, (_, ops, calls) in runners.items():
        t, c = times[n], cpu[n]
        print(f"{n:10s} {ops:6d} {calls:7d} {statistics.median(t):9.2f} / {min(t):7.2f} "
              f"{statistics.median(c):8.2f} / {min(c):6.2f}  {side[n] or '-'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
