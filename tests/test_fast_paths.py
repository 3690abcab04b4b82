"""Vectorised speed-ups (issue 23) against the per-element code they replaced."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from domino_prof.analysis import replay
from domino_prof.analysis.overlap_tax import COMPUTE_PARTS, class_keys, compute_key


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


def test_class_keys_equal_the_per_row_key():
    """overlap_tax.class_keys formats each part once per distinct value and joins them
    once per distinct (name, grid, op) — from a categorical's codes where it can — and
    must give every row the key the per-row ``compute_key`` gives it, codes in sorted key
    order (missing names read "nan")."""
    rng = np.random.default_rng(0)
    names = rng.choice(np.array(["gemm", "nccl", "a1", None], dtype=object), 500)
    ops = rng.choice(np.array(["aten::mm 3", "op12x4", "(none)", "fwd.layer_attn_12"]), 500)
    grid = rng.choice(np.array([-1, 4, 128]), 500)
    want = [compute_key("nan" if n is None else n, g, o) for n, g, o in zip(names, grid, ops)]
    for name_col in (pd.Series(names).astype("category"), pd.Series(names).astype(str)):
        codes, keys = class_keys([name_col, grid, pd.Series(ops).astype("category")],
                                 COMPUTE_PARTS)  # fmt: skip
        assert keys == sorted(set(want))
        assert [keys[c] for c in codes] == want
    assert class_keys([np.array([]), np.array([]), np.array([])], COMPUTE_PARTS)[1] == []


def _handoffs_loop(cand_d, cand_lo, hl, h_s, h_e):
    """replay._gpu_graph's handoff loop before (commit 67ef664), verbatim but for add."""
    order = np.argsort(h_e, kind="stable")
    e_sorted = h_e[order]
    out_d, out_s = [], []
    for d, lo in zip(cand_d.tolist(), cand_lo.tolist()):
        k = int(np.searchsorted(e_sorted, h_s[d], "right")) - 1
        while k >= 0 and hl[order[k]] == hl[d]:
            k -= 1
        if k >= 0 and e_sorted[k] > lo:
            out_d.append(d)
            out_s.append(int(order[k]))
    return out_d, out_s


@pytest.mark.parametrize("seed", range(40))
def test_handoffs_equal_the_loop(seed):
    rng = np.random.default_rng(seed)
    nh = int(rng.integers(1, 300))
    hl = rng.integers(0, int(rng.integers(1, 5)), nh).astype(np.int64)
    h_s = rng.integers(0, 100_000, nh).astype(np.int64)
    h_e = h_s + rng.integers(0, 5_000, nh).astype(np.int64)
    td, ts_ = replay._prev_on_lane(hl, h_s, h_e)
    long = (h_s[td] - h_e[ts_]) >= int(rng.choice([0, 500, replay.HANDOFF_MIN_NS]))
    first_idx = np.setdiff1d(np.arange(nh), td)
    cand_d = np.concatenate([td[long], first_idx])
    cand_lo = np.concatenate([h_e[ts_[long]], np.full(len(first_idx), np.iinfo(np.int64).min)])
    want = _handoffs_loop(cand_d, cand_lo, hl, h_s, h_e)
    got = replay._handoffs(cand_d, cand_lo, hl, h_s, h_e)
    assert got[0].tolist() == want[0] and got[1].tolist() == want[1]


def _outermost_loop(a_tid, a_s, a_e, q_tid, q_t):
    """replay._with_sync_sites' per-sync scan before (commit 67ef664), verbatim."""
    out = []
    for tid, t in zip(q_tid.tolist(), q_t.tolist()):
        m = (a_tid == tid) & (a_s <= t) & (a_e > t)
        out.append(int(np.flatnonzero(m)[np.argmin(a_s[m])]) if m.any() else -1)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_outermost_op_equals_the_scan(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    a_tid = rng.integers(0, 3, n).astype(np.int64)
    a_s = rng.integers(0, 10_000, n).astype(np.int64)  # ties on purpose
    a_e = a_s + rng.integers(0, 3_000, n).astype(np.int64)
    q = int(rng.integers(0, 100))
    q_tid = rng.integers(0, 4, q).astype(np.int64)  # thread 3: no ops
    q_t = rng.integers(-10, 13_000, q).astype(np.int64)
    got = replay._outermost_at(a_tid, a_s, a_e, q_tid, q_t)
    assert got.tolist() == _outermost_loop(a_tid, a_s, a_e, q_tid, q_t)


def _sync_targets_loop(ev, iv, h_api, h_s, h_e, h_tid, h_corr, call_of, nd):
    """replay._sync_targets before (commit 67ef664), verbatim, plus the event-sync rule
    added since (an event sync waits for the latest-ending interval of its stream that
    had ended when it returned: the two lines marked)."""
    sync_idx = np.flatnonzero(np.isin(h_api, replay.SYNC_CALLS))
    if len(sync_idx) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cs = ev.loc[(ev["cat"] == "cuda_sync").to_numpy() & (ev["name"] != "Stream Wait Event").to_numpy()]
    stream_of_corr = dict(zip(cs["correlation"].to_numpy(np.int64).tolist(),
                              cs["stream"].to_numpy(np.int64).tolist()))  # fmt: skip
    d_stream = iv["stream"].to_numpy(np.int64)
    d_ls = iv["launch_start"].to_numpy(np.int64)
    d_lt = iv["launch_tid"].to_numpy(np.int64)
    d_e = iv["end"].to_numpy(np.int64)
    xd, xs = [], []
    for i in sync_idx.tolist():
        before = (d_ls >= 0) & (d_ls < h_s[i])
        if not before.any():
            continue
        if h_api[i] in replay._DEVICE_WIDE:
            cand = np.flatnonzero(before)
        else:
            st = stream_of_corr.get(int(h_corr[i]), -1)
            if st is None or st < 0:
                mine = np.flatnonzero(before & (d_lt == h_tid[i]))
                if len(mine) == 0:
                    continue
                st = int(d_stream[mine[np.argmax(d_ls[mine])]])
            cand = np.flatnonzero(before & (d_stream == st))
            if h_api[i] in replay._EVENT_SYNCS:  # the event-sync rule
                cand = cand[d_e[cand] <= h_e[i]]  # the event-sync rule
        if len(cand):
            xd.append(nd + i)
            xs.append(int(cand[np.argmax(d_e[cand])]))
    return np.asarray(xd, np.int64), np.asarray(xs, np.int64)


@pytest.mark.parametrize("seed", range(40))
def test_sync_targets_equal_the_loop(seed):
    rng = np.random.default_rng(seed)
    nd, nh = int(rng.integers(0, 200)), int(rng.integers(1, 120))
    iv = pd.DataFrame({
        "stream": rng.integers(0, 4, nd), "launch_tid": rng.integers(0, 3, nd),
        "launch_start": np.where(rng.random(nd) < 0.2, -1, rng.integers(0, 2_000, nd)),
        "end": rng.integers(0, 500, nd),  # ties on purpose
    })  # fmt: skip
    apis = np.array([*replay.SYNC_CALLS, "cudaLaunchKernel", "cudaMemcpyAsync"], dtype=object)
    h_api = rng.choice(apis, nh)
    h_s = rng.integers(0, 2_200, nh).astype(np.int64)
    h_e = h_s + rng.integers(0, 600, nh).astype(np.int64)
    h_tid = rng.integers(0, 4, nh).astype(np.int64)
    h_corr = rng.integers(-1, 40, nh).astype(np.int64)
    m = int(rng.integers(0, 30))
    ev = pd.DataFrame({
        "cat": rng.choice(np.array(["cuda_sync", "kernel"], dtype=object), m),
        "name": rng.choice(np.array(["Stream Sync", "Stream Wait Event"], dtype=object), m),
        "correlation": rng.integers(-1, 40, m), "stream": rng.integers(-1, 4, m),
    })  # fmt: skip
    args = (ev, iv, h_api, h_s, h_e, h_tid, h_corr, None, nd)
    want = _sync_targets_loop(*args)
    got = replay._sync_targets(*args)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
