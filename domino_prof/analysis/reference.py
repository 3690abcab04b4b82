"""The compute reference: merged, disjoint compute time per (rank, device), and the one
routine that measures comm against it (docs/METRICS.md "Overlap"). Its own module, below
``classify`` (which builds it) and ``overlap`` (which measures with it), so neither
imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from domino_prof.analysis import intervals as iv
from domino_prof.analysis.attribution import tuple_ids


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
