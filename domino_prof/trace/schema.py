"""The columnar event model every analysis works on (the contract of `trace/`).

A loaded trace is one :class:`Trace`: a single long pandas frame ``events`` with
a ``rank`` column (all ranks together, Perfetto-batch style) plus per-rank
metadata. Only complete events (``ph == "X"``) become rows; metadata events
(``ph == "M"``) fill :class:`RankMeta`; flow events are not needed because
Kineto puts ``args.correlation`` on both the launch call and the device event.

Columns of ``Trace.events`` (dtype, meaning; "-1" means absent):

==================  ========  ==========================================================
rank                int32     rank of the file (``distributedInfo.rank``)
cat                 category  Kineto category (``kernel``, ``gpu_memcpy``, ``cpu_op`` ...);
                              older names (``Kernel``, ``Memcpy``, ``Runtime`` ...) are
                              renamed to these (``LEGACY_CATEGORIES``)
name                category  event name
pid                 int64     process id; string pids ("Spans") are interned as negative
                              ids, their labels in ``RankMeta.pid_labels``
tid                 int64     thread id (CPU) or stream (device events); may be negative;
                              string tids are interned below every real id, their text
                              becoming the thread name
ts                  int64     absolute start, nanoseconds: baseTimeNanoseconds + ts_us*1000
                              (never rounded to whole microseconds)
dur                 int64     duration in ns; 0 when the event has no ``dur``; a negative
                              ``dur`` is read as 0 (``RankMeta.negative_durations``)
correlation         int64     ``args.correlation`` (launch call <-> device event), -1
external_id         int64     ``args["External id"]``, -1
stream              int64     ``args.stream`` (device events), -1
device              int64     ``args.device`` (device events), -1
wait_on_stream      int64     ``args.wait_on_stream`` (cuda_sync Stream Wait Event), -1
wait_on_corr        int64     ``args.wait_on_cuda_event_record_corr_id``, -1
coll_name           category  ``args["Collective name"]`` ('' when absent)
pg_name             category  ``args["Process Group Name"]`` ('' when absent)
msg_nelems          int64     ``args["In msg nelems"]``, -1
group_size          int64     ``args["Group size"]``, -1
seq                 int64     ``args["Seq"]`` (collective sequence number in its group), -1
from_device         int32     ``args.fromDevice`` (memcpy source device), -1
to_device           int32     ``args.toDevice`` (memcpy destination device), -1
grid                int64     x·y·z of ``args.grid`` (a kernel's launch grid), -1 when
                              absent or not a list of positive ints
==================  ========  ==========================================================

Rows are sorted by (rank, ts). Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

INT_COLUMNS: dict[str, type] = {
    "rank": np.int32,
    "pid": np.int64,
    "tid": np.int64,
    "ts": np.int64,
    "dur": np.int64,
    "correlation": np.int64,
    "external_id": np.int64,
    "stream": np.int64,
    "device": np.int64,
    "wait_on_stream": np.int64,
    "wait_on_corr": np.int64,
    "msg_nelems": np.int64,
    "group_size": np.int64,
    "seq": np.int64,
    "from_device": np.int32,
    "to_device": np.int32,
    "grid": np.int64,
}
CATEGORY_COLUMNS: tuple[str, ...] = ("cat", "name", "coll_name", "pg_name")
EVENT_COLUMNS: tuple[str, ...] = (
    "rank", "cat", "name", "pid", "tid", "ts", "dur", "correlation", "external_id",
    "stream", "device", "wait_on_stream", "wait_on_corr", "coll_name", "pg_name",
    "msg_nelems", "group_size", "seq", "from_device", "to_device", "grid",
)  # fmt: skip

# Meta's MTIA accelerators (Kineto's MTIA profilers, as in HTA's public test data):
# device events are category ``mtia_ccp_events`` (pid = the device, args.stream, and
# args.correlation when launched), their launch calls ``mtia_runtime`` (args.correlation);
# the ``ac2g`` flow events that link them repeat that correlation and are not needed.
MTIA_DEVICE_CAT = "mtia_ccp_events"
MTIA_RUNTIME_CAT = "mtia_runtime"
DEVICE_CATS: tuple[str, ...] = ("kernel", "gpu_memcpy", "gpu_memset", MTIA_DEVICE_CAT)
# Categories written by Kineto before ~2021 (PyTorch 1.8/1.9, the tb-profiler samples) and
# today's names for them; the loader renames them so every analysis sees one vocabulary.
LEGACY_CATEGORIES: dict[str, str] = {
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Runtime": "cuda_runtime",
    "Driver": "cuda_driver",
    "Operator": "cpu_op",
}


@dataclass
class RankMeta:
    """What one rank file says about itself, besides its events."""

    rank: int
    path: str
    world_size: int | None = None
    backend: str | None = None
    base_time_ns: int = 0
    host: str | None = None
    pg_config: list[dict] = field(default_factory=list)
    device_properties: list[dict] = field(default_factory=list)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    process_names: dict[int, str] = field(default_factory=dict)
    pid_labels: dict[int, str] = field(default_factory=dict)
    n_events: int = 0
    # categories of older Kineto versions read as today's (old -> new), e.g. Kernel -> kernel
    renamed_categories: dict[str, str] = field(default_factory=dict)
    # events whose ``dur`` was negative (read as 0): count per category, and the worst
    negative_durations: dict[str, int] = field(default_factory=dict)
    worst_negative: tuple[str, str, int] | None = None  # (cat, name, dur ns)
    time_unit: str = "us"  # "ns" when the file's ts/dur were written in ns (read as such)
    # the file's comm-emulation mark (top-level "domino_prof", emulation.marker): its label
    # "emulated comm (profile NAME)", None for real collectives
    emulation: str | None = None


@dataclass
class Trace:
    """All ranks of one profiled run: one event frame plus per-rank metadata."""

    events: pd.DataFrame
    ranks: dict[int, RankMeta]
    source: str = ""
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)

    @property
    def rank_ids(self) -> list[int]:
        return sorted(self.ranks)


def empty_events() -> pd.DataFrame:
    """A zero-row frame with the exact dtypes of ``Trace.events``."""
    data: dict[str, object] = {}
    for col in EVENT_COLUMNS:
        if col in INT_COLUMNS:
            data[col] = np.empty(0, dtype=INT_COLUMNS[col])
        else:
            data[col] = pd.Categorical([])
    return pd.DataFrame(data)
