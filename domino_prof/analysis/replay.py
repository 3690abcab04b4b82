"""Replay a profiled step: its dependency graph, what-if edits, the critical path.

Definitions: ``docs/METRICS.md`` "Extension: replay model". Torch-free.

**The graph of one rank** (:func:`rank_graph`, built where the rank's file is read):

- *nodes* are device intervals (GPU kernels / copies / sets on their stream; on a CPU
  gloo trace the compute thread's busy segments — the compute reference — and the
  gloo events on their runloop thread, "threads as streams") and host calls (GPU: every
  top-level ``cuda_runtime`` / ``cuda_driver`` call on its thread, in program order; CPU:
  the ``c10d::*`` op that enqueues each gloo collective). Each node keeps its own
  measured duration.
- *start edges* (``node start = max over its edges of (source time + delay)``):
  ``thread`` (the previous node of the same host thread or CPU lane; its delay is the
  host's own gap between the two), ``launch`` (launch call start -> its device
  interval), ``stream`` (the previous interval of the same stream, kernel order),
  ``event`` (event record -> stream wait: the producer / consumer pairs of
  ``analysis.switches``, inferred where CUPTI dropped the record's correlation),
  ``wait`` (CPU: a gloo event whose end the compute thread was blocked on) and
  ``handoff`` (a host thread that sat idle while another thread of the rank issued
  calls resumes after that thread's last call: autograd's device thread and the main
  thread).
- *end edges* (``node end = max(start + own duration, source time + delay)``): a
  blocking sync (``cudaStreamSynchronize`` / ``cudaEventSynchronize`` /
  ``cudaDeviceSynchronize``, the sync under ``aten::item``) returns at the awaited
  interval's end plus the measured wake-up; a collective ends at ``max(own start,
  every peer's start) + transfer`` when its peers are loaded (instances matched by
  ``analysis.ranks.collective_instances``; ``transfer`` = its measured end minus the
  latest arrival), else after its measured duration.

**Delays.** Each node's measured start is the maximum of its edges' ready times: the
binding edge (the one whose source time + typical delay is latest) gets the measured
residual, every other edge ``min(typical, residual)``, all clipped at 0 (causality).
So the unedited replay reproduces every node exactly unless the trace breaks causality
(a kernel before its launch, a collective ending before a peer arrives, a sync
returning before its kernel ended); :func:`whatif` compares the unedited replay with
the profiled step and says when the model does not explain the trace.

**Edits** (:class:`Edit`): comm removed (its device time, its peer coupling and its
host launch calls), comm × k, launches at graph-replay cost (host calls and the host
gaps before them cost nothing, every kernel follows its stream predecessor after
:data:`GRAPH_KERNEL_GAP_NS`), blocking syncs removed (by site), cross-stream waits at
no latency, comm fully hidden (the overlap ceiling: comm costs no device time on any
path, its host launches stay), no cross-rank skew (each collective takes its transfer
time only).

**Step** = the mean over iterations of the largest per-rank device wall (first to last
device node of the rank's iteration): the profiled step of the slowest rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from domino_prof.analysis.attribution import context, iteration_at, step_windows
from domino_prof.analysis.overlap_tax import overlap_tax
from domino_prof.analysis.ranks import align_hosts, collective_instances
from domino_prof.analysis.reference import ComputeReference
from domino_prof.analysis.results import Note, jsonable
from domino_prof.analysis.switches import _interval_table, switch_edges

# in-graph cost of one kernel when a CUDA graph replays it: the device-side gap from a
# kernel's end to the next kernel's start on the same stream inside a replayed graph.
# Measured on one H200 (torch 2.11.0+cu130, driver 580.159.04; benchmarks/graph_kernel_gap.py
# through benchmarks/gpu_session.sh whatif-gap, 2026-12-02): median 97 ns, p10 64 ns over 199 gaps
# of a replayed graph, against 14.5 us between the same kernels launched eagerly back to
# back (reports/whatif/h200/graph_kernel_gap.json). Other GPUs: re-measure with that script.
GRAPH_KERNEL_GAP_NS = 97
# a host thread idle this long while another thread of its rank issues calls is taken
# to wait for that thread (handoff edge)
HANDOFF_MIN_NS = 50_000
# CPU: a compute segment that starts at most this long after a gloo event ended, with
# its thread idle since before that end, was blocked on it (wait edge)
WAKE_MAX_NS = 500_000
# GPU: a kernel starting this long after its stream predecessor, at most this long
# after an interval of another stream of its device ended, waited for it (inferred
# event edge)
INFER_GAP_NS = 20_000
# the largest graph (all ranks' nodes) the what-if replays: ~10 us per node and scenario
REPLAY_MAX_NODES = 200_000
# tolerance of "the replay reproduces the profiled step"
EXPLAIN_TOL = 0.01

SYNC_CALLS: tuple[str, ...] = (
    "cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize",
    "cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize",
    "hipStreamSynchronize", "hipEventSynchronize", "hipDeviceSynchronize",
)  # fmt: skip
_DEVICE_WIDE = ("cudaDeviceSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize")
_EVENT_SYNCS = ("cudaEventSynchronize", "cuEventSynchronize", "hipEventSynchronize")
_VERSION = re.compile(r"_v\d+$")

# node kinds
COMPUTE, COMM, MEMORY, HOST, SYNC, LAUNCH_COMM = 0, 1, 2, 3, 4, 5
KIND_NAMES = ("compute", "comm", "memory", "host", "sync", "comm_launch")
# start-edge kinds
THREAD, LAUNCH, STREAM, EVENT, WAIT, HANDOFF = 0, 1, 2, 3, 4, 5
EDGE_NAMES = ("thread", "launch", "stream", "event", "wait", "handoff")


@dataclass
class RankGraph:
    """One rank's step graph (picklable numpy arrays; see module doc). Nodes are in
    measured-start order; ``start``/``end`` are the measured ns on the rank's clock."""

    rank: int
    mode: str  # "gpu" | "cpu"
    kind: np.ndarray  # int8 [N]: COMPUTE .. LAUNCH_COMM
    lane: np.ndarray  # int32 [N]: index into lanes
    lanes: list  # [(label, is_device)]
    start: np.ndarray  # int64 [N]
    end: np.ndarray  # int64 [N]
    iteration: np.ndarray  # int64 [N]: device nodes' step, -1 host / outside
    is_device: np.ndarray  # bool [N]: counts for the step's device wall
    is_launch: np.ndarray  # bool [N]: host call a CUDA graph would replace
    sync_site: np.ndarray  # int32 [N]: index into sync_sites, -1 not a sync
    sync_sites: list  # [(api, op)]
    name: np.ndarray  # object [N]: kernel / call / op name
    # start edges [E]
    e_dst: np.ndarray
    e_src: np.ndarray
    e_kind: np.ndarray
    e_from_start: np.ndarray  # bool: ready = source start (else source end)
    e_delay: np.ndarray  # int64: fitted delay (see module doc)
    e_binding: np.ndarray  # bool: the edge that set the node's measured start
    # end edges [X] (intra-rank: syncs)
    x_dst: np.ndarray
    x_src: np.ndarray
    x_delay: np.ndarray
    self_dur: np.ndarray  # int64 [N]: own duration when an end edge binds (else dur)
    n_dropped: int = 0  # edges that broke the measured order (not replayed)
    notes: list = field(default_factory=list)

    @property
    def dur(self) -> np.ndarray:
        return self.end - self.start


# --------------------------------------------------------------------------- building
def _fit_delays(start, end, dst, src, from_start, tau, n):
    """Binding edge per node and each edge's delay (module doc)."""
    ready = np.where(from_start, start[src], end[src])
    resid = start[dst] - ready
    score = ready + np.minimum(tau, np.maximum(resid, 0))
    order = np.lexsort((-score, dst))
    first = np.ones(len(order), dtype=bool)
    first[1:] = dst[order][1:] != dst[order][:-1]
    binding = np.zeros(len(dst), dtype=bool)
    binding[order[first]] = True
    delay = np.where(binding, resid, np.minimum(tau, resid))
    return np.maximum(delay, 0).astype(np.int64), binding


class _Edges:
    """A graph's edges as its builder adds them: ``dst`` after ``src`` (edge kind ``ek``),
    from ``src``'s start (``fs``) or end, at least ``tau`` ns later."""

    _DTYPES = {"dst": np.int64, "src": np.int64, "ek": np.int8, "fs": bool, "tau": np.int64}

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in self._DTYPES}

    def add(self, d, s, k, from_start, t) -> None:
        d = np.asarray(d, np.int64)
        self.parts["dst"].append(d)
        self.parts["src"].append(np.asarray(s, np.int64))
        self.parts["ek"].append(np.full(len(d), k, np.int8))
        self.parts["fs"].append(np.full(len(d), from_start, bool))
        self.parts["tau"].append(np.broadcast_to(np.asarray(t, np.int64), d.shape).copy())

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.concatenate(v) if v else np.zeros(0, self._DTYPES[k])
                for k, v in self.parts.items()}  # fmt: skip


def _prev_on_lane(lane: np.ndarray, start: np.ndarray, end: np.ndarray):
    """(dst, src) pairs: each node after the previous node of its lane (by start)."""
    order = np.lexsort((end, start, lane))
    same = lane[order][1:] == lane[order][:-1]
    return order[1:][same], order[:-1][same]


def _median(x: np.ndarray, default: int) -> int:
    x = x[x >= 0]
    return int(np.median(x)) if len(x) else default


def _api(names) -> np.ndarray:
    """Call names without CUPTI's version suffix: the regex once per distinct name."""
    codes, uniq = pd.factorize(np.asarray(names, dtype=object), use_na_sentinel=False)
    return np.array([_VERSION.sub("", str(n)) for n in uniq], dtype=object)[codes]


def rank_graph(events: pd.DataFrame, intervals: pd.DataFrame, *, rank: int, mode: str,
               reference=None, max_nodes: int | None = None,
               ) -> RankGraph | TooBig | None:  # fmt: skip
    """The step graph of one rank (``events``: that rank's trace events; ``intervals``:
    its classified device intervals; ``reference``: its compute reference, CPU mode);
    a GPU rank of more than ``max_nodes`` nodes (None: REPLAY_MAX_NODES; less:
    :func:`graph_cap`, a rank job of several) only their count (:class:`TooBig`)."""
    iv = intervals.loc[intervals["rank"].to_numpy() == rank]
    if len(iv) == 0:
        return None
    if mode == "cpu":
        return _cpu_graph(iv, rank=rank, reference=reference)
    ev = events.loc[events["rank"].to_numpy() == rank]
    host = _host_calls(ev)
    n = len(iv) + len(host[0])  # the graph's nodes: device intervals, then host calls
    if n > (REPLAY_MAX_NODES if max_nodes is None else max_nodes):  # not replayed, or
        # not known to be yet (graph_cap): not built
        return TooBig(rank=rank, n_nodes=n)
    return _gpu_graph(ev, iv, rank=rank, host=host)


@dataclass(frozen=True)
class TooBig:
    """A rank whose graph was not built, only its node count kept: more than
    REPLAY_MAX_NODES nodes alone (the what-if is not replayed then, whatever the other
    ranks; building it cost 16 s and 0.5 GB on a 3M-event rank, for nothing), or more
    than its share (:func:`graph_cap`) when its file was analysed as one of several."""

    rank: int
    n_nodes: int


def graph_cap(n_ranks: int) -> int:
    """The nodes up to which a rank job of ``n_ranks`` builds its graph: its share of
    REPLAY_MAX_NODES. The what-if replays every rank's graph at once, and only when
    their nodes add up to at most REPLAY_MAX_NODES, which no rank job knows alone; with
    this cap a rank whose graph would be dropped in most sets is never built (on 2
    ranks of 160k nodes each, 0.4 s a rank, a third of its analysis). When the total
    does fit after all (ranks of unequal sizes), :func:`graphs_to_build` names the ranks
    whose graphs are needed, and the caller builds them again with the whole
    REPLAY_MAX_NODES: the same what-if as without a cap."""
    return REPLAY_MAX_NODES // max(n_ranks, 1)


def graphs_to_build(results) -> list[int]:
    """Positions in ``results`` (rank results; any other value is passed over) of the
    ranks whose graph :func:`graph_cap` kept from being built although every rank's
    nodes add up to at most REPLAY_MAX_NODES (so the what-if is replayed)."""
    parts = [getattr(r, "extra", {}).get("replay") for r in results]
    skipped = [i for i, p in enumerate(parts)
               if isinstance(p, TooBig) and p.n_nodes <= REPLAY_MAX_NODES]  # fmt: skip
    return skipped if skipped and _n_nodes(parts) <= REPLAY_MAX_NODES else []


def _n_nodes(parts) -> int:
    """The nodes of every rank's replay part together: built graphs and counted ones."""
    return (sum(len(p.start) for p in parts if isinstance(p, RankGraph))
            + sum(p.n_nodes for p in parts if isinstance(p, TooBig)))  # fmt: skip


def _host_calls(ev: pd.DataFrame):
    """(calls, tid, start, end) of the top-level runtime / driver calls per thread."""
    rt = ev.loc[ev["cat"].isin(("cuda_runtime", "cuda_driver")).to_numpy()]
    rt = rt.sort_values(["tid", "ts"], kind="stable")
    h_tid = rt["tid"].to_numpy(np.int64)
    h_s = rt["ts"].to_numpy(np.int64)
    h_e = h_s + np.maximum(rt["dur"].to_numpy(np.int64), 0)
    run_end = pd.Series(h_e).groupby(h_tid, sort=False).cummax().to_numpy(np.int64)
    top = np.ones(len(rt), dtype=bool)
    top[1:] = (h_tid[1:] != h_tid[:-1]) | (h_s[1:] >= run_end[:-1])
    return rt.loc[top], h_tid[top], h_s[top], h_e[top]


def _inferred_waits(late, dev, dl, d_s, d_e, prev_end) -> tuple[np.ndarray, np.ndarray]:
    """For each late interval ``k``: the interval of another stream of its device that
    ended last at or before ``d_s[k]`` (ends sorted per device, ties by row), kept when it
    ended within INFER_GAP_NS of ``d_s[k]`` and after ``k``'s stream predecessor.
    Vectorised: the last interval ending by ``d_s[k]`` on its device, stepped back past
    the run of ``k``'s own stream that holds it."""
    o = np.lexsort((d_e, dev))
    dev_o, end_o, lane_o = dev[o], d_e[o], dl[o]
    dk, sk, lk = dev[late], d_s[late], dl[late]
    lo = np.searchsorted(dev_o, dk, "left")
    dev_hi = np.searchsorted(dev_o, dk, "right")
    # last row of k's device ending at or before d_s[k]: per device, since ends sort
    # within a device
    j = lo - 1
    for d in np.unique(dk).tolist():
        m = dk == d
        a, b = int(lo[m][0]), int(dev_hi[m][0])
        j[m] = np.searchsorted(end_o[a:b], sk[m], "right") + a - 1
    # where that row is on k's own stream, step to just before its run of that stream
    n = len(o)
    run_start = np.zeros(n, np.int64)
    if n:
        new_run = np.ones(n, bool)
        new_run[1:] = (lane_o[1:] != lane_o[:-1]) | (dev_o[1:] != dev_o[:-1])
        run_start = np.maximum.accumulate(np.where(new_run, np.arange(n), 0))
    ok = j >= lo
    jj = np.maximum(j, 0)
    own = ok & (lane_o[jj] == lk)
    j = np.where(own, run_start[jj] - 1, j)
    ok = j >= lo
    jj = np.maximum(j, 0)
    ok &= (sk - end_o[jj] <= INFER_GAP_NS) & (end_o[jj] > prev_end[late])
    return late[ok], o[jj[ok]]


def _last_other_lane(sorted_vals, lane_sorted, q_vals, q_lane) -> np.ndarray:
    """For each query: the last position ``k`` of ``sorted_vals`` with value <= its
    value whose lane differs from the query's (-1: none) - the last such position,
    stepped back past the run of the query's own lane that holds it."""
    n = len(sorted_vals)
    k = np.searchsorted(sorted_vals, q_vals, "right") - 1
    if n == 0:
        return k
    new_run = np.ones(n, bool)
    new_run[1:] = lane_sorted[1:] != lane_sorted[:-1]
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(n), 0))
    kk = np.maximum(k, 0)
    own = (k >= 0) & (lane_sorted[kk] == q_lane)
    return np.where(own, run_start[kk] - 1, k)


def _handoffs(cand_d, cand_lo, hl, h_s, h_e) -> tuple[np.ndarray, np.ndarray]:
    """(call, call of another thread) handoff pairs: for each candidate call ``d``, the
    last call of another thread ending in ``(lo, h_s[d]]`` (ends in stable order)."""
    order = np.argsort(h_e, kind="stable")
    e_sorted = h_e[order]
    cand_d = np.asarray(cand_d, np.int64)
    k = _last_other_lane(e_sorted, hl[order], h_s[cand_d], hl[cand_d])
    kk = np.maximum(k, 0)
    ok = (k >= 0) & (e_sorted[kk] > np.asarray(cand_lo, np.int64))
    return cand_d[ok], order[kk[ok]].astype(np.int64)


def _gpu_graph(ev: pd.DataFrame, iv: pd.DataFrame, *, rank: int, host=None) -> RankGraph:
    """``ev``: this rank's events; ``host``: its :func:`_host_calls`, when known."""
    # host calls: top-level runtime / driver calls per thread
    rt, h_tid, h_s, h_e = _host_calls(ev) if host is None else host
    h_api = _api(rt["name"].astype(str).to_numpy())
    h_corr = rt["correlation"].to_numpy(np.int64)
    nh = len(rt)
    # device nodes
    d_s = iv["start"].to_numpy(np.int64)
    d_e = np.maximum(iv["end"].to_numpy(np.int64), d_s)
    d_kind = np.select(
        [iv["kind"].to_numpy() == "compute", iv["kind"].to_numpy() == "comm"],
        [COMPUTE, COMM], MEMORY,
    )  # fmt: skip
    nd = len(iv)
    dev_lane_key = iv["device"].to_numpy(np.int64) * (1 << 32) + iv["stream"].to_numpy(np.int64)
    dl_keys, dl = np.unique(dev_lane_key, return_inverse=True)
    hl_keys, hl = np.unique(h_tid, return_inverse=True)
    lanes = [(f"stream {int(k & 0xFFFFFFFF)} (device {int(k >> 32)})", True) for k in dl_keys]
    lanes += [(f"thread {int(t)}", False) for t in hl_keys]
    # comm launch calls: correlation of a comm interval
    corr_comm = set(iv.loc[d_kind == COMM, "correlation"].to_numpy(np.int64).tolist())
    h_kind = np.full(nh, HOST, dtype=np.int8)
    h_kind[np.isin(h_corr, list(corr_comm)) & (h_corr >= 0)] = LAUNCH_COMM
    is_sync = np.isin(h_api, SYNC_CALLS)
    h_kind[is_sync] = SYNC
    # blocking launch calls (cudaMemcpy ...) wait for their interval: treat as syncs
    # through their interval below; a launch call = what a graph would replace
    h_launch = ~is_sync
    # join device interval -> host call index (by launch tid + start)
    hkey = pd.Series(np.arange(nh), index=pd.MultiIndex.from_arrays([h_tid, h_s]))
    hkey = hkey[~hkey.index.duplicated()]
    lt = iv["launch_tid"].to_numpy(np.int64)
    ls = iv["launch_start"].to_numpy(np.int64)
    has_l = ls >= 0
    call_of = np.full(nd, -1, dtype=np.int64)
    if has_l.any():
        got = hkey.reindex(pd.MultiIndex.from_arrays([lt[has_l], ls[has_l]]))
        call_of[has_l] = got.fillna(-1).to_numpy(np.int64)

    # all nodes: device first [0, nd), host [nd, nd + nh)
    start = np.concatenate([d_s, h_s])
    end = np.concatenate([d_e, h_e])
    kind = np.concatenate([d_kind.astype(np.int8), h_kind])
    lane = np.concatenate([dl, hl + len(dl_keys)]).astype(np.int32)
    iteration = np.concatenate([iv["iteration"].to_numpy(np.int64), np.full(nh, -1)])
    is_device = np.concatenate([np.ones(nd, bool), np.zeros(nh, bool)])
    is_launch = np.concatenate([np.zeros(nd, bool), h_launch])
    name = np.concatenate([iv["name"].astype(str).to_numpy(dtype=object),
                           h_api])  # fmt: skip
    edges = _Edges()
    add = edges.add

    # launch edges: call start -> interval start
    ok = call_of >= 0
    lat = d_s[ok] - h_s[call_of[ok]]
    # stream order
    sd, ss = _prev_on_lane(dl, d_s, d_e)
    queued = np.zeros(nd, bool)
    prev_end = np.full(nd, -1, np.int64)
    prev_end[sd] = d_e[ss]
    launch_at = np.zeros(nd, np.int64)  # (a trace without runtime calls has no h_s to index)
    launch_at[ok] = h_s[call_of[ok]]
    idle_at_launch = ok & (launch_at >= prev_end)
    tau_launch = _median(d_s[idle_at_launch] - h_s[call_of[idle_at_launch]], 5_000)
    queued[sd] = True
    queued &= ~idle_at_launch
    gaps = d_s[queued] - prev_end[queued]
    tau_stream = _median(gaps, 1_000)
    add(np.flatnonzero(ok), nd + call_of[ok], LAUNCH, True, np.minimum(lat, tau_launch))
    add(sd, ss, STREAM, False, tau_stream)
    # cross-stream waits

    ivr = iv.reset_index(drop=True).assign(_orig=np.arange(nd, dtype=np.int64))
    ed, _ = switch_edges(ev, ivr)
    if len(ed):
        good = (ed["producer"] >= 0) & (ed["consumer"] >= 0) & ~ed["unresolved"]
        ed = ed.loc[good]
        orig = _interval_table(ivr)["_orig"].to_numpy(np.int64)  # switches' row -> ours
        add(orig[ed["consumer"].to_numpy(np.int64)], orig[ed["producer"].to_numpy(np.int64)],
            EVENT, False, 0)  # fmt: skip
    # inferred waits: a kernel that started long after its stream predecessor ended,
    # shortly after an interval of another stream of its device ended (a wait whose
    # Stream Wait Event CUPTI recorded without, or with a wrong, record correlation)
    dev = iv["device"].to_numpy(np.int64)
    late = sd[(d_s[sd] - d_e[ss]) > INFER_GAP_NS]
    if len(late):
        wd, ws = _inferred_waits(late, dev, dl, d_s, d_e, prev_end)
        add(wd, ws, EVENT, False, 0)
    # host thread order; the gap is the host's own work
    td, ts_ = _prev_on_lane(hl, h_s, h_e)
    hgap = h_s[td] - h_e[ts_]
    add(td + nd, ts_ + nd, THREAD, False, hgap)
    # handoff: a long idle gap on a thread while another thread issued calls
    if len(hl_keys) > 1 and len(td):
        long = hgap >= HANDOFF_MIN_NS
        first_idx = np.setdiff1d(np.arange(nh), td)  # first call of each thread
        cand_d = np.concatenate([td[long], first_idx])
        cand_lo = np.concatenate([h_e[ts_[long]], np.full(len(first_idx), np.iinfo(np.int64).min)])
        hd, hs = _handoffs(cand_d, cand_lo, hl, h_s, h_e)
        add(hd + nd, hs + nd, HANDOFF, False, 0)
    # end edges: blocking syncs
    x_dst, x_src = _sync_targets(ev, iv, h_api, h_s, h_e, h_tid, h_corr, call_of, nd)
    g = _finish(
        rank=rank, mode="gpu", kind=kind, lane=lane, lanes=lanes, start=start, end=end,
        iteration=iteration, is_device=is_device, is_launch=is_launch, name=name,
        **edges.arrays(), x_dst=x_dst, x_src=x_src,
    )  # fmt: skip
    return _with_sync_sites(g, ev)


def _sync_targets(ev, iv, h_api, h_s, h_e, h_tid, h_corr, call_of, nd):
    """(sync node, awaited interval) pairs (host node indices offset by ``nd``).

    A stream sync waits for the last interval launched on its stream before it; an
    event sync for the interval its event was recorded after, which the trace does not
    name and may be older than the stream's last launch (a host keeping k launches in
    flight waits for the event of k launches back): taken as the latest-ending interval
    of its stream, launched before the sync, that had ended when the sync returned (none:
    the sync keeps its measured time)."""
    sync_idx = np.flatnonzero(np.isin(h_api, SYNC_CALLS))
    if len(sync_idx) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cs = ev.loc[(ev["cat"] == "cuda_sync").to_numpy() & (ev["name"] != "Stream Wait Event").to_numpy()]
    stream_of_corr = dict(zip(cs["correlation"].to_numpy(np.int64).tolist(),
                              cs["stream"].to_numpy(np.int64).tolist()))  # fmt: skip
    d_stream = iv["stream"].to_numpy(np.int64)
    d_ls = iv["launch_start"].to_numpy(np.int64)
    d_lt = iv["launch_tid"].to_numpy(np.int64)
    d_e = iv["end"].to_numpy(np.int64)
    launched = np.flatnonzero(d_ls >= 0)
    t = h_s[sync_idx]
    # what each sync waits for: the device (all launched before it), a stream (its
    # cuda_sync event's), else the stream of its thread's last launch before it
    wide = np.array([h_api[i] in _DEVICE_WIDE for i in sync_idx.tolist()], bool)
    st = np.array([-1 if w else stream_of_corr.get(int(h_corr[i]), -1)
                   for i, w in zip(sync_idx.tolist(), wide.tolist())], np.int64)  # fmt: skip
    got = np.full(len(sync_idx), -1, np.int64)
    got[wide] = _best_before(launched, d_ls, d_e, t[wide])
    by_thread = np.flatnonzero(~wide & (st < 0))
    tids = h_tid[sync_idx[by_thread]]
    for tid in np.unique(tids).tolist():
        q = by_thread[tids == tid]
        last = _best_before(launched[d_lt[launched] == tid], d_ls, d_ls, t[q])
        st[q[last >= 0]] = d_stream[last[last >= 0]]
        st[q[last < 0]] = -1
    on_stream = ~wide & (st >= 0)
    ev_sync = np.isin(h_api[sync_idx], _EVENT_SYNCS)
    for s_ in np.unique(st[on_stream]).tolist():
        q = np.flatnonzero(on_stream & (st == s_))
        rows = launched[d_stream[launched] == s_]
        got[q] = _best_before(rows, d_ls, d_e, t[q])
        for k in q[ev_sync[q]].tolist():
            r = rows[(d_ls[rows] < t[k]) & (d_e[rows] <= h_e[sync_idx[k]])]
            got[k] = int(r[np.argmax(d_e[r])]) if len(r) else -1
    ok = got >= 0
    return nd + sync_idx[ok].astype(np.int64), got[ok]


def _best_before(rows: np.ndarray, ls: np.ndarray, key: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time ``t``: among ``rows`` (ascending) with ``ls[row] < t``, the row with
    the largest ``key``, ties to the smallest row (``argmax`` over them); -1: none."""
    if len(rows) == 0 or len(t) == 0:
        return np.full(len(t), -1, np.int64)
    o = rows[np.argsort(ls[rows], kind="stable")]
    by_key = np.lexsort((-o, key[o]))  # key ascending, then row descending: last is best
    rank = np.empty(len(o), np.int64)
    rank[by_key] = np.arange(len(o))
    best = o[by_key][np.maximum.accumulate(rank)]  # best row of o[:j + 1]
    pos = np.searchsorted(ls[o], t, "left")  # o[:pos] launched before t
    return np.where(pos > 0, best[np.maximum(pos - 1, 0)], -1).astype(np.int64)


def _outermost_at(a_tid, a_s, a_e, q_tid, q_t) -> np.ndarray:
    """For each query (thread, t): the row of the op on that thread holding ``t``
    (``a_s <= t < a_e``) with the earliest start, ties to the first row; -1: none.
    Per thread, rows sorted by start: the first row whose running maximum end
    exceeds ``t``, when it starts by ``t``."""
    out = np.full(len(q_t), -1, np.int64)
    q_tid, q_t = np.asarray(q_tid, np.int64), np.asarray(q_t, np.int64)
    for tid in np.unique(q_tid).tolist():
        rows = np.flatnonzero(a_tid == tid)
        q = np.flatnonzero(q_tid == tid)
        if len(rows) == 0:
            continue
        rows = rows[np.argsort(a_s[rows], kind="stable")]
        s_sorted = a_s[rows]
        run_max = np.maximum.accumulate(a_e[rows])
        t = q_t[q]
        pos = np.searchsorted(s_sorted, t, "right")  # rows [0, pos) start by t
        first = np.searchsorted(run_max, t, "right")  # first row ending after t
        hit = first < pos
        out[q[hit]] = rows[first[hit]]
    return out


def _with_sync_sites(g: RankGraph, ev: pd.DataFrame) -> RankGraph:
    """Sync site = (api, innermost op-naming annotation on the calling thread)."""
    idx = np.flatnonzero(g.kind == SYNC)
    if len(idx) == 0:
        return g
    ctx = context(ev)
    lab = g.lanes
    tids = np.array([int(lab[g.lane[i]][0].split()[1]) for i in idx], np.int64)
    pid = ev.loc[ev["cat"].isin(("cuda_runtime", "cuda_driver")).to_numpy(), "pid"]
    pid = int(pid.iloc[0]) if len(pid) else -1
    ops = ctx.op_at(np.full(len(idx), g.rank, np.int64), np.full(len(idx), pid, np.int64),
                    tids, g.start[idx])  # fmt: skip
    ops = np.asarray(ops, dtype=object)
    none = np.flatnonzero(ops == "(none)")
    if len(none):  # no annotation: the outermost aten:: op around the call
        cpu = ev.loc[(ev["cat"] == "cpu_op").to_numpy()]
        aten = cpu.loc[cpu["name"].astype(str).str.startswith("aten::").to_numpy()]
        a_tid, a_s = aten["tid"].to_numpy(np.int64), aten["ts"].to_numpy(np.int64)
        a_e = a_s + aten["dur"].to_numpy(np.int64)
        a_n = aten["name"].astype(str).to_numpy(dtype=object)
        j = _outermost_at(a_tid, a_s, a_e, tids[none], g.start[idx[none]])
        ops[none[j >= 0]] = a_n[j[j >= 0]]
    sites: dict = {}
    site = np.full(len(g.kind), -1, np.int32)
    for i, op in zip(idx.tolist(), ops.tolist()):
        site[i] = sites.setdefault((str(g.name[i]), str(op)), len(sites))
    return replace(g, sync_site=site, sync_sites=list(sites))


def _cpu_graph(iv: pd.DataFrame, *, rank: int, reference) -> RankGraph:
    comm = iv.loc[iv["kind"].to_numpy() == "comm"]
    g_s = comm["start"].to_numpy(np.int64)
    g_e = np.maximum(comm["end"].to_numpy(np.int64), g_s)
    g_lane_key = comm["stream"].to_numpy(np.int64)
    # compute lane(s): the compute reference of each process (device = pid)
    if reference is not None:
        m = np.asarray(reference.rank) == rank
        c_dev = np.asarray(reference.device)[m].astype(np.int64)
        c_s = np.asarray(reference.start)[m].astype(np.int64)
        c_e = np.asarray(reference.end)[m].astype(np.int64)
    else:  # no classified reference at hand: the union of the compute rows

        ref = ComputeReference.of_intervals(iv)
        c_dev, c_s, c_e = (np.asarray(x, np.int64) for x in (ref.device, ref.start, ref.end))
    # the c10d launch op of each gloo event (on its launching thread = a compute lane)
    ls = comm["launch_start"].to_numpy(np.int64)
    le = comm["launch_end"].to_numpy(np.int64)
    has_l = ls >= 0
    lk = pd.DataFrame({"s": ls[has_l], "e": le[has_l],
                       "dev": comm["device"].to_numpy(np.int64)[has_l]}).drop_duplicates(["s"])  # fmt: skip
    l_s, l_e, l_dev = (lk[c].to_numpy(np.int64) for c in ("s", "e", "dev"))
    ng, nc, nl = len(comm), len(c_s), len(l_s)
    comp_lanes, cl = np.unique(np.concatenate([c_dev, l_dev]), return_inverse=True)
    g_keys, gl = np.unique(g_lane_key, return_inverse=True)
    lanes = [(f"thread {int(k)} (gloo)", True) for k in g_keys]
    lanes += [(f"process {int(p)} compute threads", True) for p in comp_lanes]
    start = np.concatenate([g_s, c_s, l_s])
    end = np.concatenate([g_e, c_e, l_e])
    kind = np.concatenate([np.full(ng, COMM), np.full(nc, COMPUTE),
                           np.full(nl, LAUNCH_COMM)]).astype(np.int8)  # fmt: skip
    lane = np.concatenate([gl, cl + len(g_keys)]).astype(np.int32)
    # iteration of compute segments: the step window holding the segment's start, taken
    # from the intervals' own (step of compute rows)
    cp = iv.loc[iv["kind"].to_numpy() == "compute"]
    it_s = cp.groupby("iteration")["start"].min()
    it_e = cp.groupby("iteration")["end"].max()
    wins = pd.DataFrame({"s": it_s, "e": it_e}).sort_values("s")
    wins = wins.loc[wins.index >= 0]
    seg_it = np.full(nc, -1, np.int64)
    if len(wins):
        k = np.searchsorted(wins["s"].to_numpy(np.int64), c_s, "right") - 1
        okk = (k >= 0) & (c_s < wins["e"].to_numpy(np.int64)[np.maximum(k, 0)])
        seg_it[okk] = wins.index.to_numpy(np.int64)[k[okk]]
    iteration = np.concatenate([comm["iteration"].to_numpy(np.int64), seg_it, np.full(nl, -1)])
    is_device = np.concatenate([np.ones(ng + nc, bool), np.zeros(nl, bool)])
    name = np.concatenate([comm["name"].astype(str).to_numpy(dtype=object),
                           np.full(nc, "compute", dtype=object),
                           np.full(nl, "c10d launch", dtype=object)])  # fmt: skip
    n = ng + nc + nl
    edges = _Edges()
    add = edges.add

    # compute-lane order (segments and launch ops interleaved): the gap is host work
    cl_all = lane[ng:]
    sd, ss = _prev_on_lane(cl_all, start[ng:], end[ng:])
    gap = start[ng:][sd] - end[ng:][ss]
    tau_gap = _median(gap, 0)
    # wait edges: a gloo event ending inside the thread's gap, shortly before it resumes
    order = np.argsort(g_e, kind="stable")
    ge_sorted = g_e[order]
    wd, ws = [], []
    d_abs, s_abs = sd + ng, ss + ng
    for d, s in zip(d_abs.tolist(), s_abs.tolist()):
        k = int(np.searchsorted(ge_sorted, start[d], "right")) - 1
        if k >= 0 and ge_sorted[k] > end[s] and start[d] - ge_sorted[k] <= WAKE_MAX_NS:
            wd.append(d)
            ws.append(int(order[k]))
    long_gap = np.isin(d_abs, wd)
    add(d_abs, s_abs, THREAD, False, np.where(long_gap, np.minimum(gap, tau_gap), gap))
    add(wd, ws, WAIT, False, 0)
    # gloo events: launch (c10d op start) and runloop-thread order
    lpos = pd.Series(np.arange(nl), index=l_s)
    ok = has_l
    li = np.full(ng, -1, np.int64)
    li[ok] = lpos.reindex(ls[ok]).fillna(-1).to_numpy(np.int64)
    ok = li >= 0
    lat = g_s[ok] - l_s[li[ok]]
    add(np.flatnonzero(ok), ng + nc + li[ok], LAUNCH, True, np.minimum(lat, _median(lat, 0)))
    gd, gs = _prev_on_lane(gl, g_s, g_e)
    add(gd, gs, STREAM, False, 0)
    g = _finish(
        rank=rank, mode="cpu", kind=kind, lane=lane, lanes=lanes, start=start, end=end,
        iteration=iteration, is_device=is_device, is_launch=np.zeros(n, bool), name=name,
        **edges.arrays(), x_dst=np.zeros(0, np.int64), x_src=np.zeros(0, np.int64),
    )  # fmt: skip
    return g


def _finish(*, rank, mode, kind, lane, lanes, start, end, iteration, is_device, is_launch,
            name, dst, src, ek, fs, tau, x_dst, x_src) -> RankGraph:  # fmt: skip
    """Nodes in measured-start order, edges that respect it, fitted delays."""
    n = len(start)
    order = np.lexsort((end, start))
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    dst, src, x_dst, x_src = pos[dst], pos[src], pos[x_dst], pos[x_src]
    start, end = start[order], end[order]
    kind, lane, iteration = kind[order], lane[order], iteration[order]
    is_device, is_launch, name = is_device[order], is_launch[order], name[order]
    # a start edge needs its source processed first: the source's start comes earlier
    # in node order (and, when it has end edges, its measured end <= this start)
    has_x = np.zeros(n, bool)
    has_x[x_dst] = True
    ok = (src < dst) & (dst != src)
    ok &= ~(has_x[src] & ~fs & (end[src] > start[dst]))
    keep_x = end[x_src] <= end[x_dst]
    x_src, x_dst = x_src[keep_x], x_dst[keep_x]
    n_dropped = int((~ok).sum() + (~keep_x).sum())
    dst, src, ek, fs, tau = dst[ok], src[ok], ek[ok], fs[ok], tau[ok]
    delay, binding = _fit_delays(start, end, dst, src, fs, tau, n)
    # end edges: bound when the awaited end is after the node's start
    dur = end - start
    x_delay = np.maximum(end[x_dst] - end[x_src], 0).astype(np.int64)
    self_dur = dur.copy()
    bound = end[x_src] > start[x_dst]
    # a sync whose awaited work ended after it began: its own cost is what it took
    # beyond the wake-up, at most its duration (a bound sync costs ~nothing itself)
    self_dur[x_dst[bound]] = 0
    return RankGraph(
        rank=rank, mode=mode, kind=kind, lane=lane, lanes=lanes, start=start, end=end,
        iteration=iteration, is_device=is_device, is_launch=is_launch,
        sync_site=np.full(n, -1, np.int32), sync_sites=[], name=name,
        e_dst=dst, e_src=src, e_kind=ek, e_from_start=fs, e_delay=delay, e_binding=binding,
        x_dst=x_dst, x_src=x_src, x_delay=x_delay, self_dur=self_dur, n_dropped=n_dropped,
    )  # fmt: skip


# --------------------------------------------------------------------------- edits
@dataclass(frozen=True, kw_only=True)
class Edit:
    """One what-if scenario (module doc)."""

    name: str
    label: str
    comm_scale: float = 1.0  # 0: comm takes no device time
    comm_host_removed: bool = False  # its host launch calls / c10d ops cost nothing
    couple: bool = True  # collectives wait for their peers
    graphs: bool = False  # launches at graph-replay cost
    drop_syncs: tuple = ()  # sync sites removed; ("*",) all
    event_free: bool = False  # cross-stream waits at no latency


def scenarios(graphs: list[RankGraph], *, comm_k: float = 2.0) -> list[Edit]:
    """The what-if scenarios that apply to these graphs."""
    gpu = any(g.mode == "gpu" for g in graphs)
    has_comm = any((g.kind == COMM).any() for g in graphs)
    out = [Edit(name="measured", label="as profiled (replayed)")]
    if has_comm:
        out += [
            Edit(name="no_comm", label="comm removed", comm_scale=0.0,
                 comm_host_removed=True, couple=False),
            Edit(name=f"comm_x{comm_k:g}", label=f"comm x {comm_k:g}", comm_scale=comm_k),
            Edit(name="comm_hidden", label="comm fully hidden (overlap ceiling)",
                 comm_scale=0.0, couple=False),
        ]  # fmt: skip
        if len(graphs) > 1:
            out.append(Edit(name="no_skew", label="no cross-rank skew (transfer only)",
                            couple=False))  # fmt: skip
    if gpu:
        out.append(Edit(name="cuda_graphs", label="launches at CUDA-graph replay cost",
                        graphs=True))  # fmt: skip
        if any(len(g.sync_sites) for g in graphs):
            out.append(Edit(name="no_syncs", label="every blocking sync removed",
                            drop_syncs=("*",)))  # fmt: skip
            sites = sorted({s for g in graphs for s in g.sync_sites})
            for api, op in sites:
                where = "outside any annotation" if op == "(none)" else f"in {op}"
                out.append(Edit(name=f"no_sync:{api}@{op}", label=f"{api} {where} removed",
                                drop_syncs=((api, op),)))  # fmt: skip
        if any((g.e_kind == EVENT).any() for g in graphs):
            out.append(Edit(name="free_waits", label="cross-stream waits at no latency",
                            event_free=True))  # fmt: skip
    return out


# --------------------------------------------------------------------------- replay
@dataclass
class Coupling:
    """Collective peers across ranks: per comm node (global index), the global indices
    of its peers and its transfer time (ns)."""

    node: np.ndarray
    peers: list
    transfer: np.ndarray


def _offsets(graphs: list[RankGraph]) -> np.ndarray:
    n = [len(g.start) for g in graphs]
    return np.concatenate([[0], np.cumsum(n)]).astype(np.int64)


def couple(graphs: list[RankGraph], comm: pd.DataFrame | None, hosts: dict | None = None,
           ) -> tuple[Coupling, dict[int, int]]:  # fmt: skip
    """Match each rank's collectives to their peers (``analysis.ranks``): the coupling
    and each rank's clock offset (ns, added to its times)."""
    empty = Coupling(np.zeros(0, np.int64), [], np.zeros(0, np.int64))
    offs = {g.rank: 0 for g in graphs}
    if comm is None or len(comm) == 0 or len(graphs) < 2:
        return empty, offs
    inst, _, _ = collective_instances(comm)
    if inst.empty:
        return empty, offs
    host_of = {g.rank: (hosts or {}).get(g.rank) or "localhost" for g in graphs}
    inst = inst.loc[inst["rank"].isin(list(host_of))]
    inst, _, _ = align_hosts(inst, host_of)
    if inst.empty:
        return empty, offs
    for r, d in inst.groupby("rank"):
        offs[int(r)] = int((d["a_start"] - d["start"]).iloc[0])
    base = _offsets(graphs)
    # the node of each (rank, start) arrival: a comm node starting there
    node_of = {}
    for i, g in enumerate(graphs):
        c = np.flatnonzero(g.kind == COMM)
        for j, s in zip(c.tolist(), g.start[c].tolist()):
            node_of.setdefault((g.rank, s), base[i] + j)
    nodes, peers, transfer = [], [], []
    for _, d in inst.groupby("iid", sort=False):
        got = [(node_of.get((int(r), int(s))), int(a), int(e))
               for r, s, a, e in zip(d["rank"], d["start"], d["a_start"], d["a_end"])]  # fmt: skip
        if any(x[0] is None for x in got) or len(got) < 2:
            continue
        latest = max(a for _, a, _ in got)
        for k, (nd, a, e) in enumerate(got):
            nodes.append(nd)
            peers.append([x[0] for j, x in enumerate(got) if j != k])
            transfer.append(max(e - latest, 0))
    return Coupling(np.asarray(nodes, np.int64), peers, np.asarray(transfer, np.int64)), offs


@dataclass
class Replayed:
    """A replay's node times (global index, common clock) and its step figures."""

    start: np.ndarray
    end: np.ndarray
    binding: np.ndarray  # int64 [N]: the start edge (global edge index) that set it, -1
    end_by: np.ndarray  # int64 [N]: source node of the binding end edge, -1 (own dur)
    walls: pd.DataFrame  # rank, iteration, wall_ns
    step_ns: float | None


def _walls(graphs, start, end, base) -> pd.DataFrame:
    rows = []
    for i, g in enumerate(graphs):
        sl = slice(base[i], base[i + 1])
        m = g.is_device & (g.iteration >= 0)
        if not m.any():
            continue
        df = pd.DataFrame({"it": g.iteration[m], "s": start[sl][m], "e": end[sl][m]})
        w = df.groupby("it").agg(s=("s", "min"), e=("e", "max"))
        # an iteration's time starts when it starts or when the previous one ended,
        # whichever is later: work a run-ahead host queued early is not step time
        prev_e = w["e"].shift(1).fillna(np.iinfo(np.int64).min).to_numpy(np.int64)
        s0 = np.maximum(w["s"].to_numpy(np.int64), prev_e)
        rows.append(pd.DataFrame({"rank": g.rank, "iteration": w.index.to_numpy(np.int64),
                                  "wall_ns": w["e"].to_numpy(np.int64) - s0}))  # fmt: skip
    if not rows:
        return pd.DataFrame({"rank": [], "iteration": [], "wall_ns": []})
    return pd.concat(rows, ignore_index=True)


def step_of(walls: pd.DataFrame) -> float | None:
    """Mean over iterations of the slowest rank's wall (ns)."""
    if walls.empty:
        return None
    return float(walls.groupby("iteration")["wall_ns"].max().mean())


class Model:
    """Every rank's graph on one clock, ready to replay under edits."""

    def __init__(self, graphs: list[RankGraph], coupling: Coupling, offsets: dict[int, int]):
        self.graphs = graphs
        self.base = _offsets(graphs)
        off = np.concatenate([np.full(len(g.start), offsets.get(g.rank, 0), np.int64)
                              for g in graphs])  # fmt: skip
        cat = np.concatenate
        self.start = cat([g.start for g in graphs]) + off
        self.end = cat([g.end for g in graphs]) + off
        self.kind = cat([g.kind for g in graphs])
        self.is_launch = cat([g.is_launch for g in graphs])
        self.site = [(g.sync_sites[s] if s >= 0 else None) for g in graphs for s in g.sync_site]
        self.rank_of = cat([np.full(len(g.start), g.rank, np.int64) for g in graphs])
        b = self.base
        self.e_dst = cat([g.e_dst + b[i] for i, g in enumerate(graphs)])
        self.e_src = cat([g.e_src + b[i] for i, g in enumerate(graphs)])
        self.e_kind = cat([g.e_kind for g in graphs])
        self.e_fs = cat([g.e_from_start for g in graphs])
        self.e_delay = cat([g.e_delay for g in graphs])
        self.x_dst = cat([g.x_dst + b[i] for i, g in enumerate(graphs)])
        self.x_src = cat([g.x_src + b[i] for i, g in enumerate(graphs)])
        self.x_delay = cat([g.x_delay for g in graphs])
        self.self_dur = cat([g.self_dur for g in graphs])
        self.coupling = coupling
        n = len(self.start)
        # processing order: start events at measured start, end events (nodes whose end
        # waits on another node) at measured end; end events first on a tie
        has_x = np.zeros(n, bool)
        has_x[self.x_dst] = True
        has_x[coupling.node] = True
        self.has_x = has_x
        xe = np.flatnonzero(has_x)
        t = np.concatenate([self.start, self.end[xe]])
        typ = np.concatenate([np.ones(n, np.int8), np.zeros(len(xe), np.int8)])
        idx = np.concatenate([np.arange(n), xe])
        o = np.lexsort((idx, typ, t))
        self.events = list(zip(typ[o].tolist(), idx[o].tolist()))
        self.measured_walls = _walls(graphs, self.start, self.end, self.base)

    def replay(self, edit: Edit | None = None) -> Replayed:
        edit = edit or Edit(name="measured", label="")
        n = len(self.start)
        dur = (self.end - self.start).astype(np.int64)
        self_dur = self.self_dur.copy()
        delay = self.e_delay.copy()
        kind = self.kind
        comm = kind == COMM
        e_on = np.ones(len(delay), bool)
        x_on = np.ones(len(self.x_dst), bool)
        transfer = self.coupling.transfer.astype(np.float64)
        cpl_on = edit.couple
        if edit.comm_scale != 1.0:
            if edit.couple:  # with peers: the wait comes from the replay; scale transfer
                cn = self.coupling.node
                solo = comm.copy()
                solo[cn] = False
                dur[solo] = np.round(dur[solo] * edit.comm_scale).astype(np.int64)
                transfer = transfer * edit.comm_scale
            else:
                dur[comm] = np.round(dur[comm] * edit.comm_scale).astype(np.int64)
            self_dur[comm] = dur[comm]
        if not edit.couple:  # each collective takes its transfer time only
            cn = self.coupling.node
            if len(cn):
                dur[cn] = np.round(transfer * edit.comm_scale).astype(np.int64)
                self_dur[cn] = dur[cn]
        if edit.comm_host_removed:
            lc = kind == LAUNCH_COMM
            dur[lc] = 0
            self_dur[lc] = 0
        if edit.graphs:
            hl = self.is_launch
            dur[hl] = 0
            self_dur[hl] = 0
            k, d = self.e_kind, self.e_dst
            delay[(k == THREAD) & hl[d]] = 0  # launch latency (LAUNCH delays) stays
            delay[k == STREAM] = np.minimum(delay[k == STREAM], GRAPH_KERNEL_GAP_NS)
        if edit.drop_syncs:
            drop = np.array([s is not None and ("*" in edit.drop_syncs or s in edit.drop_syncs)
                             for s in self.site], bool)  # fmt: skip
            x_on &= ~drop[self.x_dst]
            dur[drop] = 0
            self_dur[drop] = 0
        if edit.event_free:
            delay[self.e_kind == EVENT] = 0
        # CSR of start edges by destination
        o = np.argsort(self.e_dst, kind="stable")
        o = o[e_on[o]]
        ptr = np.searchsorted(self.e_dst[o], np.arange(n + 1))
        e_src = self.e_src[o].tolist()
        e_fs = self.e_fs[o].tolist()
        e_dl = delay[o].tolist()
        e_id = o.tolist()
        xo = np.argsort(self.x_dst, kind="stable")
        xo = xo[x_on[xo]]
        xptr = np.searchsorted(self.x_dst[xo], np.arange(n + 1))
        x_src = self.x_src[xo].tolist()
        x_dl = self.x_delay[xo].tolist()
        peers = {}
        if cpl_on:
            for nd, pr, tr in zip(self.coupling.node.tolist(), self.coupling.peers,
                                  np.round(transfer).astype(np.int64).tolist()):  # fmt: skip
                peers[nd] = (pr, tr)
        ms = self.start.tolist()
        ptr_l, xptr_l = ptr.tolist(), xptr.tolist()
        durs, sdur = dur.tolist(), self_dur.tolist()
        has_x = self.has_x.tolist()
        S = [0] * n
        E = [0] * n
        bind = [-1] * n
        end_by = [-1] * n
        for typ, i in self.events:
            if typ == 1:  # start
                a, b = ptr_l[i], ptr_l[i + 1]
                if a == b:
                    s = ms[i]  # an anchor: no predecessor in the graph
                else:
                    s, bi = None, -1
                    for k in range(a, b):
                        j = e_src[k]
                        r = (S[j] if e_fs[k] else E[j]) + e_dl[k]
                        if s is None or r > s:
                            s, bi = r, e_id[k]
                    bind[i] = bi
                S[i] = s
                if not has_x[i]:
                    E[i] = s + durs[i]
            else:  # end of a node that waits on others
                s = S[i]
                if i in peers:
                    pr, tr = peers[i]
                    e = max([s] + [S[j] for j in pr]) + tr
                    late = max(pr, key=lambda j: S[j])
                    end_by[i] = late if S[late] > s else -1
                else:
                    e = s + sdur[i]
                    for k in range(xptr_l[i], xptr_l[i + 1]):
                        r = E[x_src[k]] + x_dl[k]
                        if r > e:
                            e, end_by[i] = r, x_src[k]
                E[i] = max(e, s)
        start = np.asarray(S, np.int64)
        end = np.asarray(E, np.int64)
        walls = _walls(self.graphs, start, end, self.base)
        return Replayed(start=start, end=end, binding=np.asarray(bind, np.int64),
                        end_by=np.asarray(end_by, np.int64), walls=walls,
                        step_ns=step_of(walls))  # fmt: skip


# --------------------------------------------------------------------------- critical path
CP_PARTS = ("compute", "exposed_comm", "host", "idle")


def critical_path(model: Model, rep: Replayed) -> list[dict]:
    """Per (rank, iteration): the chain of binding edges back from the rank's last
    device node of the step to its first device start, with its time split into
    compute (compute kernels / CPU compute segments), exposed comm (comm on the path),
    host (host calls, the host's gaps, launch latency) and idle (stream / event delays,
    waking from a sync). Shares are of the path's length, which is the rank's wall."""
    out = []
    own_part = {COMPUTE: "compute", MEMORY: "compute", COMM: "exposed_comm", HOST: "host",
                LAUNCH_COMM: "host", SYNC: "idle"}  # fmt: skip
    gap_part = {THREAD: "host", LAUNCH: "host", HANDOFF: "host", STREAM: "idle",
                EVENT: "idle", WAIT: "idle"}  # fmt: skip
    for gi, g in enumerate(model.graphs):
        b0 = model.base[gi]
        m = g.is_device & (g.iteration >= 0)
        for it in np.unique(g.iteration[m]).tolist():
            sel = np.flatnonzero(m & (g.iteration == it)) + b0
            t0 = int(rep.start[sel].min())
            i = int(sel[np.argmax(rep.end[sel])])
            t = int(rep.end[i])
            parts = dict.fromkeys(CP_PARTS, 0)
            while t > t0:
                s = max(int(rep.start[i]), t0)
                x = int(rep.end_by[i])
                if x >= 0 and model.kind[i] == SYNC and model.rank_of[x] == g.rank:
                    # a sync returns when its awaited work ends: follow that work
                    xe = max(int(rep.end[x]), t0)
                    if t > xe:
                        parts["idle"] += t - xe  # waking up
                    t = min(t, xe)
                    i = x
                    continue
                if t > s:  # the node's own time on the path
                    parts[own_part[int(model.kind[i])]] += t - s
                    t = s
                if t <= t0:
                    break
                e = int(rep.binding[i])
                if e < 0:  # an anchor inside the window: nothing in the graph explains it
                    parts["idle"] += t - t0
                    break
                j = int(model.e_src[e])
                ready = max(int(rep.start[j] if model.e_fs[e] else rep.end[j]), t0)
                if t > ready:
                    parts[gap_part[int(model.e_kind[e])]] += t - ready
                t = min(t, ready)
                i = j
            total = sum(parts.values())
            out.append({
                "rank": g.rank, "iteration": int(it), "length_ns": int(total),
                **{f"{p}_ns": int(v) for p, v in parts.items()},
                **{f"{p}_share": (v / total if total else None) for p, v in parts.items()},
            })  # fmt: skip
    return out


# --------------------------------------------------------------------------- what if
@dataclass(frozen=True, kw_only=True)
class WhatIf:
    """The what-if table: the replayed step of each scenario and its gain."""

    computed: bool
    reason: str | None = None
    explained: bool = False
    profiled_step_ms: float | None = None  # the slowest rank's device wall (measured)
    replayed_step_ms: float | None = None  # the unedited replay of it
    error_pct: float | None = None
    graph_kernel_gap_ns: int = GRAPH_KERNEL_GAP_NS
    scenarios: list = field(default_factory=list)  # {name, label, step_ms, gain_ms}
    critical_path: list = field(default_factory=list)  # critical_path() rows
    n_nodes: int = 0
    n_edges: int = 0
    n_dropped_edges: int = 0
    n_coupled: int = 0

    def gain(self, name: str) -> float | None:
        for s in self.scenarios:
            if s["name"] == name:
                return s["gain_ms"]
        return None

    def to_json(self) -> dict:
        return jsonable({k: getattr(self, k) for k in self.__dataclass_fields__})


def whatif(graphs: list[RankGraph], *, comm: pd.DataFrame | None = None,
           hosts: dict | None = None, edits: list[Edit] | None = None,
           extra: list[Edit] = ()) -> tuple[WhatIf, Model | None]:  # fmt: skip
    """Replay every scenario (``edits``, default :func:`scenarios`, plus ``extra``)."""
    graphs = [g for g in graphs if g is not None]
    if not graphs:
        return WhatIf(computed=False, reason="no device activity to replay"), None
    cpl, offs = couple(graphs, comm, hosts)
    model = Model(graphs, cpl, offs)
    measured = step_of(model.measured_walls)
    if measured is None:
        return WhatIf(computed=False, reason="no device node inside a ProfilerStep#N"), model
    base = model.replay()
    err = abs(base.step_ns - measured) / measured if measured else None
    explained = err is not None and err <= EXPLAIN_TOL
    rows = []
    for ed in list(edits or scenarios(graphs)) + list(extra):
        rep = base if ed.name == "measured" else model.replay(ed)
        rows.append({"name": ed.name, "label": ed.label,
                     "step_ms": rep.step_ns / 1e6 if rep.step_ns is not None else None,
                     "gain_ms": ((base.step_ns - rep.step_ns) / 1e6
                                 if explained and rep.step_ns is not None else None)})  # fmt: skip
    w = WhatIf(
        computed=True, explained=explained,
        reason=None if explained else (
            f"the replay model does not explain this trace: it replays the step in "
            f"{base.step_ns / 1e6:.3f} ms, the profile shows {measured / 1e6:.3f} ms "
            f"({100 * err:.1f}% apart, more than {100 * EXPLAIN_TOL:g}%): no gain is predicted"),
        profiled_step_ms=measured / 1e6, replayed_step_ms=base.step_ns / 1e6,
        error_pct=100 * err if err is not None else None, scenarios=rows,
        critical_path=critical_path(model, base), n_nodes=len(model.start),
        n_edges=len(model.e_dst) + len(model.x_dst),
        n_dropped_edges=sum(g.n_dropped for g in graphs), n_coupled=len(cpl.node),
    )  # fmt: skip
    return w, model


# --------------------------------------------------------------------------- validation
def cpu_profiled_step(events: pd.DataFrame) -> tuple[float | None, pd.DataFrame]:
    """The profiled step (ns) of a CPU trace with or without gloo collectives (a nocomm
    run has none, so it cannot be classified): per (rank, iteration) the extent of the
    ``cpu_op`` events on threads without ``gloo:*`` events plus the gloo events, each
    attributed to the step window holding its start; the step is :func:`step_of` of
    those walls (the same figure :class:`Model` computes from a tp trace)."""
    ev = events
    name = ev["name"].astype(str)
    gloo = name.str.startswith("gloo:").to_numpy()
    thr = ev["rank"].to_numpy(np.int64) * (1 << 40) + ev["tid"].to_numpy(np.int64)
    comm_thr = np.isin(thr, thr[gloo])
    cpu = (ev["cat"].to_numpy() == "cpu_op") & ~comm_thr
    m = cpu | gloo
    sel = ev.loc[m]
    it = iteration_at(step_windows(ev), sel["rank"].to_numpy(np.int64),
                      sel["ts"].to_numpy(np.int64))  # fmt: skip
    df = pd.DataFrame({"rank": sel["rank"].to_numpy(np.int64), "it": it,
                       "s": sel["ts"].to_numpy(np.int64),
                       "e": (sel["ts"] + sel["dur"].clip(lower=0)).to_numpy(np.int64)})  # fmt: skip
    df = df.loc[df["it"] >= 0]
    rows = []
    for r, d in df.groupby("rank"):
        w = d.groupby("it").agg(s=("s", "min"), e=("e", "max"))
        prev_e = w["e"].shift(1).fillna(np.iinfo(np.int64).min).to_numpy(np.int64)
        s0 = np.maximum(w["s"].to_numpy(np.int64), prev_e)
        rows.append(pd.DataFrame({"rank": int(r), "iteration": w.index.to_numpy(np.int64),
                                  "wall_ns": w["e"].to_numpy(np.int64) - s0}))  # fmt: skip
    walls = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(
        {"rank": [], "iteration": [], "wall_ns": []})
    return step_of(walls), walls


# --------------------------------------------------------------------------- pipeline
def rank_graph_or_note(events, intervals, *, rank: int, mode: str, reference=None,
                       max_nodes: int | None = None):  # fmt: skip
    """:func:`rank_graph`, or the one-line reason it could not be built (a str): the
    replay is an extra; a trace it cannot model keeps every other figure."""
    try:
        return rank_graph(events, intervals, rank=rank, mode=mode, reference=reference,
                          max_nodes=max_nodes)  # fmt: skip
    except (ValueError, KeyError, IndexError) as e:  # an unexpected trace shape
        return f"rank {rank}: replay graph not built ({type(e).__name__}: {e})"


ALL_FIXES = "all_fixes"


def whatif_of_results(results, *, comm=None, hosts=None) -> tuple[dict, list]:
    """The what-if table (JSON form) of every rank's ``RankResult`` and its notes."""
    parts = [r.extra.get("replay") for r in results]
    notes = [Note(p, "replay") for p in parts if isinstance(p, str)]
    graphs = [p for p in parts if isinstance(p, RankGraph)]
    too_big = [p for p in parts if isinstance(p, TooBig)]
    if not graphs and not too_big:
        return {}, notes
    n = _n_nodes(parts)
    if n > REPLAY_MAX_NODES:
        why = (f"not replayed: {n} nodes exceed the {REPLAY_MAX_NODES} a replay handles "
               "quickly (one Python pass per scenario); analyse fewer steps or ranks "
               "(--rank) to get the what-if table")
        notes.append(Note(f"what if: {why}", "replay"))
        # the overlap tax is measured on the intervals, not replayed: given all the same
        # (until 2026-12-02 a trace over the limit lost it with the replay)
        return {"computed": False, "reason": why, "overlap_tax": _tax_of(results)}, notes
    edits = scenarios(graphs)
    fixes = [e for e in edits if e.name in ("cuda_graphs", "no_syncs", "free_waits", "no_skew")]
    extra = []
    if fixes:
        extra.append(Edit(
            name=ALL_FIXES, label="every fix above applied together",
            couple=all(e.couple for e in fixes), graphs=any(e.graphs for e in fixes),
            drop_syncs=("*",) if any(e.drop_syncs for e in fixes) else (),
            event_free=any(e.event_free for e in fixes)))  # fmt: skip
    w, _ = whatif(graphs, comm=comm, hosts=hosts, edits=edits, extra=extra)
    doc = w.to_json()
    doc["overlap_tax"] = _tax_of(results)
    if w.computed and w.explained:
        singles = [s["gain_ms"] for s in w.scenarios if s["name"] in {e.name for e in fixes}]
        comb = w.gain(ALL_FIXES)
        doc["sum_of_fix_gains_ms"] = float(sum(singles)) if singles else None
        doc["combined_gain_ms"] = comb
        doc["gains_add"] = (
            None if comb is None or not singles
            else bool(abs(sum(singles) - comb) <= max(0.05 * abs(comb), 0.01)))  # fmt: skip
    elif w.reason:
        notes.append(Note(f"what if: {w.reason}", "replay"))
    return doc, notes


def _tax_of(results) -> dict:
    """The overlap tax (analysis.overlap_tax) over the ranks' parts; hidden comm per step
    from their by_iteration rows (steps only)."""
    parts = [r.extra.get("tax") for r in results]
    n_steps, hidden = 0, 0
    have_tables = True
    for r in results:
        sp = r.spans
        n_steps += int((sp["iteration"] >= 0).sum()) if sp is not None and len(sp) else 0
        bi = (r.tables or {}).get("by_iteration")
        if bi is None:
            have_tables = False
        else:
            hidden += int(bi.loc[bi["iteration"] >= 0, "hidden_ns"].sum())
    return overlap_tax(parts, n_rank_steps=n_steps, hidden_ns=hidden if have_tables else None)
