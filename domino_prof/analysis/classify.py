"""Trace events -> the ``intervals`` frame: device work, classified and attributed.

One row per device interval (GPU ``kernel`` / ``gpu_memcpy`` / ``gpu_memset``; for
CPU-only gloo traces the ``gloo:*`` events and the ``cpu_op`` events of the other
threads), with its kind (compute / comm / memory), its launch call (joined on
``rank`` + ``args.correlation``), the op name (innermost ``record_function`` on the
launching thread at the launch call), the phase and the iteration. The rules are in
docs/METRICS.md ("Device activity", "Overlap" and the "Extension:" paragraphs).

Everything is vectorised. Op, phase and iteration come from the attribution core
(``analysis.attribution``), which the overheads use too, so both put a launch in the
same step under the same op name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from domino_prof.analysis import intervals as iv
from domino_prof.analysis.attribution import (
    GRAPH_APIS,
    NO_OP,
    PHASES,
    Context,
    context,
    innermost_containing,
    join_on_correlation,
    match_names,
    shared_ids,
    tuple_ids,
)
from domino_prof.analysis.config import (
    COMM_FAMILIES,
    DTOD_COPY,
    P2P_COPY,
    USER_PATTERN,
    AnalysisConfig,
    CommFamily,
)
from domino_prof.analysis.reference import ComputeReference
from domino_prof.analysis.results import Note
from domino_prof.errors import NoActivityError, TraceError
from domino_prof.trace.schema import DEVICE_CATS, MTIA_DEVICE_CAT, Trace

KINDS = ("compute", "comm", "memory")
_GLOO = re.compile(r"^gloo:")
# CPU-only traces: cpu_ops that launch or wait for collectives are not compute
CPU_NONCOMPUTE = re.compile(r"^(?:c10d::|record_param_comms|_?c10d_functional::)")
_C10D_LAUNCH = re.compile(r"^c10d::(?!.*wait)")
_ATEN = re.compile(r"^aten::")
# MTIA device events (``mtia_ccp_events``): DMA requests are memory (HTA's "MTIA Memory"
# grouping: ``^dma``); event_record / event_wait mark stream order, as CUDA's cuda_sync
# events do, and are not work; every other one is a kernel (docs/METRICS.md Extension)
_MTIA_MEMORY = re.compile(r"^dma")
_MTIA_SYNC = re.compile(r"^event_(?:record|wait)$")

INTERVAL_COLUMNS = (
    "rank", "device", "stream", "start", "end", "dur", "kind", "name", "correlation",
    "launch_start", "launch_end", "launch_name", "launch_tid", "op", "phase", "iteration",
    "coll_name", "msg_nelems", "grid",
)  # fmt: skip


@dataclass
class Classified:
    """The ``intervals`` frame plus the merged compute reference used for hiding."""

    intervals: pd.DataFrame
    mode: str  # "gpu" | "cpu"
    # merged, disjoint compute time per (rank, device): what can hide comm
    ref_rank: np.ndarray
    ref_device: np.ndarray
    ref_start: np.ndarray
    ref_end: np.ndarray
    # what the notes count (rows of several ranks add up): see :func:`classify_notes`
    counts: dict[str, int] = field(default_factory=dict)
    # which kinds of comm were recognised: [{source, label, n_intervals, busy_ns}]
    comm_sources: list[dict] = field(default_factory=list)
    # the trace's attribution context (step windows, annotations, runtime calls)
    context: Context | None = None

    @property
    def notes(self) -> list[str]:
        return classify_notes(self.mode, self.counts)

    @property
    def reference(self):
        """The compute reference as ``overlap.ComputeReference``."""
        return ComputeReference(self.ref_rank, self.ref_device, self.ref_start, self.ref_end)


__all__ = ["NO_OP", "PHASES", "Classified", "classify", "innermost_containing", "leaf_ops"]


# --------------------------------------------------------------------------- #
# GPU and CPU (gloo) classification                                           #
# --------------------------------------------------------------------------- #


def trace_mode(events: pd.DataFrame) -> str | None:
    """ "gpu" when any event is device work, else "cpu" when some event is a ``gloo:*``
    collective, else None (docs/METRICS.md "Extension: CPU-only mode")."""
    if events["cat"].isin(DEVICE_CATS).to_numpy().any():
        return "gpu"
    return "cpu" if match_names(events["name"], _GLOO).any() else None


def classify(trace: Trace, config: AnalysisConfig, *, mode: str | None = None) -> Classified:
    """Build the ``intervals`` frame (columns ``INTERVAL_COLUMNS``) for a trace.
    ``mode``: the mode of the whole trace when this is one rank of it (a rank without
    device work in a GPU trace has no intervals); None: this trace's own."""
    ev = trace.events
    mode = trace_mode(ev) if mode is None else mode
    if mode == "gpu":
        return _classify_gpu(ev, device_work(ev), config, context(ev))
    if mode == "cpu":
        return _classify_cpu(ev, match_names(ev["name"], _GLOO), context(ev))
    raise no_activity_error(trace)


def device_work(events: pd.DataFrame) -> np.ndarray:
    """Which events are device work: the ``DEVICE_CATS`` events but MTIA's stream
    bookkeeping (event_record / event_wait)."""
    cat = events["cat"]
    dev = cat.isin(DEVICE_CATS).to_numpy()
    mtia = (cat == MTIA_DEVICE_CAT).to_numpy()
    if mtia.any():
        dev = dev & ~(mtia & match_names(events["name"], _MTIA_SYNC))
    return dev


def _some(names: list[str], at_most: int = 4) -> str:
    more = len(names) - at_most
    return ", ".join(names[:at_most]) + (f" and {more} more" if more > 0 else "")


def mixed_modes_error(source: str, gpu: list[str], cpu: list[str]) -> TraceError:
    """The error for rank files of two kinds in one trace: ``gpu`` files with device
    work, ``cpu`` files with gloo collectives and none (a CPU run's ranks): analysed in
    the GPU mode the CPU ranks would show 0 comm, so this is refused (one line)."""
    root = Path(source)

    def rel(path: str) -> str:
        q = Path(path)
        return str(q.relative_to(root)) if root.is_dir() and q.is_relative_to(root) else str(q)

    return TraceError(
        source,
        f"mixes GPU rank files ({_some(sorted(map(rel, gpu)))}: device kernels) and "
        f"CPU-only gloo rank files ({_some(sorted(map(rel, cpu)))}: gloo collectives, no "
        "device work), which cannot be one run",
        "analyse each run's rank files on their own (one directory per run); "
        "domino-prof compare sets two runs side by side",
    )


def no_activity_error(trace: Trace) -> NoActivityError:
    """The error for a trace without device work or gloo collectives."""
    if any(m.backend == "gloo" for m in trace.ranks.values()):
        # e.g. `domino-prof run --device cpu --mode nocomm`: CPU work, no collective
        return NoActivityError(
            trace.source or "trace",
            "CPU (gloo) trace without any gloo:* collective: there is no comm to overlap",
            "profile a step that communicates (nocomm and the *-nocomm modes have none by design)",
        )
    return NoActivityError(
        trace.source or "trace",
        "no device activity (kernels/memcpy) or gloo events",
        "was the profiler run with ProfilerActivity.CUDA?",
    )


_PTOP = re.compile(r"PtoP")
# the driver's copy kernels (a CUDA graph's same-device copy node runs as one)
_DRIVER_COPY = re.compile(r"^memcpy\d+$")
EMULATED_KEY = "emulated"  # the emulator's family key (analysis/config.py COMM_FAMILIES)
_DTOD = re.compile(r"DtoD|PtoP|Device\s*->\s*Device|DeviceToDevice", re.IGNORECASE)


_CE_WAIT = re.compile(r"^emulated_\w+_ce_wait$")


def _emulated_stream_copies(dev, key: np.ndarray, copy: np.ndarray, kernel: np.ndarray,
                            source: np.ndarray) -> np.ndarray:  # fmt: skip
    """Copies (same-device DtoD ``gpu_memcpy`` events, or driver copy kernels ``memcpyN``)
    inside a call of the copy-engine stand-in: on their (rank, device, stream), in start
    order, the nearest other event before them is a kernel of the emulated comm family and
    the nearest after them its wait kernel (``emulated_<coll>_ce_wait``: every copy run of
    a call ends at one). A copy between two calls (after one's last wait, before the next
    start), or beside compute that a CUDA graph put on the same stream, stays what it was.
    ``key``: each row's (rank, device, stream) id. All False in a trace with no emulated
    comm kernel."""
    emu = source == EMULATED_KEY
    n = len(dev)
    if not emu.any():
        return np.zeros(n, dtype=bool)
    cand = copy | (kernel & match_names(dev["name"], _DRIVER_COPY))
    if not cand.any():
        return cand
    wait = emu & match_names(dev["name"], _CE_WAIT)
    order = np.lexsort((dev["ts"].to_numpy(np.int64), key))
    k, c, e, w = key[order], cand[order], emu[order], wait[order]
    other = np.flatnonzero(~c)  # sorted positions of the events that are not copies
    if not len(other):
        return np.zeros(n, dtype=bool)
    pos = np.arange(n)
    after = np.searchsorted(other, pos, side="right")
    nxt = other[np.minimum(after, len(other) - 1)]
    before = np.searchsorted(other, pos, side="left") - 1
    prv = other[np.maximum(before, 0)]
    inside = (c & (after < len(other)) & (k[nxt] == k) & w[nxt]
              & (before >= 0) & (k[prv] == k) & e[prv])  # fmt: skip
    out = np.zeros(n, dtype=bool)
    out[order] = inside
    return out


def _family_of_names(names: pd.Series, config: AnalysisConfig) -> np.ndarray:
    """Per row, the comm family whose regex names the kernel (first match in
    COMM_FAMILIES order), or the user's pattern; evaluated once per distinct name."""
    s = names if isinstance(names.dtype, pd.CategoricalDtype) else names.astype("category")
    cats = [str(c) for c in s.cat.categories]
    fams = [(f, re.compile(f.pattern, re.IGNORECASE)) for f in COMM_FAMILIES]
    out = []
    for c in cats:
        hit = USER_PATTERN.key
        if config.uses_default_families:
            hit = next((f.key for f, rx in fams if rx.search(c)), USER_PATTERN.key)
        out.append(hit)
    mapped = np.array([*out, ""], dtype=object)
    codes = s.cat.codes.to_numpy()
    return mapped[np.where(codes >= 0, codes, len(cats))]


def _comm_sources(source: np.ndarray, dur: np.ndarray) -> list[dict]:
    known: list[CommFamily] = [*COMM_FAMILIES, P2P_COPY, DTOD_COPY, USER_PATTERN]
    out = []
    for f in known:  # a handful of families, not rows
        m = source == f.key
        if m.any():
            out.append({"source": f.key, "label": f.label, "n_intervals": int(m.sum()),
                        "busy_ns": int(dur[m].sum())})  # fmt: skip
    return out


def _classify_gpu(
    ev: pd.DataFrame, is_dev: np.ndarray, config: AnalysisConfig, ctx: Context
) -> Classified:
    counts: dict[str, int] = {}
    dev = ev[is_dev]
    n = len(dev)
    cat = dev["cat"].astype(str).to_numpy()
    is_comm_name = match_names(dev["name"], config.comm_regex)
    kind = np.full(n, "memory", dtype=object)
    source = np.full(n, "", dtype=object)
    is_mtia = cat == MTIA_DEVICE_CAT
    is_kernel = (cat == "kernel") | (is_mtia & ~match_names(dev["name"], _MTIA_MEMORY))
    kind[is_kernel] = "compute"
    comm_k = is_kernel & is_comm_name
    kind[comm_k] = "comm"
    if comm_k.any():
        source[comm_k] = _family_of_names(dev["name"], config)[comm_k]
    # copies: between two devices they are comm (P2P); a same-device DtoD copy is memory
    # unless --memcpy-as-comm (docs/METRICS.md "Device activity")
    is_copy = cat == "gpu_memcpy"
    src_d = dev["from_device"].to_numpy(np.int64)
    dst_d = dev["to_device"].to_numpy(np.int64)
    peer = is_copy & (
        match_names(dev["name"], _PTOP) | ((src_d >= 0) & (dst_d >= 0) & (src_d != dst_d))
    )
    kind[peer] = "comm"
    source[peer] = P2P_COPY.key
    dtod = is_copy & ~peer & match_names(dev["name"], _DTOD)
    if config.memcpy_as_comm:
        kind[dtod] = "comm"
        source[dtod] = DTOD_COPY.key
    # the comm emulator's copy-engine stand-in (--comm-engine ce): its copies run between
    # its own kernels on their stream, as same-device copies (eager) or the driver's
    # memcpy kernels of a graph's copy nodes: comm of that stream (docs/METRICS.md)
    device = dev["device"].to_numpy(np.int64)
    device = np.where(device >= 0, device, dev["pid"].to_numpy(np.int64))
    stream = dev["stream"].to_numpy(np.int64)
    stream = np.where(stream >= 0, stream, dev["tid"].to_numpy(np.int64))
    rank = dev["rank"].to_numpy(np.int64)
    stream_key = tuple_ids(rank, device, stream)
    emu_copy = _emulated_stream_copies(dev, stream_key, dtod, is_kernel, source)
    kind[emu_copy] = "comm"
    source[emu_copy] = EMULATED_KEY
    dtod &= ~emu_copy

    start = dev["ts"].to_numpy(np.int64)
    dur = np.maximum(dev["dur"].to_numpy(np.int64), 0)
    corr = dev["correlation"].to_numpy(np.int64)

    # --- launch join: (rank, correlation) -> the runtime/driver call -------------------
    j = join_on_correlation(
        dev["rank"].to_numpy(), corr, ctx.calls, ["start", "dur", "pid", "tid", "name", "api"]
    )
    has_launch = j["found"].to_numpy()
    l_ts = j["start"].fillna(-1).to_numpy(np.int64)
    l_end = np.where(has_launch, l_ts + j["dur"].fillna(0).to_numpy(np.int64), -1)
    l_tid = j["tid"].fillna(-1).to_numpy(np.int64)
    l_pid = j["pid"].fillna(-1).to_numpy(np.int64)
    l_name = np.where(has_launch, j["name"].astype(object).fillna("").to_numpy(), "")
    counts["n_no_launch"] = int((~has_launch).sum())
    counts.update(step_counts(ctx))

    counts.update(stream_overlap_counts(stream_key[is_kernel],
                                        start[is_kernel], (start + dur)[is_kernel]))  # fmt: skip
    # a graph launch's kernels: the "inside a step" forward rule does not hold for them
    graph = has_launch & j["api"].isin(GRAPH_APIS).to_numpy()
    op, iteration, phase = ctx.attribute(rank, l_pid, l_tid, l_ts, has_launch, graph)
    unnamed = graph & np.asarray(op == NO_OP)
    counts["n_graph_unnamed"] = int(unnamed.sum())
    counts["n_graph_unnamed_comm"] = int((unnamed & (kind == "comm")).sum())
    frame = pd.DataFrame(
        {
            "rank": rank,
            "device": device,
            "stream": stream,
            "start": start,
            "end": start + dur,
            "dur": dur,
            "kind": pd.Categorical(kind, categories=list(KINDS)),
            "name": pd.Categorical(dev["name"]).remove_unused_categories(),
            "correlation": corr,
            "launch_start": np.where(has_launch, l_ts, -1),
            "launch_end": l_end,
            "launch_name": pd.Categorical(l_name),
            "launch_tid": np.where(has_launch, l_tid, -1),
            "op": op,
            "phase": phase,
            "iteration": iteration,
            "coll_name": pd.Categorical(dev["coll_name"]).remove_unused_categories(),
            "msg_nelems": dev["msg_nelems"].to_numpy(np.int64),
            "grid": dev["grid"].to_numpy(np.int64),
        }
    )
    frame = _finish(frame)
    comp = frame[frame["kind"].to_numpy() == "compute"]
    rk, rs, re_ = iv.grouped_merge(
        _dense_dev(comp, frame), comp["start"].to_numpy(), comp["end"].to_numpy()
    )
    if not config.memcpy_as_comm and dtod.any():
        counts.update(_dtod_counts((rank, device, stream), kind, source, dtod, dur))
    out = _with_ref(frame, rk, rs, re_, mode="gpu", counts=counts)
    out.comm_sources = _comm_sources(source, dur)
    out.context = ctx
    return out


def stream_overlap_counts(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> dict[str, int]:
    """Kernels that start before an earlier kernel of their stream (``key``: one id per
    (rank, device, stream)) has ended: their count and the overlapped ns (each such
    kernel's part before the latest end of the earlier ones). A stream runs its kernels
    one after another, so any overlap means the trace's stream ids or clocks are not
    what they claim (kernels moved between streams, an edited or merged trace)."""
    if len(key) < 2:
        return {"stream_overlap": 0, "stream_overlap_ns": 0}
    order = np.lexsort((end, start, key))
    k, s, e = key[order], start[order], end[order]
    run_end = pd.Series(e).groupby(k, sort=False).cummax().to_numpy(np.int64)
    same = np.r_[False, k[1:] == k[:-1]]
    prev = np.r_[np.int64(0), run_end[:-1]]
    ov = np.where(same, np.minimum(e, prev) - s, 0).clip(min=0)
    return {"stream_overlap": int((ov > 0).sum()), "stream_overlap_ns": int(ov.sum())}


def _dtod_counts(streams: tuple, kind, source, dtod, dur) -> dict[str, int]:
    """Same-device DtoD copies stay memory; count those that may carry a collective: on
    a stream that runs comm kernels (``dtod_on_comm*``), and all of them (``dtod*``) with
    ``dtod_beside`` = 1 when symmetric-memory/NVSHMEM comm is present (async TP copies
    from peer buffers, which CUPTI can record as DtoD on one device)."""
    key = tuple_ids(*streams)  # (rank, device, stream) per device interval
    comm_streams = np.unique(key[kind == "comm"])
    on_comm = dtod & np.isin(key, comm_streams)
    return {
        "dtod_on_comm": int(on_comm.sum()),
        "dtod_on_comm_ns": int(dur[on_comm].sum()),
        "dtod": int(dtod.sum()),
        "dtod_ns": int(dur[dtod].sum()),
        "dtod_beside": int(bool(np.isin(source, ["symm_mem", "nvshmem"]).any())),
    }


def step_counts(ctx: Context) -> dict[str, int]:
    """How many ``ProfilerStep#N`` windows the trace has, and how many of zero length
    (they hold no point: start <= t < end)."""
    st = ctx.steps
    zero = st["end"].to_numpy(np.int64) <= st["start"].to_numpy(np.int64)
    return {"n_step_windows": len(st), "n_zero_steps": int(zero.sum())}


def classify_notes(mode: str, counts: dict[str, int]) -> list[str]:
    """The classification notes of a trace from its counts (summed over ranks)."""
    c = counts
    notes: list[str] = []
    if c.get("n_zero_steps"):
        notes.append(Note(
            f"{c['n_zero_steps']} of {c['n_step_windows']} ProfilerStep#N windows have zero "
            "length (dur 0): nothing falls inside them, so their intervals count as outside "
            "steps and the per-step figures are n/a; the trace's durations are missing or "
            "zeroed: re-export it",
            "zero_length_steps",
        ))  # fmt: skip
    if mode == "cpu":
        notes.append(
            "CPU-only trace: comm = gloo:* events, compute = cpu_op events on the other "
            "threads of the process (threads stand in for streams)"
        )
        if c.get("n_gloo_no_launch"):
            notes.append(
                f"{c['n_gloo_no_launch']} gloo events have no c10d::* call before them on "
                "their process: op '(none)', phase 'other', iteration 'outside steps'"
            )
        return notes
    if c.get("stream_overlap"):
        notes.append(Note(
            f"{c['stream_overlap']} kernel(s) start before an earlier kernel of their own "
            f"stream has ended ({c['stream_overlap_ns'] / 1e6:.3f} ms overlapped): kernels of "
            "one stream run one after another, so the stream ids or the clocks are not what "
            "the trace claims (kernels moved between streams, an edited or merged trace); "
            "every figure takes the times as written",
            "stream_overlap",
        ))  # fmt: skip
    if c.get("n_graph_unnamed"):
        notes.append(Note(
            f"{c['n_graph_unnamed']} device intervals ({c.get('n_graph_unnamed_comm', 0)} of "
            "them comm) were launched by CUDA graph launches that no op range holds (e.g. "
            "one graph per step): op '(none)' and phase 'other', since one graph may hold "
            "work of every phase; their iteration is their launch's step. Per-op and "
            "per-phase figures need the graph launched inside named ranges (a graph per "
            "segment)",
            "graph_unattributed",
        ))  # fmt: skip
    if c.get("n_no_launch"):
        notes.append(
            f"{c['n_no_launch']} device intervals have no launch call with their "
            "correlation id: op '(none)', phase 'other', iteration 'outside steps'"
        )
    beside = bool(c.get("dtod_beside"))
    n, ns = (c.get("dtod", 0), c.get("dtod_ns", 0)) if beside else (
        c.get("dtod_on_comm", 0), c.get("dtod_on_comm_ns", 0))  # fmt: skip
    if n:
        where = "beside symmetric-memory/NVSHMEM comm" if beside else "on streams that run comm"
        notes.append(
            f"{n} same-device DtoD copies ({ns / 1e6:.3f} ms) "
            f"{where} were counted as memory; if they carry a collective (async-TP copies "
            "from peer buffers), pass --memcpy-as-comm"
        )
    return notes


def _classify_cpu(ev: pd.DataFrame, is_gloo: np.ndarray, ctx: Context) -> Classified:
    counts: dict[str, int] = {}
    gl = ev[is_gloo]
    rank_a, pid_a, tid_a = (ev[c].to_numpy(np.int64) for c in ("rank", "pid", "tid"))
    g_rank, g_pid, g_tid = (gl[c].to_numpy(np.int64) for c in ("rank", "pid", "tid"))
    # threads carrying gloo events, and the processes that own them
    thr_all, thr_g = shared_ids(len(ev), (rank_a, pid_a, tid_a), (g_rank, g_pid, g_tid))
    proc_all, proc_g = shared_ids(len(ev), (rank_a, pid_a), (g_rank, g_pid))
    on_comm_thread = np.isin(thr_all, thr_g)
    in_gloo_proc = np.isin(proc_all, proc_g)
    is_cpu_op = ev["cat"].to_numpy() == "cpu_op"
    noncompute = match_names(ev["name"], CPU_NONCOMPUTE)
    cand = is_cpu_op & in_gloo_proc & ~on_comm_thread
    comp = ev[cand & ~noncompute]
    excl = ev[cand & noncompute]
    # a wrapper op (not aten::*, with ops nested in it) hides comm only through its
    # children: its own time between them is where a thread sits blocked in
    # ``work.wait()``, which records no op (docs: Extension)
    ops = ev[cand]
    leaf = leaf_ops(
        thr_all[cand], ops["ts"].to_numpy(np.int64), np.maximum(ops["dur"].to_numpy(np.int64), 0)
    )
    leaf |= match_names(ops["name"], _ATEN)
    comp_leaf = leaf[~noncompute[cand]]

    # gloo event -> its c10d launch op on the same process (docs: Extension)
    c10d = ev[is_cpu_op & in_gloo_proc & match_names(ev["name"], _C10D_LAUNCH)]
    c10d = _top_level(c10d)
    l_idx = _match_launches(c10d, gl)
    has_l = l_idx >= 0
    ls = np.where(has_l, c10d["ts"].to_numpy(np.int64)[np.maximum(l_idx, 0)], -1)
    le = np.where(has_l, ls + c10d["dur"].to_numpy(np.int64)[np.maximum(l_idx, 0)], -1)
    ltid = np.where(has_l, c10d["tid"].to_numpy(np.int64)[np.maximum(l_idx, 0)], -1)
    lname = np.where(has_l, c10d["name"].astype(str).to_numpy(dtype=object)[np.maximum(l_idx, 0)],
                     "")  # fmt: skip
    counts["n_gloo_no_launch"] = int((~has_l).sum())
    counts.update(step_counts(ctx))

    n_g, n_c = len(gl), len(comp)
    c_rank, c_pid, c_tid = (comp[c].to_numpy(np.int64) for c in ("rank", "pid", "tid"))
    c_ts = comp["ts"].to_numpy(np.int64)
    # attribution point: the c10d launch for gloo events, the op's own start for compute
    op, iteration, phase = ctx.attribute(
        np.concatenate([g_rank, c_rank]),
        np.concatenate([g_pid, c_pid]),
        np.concatenate([ltid, c_tid]),
        np.concatenate([ls, c_ts]),
        np.concatenate([has_l, np.ones(n_c, dtype=bool)]),
    )
    both = pd.concat([gl, comp], ignore_index=True)
    start = both["ts"].to_numpy(np.int64)
    dur = np.maximum(both["dur"].to_numpy(np.int64), 0)
    kind = np.array(["comm"] * n_g + ["compute"] * n_c, dtype=object)
    frame = pd.DataFrame(
        {
            "rank": both["rank"].to_numpy(np.int64),
            "device": both["pid"].to_numpy(np.int64),
            "stream": both["tid"].to_numpy(np.int64),
            "start": start,
            "end": start + dur,
            "dur": dur,
            "kind": pd.Categorical(kind, categories=list(KINDS)),
            "name": pd.Categorical(both["name"].astype(str)),
            # gloo events carry no correlation id: their External id names the instance
            "correlation": np.concatenate(
                [gl["external_id"].to_numpy(np.int64), np.full(n_c, -1, dtype=np.int64)]
            ),
            "launch_start": np.concatenate([ls, np.full(n_c, -1, dtype=np.int64)]),
            "launch_end": np.concatenate([le, np.full(n_c, -1, dtype=np.int64)]),
            "launch_name": pd.Categorical(np.concatenate([lname, np.full(n_c, "", dtype=object)])),
            "launch_tid": np.concatenate([ltid, np.full(n_c, -1, dtype=np.int64)]),
            "op": op,
            "phase": phase,
            "iteration": iteration,
            "coll_name": pd.Categorical(both["coll_name"].astype(str)),
            "msg_nelems": both["msg_nelems"].to_numpy(np.int64),
            "grid": np.full(len(both), -1, dtype=np.int64),  # CPU ops have no launch grid
        }
    )
    frame = _finish(frame)
    # compute reference = ∪ leaf/aten compute cpu_ops minus time inside c10d/launch/wait ops
    c_start = c_ts[comp_leaf]
    c_end = c_start + np.maximum(comp["dur"].to_numpy(np.int64)[comp_leaf], 0)
    dk_c = _dense_dev(pd.DataFrame({"rank": c_rank[comp_leaf], "device": c_pid[comp_leaf]}), frame)
    ex = pd.DataFrame({"rank": excl["rank"].to_numpy(np.int64),
                       "device": excl["pid"].to_numpy(np.int64)})  # fmt: skip
    dk_x = _dense_dev(ex, frame)
    xs = excl["ts"].to_numpy(np.int64)
    known = dk_x >= 0
    rk, rs, re_ = iv.grouped_difference(
        dk_c,
        c_start,
        c_end,
        dk_x[known],
        xs[known],
        (xs + excl["dur"].to_numpy(np.int64))[known],
    )
    out = _with_ref(frame, rk, rs, re_, mode="cpu", counts=counts)
    gl_dur = np.maximum(gl["dur"].to_numpy(np.int64), 0)
    out.comm_sources = [{"source": "gloo", "label": "gloo collectives (CPU)",
                         "n_intervals": n_g, "busy_ns": int(gl_dur.sum())}]  # fmt: skip
    out.context = ctx
    return out


def leaf_ops(thread: np.ndarray, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """True for ops with no other op nested in them on the same thread.

    Ops of a thread are properly nested; sorted by (thread, start, -end) an op's first
    child, if any, is the next op, so an op is a leaf unless the next op of its thread
    starts before it ends (a zero-length op has no children).
    """
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=bool)
    end = start + dur
    order = np.lexsort((-end, start, thread))
    t, s, e = thread[order], start[order], end[order]
    has_child = np.zeros(n, dtype=bool)
    has_child[:-1] = (t[1:] == t[:-1]) & (s[1:] < e[:-1]) & (e[:-1] > s[:-1])
    leaf = np.empty(n, dtype=bool)
    leaf[order] = ~has_child
    return leaf


def _top_level(ops: pd.DataFrame) -> pd.DataFrame:
    """Drop ops that start inside an earlier op of the same thread (nested c10d calls)."""
    if len(ops) == 0:
        return ops
    ops = ops.sort_values(["rank", "pid", "tid", "ts"], kind="stable")
    key = tuple_ids(*(ops[c].to_numpy(np.int64) for c in ("rank", "pid", "tid")))
    end = ops["ts"].to_numpy(np.int64) + ops["dur"].to_numpy(np.int64)
    run_end = pd.Series(end).groupby(key, sort=False).cummax().to_numpy(np.int64)
    top = np.ones(len(ops), dtype=bool)
    top[1:] = (key[1:] != key[:-1]) | (ops["ts"].to_numpy(np.int64)[1:] >= run_end[:-1])
    return ops[top].sort_values(["rank", "pid", "ts"], kind="stable")


def _match_launches(c10d: pd.DataFrame, gl: pd.DataFrame) -> np.ndarray:
    """Row index into ``c10d`` of each gloo event's launch, or -1.

    Per (rank, pid): when the process has as many c10d launch ops as gloo events, the
    k-th gloo event (by start) belongs to the k-th launch (FIFO work queue); otherwise
    to the latest launch that started at or before the gloo event.
    """
    out = np.full(len(gl), -1, dtype=np.int64)
    if len(c10d) == 0 or len(gl) == 0:
        return out
    ck, gk = shared_ids(
        len(c10d),
        (c10d["rank"].to_numpy(np.int64), c10d["pid"].to_numpy(np.int64)),
        (gl["rank"].to_numpy(np.int64), gl["pid"].to_numpy(np.int64)),
    )
    c_ts = c10d["ts"].to_numpy(np.int64)  # c10d is sorted by (rank, pid, ts) -> by (ck, ts)
    g_ts = gl["ts"].to_numpy(np.int64)
    latest = iv.grouped_searchsorted(ck, c_ts, gk, g_ts, side="right") - 1
    ls = np.maximum(latest, 0)
    ok = (latest >= 0) & (ck[ls] == gk)
    out[ok] = latest[ok]
    # FIFO order where counts agree
    n_groups = int(max(ck.max(), gk.max())) + 1
    c_count = np.bincount(ck, minlength=n_groups)
    g_count = np.bincount(gk, minlength=n_groups)
    g_order = np.lexsort((g_ts, gk))
    g_rank_in = np.empty(len(gl), dtype=np.int64)
    g_rank_in[g_order] = np.arange(len(gl)) - np.searchsorted(gk[g_order], gk[g_order], "left")
    fifo = c_count[gk] == g_count[gk]
    c_first = np.searchsorted(ck, np.arange(n_groups), "left")
    out[fifo] = c_first[gk[fifo]] + g_rank_in[fifo]
    return out


def _finish(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.sort_values(["rank", "start", "end"], kind="stable", ignore_index=True)
    frame["rank"] = frame["rank"].astype(np.int64)
    return frame[list(INTERVAL_COLUMNS)]


def _dense_dev(rows: pd.DataFrame, frame: pd.DataFrame) -> np.ndarray:
    """Dense id of (rank, device) for ``rows``, in the id space of ``frame``'s devices
    (sorted by rank, device); -1 where the pair does not occur in ``frame``."""
    u = _unique_devs(frame)
    code = rows["rank"].to_numpy(np.int64) * 0  # shape
    if len(u) == 0 or len(rows) == 0:
        return code - 1
    m = pd.MultiIndex.from_arrays([u[:, 0], u[:, 1]])
    idx = m.get_indexer(
        pd.MultiIndex.from_arrays(
            [rows["rank"].to_numpy(np.int64), rows["device"].to_numpy(np.int64)]
        )
    )
    return idx.astype(np.int64)


def _unique_devs(frame: pd.DataFrame) -> np.ndarray:
    """Sorted distinct (rank, device) pairs of ``frame`` as an (n, 2) array."""
    if len(frame) == 0:
        return np.empty((0, 2), dtype=np.int64)
    r = frame["rank"].to_numpy(np.int64)
    d = frame["device"].to_numpy(np.int64)
    k = tuple_ids(r, d)
    first = np.zeros(int(k.max()) + 1, dtype=np.int64)
    first[k] = np.arange(len(k))
    return np.stack([r[first], d[first]], axis=1)


def _with_ref(
    frame: pd.DataFrame,
    rk: np.ndarray,
    rs: np.ndarray,
    re_: np.ndarray,
    *,
    mode: str,
    counts: dict[str, int],
) -> Classified:
    u = _unique_devs(frame)
    return Classified(
        intervals=frame,
        mode=mode,
        ref_rank=u[rk, 0] if len(rk) else np.empty(0, np.int64),
        ref_device=u[rk, 1] if len(rk) else np.empty(0, np.int64),
        ref_start=rs,
        ref_end=re_,
        counts=counts,
    )
