"""Exact interval arithmetic on int64 nanosecond arrays, vectorised.

Every function works on plain numpy arrays: one sort, then cumsum / cummax sweeps
and ``searchsorted`` look-ups; there is no per-interval Python loop. Intervals are
half-open ``[start, end)``; a zero-length interval covers nothing. Results are exact
integers (no float, no rounding).

"Grouped" functions take dense integer group ids (``0..G-1``, e.g. from
``pandas.factorize``) and treat each group as an independent timeline (one rank, one
stream, ...).

The central trick (as in HTA's ``merge_kernel_intervals`` and Perfetto's interval
intersection): merge the reference set into disjoint sorted intervals, keep the prefix
sum of their lengths, and then ``F(t)`` = covered length of the reference in
``(-inf, t]`` is one ``searchsorted`` away. The measure of ``[s, e) ∩ reference`` is
``F(e) - F(s)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = [
    "grouped_contains",
    "grouped_covered_before",
    "grouped_difference",
    "grouped_intersection",
    "grouped_merge",
    "grouped_searchsorted",
    "grouped_union_length",
    "merge",
    "union_length",
]

_I64 = np.int64


def _as_i64(a: object) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=_I64)


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as disjoint, sorted ``(starts, ends)``; empty intervals drop out."""
    k = np.zeros(len(starts), dtype=_I64)
    _, ms, me = grouped_merge(k, starts, ends)
    return ms, me


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of the intervals (exact, ns)."""
    ms, me = merge(starts, ends)
    return int((me - ms).sum())


def grouped_merge(
    keys: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union of the intervals of each group.

    Returns ``(keys, starts, ends)`` of disjoint non-empty intervals sorted by
    (key, start); within a group no two returned intervals touch or overlap.
    Sweep: sort by (key, start), running maximum of ends within the group (cummax);
    a new merged interval begins where a start exceeds the running end so far.
    """
    keys, starts, ends = _as_i64(keys), _as_i64(starts), _as_i64(ends)
    keep = ends > starts
    keys, starts, ends = keys[keep], starts[keep], ends[keep]
    if len(keys) == 0:
        e = np.empty(0, dtype=_I64)
        return e, e.copy(), e.copy()
    order = np.lexsort((starts, keys))
    keys, starts, ends = keys[order], starts[order], ends[order]
    # running max of ends within each group (Cython groupby cummax; O(n))
    run_end = pd.Series(ends).groupby(keys, sort=False).cummax().to_numpy(dtype=_I64)
    new = np.empty(len(keys), dtype=bool)
    new[0] = True
    new[1:] = (keys[1:] != keys[:-1]) | (starts[1:] > run_end[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(keys) - 1)
    return keys[first], starts[first], run_end[last]


def grouped_union_length(
    keys: np.ndarray, starts: np.ndarray, ends: np.ndarray, n_groups: int
) -> np.ndarray:
    """Length of the union of each group's intervals, as an int64 array of ``n_groups``."""
    mk, ms, me = grouped_merge(keys, starts, ends)
    return _bincount_i64(mk, me - ms, n_groups)


def _bincount_i64(keys: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact integer per-key sums (``np.bincount`` would go through float64)."""
    out = np.zeros(n, dtype=_I64)
    np.add.at(out, _as_i64(keys), _as_i64(values))
    return out


def grouped_searchsorted(
    ref_keys: np.ndarray,
    ref_vals: np.ndarray,
    q_keys: np.ndarray,
    q_vals: np.ndarray,
    side: str = "right",
) -> np.ndarray:
    """``searchsorted`` on (key, value) pairs: ``ref`` must be sorted by (key, value).

    Returns, for each query, the number of ref entries that sort before it
    (lexicographically on (key, value), ties per ``side``) — a global index into ref.
    Values are replaced by their dense rank, so ``key * M + rank`` is an exact int64
    combined key (no overflow for any realistic size).
    """
    ref_keys, ref_vals = _as_i64(ref_keys), _as_i64(ref_vals)
    q_keys, q_vals = _as_i64(q_keys), _as_i64(q_vals)
    if len(ref_keys) == 0:
        return np.zeros(len(q_keys), dtype=_I64)
    _, inv = np.unique(np.concatenate([ref_vals, q_vals]), return_inverse=True)
    m = _I64(int(inv.max()) + 1)
    inv = inv.astype(_I64)
    ref_c = ref_keys * m + inv[: len(ref_vals)]
    q_c = q_keys * m + inv[len(ref_vals) :]
    return np.searchsorted(ref_c, q_c, side=side).astype(_I64)


def grouped_covered_before(
    ref_keys: np.ndarray,
    ref_starts: np.ndarray,
    ref_ends: np.ndarray,
    q_keys: np.ndarray,
    t: np.ndarray,
) -> np.ndarray:
    """``F(t)``: covered length of the (merged, sorted) reference up to ``t``.

    The value includes the total length of all groups sorted before ``q_key`` (a
    constant per group), so only differences within one group are meaningful:
    ``F(e) - F(s)`` = length of ``[s, e) ∩ reference[group]``.
    """
    ref_keys, ref_starts, ref_ends = _as_i64(ref_keys), _as_i64(ref_starts), _as_i64(ref_ends)
    q_keys, t = _as_i64(q_keys), _as_i64(t)
    if len(ref_keys) == 0:
        return np.zeros(len(t), dtype=_I64)
    lengths = ref_ends - ref_starts
    cum_through = np.cumsum(lengths)  # covered length of ref[0..i] inclusive
    idx = grouped_searchsorted(ref_keys, ref_starts, q_keys, t, side="right") - 1
    safe = np.maximum(idx, 0)
    base = np.where(idx >= 0, cum_through[safe], 0)
    same = (idx >= 0) & (ref_keys[safe] == q_keys)
    # inside ref[idx]'s group and at/after its start: count only the part up to t
    partial = np.minimum(t, ref_ends[safe]) - ref_starts[safe]
    return np.where(same, base - lengths[safe] + partial, base)


def grouped_intersection(
    q_keys: np.ndarray,
    q_starts: np.ndarray,
    q_ends: np.ndarray,
    ref_keys: np.ndarray,
    ref_starts: np.ndarray,
    ref_ends: np.ndarray,
) -> np.ndarray:
    """Length of ``[q_start, q_end) ∩ reference[q_key]`` for each query interval.

    ``ref_*`` must be the output of :func:`grouped_merge` (disjoint, sorted).
    Queries may overlap each other; each is measured on its own.
    """
    q_starts, q_ends = _as_i64(q_starts), _as_i64(q_ends)
    q_ends = np.maximum(q_ends, q_starts)
    n = len(q_starts)
    both = grouped_covered_before(
        ref_keys,
        ref_starts,
        ref_ends,
        np.concatenate([_as_i64(q_keys), _as_i64(q_keys)]),
        np.concatenate([q_starts, q_ends]),
    )
    return both[n:] - both[:n]


def grouped_contains(
    ref_keys: np.ndarray,
    ref_starts: np.ndarray,
    ref_ends: np.ndarray,
    q_keys: np.ndarray,
    t: np.ndarray,
) -> np.ndarray:
    """Whether point ``t`` lies in ``[start, end)`` of a (merged) ref interval of its group."""
    ref_keys, ref_starts, ref_ends = _as_i64(ref_keys), _as_i64(ref_starts), _as_i64(ref_ends)
    q_keys, t = _as_i64(q_keys), _as_i64(t)
    if len(ref_keys) == 0:
        return np.zeros(len(t), dtype=bool)
    idx = grouped_searchsorted(ref_keys, ref_starts, q_keys, t, side="right") - 1
    safe = np.maximum(idx, 0)
    return (idx >= 0) & (ref_keys[safe] == q_keys) & (t < ref_ends[safe])


def grouped_difference(
    a_keys: np.ndarray,
    a_starts: np.ndarray,
    a_ends: np.ndarray,
    b_keys: np.ndarray,
    b_starts: np.ndarray,
    b_ends: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group, ``(∪a) \\ (∪b)`` as merged ``(keys, starts, ends)``.

    Cut every group's timeline at all endpoints of a and b; an elementary segment
    ``[p_i, p_{i+1})`` is kept when its left point is covered by a and not by b.
    """
    ak, as_, ae = grouped_merge(a_keys, a_starts, a_ends)
    bk, bs, be = grouped_merge(b_keys, b_starts, b_ends)
    if len(ak) == 0 or len(bk) == 0:
        return ak, as_, ae
    pk = np.concatenate([ak, ak, bk, bk])
    pt = np.concatenate([as_, ae, bs, be])
    order = np.lexsort((pt, pk))
    pk, pt = pk[order], pt[order]
    seg = (pk[1:] == pk[:-1]) & (pt[1:] > pt[:-1])
    sk, ss, se = pk[:-1][seg], pt[:-1][seg], pt[1:][seg]
    keep = grouped_contains(ak, as_, ae, sk, ss) & ~grouped_contains(bk, bs, be, sk, ss)
    return grouped_merge(sk[keep], ss[keep], se[keep])
