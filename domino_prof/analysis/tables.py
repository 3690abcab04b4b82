"""Small per-stream and per-iteration tables the overhead analyses share: each
iteration's device wall, the previous interval on a stream, percentiles and
count/total/p50/p95 summaries. Pure; vectorised; no printing."""

from __future__ import annotations

import numpy as np
import pandas as pd


def iteration_spans(intervals: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, iteration >= 0): ``start`` = first device start, ``end`` = last device
    end and ``wall_ns`` = end - start (int64)."""
    iv = intervals.loc[intervals["iteration"] >= 0]
    g = iv.groupby(["rank", "iteration"], observed=True, sort=True)
    w = g.agg(start=("start", "min"), end=("end", "max")).reset_index()
    w["wall_ns"] = (w["end"] - w["start"]).astype(np.int64)
    for c in ("rank", "iteration", "start", "end"):
        w[c] = w[c].astype(np.int64)
    return w[["rank", "iteration", "start", "end", "wall_ns"]]


def iteration_walls(intervals_or_spans: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, iteration >= 0): wall_ns = last device end - first device start (from
    the intervals frame, or from :func:`iteration_spans` rows)."""
    s = intervals_or_spans
    if "wall_ns" not in s:
        s = iteration_spans(s)
    return s[["rank", "iteration", "wall_ns"]].reset_index(drop=True)


def pct(values: np.ndarray | pd.Series, q: float) -> float | None:
    """Percentile with numpy's default (linear) interpolation; None when empty."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return None
    return float(np.percentile(v, q))


def stats_ns(values: np.ndarray | pd.Series) -> dict:
    """count, total_ns, p50_ns, p95_ns of a set of ns durations."""
    v = np.asarray(values, dtype=np.int64)
    return {
        "count": int(v.size),
        "total_ns": int(v.sum()),
        "p50_ns": pct(v, 50),
        "p95_ns": pct(v, 95),
    }


def grouped_stats(df: pd.DataFrame, keys: list[str], col: str, prefix: str) -> pd.DataFrame:
    """Per group: n, total, p50, p95 of ``col`` (linear interpolation, as :func:`pct`)."""
    g = df.groupby(keys, observed=True, sort=True)[col]
    out = g.agg(["count", "sum"]).rename(
        columns={"count": f"n_{prefix}", "sum": f"{prefix}_total_ns"}
    )
    if len(df) == 0:  # no group: the columns, no rows
        out[f"{prefix}_p50_ns"] = np.empty(0, np.float64)
        out[f"{prefix}_p95_ns"] = np.empty(0, np.float64)
        return out.reset_index()
    qs = g.quantile([0.5, 0.95]).unstack()
    out[f"{prefix}_p50_ns"] = qs[0.5].astype(np.float64)
    out[f"{prefix}_p95_ns"] = qs[0.95].astype(np.float64)
    return out.reset_index()


def prev_end_on_stream(intervals: pd.DataFrame) -> pd.DataFrame:
    """Intervals sorted by (rank, device, stream, start) with ``prev_end`` = the latest end
    of the earlier intervals on the same stream (-1 for the first) and ``prev_iteration``."""
    iv = intervals.sort_values(["rank", "device", "stream", "start"], kind="stable")
    iv = iv.reset_index(drop=True)
    keys = [iv["rank"], iv["device"], iv["stream"]]
    run_end = iv.groupby(keys, observed=True, sort=False)["end"].cummax()
    prev = run_end.groupby(keys, observed=True, sort=False).shift(1, fill_value=-1)
    iv["prev_end"] = prev.astype(np.int64)
    prev_it = iv.groupby(keys, observed=True, sort=False)["iteration"].shift(1, fill_value=-2)
    iv["prev_iteration"] = prev_it.astype(np.int64)
    return iv
