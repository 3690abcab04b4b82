"""Exposed comm's step cost: the part of a rank's exposed comm that added to its step
(docs/METRICS.md, "Extension: exposed comm's step cost").

Exposed comm (``overlap``) is comm not under compute. Part of it lies in device gaps that
are there without comm too: the kernel-to-kernel gap (a CUDA graph's node-to-node gap,
~0.4 µs on an H200) and the gaps where the device waits for the host. Per rank and
profiled step, in the step's window W = [first device start, last device end) (the
window ``step_ms`` measures):

* G = the maximal intervals of W with no compute on any stream of the device (gaps of the
  compute reference, ``reference.ComputeReference``); a gap is **interior** when compute
  bounds it on both sides, an **edge** gap when it reaches W's start or end;
* e_g = the step's exposed comm inside g: the union of the step's comm intervals (the
  rows ``by_iteration`` measures) inside g, so Σ_g e_g = the step's exposed comm;
* mem_g = the union inside g of the device's **memory ops on its compute streams**: the
  intervals of kind ``memory`` (copies and sets that are not comm) on a stream of the
  device that runs a compute kernel of the rank, of any step. That is device work, not
  idle: comm over a copy did not add the copy's time to the step (a copy or set on a
  stream without compute is left out: it is not compute-path work);
* the rank's **bubble** b = the median length of its interior gaps, over all its steps,
  that hold no comm (of any step), no host-bound device idle and no memory op
  (mem_g = 0); with fewer than :data:`MIN_BUBBLES` of them b is not measured, nor is the
  cost (None and a reason);
* host_g = the host-bound device idle of the step inside g (``launches.device_idle_pieces``;
  0 without launch calls, e.g. a CPU trace); it is device idle, so disjoint from mem_g;
* cost_g = min(e_g, max(0, |g| − b_g − host_g − mem_g)), b_g = b for an interior gap and 0
  for an edge gap (without the comm the step would begin or end at the compute kernel,
  with no gap there to keep).

cost = Σ_g cost_g per (rank, step). A rank whose steps expose no comm costs 0 whether or
not its bubble is measured. Vectorised: a searchsorted per window into the merged compute,
``np.repeat`` for the gaps, interval intersections for e_g, host_g, mem_g and "holds comm".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from domino_prof.analysis import intervals as iv
from domino_prof.analysis.attribution import tuple_ids
from domino_prof.analysis.reference import ComputeReference

MIN_BUBBLES = 20  # gaps without comm, host idle or memory op a rank needs (median)
GAP_COLUMNS = ("rank", "device", "iteration", "start", "end", "interior")


@dataclass
class CostPart:
    """One rank's exposed comm's step cost: what :func:`combine_costs` reduces."""

    rank: int
    per_iteration: pd.DataFrame  # rank, iteration, exposed_ns, cost_ns, n_gaps
    bubble_ns: float | None  # the median gap without comm, host idle or memory op
    # (None: too few)
    n_bubbles: int  # the gaps that median is over
    reason: str | None  # why the cost is not measured (None: measured)


def step_gaps(reference: ComputeReference, windows: pd.DataFrame) -> pd.DataFrame:
    """The compute-union gaps of each window (columns ``rank``, ``device``,
    ``iteration``, ``start``, ``end``: one row per (rank, device, step) window), in window
    then time order: columns :data:`GAP_COLUMNS`, ``interior`` False for a gap that reaches
    the window's start or end (a window without compute is one edge gap)."""
    ws = windows["start"].to_numpy(np.int64)
    we = windows["end"].to_numpy(np.int64)
    ref_k, w_k = reference._codes(windows["rank"].to_numpy(), windows["device"].to_numpy())
    cs, ce = reference.start, reference.end
    # the merged compute intervals overlapping [ws, we): indices lo .. hi-1 of the
    # reference (sorted by key and start, so by key and end too: they are disjoint)
    lo = iv.grouped_searchsorted(ref_k, ce, w_k, ws, side="right")
    hi = iv.grouped_searchsorted(ref_k, cs, w_k, we, side="left")
    n = np.where(we > ws, hi - lo, -1)  # -1: an empty window, no gap at all
    last = max(len(cs) - 1, 0)
    has = n > 0
    lo_c, hi_c = np.minimum(lo, last), np.clip(hi - 1, 0, last)
    if len(cs):  # a gap from the window's start to its first compute, and after the last
        lead, tail = has & (cs[lo_c] > ws), has & (ce[hi_c] < we)
    else:  # no compute at all: every window is one edge gap
        lead = tail = np.zeros(len(ws), bool)
    # interior gaps: (end of compute j, start of compute j + 1) for j = lo .. hi - 2
    k_in = np.maximum(n - 1, 0)
    w_in = np.repeat(np.arange(len(ws)), k_in)
    j = np.repeat(lo, k_in) + (np.arange(k_in.sum()) - np.repeat(np.cumsum(k_in) - k_in, k_in))
    w_lead, w_tail, w_all = np.flatnonzero(lead), np.flatnonzero(tail), np.flatnonzero(n == 0)
    w = np.concatenate([w_lead, w_in, w_tail, w_all])
    start = np.concatenate([ws[w_lead], ce[j], ce[hi_c[w_tail]], ws[w_all]])
    end = np.concatenate([cs[lo_c[w_lead]], cs[j + 1], we[w_tail], we[w_all]])
    interior = np.concatenate([np.zeros(len(w_lead), bool), np.ones(len(w_in), bool),
                               np.zeros(len(w_tail) + len(w_all), bool)])  # fmt: skip
    o = np.lexsort((start, w))
    w = w[o]
    return pd.DataFrame({
        "rank": windows["rank"].to_numpy(np.int64)[w],
        "device": windows["device"].to_numpy(np.int64)[w],
        "iteration": windows["iteration"].to_numpy(np.int64)[w],
        "start": start[o].astype(np.int64),
        "end": end[o].astype(np.int64),
        "interior": interior[o],
    })  # fmt: skip


def _inside(gaps: pd.DataFrame, g_key: np.ndarray, key: np.ndarray, rows: pd.DataFrame):
    """Per gap, the length of the union of ``rows`` (start, end) of the same ``key``
    inside it (``g_key``: the gaps' keys, in the same dense numbering)."""
    mk, ms, me = iv.grouped_merge(key, rows["start"].to_numpy(), rows["end"].to_numpy())
    return iv.grouped_intersection(
        g_key, gaps["start"].to_numpy(), gaps["end"].to_numpy(), mk, ms, me
    )


def memory_on_compute_streams(intervals: pd.DataFrame, kind: np.ndarray | None = None):
    """The rows of kind ``memory`` (copies and sets that are not comm) on a stream of
    their (rank, device) that runs a compute kernel: mem_g's intervals (module doc)."""
    kind = intervals["kind"].astype(str).to_numpy() if kind is None else kind
    key = tuple_ids(*(intervals[c].to_numpy(np.int64) for c in ("rank", "device", "stream")))
    on = np.isin(key, np.unique(key[kind == "compute"]))
    return intervals.loc[(kind == "memory") & on]


def cost_part(
    intervals: pd.DataFrame,
    *,
    rank: int,
    reference: ComputeReference,
    spans: pd.DataFrame,
    host: pd.DataFrame | None = None,
) -> CostPart:
    """Exposed comm's step cost of one rank (module doc): ``intervals`` and
    ``reference`` are the rank's, ``spans`` its steps (``tables.iteration_spans``),
    ``host`` its ``launches.device_idle_pieces`` (None: no launches, host_g = 0)."""
    devices = intervals[["rank", "device"]].drop_duplicates()
    windows = spans[["rank", "iteration", "start", "end"]].merge(devices, on="rank")
    gaps = step_gaps(reference, windows)
    cols = ["rank", "device", "iteration", "start", "end"]
    kind = intervals["kind"].astype(str).to_numpy()
    comm = intervals.loc[kind == "comm", cols]
    mem = memory_on_compute_streams(intervals, kind)[cols]
    host = host if host is not None else comm.iloc[:0]
    parts = [gaps, comm, host, mem]
    # dense ids shared by the four frames: per device, and per (device, step)
    dev = tuple_ids(*(np.concatenate([p[c].to_numpy(np.int64) for p in parts])
                      for c in ("rank", "device")))  # fmt: skip
    step = tuple_ids(dev, np.concatenate([p["iteration"].to_numpy(np.int64) for p in parts]))
    cut = np.cumsum([len(p) for p in parts])[:-1]
    (g_dev, c_dev, _, m_dev), (g_step, c_step, h_step, _) = np.split(dev, cut), np.split(step, cut)
    e = _inside(gaps, g_step, c_step, comm)  # the step's exposed comm in the gap
    any_comm = _inside(gaps, g_dev, c_dev, comm)  # comm of any step in the gap
    host_g = _inside(gaps, g_step, h_step, host)
    mem_g = _inside(gaps, g_dev, m_dev, mem)  # memory ops (compute streams, any step)
    length = (gaps["end"] - gaps["start"]).to_numpy(np.int64)
    sample = gaps["interior"].to_numpy() & (any_comm == 0) & (host_g == 0) & (mem_g == 0)
    n_bubbles = int(sample.sum())
    bubble = float(np.median(length[sample])) if n_bubbles >= MIN_BUBBLES else None
    exposed = bool((e > 0).any())
    reason = None
    if bubble is None and exposed:
        reason = (f"rank {rank}: {n_bubbles} gap(s) between compute kernels hold no comm, "
                  f"no host wait and no memory op (at least {MIN_BUBBLES} give the typical "
                  "bubble): "
                  "the exposed comm that added to the step is not told from the bubbles "
                  "it spans")  # fmt: skip
    b_g = np.where(gaps["interior"].to_numpy(), bubble or 0.0, 0.0)
    cost = np.minimum(e, np.maximum(0.0, length - b_g - host_g - mem_g))
    per = pd.DataFrame({"iteration": gaps["iteration"].to_numpy(), "exposed_ns": e,
                        "cost_ns": cost, "n_gaps": (e > 0).astype(np.int64)})  # fmt: skip
    per = per.groupby("iteration", sort=True).sum()
    steps = spans[["rank", "iteration"]].drop_duplicates().sort_values("iteration")
    per = steps.merge(per.reset_index(), on="iteration", how="left").fillna(0)
    per = per.astype({"exposed_ns": np.int64, "cost_ns": np.float64, "n_gaps": np.int64})
    return CostPart(rank=rank, per_iteration=per.reset_index(drop=True), bubble_ns=bubble,
                    n_bubbles=n_bubbles, reason=reason)  # fmt: skip


def combine_costs(parts: list[CostPart | None]) -> dict:
    """The totals' ``exposed_cost_ms_per_step`` (the mean over the (rank, step) rows, as
    ``exposed_ms_per_step``; None when a rank's cost is not measured) and its
    ``exposed_cost`` block: ``measured``, ``reason``, ``bubble_us`` (the ranks' median
    bubble), ``n_bubbles``, ``n_gaps`` (gaps that hold the steps' exposed comm),
    ``n_rank_steps``, ``min_bubbles`` and ``per_rank`` rows."""
    got = [p for p in parts if p is not None]
    reasons = [p.reason for p in got if p.reason]
    if len(got) < len(parts):
        reasons.insert(0, "not computed for every rank")
    rows = pd.concat([p.per_iteration for p in got], ignore_index=True) if got else None
    n = 0 if rows is None else len(rows)
    measured = not reasons and n > 0
    bubbles = [p.bubble_ns for p in got if p.bubble_ns is not None]

    def per_step(p_rows: pd.DataFrame) -> float:
        return float(p_rows["cost_ns"].mean()) / 1e6

    per_rank = [{
        "rank": int(p.rank),
        "exposed_cost_ms_per_step": (per_step(p.per_iteration)
                                     if p.reason is None and len(p.per_iteration) else None),
        "bubble_us": None if p.bubble_ns is None else p.bubble_ns / 1e3,
        "n_bubbles": p.n_bubbles,
        "n_gaps": int(p.per_iteration["n_gaps"].sum()),
        "reason": p.reason,
    } for p in got]  # fmt: skip
    return {
        "exposed_cost_ms_per_step": per_step(rows) if measured else None,
        "exposed_cost": {
            "measured": measured,
            "reason": "; ".join(reasons) if reasons else (None if n else "no profiled step"),
            "bubble_us": float(np.median(bubbles)) / 1e3 if bubbles else None,
            "n_bubbles": sum(p.n_bubbles for p in got),
            "n_gaps": sum(r["n_gaps"] for r in per_rank),
            "n_rank_steps": n,
            "min_bubbles": MIN_BUBBLES,
            "per_rank": per_rank,
        },
    }
