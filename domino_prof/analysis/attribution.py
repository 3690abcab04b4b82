"""The attribution core: where on the host a device event or a host call belongs.

One implementation of each rule of docs/METRICS.md that the overlap analysis
(``classify``) and the overheads (``switches``, ``launches``, ``ranks``) both need:

- **step windows**: ``ProfilerStep#N`` ranges (``user_annotation``, or ``cpu_op`` as
  older traces write them) per rank; a point belongs to the window of its rank with
  start <= t < end (:func:`step_windows`, :func:`iteration_at`);
- **innermost annotation**: the op name of a point is the innermost op-naming
  ``user_annotation`` open at it on its thread (rank, pid, tid), skipping step windows
  and collective wrappers (:func:`innermost_containing`, :meth:`Context.op_at`);
- **phase**: optimizer / backward / forward / other (:meth:`Context.attribute`);
- **id joins**: dense ids of integer tuples (:func:`tuple_ids`) and the
  CUDA/HIP (and MTIA) runtime and driver calls by (rank, correlation) (:func:`runtime_calls`,
  :func:`join_on_correlation`).

A :class:`Context` holds the CPU-side ranges of one trace, built once
(:func:`context`) and shared by every analysis of that trace. Vectorised: the
innermost annotation is a depth-indexed ``searchsorted``, the step and phase windows
``searchsorted`` look-ups on sorted or merged ranges. Pure functions; no printing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from domino_prof.analysis import intervals as iv
from domino_prof.trace.schema import MTIA_RUNTIME_CAT

NO_OP = "(none)"
PHASES = ("forward", "backward", "optimizer", "other")
STEP_PREFIX = "ProfilerStep#"
RUNTIME_CATS: tuple[str, ...] = ("cuda_runtime", "cuda_driver", MTIA_RUNTIME_CAT)
# the calls that launch a whole CUDA/HIP graph: every kernel of the graph has their
# correlation id, whatever phase of the step it belongs to
GRAPH_APIS: tuple[str, ...] = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")

# user annotations that never name an op: step windows and collective-level ranges
# (``nccl:all_reduce`` wraps every NCCL launch and would hide the model's op name)
NOT_AN_OP = re.compile(r"^(?:ProfilerStep#|nccl:|rccl:|hccl:|gloo:)")
STEP = re.compile(r"^ProfilerStep#(\d+)$")
_BACKWARD_CTX = re.compile(r"^autograd::engine::evaluate_function")
_OPTIMIZER_CTX = re.compile(r"^Optimizer\.(?:step|zero_grad)#")
_OP_OPTIMIZER = re.compile(r"^optimizer", re.IGNORECASE)
_OP_BACKWARD = re.compile(r"^(?:bwd|backward)", re.IGNORECASE)
_OP_FORWARD = re.compile(r"^(?:fwd|forward)", re.IGNORECASE)
_VERSION_SUFFIX = re.compile(r"_v\d+$")


# --------------------------------------------------------------------------- ids, names
def match_names(s: pd.Series, pattern: re.Pattern[str]) -> np.ndarray:
    """``pattern.search`` over a (categorical) string column, evaluated once per category."""
    if not isinstance(s.dtype, pd.CategoricalDtype):
        s = s.astype("category")
    cats = s.cat.categories
    hit = np.fromiter((bool(pattern.search(str(c))) for c in cats), dtype=bool, count=len(cats))
    codes = s.cat.codes.to_numpy()
    return np.where(codes >= 0, hit[np.maximum(codes, 0)] if len(hit) else False, False)


def per_category(values: pd.Series, fn) -> np.ndarray:
    """Apply a vectorised string function once per distinct value (names are interned
    as categories), then broadcast it back through the codes; missing values act as ""."""
    c = values if isinstance(values.dtype, pd.CategoricalDtype) else values.astype("category")
    cats = [*c.cat.categories.astype(str), ""]  # the last slot stands for missing
    mapped = np.asarray(fn(pd.Series(cats, dtype=object)), dtype=object)
    codes = c.cat.codes.to_numpy()
    return mapped[np.where(codes >= 0, codes, len(cats) - 1)]


def tuple_ids(*cols: np.ndarray) -> np.ndarray:
    """Dense int64 ids for tuples of int columns (e.g. rank, pid, tid), numbered in
    lexicographic order of the tuples (so sorting by id sorts by the tuple)."""
    n = len(cols[0])
    if n == 0:
        return np.empty(0, dtype=np.int64)
    combined = np.zeros(n, dtype=np.int64)
    for c in cols:
        # per-column dense ranks (sorted), then mixed radix: exact, order-preserving
        uniq, inv = np.unique(np.asarray(c, dtype=np.int64), return_inverse=True)
        combined = combined * np.int64(len(uniq)) + inv.reshape(-1).astype(np.int64)
    _, dense = np.unique(combined, return_inverse=True)
    return dense.reshape(-1).astype(np.int64)


def shared_ids(n_first: int, first: tuple, second: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Dense ids of the tuples of two row sets in one id space (e.g. the threads of
    annotations and of query points): ``first`` and ``second`` are tuples of columns."""
    both = tuple_ids(*(np.concatenate([a, q]) for a, q in zip(first, second)))
    return both[:n_first], both[n_first:]


def api_name(names: pd.Series) -> pd.Series:
    """Runtime call names without CUPTI's version suffix (``cudaLaunchKernelExC_v11060``
    -> ``cudaLaunchKernelExC``), as plain strings."""
    out = per_category(names, lambda s: s.str.replace(_VERSION_SUFFIX, "", regex=True))
    return pd.Series(out, index=names.index, dtype=object)


# --------------------------------------------------------------------------- id joins
def runtime_calls(events: pd.DataFrame) -> pd.DataFrame:
    """CUDA/HIP runtime and driver calls: rank, pid, tid, start, end, dur, correlation,
    name (as recorded), api (without the version suffix)."""
    rt = events.loc[events["cat"].isin(RUNTIME_CATS)]
    out = pd.DataFrame(
        {
            "rank": rt["rank"].to_numpy(np.int64),
            "pid": rt["pid"].to_numpy(np.int64),
            "tid": rt["tid"].to_numpy(np.int64),
            "start": rt["ts"].to_numpy(np.int64),
            "dur": rt["dur"].to_numpy(np.int64),
            "correlation": rt["correlation"].to_numpy(np.int64),
            "name": rt["name"].to_numpy(),
            "api": api_name(rt["name"]).to_numpy(),
        }
    )
    out["end"] = out["start"] + out["dur"]
    return out


def join_on_correlation(
    rank: np.ndarray, correlation: np.ndarray, calls: pd.DataFrame, columns: list[str]
) -> pd.DataFrame:
    """Per query row, the ``columns`` of the call with the same (rank, correlation) (the
    first one if a correlation repeats); NaN where there is none. ``found`` says which
    rows have one (a negative correlation never matches)."""
    c = calls.loc[calls["correlation"].to_numpy() >= 0, ["rank", "correlation", *columns]]
    c = c.drop_duplicates(["rank", "correlation"], keep="first")
    left = pd.DataFrame({"rank": np.asarray(rank), "correlation": np.asarray(correlation)})
    j = left.merge(c, on=["rank", "correlation"], how="left", sort=False)
    j["found"] = j[columns[0]].notna().to_numpy() & (left["correlation"].to_numpy() >= 0)
    return j


# --------------------------------------------------------------------------- innermost range
def innermost_containing(
    ann_keys: np.ndarray,
    ann_start: np.ndarray,
    ann_end: np.ndarray,
    q_keys: np.ndarray,
    q_t: np.ndarray,
) -> np.ndarray:
    """Index of the innermost annotation ``[start, end)`` of the same key containing each
    query point, or -1. Annotations of one key (thread) are properly nested ranges.

    Depth trick (no stack, no Python loop): order a thread's ranges by (start, -end);
    a range's depth is the number of ranges before it still open at its start. A point
    inside ``D`` ranges is innermost in the last range of depth ``D-1`` that started at
    or before it (a later range of that depth would lie inside it and so be deeper).
    Results whose range does not contain the point (improperly nested input) are -1.
    """
    ann_keys = np.asarray(ann_keys, dtype=np.int64)
    ann_start = np.asarray(ann_start, dtype=np.int64)
    ann_end = np.asarray(ann_end, dtype=np.int64)
    q_keys = np.asarray(q_keys, dtype=np.int64)
    q_t = np.asarray(q_t, dtype=np.int64)
    out = np.full(len(q_t), -1, dtype=np.int64)
    keep = np.flatnonzero(ann_end > ann_start)
    if len(keep) == 0 or len(q_t) == 0:
        return out
    k, s, e = ann_keys[keep], ann_start[keep], ann_end[keep]
    order = np.lexsort((-e, s, k))
    k, s, e, orig = k[order], s[order], e[order], keep[order]
    n = len(k)
    pos = np.arange(n, dtype=np.int64) - np.searchsorted(k, k, side="left")
    eorder = np.lexsort((e, k))
    ek, ee = k[eorder], e[eorder]
    closed = iv.grouped_searchsorted(ek, ee, k, s, side="right") - np.searchsorted(ek, k, "left")
    depth = pos - closed
    # number of ranges of the query's key open at t: started <= t minus ended <= t
    started = iv.grouped_searchsorted(k, s, q_keys, q_t, side="right") - np.searchsorted(
        k, q_keys, side="left"
    )
    ended = iv.grouped_searchsorted(ek, ee, q_keys, q_t, side="right") - np.searchsorted(
        ek, q_keys, side="left"
    )
    want = started - ended - 1
    width = np.int64(depth.max() + 1)
    dk = k * width + depth
    o2 = np.lexsort((s, dk))
    dk, s2, e2, orig2 = dk[o2], s[o2], e[o2], orig[o2]
    valid = (want >= 0) & (want < width)
    qdk = q_keys * width + np.clip(want, 0, width - 1)
    j = iv.grouped_searchsorted(dk, s2, qdk, q_t, side="right") - 1
    js = np.maximum(j, 0)
    ok = valid & (j >= 0) & (dk[js] == qdk) & (s2[js] <= q_t) & (q_t < e2[js])
    out[ok] = orig2[js[ok]]
    return out


def _contains_any(
    ranges: pd.DataFrame, q_rank: np.ndarray, q_pid: np.ndarray, q_tid: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """Whether ``t`` lies inside any of ``ranges`` (rank, pid, tid, ts, dur) on its thread."""
    if len(ranges) == 0 or len(t) == 0:
        return np.zeros(len(t), dtype=bool)
    rk, qk = shared_ids(
        len(ranges),
        (ranges["rank"].to_numpy(), ranges["pid"].to_numpy(), ranges["tid"].to_numpy()),
        (q_rank, q_pid, q_tid),
    )
    s = ranges["ts"].to_numpy(np.int64)
    mk, ms, me = iv.grouped_merge(rk, s, s + ranges["dur"].to_numpy(np.int64))
    return iv.grouped_contains(mk, ms, me, qk, t)


# --------------------------------------------------------------------------- steps
def step_windows(events: pd.DataFrame) -> pd.DataFrame:
    """``ProfilerStep#N`` CPU windows (``user_annotation``, or ``cpu_op`` as older traces
    write them): rank, iteration (N), start, end, sorted by (rank, start). A step seen
    twice on a rank (e.g. as both categories) is its first window in the trace."""
    cat = events["cat"].to_numpy()
    m = ((cat == "user_annotation") | (cat == "cpu_op")) & match_names(events["name"], STEP)
    st = events.loc[m]
    n = st["name"].astype(str).str.slice(len(STEP_PREFIX)).astype(np.int64)
    out = pd.DataFrame(
        {
            "rank": st["rank"].to_numpy(np.int64),
            "iteration": n.to_numpy(np.int64),
            "start": st["ts"].to_numpy(np.int64),
            "end": (st["ts"] + st["dur"]).to_numpy(np.int64),
        }
    )
    out = out.drop_duplicates(["rank", "iteration"])
    return out.sort_values(["rank", "start"], kind="stable").reset_index(drop=True)


def iteration_at(
    windows: pd.DataFrame, rank: np.ndarray, t: np.ndarray, has_point: np.ndarray | None = None
) -> np.ndarray:
    """Iteration of the step window of ``rank`` with start <= t < end (the latest one
    starting at or before t), -1 where none holds t (or ``has_point`` is False)."""
    rank = np.asarray(rank, np.int64)
    t = np.asarray(t, np.int64)
    out = np.full(len(t), -1, dtype=np.int64)
    if len(windows) == 0 or len(t) == 0:
        return out
    sr = windows["rank"].to_numpy(np.int64)
    ss = windows["start"].to_numpy(np.int64)
    se = windows["end"].to_numpy(np.int64)
    i = iv.grouped_searchsorted(sr, ss, rank, t, side="right") - 1
    isafe = np.maximum(i, 0)
    inside = (i >= 0) & (sr[isafe] == rank) & (t < se[isafe])
    if has_point is not None:
        inside &= np.asarray(has_point, dtype=bool)
    out[inside] = windows["iteration"].to_numpy(np.int64)[isafe[inside]]
    return out


# --------------------------------------------------------------------------- context
@dataclass(frozen=True)
class Context:
    """The CPU-side ranges of one trace that attribute a host point (rank, pid, tid, t)."""

    steps: pd.DataFrame  # ProfilerStep#N windows: rank, iteration, start, end
    calls: pd.DataFrame  # runtime/driver calls (runtime_calls)
    ann: pd.DataFrame  # op-naming user annotations
    backward: pd.DataFrame  # autograd::engine::evaluate_function ranges
    optimizer: pd.DataFrame  # Optimizer.step# / Optimizer.zero_grad# ranges

    def iteration_at(self, rank, t, has_point=None) -> np.ndarray:
        return iteration_at(self.steps, rank, t, has_point)

    def op_index(self, rank, pid, tid, t) -> np.ndarray:
        """Row of ``ann`` that names each point's op (innermost on its thread), or -1."""
        ann = self.ann
        ak, qk = shared_ids(
            len(ann),
            (ann["rank"].to_numpy(), ann["pid"].to_numpy(), ann["tid"].to_numpy()),
            (np.asarray(rank), np.asarray(pid), np.asarray(tid)),
        )
        a_s = ann["ts"].to_numpy(np.int64)
        return innermost_containing(ak, a_s, a_s + ann["dur"].to_numpy(np.int64), qk, t)

    def op_at(self, rank, pid, tid, t, has_point=None) -> np.ndarray:
        """Op name (object array) of each point; "(none)" where no annotation holds it."""
        j = self.op_index(rank, pid, tid, t)
        if has_point is not None:
            j[~np.asarray(has_point, dtype=bool)] = -1
        names = self.ann["name"].astype(str).to_numpy(dtype=object)
        out = np.full(len(j), NO_OP, dtype=object)
        out[j >= 0] = names[j[j >= 0]]
        return out

    def attribute(
        self,
        rank: np.ndarray,
        pid: np.ndarray,
        tid: np.ndarray,
        t: np.ndarray,
        has_point: np.ndarray,
        graph: np.ndarray | None = None,
    ) -> tuple[pd.Categorical, np.ndarray, pd.Categorical]:
        """(op, iteration, phase) of each point; rows without a point get (``(none)``,
        -1, ``other``). Phase (docs/METRICS.md "Extension: phase"), first rule wins:
        optimizer, backward, forward (by op name, or a step holds the point: not for a
        ``graph`` point, a graph launch, whose graph may hold any phase's work), other."""
        op = pd.Categorical(self.op_at(rank, pid, tid, t, has_point))
        iteration = self.iteration_at(rank, t, has_point)
        in_opt = _contains_any(self.optimizer, rank, pid, tid, t)
        in_bwd = _contains_any(self.backward, rank, pid, tid, t)
        op_s = pd.Series(op)
        phase = np.full(len(t), "other", dtype=object)
        in_step = iteration >= 0
        if graph is not None:
            in_step = in_step & ~np.asarray(graph, dtype=bool)
        fwd = (match_names(op_s, _OP_FORWARD) | in_step) & has_point
        phase[fwd] = "forward"
        bwd = (match_names(op_s, _OP_BACKWARD) | in_bwd) & has_point
        phase[bwd] = "backward"
        opt = (match_names(op_s, _OP_OPTIMIZER) | in_opt) & has_point
        phase[opt] = "optimizer"
        return op, iteration, pd.Categorical(phase, categories=list(PHASES))


def context(events: pd.DataFrame) -> Context:
    """The attribution context of a trace's events (built once per trace)."""
    cat = events["cat"].to_numpy()
    ann_all = events[cat == "user_annotation"]
    return Context(
        steps=step_windows(events),
        calls=runtime_calls(events),
        ann=ann_all[~match_names(ann_all["name"], NOT_AN_OP)],
        backward=events[match_names(events["name"], _BACKWARD_CTX)],
        optimizer=events[match_names(events["name"], _OPTIMIZER_CTX)],
    )
