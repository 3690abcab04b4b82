"""Comm/compute overlap, exactly as docs/METRICS.md "Overlap" defines it.

For a window W (a rank, a stream, one collective, an op name, a phase, an iteration):
``C`` = length of the union of W's comm intervals, ``H`` = length of that union
intersected with the union of all compute on any stream of the same rank's device,
``E = C - H``, ``hidden_pct = 100 H / C`` (NaN in frames when C = 0; null in JSON).
Comm overlapping only comm or memory work is not hidden (memory and comm are simply
not part of the compute reference). Integer ns throughout.

:func:`analyze` is the package entry point: classify, overlap tables, totals, then the
overheads analysis (``analysis.overheads``, when present).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from domino_prof.analysis import intervals as iv
from domino_prof.analysis.attribution import per_category, tuple_ids
from domino_prof.analysis.classify import Classified
from domino_prof.analysis.config import AnalysisConfig
from domino_prof.analysis.document import Analysis
from domino_prof.analysis.rankwise import (  # noqa: F401  (re-exported: the gate reads them)
    NEGATIVE_DURATION,
    NEGATIVE_DURATION_TOPIC,
    SKIPPED,
)
from domino_prof.trace.schema import Trace

NS_COLS = ("comm_ns", "hidden_ns", "exposed_ns")


@dataclass(frozen=True)
class ComputeReference:
    """Merged, disjoint compute time per (rank, device), sorted: what can hide comm.

    The one overlap routine: every figure that says how much comm is hidden (the
    analysis tables, the gate's selections in ``baseline``, the timeline's hidden and
    exposed pieces) measures comm against this, per (rank, device). For GPU traces it
    is the union of the compute kernels of the device; for CPU-only traces the leaf /
    ``aten::*`` ops minus collective calls (docs/METRICS.md), which is why it is kept
    and not rebuilt from the intervals' ``kind`` column."""

    rank: np.ndarray
    device: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @staticmethod
    def of_intervals(intervals: pd.DataFrame) -> ComputeReference:
        """The union of an intervals frame's compute rows per (rank, device): the
        reference of a GPU trace (for frames that come without one)."""
        comp = intervals[intervals["kind"].astype(str).to_numpy() == "compute"]
        r = comp["rank"].to_numpy(np.int64)
        d = comp["device"].to_numpy(np.int64)
        key = tuple_ids(r, d)
        mk, ms, me = iv.grouped_merge(key, comp["start"].to_numpy(), comp["end"].to_numpy())
        first = np.zeros(int(key.max()) + 1 if len(key) else 0, dtype=np.int64)
        first[key] = np.arange(len(key))
        return ComputeReference(r[first][mk], d[first][mk], ms, me)

    def _codes(self, rank, device) -> tuple[np.ndarray, np.ndarray]:
        """Dense (rank, device) ids shared by the reference and query rows."""
        n_ref = len(self.rank)
        r = np.concatenate([self.rank, np.asarray(rank, dtype=np.int64)])
        d = np.concatenate([self.device, np.asarray(device, dtype=np.int64)])
        if len(r) == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        ids = tuple_ids(r, d)  # order-preserving: the reference stays sorted by its key
        return ids[:n_ref], ids[n_ref:]

    def hidden(self, rank, device, starts, ends) -> np.ndarray:
        """Length of each ``[start, end)`` covered by compute of its (rank, device)."""
        ref_k, q_k = self._codes(rank, device)
        return iv.grouped_intersection(q_k, starts, ends, ref_k, self.start, self.end)

    def pieces(
        self, rank, device, starts, ends
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Each ``[start, end)`` cut at its device's compute boundaries: (owner row,
        piece start, piece end, piece covered by compute?); empty pieces dropped.
        The covered pieces of a row sum to :meth:`hidden` of it."""
        ref_k, q_k = self._codes(rank, device)
        starts = np.asarray(starts, np.int64)
        ends = np.asarray(ends, np.int64)
        out = []
        for k in np.unique(q_k):  # one pass per (rank, device): a handful
            rows = np.flatnonzero(q_k == k)
            lo, hi = np.searchsorted(ref_k, [k, k + 1])
            owner, ps, pe, inside = _split_against(
                starts[rows], ends[rows], self.start[lo:hi], self.end[lo:hi]
            )
            out.append((rows[owner], ps, pe, inside))
        if not out:
            e = np.empty(0, np.int64)
            return e, e.copy(), e.copy(), np.zeros(0, bool)
        return tuple(np.concatenate(x) for x in zip(*out))  # type: ignore[return-value]


def _split_against(
    s: np.ndarray, e: np.ndarray, us: np.ndarray, ue: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cut each [s, e) at the boundaries of the disjoint sorted union (us, ue).

    Returns (owner index, piece start, piece end, piece inside union?)."""
    if len(us) == 0:  # nothing to be hidden behind: every interval is one piece, outside
        keep = e > s
        return np.flatnonzero(keep), s[keep], e[keep], np.zeros(int(keep.sum()), dtype=bool)
    bounds = np.concatenate([us, ue])
    bounds.sort(kind="stable")
    lo = np.searchsorted(bounds, s, side="right")
    hi = np.searchsorted(bounds, e, side="left")
    n_inner = np.maximum(hi - lo, 0)
    n_pieces = n_inner + 1
    owner = np.repeat(np.arange(len(s)), n_pieces)
    first = np.r_[0, np.cumsum(n_pieces)[:-1]]
    k = np.arange(len(owner)) - np.repeat(first, n_pieces)  # piece number within its owner
    # piece k of owner i spans [cut_{k}, cut_{k+1}) with cut_0 = s_i, cut_{m} = e_i
    cut_idx = np.repeat(lo, n_pieces) + k - 1
    is_first = k == 0
    is_last = k == np.repeat(n_pieces, n_pieces) - 1
    last = len(bounds) - 1
    p_start = np.where(is_first, s[owner], bounds[np.clip(cut_idx, 0, last)])
    p_end = np.where(is_last, e[owner], bounds[np.clip(cut_idx + 1, 0, last)])
    # a piece never straddles a union boundary: it is inside iff its start is
    j = np.searchsorted(us, p_start, side="right") - 1
    inside = (j >= 0) & (p_start < ue[np.clip(j, 0, len(ue) - 1)])
    keep = p_end > p_start
    return owner[keep], p_start[keep], p_end[keep], inside[keep]


def hidden_of(cl: Classified, rank, device, starts, ends) -> np.ndarray:
    """Length of each ``[start, end)`` covered by compute of its (rank, device)."""
    return cl.reference.hidden(rank, device, starts, ends)


def _with_derived(df: pd.DataFrame) -> pd.DataFrame:
    df["comm_ns"] = df["comm_ns"].astype(np.int64)
    df["hidden_ns"] = df["hidden_ns"].astype(np.int64)
    df["exposed_ns"] = (df["comm_ns"] - df["hidden_ns"]).astype(np.int64)
    c = df["comm_ns"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        df["hidden_pct"] = np.where(c > 0, 100.0 * df["hidden_ns"].to_numpy() / c, np.nan)
    return df


def comm_overlap(ref: ComputeReference, comm: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """C and H of the union of the ``comm`` rows per group ``keys`` (which include
    ``rank``): each group is measured per (rank, device) against ``ref`` and summed
    over devices (docs/METRICS.md: comm running concurrently in one group counts once).
    Key columns keep the dtypes of ``comm``."""
    gcols = list(dict.fromkeys(["rank", "device", *keys]))
    out_cols = [*gcols, "comm_ns", "hidden_ns"]
    if len(comm) == 0:
        res = pd.DataFrame({c: pd.Series(dtype=comm[c].dtype) for c in gcols})
        res["comm_ns"] = np.empty(0, np.int64)
        res["hidden_ns"] = np.empty(0, np.int64)
    else:
        grouped = comm.groupby(gcols, sort=True, observed=True, dropna=False)
        g = grouped.ngroup().to_numpy(np.int64)
        res = grouped.size().reset_index()[gcols]
        n = len(res)
        mk, ms, me = iv.grouped_merge(g, comm["start"].to_numpy(), comm["end"].to_numpy())
        comm_ns = iv._bincount_i64(mk, me - ms, n)
        grank = res["rank"].to_numpy(np.int64)[mk]
        gdev = res["device"].to_numpy(np.int64)[mk]
        hidden_ns = iv._bincount_i64(mk, ref.hidden(grank, gdev, ms, me), n)
        res["comm_ns"] = comm_ns
        res["hidden_ns"] = hidden_ns
    res = res[out_cols]
    if "device" not in keys:
        res = res.groupby(keys, sort=True, observed=True, dropna=False)[
            ["comm_ns", "hidden_ns"]
        ].sum().reset_index()  # fmt: skip
    return res


def group_overlap(cl: Classified, keys: list[str], *, rows: pd.DataFrame | None = None):
    """:func:`comm_overlap` of the trace's comm intervals (or ``rows``)."""
    iv_frame = cl.intervals
    comm = iv_frame[iv_frame["kind"].to_numpy() == "comm"] if rows is None else rows
    return comm_overlap(cl.reference, comm, keys)


def _on_all(all_keys: pd.DataFrame, part: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Left-join comm figures onto every key present in the trace (missing -> 0)."""
    df = all_keys.merge(part, on=keys, how="left")
    for c in ("comm_ns", "hidden_ns"):
        df[c] = df[c].fillna(0).astype(np.int64)
    return df


# Collective type of a comm interval, from the profiler's "Collective name" argument
# when present, else the kernel / op name (NCCL/RCCL kernels, gloo ops, symmetric-memory
# and NVSHMEM kernels, c10d spans). Matched on the lower-cased name with '_' removed;
# first match wins (so "reducescatter" is not taken for "reduce").
COLLECTIVE_TYPES: tuple[tuple[str, str], ...] = (
    ("reduce_scatter", r"reducescatter"),
    ("all_gather", r"allgather"),
    ("all_reduce", r"allreduce"),
    ("all_to_all", r"alltoall"),
    ("broadcast", r"broadcast|bcast"),
    ("send_recv", r"sendrecv|send|recv|p2p|ptop"),
    ("reduce", r"reduce"),
    ("barrier", r"barrier"),
    ("copy", r"memcpy|copy"),
)


def _types_of(names: pd.Series) -> np.ndarray:
    """:data:`COLLECTIVE_TYPES` of a column of distinct names ("other" when none)."""
    key = names.astype(str).str.lower().str.replace("_", "", regex=False)
    out = np.full(len(key), "other", dtype=object)
    free = np.ones(len(key), dtype=bool)
    for typ, pat in COLLECTIVE_TYPES:
        hit = free & key.str.contains(pat, regex=True).to_numpy(dtype=bool)
        out[hit] = typ
        free &= ~hit
    return out


def collective_type(name: pd.Series, coll_name: pd.Series) -> np.ndarray:
    """Vectorised :data:`COLLECTIVE_TYPES` lookup ("other" when nothing matches): the
    ``coll_name`` when present, else the kernel name, matched once per distinct name."""
    has_coll = per_category(coll_name, lambda s: (s != "").to_numpy()).astype(bool)
    return np.where(has_coll, per_category(coll_name, _types_of), per_category(name, _types_of))


def overlap_tables(cl: Classified, ranks: list[int]) -> dict[str, pd.DataFrame]:
    """All per-window tables (see docs/ARCHITECTURE.md section 2)."""
    f = cl.intervals
    # per rank: every rank of the trace, also those without comm
    all_ranks = pd.DataFrame({"rank": np.asarray(sorted(ranks), dtype=np.int64)})
    by_rank = _with_derived(_on_all(all_ranks, group_overlap(cl, ["rank"]), ["rank"]))

    # per stream (comm restricted to the stream); every stream with any interval
    sk = ["rank", "device", "stream"]
    streams = f[sk].drop_duplicates().sort_values(sk, ignore_index=True)
    by_stream = _with_derived(_on_all(streams, group_overlap(cl, sk), sk))

    # per collective instance: one comm interval each
    comm = f[f["kind"].to_numpy() == "comm"]
    by_collective = comm[
        ["rank", "device", "stream", "correlation", "name", "start", "end", "op", "phase",
         "iteration", "coll_name", "msg_nelems"]
    ].reset_index(drop=True)  # fmt: skip
    by_collective["comm_ns"] = (comm["end"] - comm["start"]).to_numpy(np.int64)
    by_collective["hidden_ns"] = hidden_of(
        cl,
        comm["rank"].to_numpy(),
        comm["device"].to_numpy(),
        comm["start"].to_numpy(),
        comm["end"].to_numpy(),
    )
    by_collective["collective"] = collective_type(comm["name"], comm["coll_name"])
    by_collective = _with_derived(by_collective)

    # per collective type (all-reduce, reduce-scatter, all-gather, ...): the union of
    # that type's comm intervals per rank, like every other group
    typed = comm.assign(collective=collective_type(comm["name"], comm["coll_name"]))
    tk = ["rank", "collective"]
    by_collective_type = _with_derived(group_overlap(cl, tk, rows=typed))
    counts = typed.groupby(tk, sort=False).size().rename("count").reset_index()
    by_collective_type = by_collective_type.merge(counts, on=tk, how="left")
    by_collective_type = by_collective_type[[*tk, "count", *NS_COLS, "hidden_pct"]].sort_values(
        ["rank", "comm_ns"], ascending=[True, False], ignore_index=True
    )

    # per op name (comm ops only)
    by_op = _with_derived(group_overlap(cl, ["rank", "op"]))
    by_op["op"] = by_op["op"].astype(str)
    by_op = by_op.sort_values(["rank", "exposed_ns", "op"], ascending=[True, False, True],
                              ignore_index=True)  # fmt: skip

    # per phase: every (rank, phase) with any interval
    pk = ["rank", "phase"]
    phases = f[pk].drop_duplicates()
    phases["phase"] = phases["phase"].astype(str)
    part = group_overlap(cl, pk)
    part["phase"] = part["phase"].astype(str)
    by_phase = _with_derived(_on_all(phases.sort_values(pk, ignore_index=True), part, pk))

    # per iteration: every (rank, iteration) with any interval, plus wall time
    ik = ["rank", "iteration"]
    wall = f.groupby(ik, sort=True).agg(first=("start", "min"), last=("end", "max")).reset_index()
    wall["wall_ns"] = (wall["last"] - wall["first"]).astype(np.int64)
    by_iteration = _with_derived(_on_all(wall[[*ik, "wall_ns"]], group_overlap(cl, ik), ik))
    w = by_iteration["wall_ns"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        by_iteration["exposed_comm_share"] = np.where(
            w > 0, by_iteration["exposed_ns"].to_numpy() / w, np.nan
        )
    by_iteration = by_iteration[[*ik, *NS_COLS, "hidden_pct", "wall_ns", "exposed_comm_share"]]
    return {
        "by_rank": by_rank,
        "by_stream": by_stream,
        "by_collective": by_collective,
        "by_collective_type": by_collective_type,
        "by_op": by_op,
        "by_phase": by_phase,
        "by_iteration": by_iteration,
    }


def totals_of(
    tables: dict[str, pd.DataFrame],
    intervals: pd.DataFrame | None = None,
    *,
    n_outside: int | None = None,
    kinds: dict[str, int] | None = None,
) -> dict:
    """Whole-trace totals: sums over ranks; per-step means over (rank, iteration) rows
    of real steps (iteration >= 0). The interval counts come from ``intervals`` or, for
    several ranks analysed apart, ``n_outside`` (launched outside steps) and ``kinds``."""
    if intervals is not None:
        n_outside = int((intervals["iteration"] < 0).sum())
        kinds = {str(k): int(v) for k, v in intervals["kind"].value_counts(sort=False).items()}
    r = tables["by_rank"]
    c, h = int(r["comm_ns"].sum()), int(r["hidden_ns"].sum())
    it = tables["by_iteration"]
    steps = it[it["iteration"] >= 0]
    outside = it[it["iteration"] < 0]
    n_steps = int(steps["iteration"].nunique())
    return {
        "comm_ns": c,
        "hidden_ns": h,
        "exposed_ns": c - h,
        "hidden_pct": (100.0 * h / c) if c > 0 else None,
        "n_ranks": len(r),
        "n_iterations": n_steps,
        "step_ms": float(steps["wall_ns"].mean() / 1e6) if len(steps) else None,
        "exposed_ms_per_step": float(steps["exposed_ns"].mean() / 1e6) if len(steps) else None,
        "comm_ms_per_step": float(steps["comm_ns"].mean() / 1e6) if len(steps) else None,
        "outside_steps": {
            "intervals": int(n_outside or 0),
            "comm_ns": int(outside["comm_ns"].sum()),
            "exposed_ns": int(outside["exposed_ns"].sum()),
        },
        "intervals_by_kind": dict(kinds or {}),
    }


def analyze(trace: Trace, config: AnalysisConfig | None = None) -> Analysis:
    """Classify a loaded trace and compute every overlap number (docs/METRICS.md): each
    rank on its own, then the cross-rank reduction (``analysis.rankwise``)."""
    from domino_prof.analysis.classify import mixed_modes_error, no_activity_error, trace_mode
    from domino_prof.analysis.rankwise import analyze_rank, combine, rank_ids_of, split_ranks

    config = AnalysisConfig() if config is None else config
    mode = trace_mode(trace.events)
    if mode is None:
        raise no_activity_error(trace)
    parts = split_ranks(trace)
    own = {r: trace_mode(one.events) for r, one in parts}
    if {"gpu", "cpu"} <= set(own.values()):  # a GPU run's and a CPU run's ranks
        path = {r: m.path for r, m in trace.ranks.items()}
        raise mixed_modes_error(trace.source or "trace", *(
            [path.get(r, f"rank {r}") for r, m in own.items() if m == k] for k in ("gpu", "cpu")
        ))  # fmt: skip
    results = [
        analyze_rank(one, config, rank=r, mode=mode, keep_intervals=True) for r, one in parts
    ]
    return combine(
        results, config, source=trace.source, ranks=rank_ids_of(trace), metas=trace.ranks,
        skipped=trace.skipped,
    )  # fmt: skip
