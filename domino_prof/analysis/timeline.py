"""Derived views the report draws: one step's timeline split into hidden/exposed
comm, the layer x micro-batch grid, per-op tables pooled over ranks, A/B deltas.

Pure functions (frames in, frames out), vectorised numpy; no plotting, no
printing. The numbers follow ``docs/METRICS.md``: a comm interval's *hidden*
part is its intersection with the union of compute intervals on any stream of
the same rank's device; the rest is *exposed*. Comm overlapping only comm or
memory work is not hidden.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from domino_prof.analysis.launches import launch_table
from domino_prof.analysis.reference import ComputeReference

PARTS: tuple[str, ...] = ("compute", "comm_hidden", "comm_exposed", "memory")
_LAYER_OP = re.compile(r"^(fwd|bwd)\.layer_(attn|mlp)_(\d+)_batch_(\d+)$")


def split_hidden_exposed(
    intervals: pd.DataFrame,
    *,
    reference: Any = None,
    rank: int | None = None,
    iteration: int | None = None,
) -> pd.DataFrame:
    """Device intervals as drawable pieces: compute, memory, and every comm interval
    cut into its hidden and exposed sub-intervals.

    ``reference``: the analysis' compute reference (``Analysis.reference``: merged
    compute per (rank, device), any step's); None takes the compute rows of
    ``intervals`` per (rank, device). Comm is cut by ``overlap.ComputeReference.pieces``,
    the routine behind every hidden figure, so the hidden pieces of a comm interval sum
    to its ``hidden_ns``. ``rank`` / ``iteration`` select rows to draw (None = all);
    compute of other steps still hides a selected comm interval, as in the numbers.
    Columns: ``rank, stream, start, end`` (int64 ns), ``part`` (one of :data:`PARTS`),
    ``name``, ``op`` (str), ``src`` (row position in the selected ``intervals``).
    """
    cols = ["rank", "stream", "start", "end", "part", "name", "op", "src"]
    if reference is None:
        reference = ComputeReference.of_intervals(intervals)
    df = intervals
    if rank is not None:
        df = df[df["rank"] == rank]
    if iteration is not None:
        df = df[df["iteration"] == iteration]
    if len(df) == 0:
        return pd.DataFrame(
            {c: pd.Series(dtype=object if c in ("part", "name", "op") else np.int64) for c in cols}
        )
    df = df.reset_index(drop=True)
    kind = df["kind"].astype(str).to_numpy()
    starts = df["start"].to_numpy(np.int64)
    ends = df["end"].to_numpy(np.int64)
    plain = np.flatnonzero(kind != "comm")
    comm = np.flatnonzero(kind == "comm")
    owner, ps, pe, inside = reference.pieces(
        df["rank"].to_numpy(np.int64)[comm], df["device"].to_numpy(np.int64)[comm],
        starts[comm], ends[comm],
    )  # fmt: skip
    res = pd.concat(
        [
            pd.DataFrame({
                "src": plain, "start": starts[plain], "end": ends[plain],
                "part": np.where(kind[plain] == "compute", "compute", "memory"),
            }),
            pd.DataFrame({
                "src": comm[owner], "start": ps, "end": pe,
                "part": np.where(inside, "comm_hidden", "comm_exposed"),
            }),
        ],
        ignore_index=True,
    )  # fmt: skip
    src = res["src"].to_numpy()
    res["rank"] = df["rank"].to_numpy(np.int64)[src]
    res["stream"] = df["stream"].to_numpy(np.int64)[src]
    res["name"] = df["name"].astype(str).to_numpy()[src]
    res["op"] = df["op"].astype(str).to_numpy()[src] if "op" in df else "(none)"
    res = res.sort_values(["rank", "stream", "start"], kind="stable").reset_index(drop=True)
    return res[cols]


def merge_for_display(pieces: pd.DataFrame, *, max_per_lane: int) -> tuple[pd.DataFrame, bool]:
    """Merge pieces of one part on one (rank, stream) lane that lie closer than
    ``lane span / max_per_lane`` so that a lane keeps at most about ``max_per_lane``
    rectangles per part. Returns (frame with ``count`` and ``busy_ns`` columns,
    whether anything was merged). Display-only: no metric is computed from it."""
    p = pieces.copy()
    p["count"] = 1
    p["busy_ns"] = p["end"] - p["start"]
    if len(p) == 0:
        return p, False
    lane_n = p.groupby(["rank", "stream"], sort=False)["start"].transform("size").to_numpy()
    if (lane_n <= max_per_lane).all():
        return p, False
    span = (
        p.groupby(["rank", "stream"], sort=False)["end"].transform("max")
        - p.groupby(["rank", "stream"], sort=False)["start"].transform("min")
    ).to_numpy()
    min_gap = np.where(lane_n > max_per_lane, span / max_per_lane, -1.0)
    p["_gap"] = min_gap
    p = p.sort_values(["rank", "stream", "part", "start"], kind="stable").reset_index(drop=True)
    key = (p["rank"].to_numpy(), p["stream"].to_numpy(), p["part"].to_numpy())
    same = np.ones(len(p), dtype=bool)
    same[0] = False
    for k in key:
        same[1:] &= k[1:] == k[:-1]
    s = p["start"].to_numpy()
    # running max end of the earlier pieces of the same lane and part
    run_end = p.groupby(["rank", "stream", "part"], sort=False)["end"].cummax().to_numpy()
    prev_end = np.r_[np.int64(0), run_end[:-1]]
    gap = p["_gap"].to_numpy()
    # lanes within the limit keep every piece; others merge across gaps below min_gap
    new = ~same | (gap < 0) | (s - prev_end > gap)
    gid = np.cumsum(new) - 1
    g = p.groupby(gid, sort=False)
    merged = pd.DataFrame({
        "rank": g["rank"].first(), "stream": g["stream"].first(), "start": g["start"].min(),
        "end": g["end"].max(), "part": g["part"].first(), "name": g["name"].first(),
        "op": g["op"].first(), "src": g["src"].first(), "count": g["count"].sum(),
        "busy_ns": g["busy_ns"].sum(),
    })  # fmt: skip
    merged = merged.sort_values(["rank", "stream", "start"], kind="stable")
    return merged.reset_index(drop=True), True


def pick_iteration(by_iteration: pd.DataFrame | None) -> int | None:
    """The step to draw: the one whose wall time is closest to the median (ties:
    the earliest); None when there are no steps."""
    if by_iteration is None or len(by_iteration) == 0 or "iteration" not in by_iteration:
        return None
    it = by_iteration[by_iteration["iteration"] >= 0]
    if len(it) == 0:
        return None
    if "wall_ns" not in it:
        return int(it["iteration"].min())
    wall = it.groupby("iteration", sort=True)["wall_ns"].max()
    med = float(np.median(wall.to_numpy()))
    dist = (wall - med).abs()
    return int(dist.idxmin())


def _pct(hidden: np.ndarray, comm: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(comm > 0, 100.0 * hidden / np.where(comm > 0, comm, 1), np.nan)


def op_table(by_op: pd.DataFrame | None) -> pd.DataFrame:
    """Per op name, pooled over ranks: ``op, n_ranks, comm_ns, hidden_ns, exposed_ns``
    (sums), ``hidden_pct`` (100*sum hidden/sum comm; NaN when no comm), sorted by
    exposed comm, largest first. Ops without comm are left out."""
    cols = ["op", "n_ranks", "comm_ns", "hidden_ns", "exposed_ns", "hidden_pct"]
    if by_op is None or len(by_op) == 0:
        return pd.DataFrame(columns=cols)
    df = by_op.assign(op=by_op["op"].astype(str))
    g = df.groupby("op", sort=False, observed=True)
    t = pd.DataFrame({
        "n_ranks": g["rank"].nunique() if "rank" in df else 1,
        "comm_ns": g["comm_ns"].sum(), "hidden_ns": g["hidden_ns"].sum(),
        "exposed_ns": g["exposed_ns"].sum(),
    }).reset_index()  # fmt: skip
    t = t[t["comm_ns"] > 0]
    t["hidden_pct"] = _pct(t["hidden_ns"].to_numpy(float), t["comm_ns"].to_numpy(float))
    t = t.sort_values(["exposed_ns", "op"], ascending=[False, True], kind="stable")
    return t[cols].reset_index(drop=True)


def layer_grid(by_op: pd.DataFrame | None) -> pd.DataFrame:
    """Hidden % by layer x micro-batch from op names ``fwd.layer_attn_{L}_batch_{b}`` /
    ``..._mlp_...`` / ``bwd....``, pooled over ranks. Columns: ``phase`` (fwd/bwd),
    ``block`` (attn/mlp), ``layer``, ``batch`` (int), ``comm_ns, hidden_ns,
    exposed_ns``, ``hidden_pct`` (NaN when no comm). Empty when no op matches."""
    cols = ["phase", "block", "layer", "batch", "comm_ns", "hidden_ns", "exposed_ns",
            "hidden_pct"]  # fmt: skip
    t = op_table_all(by_op)
    if len(t) == 0:
        return pd.DataFrame(columns=cols)
    parts = t["op"].str.extract(_LAYER_OP)
    ok = parts[0].notna().to_numpy()
    if not ok.any():
        return pd.DataFrame(columns=cols)
    t = t[ok].reset_index(drop=True)
    parts = parts[ok].reset_index(drop=True)
    out = pd.DataFrame({
        "phase": parts[0], "block": parts[1], "layer": parts[2].astype(np.int64),
        "batch": parts[3].astype(np.int64), "comm_ns": t["comm_ns"],
        "hidden_ns": t["hidden_ns"], "exposed_ns": t["exposed_ns"],
        "hidden_pct": t["hidden_pct"],
    })  # fmt: skip
    return out.sort_values(["phase", "layer", "block", "batch"]).reset_index(drop=True)[cols]


def collective_type_table(by_type: pd.DataFrame | None) -> pd.DataFrame:
    """Per collective type, pooled over ranks: ``collective, count, comm_ns, hidden_ns,
    exposed_ns`` (sums) and ``hidden_pct``, largest comm first."""
    cols = ["collective", "count", "comm_ns", "hidden_ns", "exposed_ns", "hidden_pct"]
    if by_type is None or len(by_type) == 0:
        return pd.DataFrame(columns=cols)
    g = by_type.assign(collective=by_type["collective"].astype(str)).groupby(
        "collective", sort=False
    )
    t = g[["count", "comm_ns", "hidden_ns", "exposed_ns"]].sum().reset_index()
    t["hidden_pct"] = _pct(t["hidden_ns"].to_numpy(float), t["comm_ns"].to_numpy(float))
    return t.sort_values(["comm_ns", "collective"], ascending=[False, True], ignore_index=True)[
        cols
    ]


def op_table_all(by_op: pd.DataFrame | None) -> pd.DataFrame:
    """Like :func:`op_table` but keeping ops without comm (hidden_pct NaN)."""
    if by_op is None or len(by_op) == 0:
        return pd.DataFrame(columns=["op", "comm_ns", "hidden_ns", "exposed_ns", "hidden_pct"])
    df = by_op.assign(op=by_op["op"].astype(str))
    g = df.groupby("op", sort=False, observed=True)
    t = pd.DataFrame(
        {
            "comm_ns": g["comm_ns"].sum(),
            "hidden_ns": g["hidden_ns"].sum(),
            "exposed_ns": g["exposed_ns"].sum(),
        }
    ).reset_index()
    t["hidden_pct"] = _pct(t["hidden_ns"].to_numpy(float), t["comm_ns"].to_numpy(float))
    return t


def compare_ops(
    a_by_op: pd.DataFrame | None,
    b_by_op: pd.DataFrame | None,
    *,
    a_steps: int,
    b_steps: int,
    a_ranks: int,
    b_ranks: int,
) -> pd.DataFrame:
    """Per-op exposed and hidden comm per step and rank (ns; sums / ranks / steps; a
    count of 0 is taken as 1), for A and B, outer-joined on op name, with ``in_a`` /
    ``in_b`` (the op launched comm on that side) and ``delta_exposed_ns = b - a``. An op
    seen on one side only has NaN on the other side and as its delta: it is missing
    there, not 0 (op names often differ between schedules, e.g. micro-batch suffixes).
    Ops on both sides come first, by |delta| (largest first), then the one-sided ops
    by their exposed comm."""

    def per_step(by_op: pd.DataFrame | None, steps: int, ranks: int) -> pd.DataFrame:
        t = op_table(by_op)
        k = max(steps, 1) * max(ranks, 1)
        return pd.DataFrame(
            {
                "op": t["op"],
                "exposed": t["exposed_ns"] / k,
                "comm": t["comm_ns"] / k,
                "hidden_pct": t["hidden_pct"],
                "in": True,
            }
        )

    a = per_step(a_by_op, a_steps, a_ranks)
    b = per_step(b_by_op, b_steps, b_ranks)
    m = a.merge(b, on="op", how="outer", suffixes=("_a", "_b"))
    m["in_a"] = m["in_a"].notna().to_numpy()
    m["in_b"] = m["in_b"].notna().to_numpy()
    for c in ("exposed_a", "exposed_b", "comm_a", "comm_b", "hidden_pct_a", "hidden_pct_b"):
        m[c] = m[c].astype(np.float64)
    m["delta_exposed_ns"] = m["exposed_b"] - m["exposed_a"]  # NaN when one side lacks it
    m = m.rename(
        columns={
            "exposed_a": "exposed_ns_a",
            "exposed_b": "exposed_ns_b",
            "comm_a": "comm_ns_a",
            "comm_b": "comm_ns_b",
        }
    )
    both = (m["in_a"] & m["in_b"]).to_numpy()
    size = np.where(
        both,
        np.abs(m["delta_exposed_ns"].to_numpy()),
        np.fmax(m["exposed_ns_a"].to_numpy(), m["exposed_ns_b"].to_numpy()),
    )
    order = np.lexsort((-np.nan_to_num(size, nan=0.0), ~both))
    return m.iloc[order].reset_index(drop=True)


def launch_delay_values(intervals: pd.DataFrame | None) -> np.ndarray:
    """``launch_delay_ns`` of every counted launch (METRICS.md "Kernel launches", as
    computed by :func:`domino_prof.analysis.launches.launch_table`), for a histogram."""
    if intervals is None or len(intervals) == 0 or "launch_end" not in intervals:
        return np.empty(0, np.int64)

    lt = launch_table(intervals)
    return lt.loc[lt["delay_counted"], "launch_delay_ns"].to_numpy(np.int64)
