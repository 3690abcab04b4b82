"""Write a realistic N-event Kineto trace (one rank of a TP training run).

    python benchmarks/gen_trace.py --events 2000000 --out /tmp/bench/rank0.pt.trace.json

The mix follows real H100/H200 Kineto traces: ``ProfilerStep#N`` and
``fwd.layer_*`` annotations nesting ``cpu_op``s (with the bulky args real
traces carry: "Input Dims", "Input type", "Input Strides", "Concrete Inputs"),
``cudaLaunchKernel`` / ``cudaMemcpyAsync`` / ``cudaEventRecord`` /
``cudaStreamWaitEvent`` runtime calls, kernels on 3 compute streams and
``ncclDevKernel_*`` on 2 comm streams (with "Collective name", "In msg
nelems", "Group size", "Seq" ...), memcpys, ``cuda_sync`` Stream Wait Events,
``ac2g`` flow events and thread/process metadata. ``ts`` is relative to
``baseTimeNanoseconds`` with 3 decimals and the ~5e12 µs magnitude real traces
have. Events are written as they are generated (no giant dict in memory); the
output is deterministic for a given (events, rank, seed).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

PID = 1234567
TID = 1234567
BWD_TID = 1234599
DEVICE = 0
COMPUTE_STREAMS = (7, 20, 24)
COMM_STREAMS = (13, 17)
MEMCPY_STREAM = 7
BASE_NS = 1_790_857_026_000_000_000
T0_US = 5_136_598_139_223.635  # real Kineto "relative" ts are this large

GEMMS = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn>",
    "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn",
)
ELEMWISE = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>",
    "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0",
)
COMMS = (
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "allreduce"),
    ("ncclDevKernel_AllGather_RING_LL", "_allgather_base"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "_reduce_scatter_base"),
)


def _f(x: float) -> str:
    return f"{x:.3f}"


class _Writer:
    def __init__(self, fh, target: int, seed: int, rank: int, comms_per_layer: int = 1) -> None:
        self.comms_per_layer = comms_per_layer
        self.fh = fh
        self.n = 0
        self.target = target
        self.rng = random.Random(seed * 1000 + rank)
        self.rank = rank
        self.corr = 100
        self.ext = 1
        self.seq = 0
        self.t = T0_US  # CPU clock of the main thread (µs, relative to base)
        self.stream_free = {s: T0_US for s in (*COMPUTE_STREAMS, *COMM_STREAMS)}
        self.first = True

    def emit(self, text: str) -> None:
        self.fh.write(text if self.first else ",\n" + text)
        self.first = False
        self.n += 1

    # -- CPU -------------------------------------------------------------------
    def cpu_op(self, name: str, ts: float, dur: float, *, tid: int = TID, extra: str = "") -> None:
        self.ext += 1
        dims = self.rng.choice(("[8192, 4096]", "[4096, 11008]", "[2, 4096, 4096]"))
        self.emit(
            f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": {PID}, "tid": {tid}, '
            f'"ts": {_f(ts)}, "dur": {_f(dur)}, "args": {{"External id": {self.ext}, '
            f'"Sequence number": {self.ext * 3}, "Fwd thread id": 0, "Record function id": 0, '
            f'"Ev Idx": {self.n}, "Input Dims": [{dims}, [4096, 4096], []], '
            f'"Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"], '
            f'"Concrete Inputs": ["", "", "1"]{extra}}}}}'
        )

    def annotation(self, name: str, ts: float, dur: float, *, tid: int = TID) -> None:
        self.ext += 1
        self.emit(
            f'{{"ph": "X", "cat": "user_annotation", "name": "{name}", "pid": {PID}, '
            f'"tid": {tid}, "ts": {_f(ts)}, "dur": {_f(dur)}, '
            f'"args": {{"External id": {self.ext}, "Record function id": 0, "Ev Idx": {self.n}}}}}'
        )

    def runtime(self, name: str, ts: float, dur: float, corr: int, *, tid: int = TID) -> None:
        self.emit(
            f'{{"ph": "X", "cat": "cuda_runtime", "name": "{name}", "pid": {PID}, '
            f'"tid": {tid}, "ts": {_f(ts)}, "dur": {_f(dur)}, '
            f'"args": {{"cbid": 211, "correlation": {corr}, "External id": {self.ext}}}}}'
        )

    def flow(self, corr: int, ts_cpu: float, ts_gpu: float, stream: int) -> None:
        self.emit(
            f'{{"ph": "s", "id": {corr}, "pid": {PID}, "tid": {TID}, "ts": {_f(ts_cpu)}, '
            f'"cat": "ac2g", "name": "ac2g"}}'
        )
        self.emit(
            f'{{"ph": "f", "id": {corr}, "pid": {DEVICE}, "tid": {stream}, "ts": {_f(ts_gpu)}, '
            f'"cat": "ac2g", "name": "ac2g", "bp": "e"}}'
        )

    # -- device ----------------------------------------------------------------
    def launch(self, name: str, stream: int, dur: float, *, cat: str = "kernel",
               call: str = "cudaLaunchKernel", extra: str = "") -> None:  # fmt: skip
        self.corr += 1
        corr = self.corr
        call_dur = self.rng.uniform(3.0, 9.0)
        self.runtime(call, self.t, call_dur, corr)
        start = max(self.stream_free[stream], self.t + call_dur + self.rng.uniform(2.0, 8.0))
        self.stream_free[stream] = start + dur
        if cat == "kernel":
            args = (
                f'"queued": 0, "device": {DEVICE}, "context": 1, "stream": {stream}, '
                f'"correlation": {corr}, "registers per thread": 168, "shared memory": 213248, '
                f'"grid": [132, 1, 1], "block": [384, 1, 1]{extra}'
            )
        else:
            args = (
                f'"device": {DEVICE}, "context": 1, "stream": {stream}, "correlation": {corr}, '
                f'"bytes": 33554432, "memory bandwidth (GB/s)": 1800.5'
            )
        self.emit(
            f'{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": {DEVICE}, "tid": {stream}, '
            f'"ts": {_f(start)}, "dur": {_f(dur)}, "args": {{{args}}}}}'
        )
        self.flow(corr, self.t, start, stream)
        self.t += call_dur + self.rng.uniform(1.0, 4.0)

    def stream_wait(self, stream: int, on_stream: int) -> None:
        self.corr += 1
        rec = self.corr
        self.runtime("cudaEventRecord", self.t, 2.5, rec)
        self.t += 3.0
        self.corr += 1
        self.runtime("cudaStreamWaitEvent", self.t, 2.0, self.corr)
        self.emit(
            f'{{"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": {DEVICE}, '
            f'"tid": {stream}, "ts": {_f(self.stream_free[stream])}, "dur": 0, '
            f'"args": {{"device": {DEVICE}, "stream": {stream}, "correlation": {self.corr}, '
            f'"event": 1, "wait_on_stream": {on_stream}, '
            f'"wait_on_cuda_event_record_corr_id": {rec}}}}}'
        )
        self.t += 2.5

    # -- one layer (one record_function range) ---------------------------------
    def layer(self, step: int, layer: int, phase: str) -> None:
        rng = self.rng
        start = self.t
        self.t += 1.5
        for j in range(4):
            op_start = self.t
            self.t += 2.0
            inner_start = self.t
            self.t += 1.0
            self.launch(
                rng.choice(GEMMS), COMPUTE_STREAMS[(layer + j) % 3], rng.uniform(40.0, 400.0)
            )
            if j % 2:
                self.launch(rng.choice(ELEMWISE), COMPUTE_STREAMS[j % 3], rng.uniform(2.0, 30.0))
            self.cpu_op("aten::addmm", inner_start, self.t - inner_start)
            self.t += 0.5
            self.cpu_op("aten::linear", op_start, self.t - op_start)
        for c in range(self.comms_per_layer):
            self.collective(layer + c)
        if layer % 4 == 0:
            self.launch(
                "Memcpy DtoD (Device -> Device)", MEMCPY_STREAM, rng.uniform(5.0, 40.0),
                cat="gpu_memcpy", call="cudaMemcpyAsync",
            )  # fmt: skip
        self.annotation(f"{phase}.layer_attn_{layer}_batch_{layer % 2}", start, self.t - start)
        self.t += 1.0

    def collective(self, layer: int) -> None:
        """One tensor-parallel collective on one of two comm streams."""
        rng = self.rng
        kname, coll = COMMS[layer % 3]
        stream = COMM_STREAMS[layer % 2]
        self.seq += 1
        self.stream_wait(stream, COMPUTE_STREAMS[layer % 3])
        c_start = self.t
        self.t += 2.0
        comm_args = (
            f', "Collective name": "{coll}", "In msg nelems": 16777216, '
            f'"Out msg nelems": 16777216, "In split size": "[]", "Out split size": "[]", '
            f'"Group size": 8, "Seq": {self.seq}, "Process Group Name": "1", '
            f'"Process Group Description": "tp", "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]", '
            f'"dtype": "BFloat16"'
        )
        self.launch(kname, stream, rng.uniform(80.0, 600.0), extra=comm_args)
        if layer % 2 == 0:
            # TP: the next layer's compute needs this collective's output, so a
            # compute stream waits on the comm stream (comm is partly exposed)
            self.stream_wait(COMPUTE_STREAMS[0], stream)
            for s in COMPUTE_STREAMS:
                self.stream_free[s] = max(self.stream_free[s], self.stream_free[stream])
        self.cpu_op("record_param_comms", c_start + 1.0, self.t - c_start - 1.0, extra=comm_args)
        self.cpu_op("c10d::allreduce_", c_start, self.t - c_start + 0.5)
        self.t += 1.0

    def run(self) -> None:
        step = 0
        while self.n < self.target:
            step += 1
            s_start = self.t
            for phase in ("fwd", "bwd"):
                for layer in range(32):
                    if self.n >= self.target:
                        break
                    self.layer(step, layer, phase)
            self.annotation(f"ProfilerStep#{step}", s_start, self.t - s_start)
            # the host waits for the device at the end of a step
            self.t = max(self.t, *self.stream_free.values()) + 20.0


def write_trace(path: str | Path, *, events: int, rank: int = 0, world_size: int = 8,
                seed: int = 0, comms_per_layer: int = 1) -> Path:  # fmt: skip
    """Write an ``events``-entry Kineto trace to ``path`` (``.gz``: gzip)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    dist = {
        "backend": "nccl", "rank": rank, "world_size": world_size, "pg_count": 2,
        "pg_config": [
            {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
             "pg_size": world_size, "ranks": list(range(world_size))},
            {"pg_name": "1", "pg_desc": "tp", "backend_config": "cuda:nccl",
             "pg_size": world_size, "ranks": list(range(world_size))},
        ],
    }  # fmt: skip
    with opener(path, "wt", encoding="utf-8") as fh:
        fh.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": '
                 '"NVIDIA H200", "totalGlobalMem": 150754820096, "computeMajor": 9}],\n')  # fmt: skip
        fh.write(f'  "distributedInfo": {json.dumps(dist, indent=2)},\n')
        fh.write(f'  "baseTimeNanoseconds": {BASE_NS},\n  "traceEvents": [\n')
        w = _Writer(fh, events, seed, rank, comms_per_layer)
        for tid, label in ((TID, "python"), (BWD_TID, "pt_autograd_0")):
            w.emit(
                f'{{"ph": "M", "name": "thread_name", "pid": {PID}, "tid": {tid}, "ts": {T0_US}, '
                f'"args": {{"name": "thread {tid} ({label})"}}}}'
            )
        w.emit(
            f'{{"ph": "M", "name": "process_name", "pid": {PID}, "tid": 0, "ts": {T0_US}, '
            f'"args": {{"name": "python"}}}}'
        )
        for s in (*COMPUTE_STREAMS, *COMM_STREAMS):
            w.emit(
                f'{{"ph": "M", "name": "thread_name", "pid": {DEVICE}, "tid": {s}, '
                f'"ts": {T0_US}, "args": {{"name": "stream {s}"}}}}'
            )
        w.run()
        fh.write(f'\n  ],\n  "traceName": "rank{rank}.pt.trace.json"\n}}\n')
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--out", required=True, help="output file (.json or .json.gz)")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--comms-per-layer", type=int, default=1,
                    help="collectives per layer (10: the kernel-heavy mix)")  # fmt: skip
    a = ap.parse_args()
    p = write_trace(
        a.out,
        events=a.events,
        rank=a.rank,
        world_size=a.world_size,
        seed=a.seed,
        comms_per_layer=a.comms_per_layer,
    )
    print(f"wrote {p} ({p.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
