"""Interval maths against hand-worked cases and a brute-force rasterised timeline."""

from __future__ import annotations

import numpy as np
import pytest

from domino_prof.analysis import intervals as iv


def a(*xs):
    return np.array(xs, dtype=np.int64)


# ---- hand-worked -----------------------------------------------------------------


def test_merge_hand_worked():
    # [0,10) [5,12) [12,15) touch/overlap -> [0,15); [20,20) empty drops; [30,31) alone
    ms, me = iv.merge(a(5, 0, 12, 20, 30), a(12, 10, 15, 20, 31))
    assert ms.tolist() == [0, 30]
    assert me.tolist() == [15, 31]
    assert iv.union_length(a(5, 0, 12, 20, 30), a(12, 10, 15, 20, 31)) == 16


def test_merge_nested_and_empty_input():
    # nested: [0,100) holds [10,20) and [30,40): union is 100
    assert iv.union_length(a(0, 10, 30), a(100, 20, 40)) == 100
    assert iv.union_length(a(), a()) == 0
    ms, me = iv.merge(a(3), a(3))  # zero-length only
    assert len(ms) == 0 and len(me) == 0


def test_grouped_merge_keeps_groups_apart():
    # group 0: [0,10) [5,20) -> [0,20); group 1: [0,5) [8,9) -> two; the group-0 end (20)
    # must not swallow group 1's [8,9) (the running max resets per group)
    k, s, e = iv.grouped_merge(a(1, 0, 1, 0), a(8, 0, 0, 5), a(9, 10, 5, 20))
    assert list(zip(k.tolist(), s.tolist(), e.tolist())) == [(0, 0, 20), (1, 0, 5), (1, 8, 9)]
    assert iv.grouped_union_length(a(1, 0, 1, 0), a(8, 0, 0, 5), a(9, 10, 5, 20), 3).tolist() == [
        20,
        6,
        0,
    ]


def test_intersection_hand_worked():
    # reference (group 0): [10,20) [30,40); query [15,35) -> 5 + 5 = 10
    # group 1 reference [0,100); query in group 1 [15,35) -> 20; query [50,50) -> 0
    rk, rs, re = iv.grouped_merge(a(0, 0, 1), a(10, 30, 0), a(20, 40, 100))
    got = iv.grouped_intersection(a(0, 1, 1, 0), a(15, 15, 50, 0), a(35, 35, 50, 5), rk, rs, re)
    assert got.tolist() == [10, 20, 0, 0]


def test_large_absolute_ns_are_exact():
    # absolute ns around 1.79e18 (baseTimeNanoseconds): float64 would lose the 1-ns parts
    b = 1_790_000_000_000_000_001
    rk, rs, re = iv.grouped_merge(a(0), a(b), a(b + 3))
    assert iv.grouped_intersection(a(0), a(b + 1), a(b + 10), rk, rs, re).tolist() == [2]
    assert iv.union_length(a(b, b + 5), a(b + 3, b + 7)) == 5


def test_contains_half_open():
    rk, rs, re = iv.grouped_merge(a(0, 1), a(10, 10), a(20, 20))
    got = iv.grouped_contains(rk, rs, re, a(0, 0, 0, 0, 1, 2), a(9, 10, 19, 20, 15, 15))
    assert got.tolist() == [False, True, True, False, True, False]


def test_difference_hand_worked():
    # a = [0,10) [20,30); b = [5,25) -> [0,5) [25,30)
    k, s, e = iv.grouped_difference(a(0, 0), a(0, 20), a(10, 30), a(0), a(5), a(25))
    assert list(zip(s.tolist(), e.tolist())) == [(0, 5), (25, 30)]
    assert k.tolist() == [0, 0]


# ---- brute force -------------------------------------------------------------------


def _raster(keys, starts, ends, n_groups, horizon):
    cov = np.zeros((n_groups, horizon), dtype=bool)
    for k, s, e in zip(keys, starts, ends):
        cov[k, s:e] = True
    return cov


def _random(rng, n, n_groups, horizon):
    keys = rng.integers(0, n_groups, n)
    starts = rng.integers(0, horizon, n)
    lens = rng.integers(0, 12, n) * (rng.random(n) > 0.1)  # ~10% zero-length
    ends = np.minimum(starts + lens, horizon)
    return keys.astype(np.int64), starts.astype(np.int64), ends.astype(np.int64)


@pytest.mark.parametrize("seed", range(60))
def test_against_rasterised_timeline(seed):
    rng = np.random.default_rng(seed)
    horizon, groups = 80, int(rng.integers(1, 5))
    ak, as_, ae = _random(rng, int(rng.integers(0, 25)), groups, horizon)
    bk, bs, be = _random(rng, int(rng.integers(0, 25)), groups, horizon)
    qk, qs, qe = _random(rng, int(rng.integers(1, 25)), groups, horizon)
    ra = _raster(ak, as_, ae, groups, horizon)
    rb = _raster(bk, bs, be, groups, horizon)

    # union length per group
    assert iv.grouped_union_length(ak, as_, ae, groups).tolist() == ra.sum(axis=1).tolist()
    # merged output is disjoint, sorted, non-touching, and rasterises back to the same set
    mk, ms, me = iv.grouped_merge(ak, as_, ae)
    assert (me > ms).all()
    same = mk[1:] == mk[:-1]
    assert (ms[1:][same] > me[:-1][same]).all()
    assert (_raster(mk, ms, me, groups, horizon) == ra).all()

    # intersection of each query with its group's union of a
    got = iv.grouped_intersection(qk, qs, qe, mk, ms, me)
    want = [int(ra[k, s:e].sum()) for k, s, e in zip(qk, qs, qe)]
    assert got.tolist() == want

    # point containment
    pts = rng.integers(0, horizon, 30)
    pk = rng.integers(0, groups, 30)
    assert iv.grouped_contains(mk, ms, me, pk, pts).tolist() == [
        bool(ra[k, t]) for k, t in zip(pk, pts)
    ]

    # difference a \ b
    dk, ds, de = iv.grouped_difference(ak, as_, ae, bk, bs, be)
    assert (_raster(dk, ds, de, groups, horizon) == (ra & ~rb)).all()

    # flat (ungrouped) union
    assert iv.union_length(as_, ae) == int(_raster(np.zeros_like(ak), as_, ae, 1, horizon).sum())
