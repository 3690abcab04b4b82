"""Overlap tax: how much slower compute runs while comm runs beside it.

Definition: docs/METRICS.md "Extension: overlap tax". A compute interval is
**overlapped** when more than half of its duration lies inside the union of the comm
intervals of its (rank, device) — comm on another stream of the GPU, or on a gloo thread
of the same process on a CPU trace. (The one definition of "overlapped" that the comm
emulator shares.) Compute intervals are grouped by kernel name, launch grid (x·y·z, the
trace's ``args.grid``) and launching op with its numbers dropped (GPU:
``fwd.layer_attn_N_batch_N``, the same shapes in every layer and micro-batch; the grid
keeps apart kernels of one name and op with different shapes, e.g. domino's weight-gradient
GEMM over all micro-batches and the per-micro-batch input-gradient GEMM) or by op name
and thread (CPU; leaf ops only, so nested ops are not counted twice). Per group with both populations:
``tax = n_overlapped × (mean overlapped duration − mean not-overlapped duration)``
(may be negative: overlapped runs were faster); per step: the sum over groups / rank-steps.
"net hidden" = hidden comm per step − tax per step. Vectorised; no torch.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from domino_prof.analysis import intervals as ivm
from domino_prof.analysis.attribution import tuple_ids
from domino_prof.analysis.classify import leaf_ops

OVERLAP_FRACTION = 0.5  # "overlapped": more than this share of the interval under comm
TAX_COLUMNS = ("rank", "key", "n_overlapped", "overlapped_ns", "n_alone", "alone_ns")


def overlapped_mask(intervals: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(compute row mask, overlapped) over ``intervals``: see module doc."""
    kind = intervals["kind"].astype(str).to_numpy()
    comp, comm = kind == "compute", kind == "comm"
    rk = intervals["rank"].to_numpy(np.int64)
    dv = intervals["device"].to_numpy(np.int64)
    key = tuple_ids(rk, dv)
    s = intervals["start"].to_numpy(np.int64)
    e = intervals["end"].to_numpy(np.int64)
    mk, ms, me = ivm.grouped_merge(key[comm], s[comm], e[comm])
    inter = ivm.grouped_intersection(key[comp], s[comp], e[comp], mk, ms, me)
    dur = np.maximum(e[comp] - s[comp], 0)
    return comp, (dur > 0) & (inter > OVERLAP_FRACTION * dur)


def _per_pair(a: pd.Series, b: pd.Series, fn) -> pd.Series:
    """``fn(a, b)`` (element-wise string work) computed once per distinct (a, b) pair and
    spread back to the rows: the same values, without a regex per row."""
    if len(a) == 0:
        return fn(a, b)
    ac, au = pd.factorize(a, use_na_sentinel=False)
    bc, bu = pd.factorize(b, use_na_sentinel=False)
    pc, pu = pd.factorize(ac.astype(np.int64) * len(bu) + bc)
    out = fn(pd.Series(au.take(pu // len(bu))), pd.Series(bu.take(pu % len(bu))))
    return pd.Series(out.to_numpy(dtype=object)[pc], index=a.index, dtype=object)


_DIGITS = re.compile(r"\d+")


def _gpu_groups(c: pd.DataFrame, ov: np.ndarray, dur: np.ndarray) -> pd.DataFrame | None:
    """:func:`tax_part`'s GPU groups from the category codes of ``name`` and ``op`` and
    the int ``grid``: each distinct (name, grid, op) gets its key string once, the rows
    are summed by (rank, key) on ints and the groups come out in (rank, key string)
    order, as the string group-by of the general path gives them (the same frame, to
    the row; tests/test_overlap_tax_grid.py); 4x less time on a 3M-interval rank. None
    (the general path then) when a column is not categorical or holds a missing value,
    or there is no row."""
    name, op = c["name"], c["op"]
    if not len(c) or not all(isinstance(x.dtype, pd.CategoricalDtype) for x in (name, op)):
        return None
    nc, oc = name.cat.codes.to_numpy(np.int64), op.cat.codes.to_numpy(np.int64)
    if (nc < 0).any() or (oc < 0).any():
        return None
    grid = c["grid"].to_numpy(np.int64) if "grid" in c else np.full(len(c), -1, np.int64)
    gc, gu = pd.factorize(grid)
    n_n, n_g = len(name.cat.categories), len(gu)
    tc, tu = pd.factorize((oc * n_g + gc) * n_n + nc)  # the distinct triples, row -> one
    names = [str(x) for x in name.cat.categories]
    ops = [_DIGITS.sub("N", str(x)) for x in op.cat.categories]
    keys = [
        names[t % n_n] + (f" [grid {gu[t // n_n % n_g]}]" if gu[t // n_n % n_g] != -1 else "")
        + " @ " + ops[t // n_n // n_g]
        for t in tu.tolist()
    ]  # fmt: skip
    order = sorted(set(keys))  # a key's code is its place among the sorted strings
    code_of = {k: i for i, k in enumerate(order)}
    kc = np.fromiter((code_of[k] for k in keys), np.int64, len(keys))[tc]
    rank = c["rank"].to_numpy(np.int64)
    group = rank * len(order) + kc  # (rank, key) in sorted order
    gid, groups = pd.factorize(group, sort=True)
    n = len(groups)
    ovi = ov.astype(bool)

    def total(m: np.ndarray) -> np.ndarray:  # int64 sums, exact (no float weights)
        out = np.zeros(n, np.int64)
        np.add.at(out, gid[m], dur[m])
        return out

    return pd.DataFrame({
        "rank": groups // len(order),
        "key": np.array(order, dtype=object)[groups % len(order)],
        "n_overlapped": np.bincount(gid[ovi], minlength=n).astype(np.int64),
        "overlapped_ns": total(ovi),
        "n_alone": np.bincount(gid[~ovi], minlength=n).astype(np.int64),
        "alone_ns": total(~ovi),
    })  # fmt: skip


def tax_part(intervals: pd.DataFrame, *, mode: str) -> pd.DataFrame:
    """One rank's groups: :data:`TAX_COLUMNS` (sums, so ranks combine by concatenation)."""
    if intervals is None or len(intervals) == 0:
        return pd.DataFrame({c: [] for c in TAX_COLUMNS})
    iv = intervals
    comp, ov = overlapped_mask(iv)
    c = iv.loc[comp]
    dur = (c["end"] - c["start"]).clip(lower=0).to_numpy(np.int64)
    keep = np.ones(len(c), bool)
    if mode == "cpu":
        thr = tuple_ids(*(c[k].to_numpy(np.int64) for k in ("rank", "device", "stream")))
        keep = leaf_ops(thr, c["start"].to_numpy(np.int64), dur)
        key = c["name"].astype(str) + " @ thread " + c["stream"].astype(str)
    else:  # name + launch grid + the launching op with its numbers dropped
        fast = _gpu_groups(c, ov, dur)
        if fast is not None:
            return fast
        grid = (c["grid"] if "grid" in c else pd.Series(-1, index=c.index)).astype(str)
        named = _per_pair(c["name"].astype(str), grid,
                          lambda n, g: n + (" [grid " + g + "]").where(g != "-1", ""))
        key = _per_pair(named, c["op"].astype(str),
                        lambda n, o: n + " @ " + o.str.replace(_DIGITS, "N", regex=True))
    df = pd.DataFrame({"rank": c["rank"].to_numpy(np.int64), "key": key.to_numpy(dtype=object),
                       "ov": ov, "dur": dur}).loc[keep]  # fmt: skip
    g = df.groupby(["rank", "key", "ov"], sort=True)["dur"].agg(["size", "sum"]).unstack("ov")
    g = g.fillna(0)
    out = pd.DataFrame({
        "rank": g.index.get_level_values(0).to_numpy(np.int64),
        "key": g.index.get_level_values(1).to_numpy(dtype=object),
        "n_overlapped": g[("size", True)].to_numpy(np.int64) if ("size", True) in g else 0,
        "overlapped_ns": g[("sum", True)].to_numpy(np.int64) if ("sum", True) in g else 0,
        "n_alone": g[("size", False)].to_numpy(np.int64) if ("size", False) in g else 0,
        "alone_ns": g[("sum", False)].to_numpy(np.int64) if ("sum", False) in g else 0,
    })  # fmt: skip
    return out


def overlap_tax(parts: list[pd.DataFrame], *, n_rank_steps: int, hidden_ns: int | None,
                top_n: int = 5) -> dict:  # fmt: skip
    """The overlap tax of every rank's :func:`tax_part` (JSON form)."""
    df = pd.concat([p for p in parts if p is not None and len(p)], ignore_index=True) if any(
        p is not None and len(p) for p in parts) else pd.DataFrame({c: [] for c in TAX_COLUMNS})
    both = df.loc[(df["n_overlapped"] > 0) & (df["n_alone"] > 0)].copy() if len(df) else df
    if len(both):
        mo = both["overlapped_ns"] / both["n_overlapped"]
        ma = both["alone_ns"] / both["n_alone"]
        both["mean_overlapped_ns"] = mo
        both["mean_alone_ns"] = ma
        both["tax_ns"] = both["n_overlapped"] * (mo - ma)
        tax = float(both["tax_ns"].sum())
    else:
        tax = 0.0
    per_step = tax / n_rank_steps / 1e6 if n_rank_steps else None
    hidden = hidden_ns / n_rank_steps / 1e6 if (n_rank_steps and hidden_ns is not None) else None
    top = both.sort_values("tax_ns", ascending=False).head(top_n) if len(both) else both
    return {
        "definition": f"compute interval with > {OVERLAP_FRACTION:g} of its time under comm",
        "n_groups": int(len(both)),
        "n_overlapped": int(df["n_overlapped"].sum()) if len(df) else 0,
        "tax_ms_per_step": per_step,
        "hidden_ms_per_step": hidden,
        "net_hidden_ms_per_step": (hidden - per_step) if (hidden is not None and per_step
                                                           is not None) else None,  # fmt: skip
        "top": [
            {"rank": int(r.rank), "key": str(r.key), "n_overlapped": int(r.n_overlapped),
             "mean_overlapped_ns": float(r.mean_overlapped_ns),
             "n_alone": int(r.n_alone), "mean_alone_ns": float(r.mean_alone_ns),
             "tax_ns": float(r.tax_ns)}
            for r in top.itertuples()
        ],
    }  # fmt: skip
