"""Build small Kineto (PyTorch profiler) Chrome traces by hand, for exact tests.

Times are given in microseconds (floats, ns precision is kept: 10.001 is 10001 ns)
*relative to the trace start*; the builder writes them either relative to
``baseTimeNanoseconds`` (modern Kineto) or absolute (older traces, ``relative=False``).

Example::

    b = TraceBuilder(rank=0, world_size=2)
    b.step(1, 0, 100)
    with_op = b.annotation("fwd.layer_attn_0_batch_0", 1, 50)
    b.kernel("sm90_gemm", stream=7, start=10, dur=20, launch=2)
    b.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", stream=13, start=15, dur=10, launch=3)
    b.write(tmp_path / "rank0.json")
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

MAIN_PID = 4242
MAIN_TID = 4242
DEVICE = 0


@dataclass
class TraceBuilder:
    rank: int = 0
    world_size: int = 1
    backend: str = "nccl"
    base_ns: int = 1_790_000_000_000_000_000
    relative: bool = True
    pid: int = MAIN_PID
    device: int = DEVICE
    include_dist_info: bool = True
    events: list[dict] = field(default_factory=list)
    _corr: int = 1000
    _ext: int = 1

    # --- time helpers -------------------------------------------------------
    def _ts(self, t_us: float) -> float:
        if self.relative:
            return round(t_us, 3)
        return round(self.base_ns / 1000.0 + t_us, 3)

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    # --- CPU side -------------------------------------------------------------
    def cpu(
        self,
        name: str,
        start: float,
        dur: float,
        *,
        cat: str = "cpu_op",
        tid: int = MAIN_TID,
        pid: int | None = None,
        **args,
    ) -> dict:
        self._ext += 1
        ev = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.pid if pid is None else pid,
            "tid": tid,
            "ts": self._ts(start),
            "dur": round(dur, 3),
            "args": {"External id": self._ext, **args},
        }
        self.events.append(ev)
        return ev

    def annotation(self, name: str, start: float, dur: float, *, tid: int = MAIN_TID) -> dict:
        """A ``record_function`` range (cat user_annotation) on a CPU thread."""
        return self.cpu(name, start, dur, cat="user_annotation", tid=tid)

    def step(self, n: int, start: float, end: float, *, tid: int = MAIN_TID) -> dict:
        return self.annotation(f"ProfilerStep#{n}", start, end - start, tid=tid)

    def runtime(
        self,
        name: str,
        start: float,
        dur: float,
        *,
        corr: int | None = None,
        tid: int = MAIN_TID,
        **args,
    ) -> int:
        """A CUDA runtime call (cat cuda_runtime); returns its correlation id."""
        corr = self._next_corr() if corr is None else corr
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": self.pid,
                "tid": tid,
                "ts": self._ts(start),
                "dur": round(dur, 3),
                "args": {"correlation": corr, "cbid": 211, **args},
            }
        )
        return corr

    # --- device side ----------------------------------------------------------
    def kernel(
        self,
        name: str,
        *,
        stream: int,
        start: float,
        dur: float | None,
        launch: float | None = None,
        launch_dur: float = 1.0,
        launch_name: str = "cudaLaunchKernel",
        tid: int = MAIN_TID,
        cat: str = "kernel",
        corr: int | None = None,
        **args,
    ) -> int:
        """A device event with (optionally) its launch call; returns the correlation id.

        ``dur=None`` writes an event without ``dur`` (seen in real traces). ``corr``: the
        correlation id of a launch written already (e.g. one ``cudaGraphLaunch`` for
        every kernel of its graph).
        """
        corr = self._next_corr() if corr is None else corr
        if launch is not None:
            self.runtime(launch_name, launch, launch_dur, corr=corr, tid=tid)
        ev = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.device,
            "tid": stream,
            "ts": self._ts(start),
            "args": {"device": self.device, "stream": stream, "correlation": corr, **args},
        }
        if dur is not None:
            ev["dur"] = round(dur, 3)
        self.events.append(ev)
        return corr

    def memcpy(
        self, *, stream: int, start: float, dur: float, launch: float | None = None, **kw
    ) -> int:
        return self.kernel(
            "Memcpy DtoD (Device -> Device)",
            stream=stream,
            start=start,
            dur=dur,
            launch=launch,
            launch_name="cudaMemcpyAsync",
            cat="gpu_memcpy",
            **kw,
        )

    def stream_wait(
        self,
        *,
        stream: int,
        at: float,
        wait_on_stream: int,
        record_corr: int,
        corr: int | None = None,
    ) -> dict:
        """A cuda_sync "Stream Wait Event": ``stream`` waits on an event recorded on
        ``wait_on_stream`` by the cudaEventRecord call with correlation ``record_corr``."""
        ev = {
            "ph": "X",
            "cat": "cuda_sync",
            "name": "Stream Wait Event",
            "pid": self.device,
            "tid": stream,
            "ts": self._ts(at),
            "dur": 0,
            "args": {
                "device": self.device,
                "stream": stream,
                "correlation": self._next_corr() if corr is None else corr,
                "event": 1,
                "wait_on_stream": wait_on_stream,
                "wait_on_cuda_event_record_corr_id": record_corr,
            },
        }
        self.events.append(ev)
        return ev

    def thread_name(self, tid: int, name: str, pid: int | None = None) -> None:
        self.events.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": self.pid if pid is None else pid,
                "tid": tid,
                "ts": 0,
                "args": {"name": name},
            }
        )

    # --- output ---------------------------------------------------------------
    def to_dict(self) -> dict:
        doc: dict = {"schemaVersion": 1, "deviceProperties": [], "traceEvents": self.events}
        if self.include_dist_info:
            doc["distributedInfo"] = {
                "backend": self.backend,
                "rank": self.rank,
                "world_size": self.world_size,
                "pg_count": 1,
                "pg_config": [
                    {
                        "pg_name": "0",
                        "pg_desc": "default_pg",
                        "backend_config": f"cuda:{self.backend}",
                        "pg_size": self.world_size,
                        "ranks": list(range(self.world_size)),
                    }
                ],
            }
        if self.relative:
            doc["baseTimeNanoseconds"] = self.base_ns
        doc["traceName"] = f"rank{self.rank}.pt.trace.json"
        return doc

    def write(self, path: str | Path, *, indent: int | None = None) -> Path:
        path = Path(path)
        text = json.dumps(self.to_dict(), indent=indent)
        if path.suffix == ".gz":
            path.write_bytes(gzip.compress(text.encode()))
        else:
            path.write_text(text)
        return path
