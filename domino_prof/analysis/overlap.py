"""Comm/compute overlap, exactly as docs/METRICS.md "Overlap" defines it.

For a window W (a rank, a stream, one collective, an op name, a phase, an iteration):
``C`` = length of the union of W's comm intervals, ``H`` = length of that union
intersected with the union of all compute on any stream of the same rank's device,
``E = C - H``, ``hidden_pct = 100 H / C`` (NaN in frames when C = 0; null in JSON).
Comm overlapping only comm or memory work is not hidden (memory and comm are simply
not part of the compute reference). Integer ns throughout.

The entry points are the engine's (``domino_prof.engine.analyze`` of a loaded trace,
``analyse_path`` of rank files): classify, then these tables per rank
(``analysis.rankwise``), then the cross-rank reduction.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from domino_prof.analysis import intervals as iv
from domino_prof.analysis.attribution import per_category
from domino_prof.analysis.classify import Classified
from domino_prof.analysis.reference import ComputeReference

NS_COLS = ("comm_ns", "hidden_ns", "exposed_ns")


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
    types = collective_type(comm["name"], comm["coll_name"])
    by_collective["collective"] = types
    by_collective = _with_derived(by_collective)

    # per collective type (all-reduce, reduce-scatter, all-gather, ...): the union of
    # that type's comm intervals per rank, like every other group
    typed = comm.assign(collective=types)
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
