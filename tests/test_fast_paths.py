"""Vectorised speed-ups (issue 23) against the per-element code they replaced."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from domino_prof.analysis import replay
from domino_prof.analysis.overlap_tax import _per_pair


def _inferred_waits_loop(late, dev, dl, d_s, d_e, prev_end):
    """The loop replay._gpu_graph ran before (commit 67ef664), verbatim."""
    o = np.lexsort((d_e, dev))
    dev_o, end_o = dev[o], d_e[o]
    wd, ws = [], []
    for k in late.tolist():
        lo = np.searchsorted(dev_o, dev[k], "left")
        hi = np.searchsorted(end_o[lo:np.searchsorted(dev_o, dev[k], "right")],
                             d_s[k], "right") + lo  # fmt: skip
        j = hi - 1
        while j >= lo and dl[o[j]] == dl[k]:
            j -= 1
        if j >= lo and d_s[k] - end_o[j] <= replay.INFER_GAP_NS and end_o[j] > prev_end[k]:
            wd.append(k)
            ws.append(int(o[j]))
    return wd, ws


@pytest.mark.parametrize("seed", range(40))
def test_inferred_waits_equal_the_loop(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    n_dev, n_stream = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    dev = rng.integers(0, n_dev, n).astype(np.int64)
    stream = rng.integers(0, n_stream, n).astype(np.int64)
    d_s = rng.integers(0, 200_000, n).astype(np.int64)  # ties on purpose
    d_e = d_s + rng.integers(0, 30_000, n).astype(np.int64)
    _, dl = np.unique(dev * 100 + stream, return_inverse=True)
    sd, ss = replay._prev_on_lane(dl, d_s, d_e)
    prev_end = np.full(n, -1, np.int64)
    prev_end[sd] = d_e[ss]
    late = sd[(d_s[sd] - d_e[ss]) > int(rng.choice([0, 1_000, replay.INFER_GAP_NS]))]
    want = _inferred_waits_loop(late, dev, dl, d_s, d_e, prev_end)
    got = replay._inferred_waits(late, dev, dl, d_s, d_e, prev_end)
    assert [int(x) for x in got[0]] == want[0]
    assert [int(x) for x in got[1]] == want[1]


def test_api_names_equal_the_per_row_regex():
    names = np.array(["cudaLaunchKernel", "cudaLaunchKernelExC_v11060", "cuLaunchKernel_v2",
                      "cudaLaunchKernel", float("nan"), "x_v1_v2"], dtype=object)  # fmt: skip
    want = [re.sub(r"_v\d+$", "", str(n)) for n in names]
    assert replay._api(names).tolist() == want
    assert replay._api(np.array([], dtype=object)).tolist() == []


def test_per_pair_equals_the_per_row_string_work():
    rng = np.random.default_rng(0)
    pool_a = ["gemm", "nccl", "a1", None]
    pool_b = ["aten::mm 3", "op12x4", "(none)", None]
    a = pd.Series(rng.choice(np.array(pool_a, dtype=object), 500)).astype(str)
    b = pd.Series(rng.choice(np.array(pool_b, dtype=object), 500)).astype(str)

    def fn(x, y):
        return x + " @ " + y.str.replace(r"\d+", "N", regex=True)

    want = fn(a, b).to_numpy(dtype=object)
    got = _per_pair(a, b, fn).to_numpy(dtype=object)
    assert pd.isna(got).tolist() == pd.isna(want).tolist()
    assert [x for x in got if not pd.isna(x)] == [x for x in want if not pd.isna(x)]
    assert len(_per_pair(a[:0], b[:0], fn)) == 0
