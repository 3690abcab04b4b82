"""Host clock alignment under jitter and a late rank (docs/METRICS.md "Extension: host
clock offsets under jitter"): ``analysis/ranks.py`` ``align_hosts``.

The synthetic set: two hosts of two ranks each (a: ranks 0, 1; b: ranks 2, 3); host b's
clock reads OFFSET_US ahead. Each of N all-reduces k has a common-clock base time; every
rank arrives within 0-10 µs of it, rank 3 300 µs later on every collective; the
collective completes one transfer (100 µs) after the last arrival, each rank's end
jittered by ±20 µs (uniform, seeded, independent per instance and rank), and the late
rank itself ends LATE_TAIL_US after its peers (its part of the ring after joining).
Builder times are µs; expected values are ns.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_switches import load
from tracegen import TraceBuilder

from domino_prof.analysis.config import AnalysisConfig
from domino_prof.analysis.ranks import ALIGN_TOPIC
from domino_prof.engine import analyze

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
N = 40
OFFSET_US = 5000.0  # host b reads 5 ms ahead of host a
JITTER_US = 20.0
LATE_US = 300.0
LATE_RANK = 3
LATE_TAIL_US = 40.0
TRANSFER_US = 100.0
HOSTS = {0: "host-a", 1: "host-a", 2: "host-b", 3: "host-b"}


def jitter_docs(seed: int, *, hosts: dict[int, str | None] = HOSTS, offset_us=OFFSET_US):
    """The four rank documents; also the true common-clock (start, end) per (rank, k)."""
    rng = np.random.default_rng(seed)
    arrive = rng.uniform(0.0, 10.0, size=(N, 4))
    arrive[:, LATE_RANK] += LATE_US
    end_jit = rng.uniform(-JITTER_US, JITTER_US, size=(N, 4))
    base = 1000.0 * (1 + np.arange(N))  # one collective per ms
    starts = base[:, None] + arrive
    ends = starts.max(axis=1)[:, None] + TRANSFER_US + end_jit
    ends[:, LATE_RANK] += LATE_TAIL_US
    docs = {}
    for r in range(4):
        shift = offset_us if hosts.get(r) == "host-b" else 0.0
        b = TraceBuilder(rank=r, world_size=4)
        b.step(1, shift, shift + 1000.0 * (N + 2))
        for k in range(N):
            s, e = starts[k, r] + shift, ends[k, r] + shift
            args = {"Process Group Name": "0", "Collective name": "allreduce", "Seq": k}
            b.kernel(NCCL, stream=13, start=s, dur=e - s, launch=s - 5, **args)
        doc = b.to_dict()
        if hosts.get(r):
            doc["hostName"] = hosts[r]
        docs[f"rank{r}.json"] = doc
    return docs, starts, ends


def _across(tmp_path, docs, **cfg):
    trace, iv = load(tmp_path, docs=docs)
    out = analyze(trace, AnalysisConfig(**cfg)).overheads
    return out["across_ranks"], out["notes"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_offset_survives_jitter_and_a_late_rank(tmp_path, seed):
    docs, starts, ends = jitter_docs(seed)
    ar, _ = _across(tmp_path, docs)
    assert ar["computed"] is True and ar["n_instances"] == N
    hosts = {h["host"]: h for h in ar["hosts"]}
    assert hosts["host-a"]["offset_ns"] == 0 and hosts["host-b"]["ranks"] == [2, 3]
    assert hosts["host-b"]["n_instances"] == N
    # the estimate: within 20 µs of the true -5 ms
    assert abs(hosts["host-b"]["offset_ns"] + OFFSET_US * 1000) <= 20_000
    # the independent figure: median over k of (min end on a - min end on b), from the
    # generated ends (host b's read OFFSET_US ahead)
    d = ends[:, :2].min(axis=1) - (ends[:, 2:].min(axis=1) + OFFSET_US)
    assert hosts["host-b"]["offset_ns"] == pytest.approx(np.median(d) * 1000, abs=5)  # ns rounding
    # the late rank is still named, for (nearly) all of its 300 µs on every collective
    assert ar["late_rank"] == LATE_RANK
    strag = {s["rank"]: s for s in ar["stragglers"]}
    assert strag[LATE_RANK]["n_late"] == N
    # its skew: its start - the earliest start, on the true clock, up to the alignment
    # error (<= 20 µs) per instance
    true_skew = (starts[:, LATE_RANK] - starts.min(axis=1)).sum() * 1000
    assert abs(strag[LATE_RANK]["skew_caused_ns"] - true_skew) <= 20_000 * N


def test_median_of_ends_would_move_with_the_late_rank():
    """Why the earliest end, over 20 seeds of the same set (numbers of the generated
    ends, no analysis): the former estimator (median over a host's ranks, then over
    instances) is pulled by about half the late rank's tail (40 / 2 µs): its error is
    never below 15 µs and 19.2 µs on average; the earliest end's stays below 12 µs
    (5.8 µs on average)."""
    old, new = [], []
    for seed in range(20):
        _, _, ends = jitter_docs(seed)
        old.append(abs(np.median(np.median(ends[:, :2], axis=1) - np.median(ends[:, 2:], axis=1))))
        new.append(abs(np.median(ends[:, :2].min(axis=1) - ends[:, 2:].min(axis=1))))
    assert min(old) > 15.0 and np.mean(old) > 19.0
    assert max(new) < 12.0 and np.mean(new) < 6.0


@pytest.mark.parametrize("named", [True, False])
def test_one_host_is_never_shifted(tmp_path, named):
    """Same jitter and late rank on one host (named, or no hostName at all): no offset,
    the aligned times are the times as read, the late rank named; without names a note
    of topic clock_alignment says the ranks were taken as one host."""
    hosts = {r: ("node-1" if named else None) for r in range(4)}
    docs, starts, _ = jitter_docs(0, hosts=hosts, offset_us=0.0)
    ar, notes = _across(tmp_path, docs)
    assert [h["offset_ns"] for h in ar["hosts"]] == [0] and len(ar["hosts"]) == 1
    assert ar["hosts"][0]["ranks"] == [0, 1, 2, 3]
    assert ar["late_rank"] == LATE_RANK
    # skew from the times as read (builder rounding: the kernel starts are whole ns)
    worst = max(ar["worst_instances"], key=lambda w: w["skew_ns"])
    k = int(worst["key"])
    assert worst["skew_ns"] == pytest.approx((starts[k].max() - starts[k].min()) * 1000, abs=2)
    one_host = [n for n in notes if getattr(n, "topic", "") == ALIGN_TOPIC]
    if named:
        assert one_host == []
    else:
        assert len(one_host) == 1 and "name no host" in one_host[0]


def test_no_align_clocks_uses_times_as_read(tmp_path):
    """--no-align-clocks: offset 0, and host b's residual (against 0) shows the 5 ms;
    with its kernels 5 ms late, the matched collectives no longer overlap: nothing is
    reported, rather than a 5 ms skew."""
    docs, _, _ = jitter_docs(0)
    ar, notes = _across(tmp_path, docs, align_clocks=False)
    assert ar["computed"] is False and ar["n_implausible"] == N
    (n,) = [x for x in notes if getattr(x, "topic", "") == ALIGN_TOPIC]
    assert n.startswith("across ranks: clock alignment off (--no-align-clocks)")


def test_partly_named_hosts_are_said(tmp_path):
    hosts = {0: "host-a", 1: "host-a", 2: None, 3: None}
    docs, _, _ = jitter_docs(0, hosts=hosts, offset_us=0.0)
    ar, notes = _across(tmp_path, docs)
    assert [h["host"] for h in ar["hosts"]] == ["host-a", "(unknown host)"]
    assert any(getattr(x, "topic", "") == ALIGN_TOPIC and "2 rank(s) name no host" in x
               for x in notes)  # fmt: skip


def test_cli_no_align_clocks(tmp_path):
    """``analyze --no-align-clocks``: the document says so in its config, and host b
    (rank 2, 1000 µs ahead in test_ranks' set) gets no offset."""
    import json

    from test_ranks import rank_doc
    from typer.testing import CliRunner

    from domino_prof.cli import app

    d = tmp_path / "t"
    d.mkdir()
    for r in range(3):
        (d / f"rank{r}.json").write_text(json.dumps(rank_doc(r, with_seq=True, hosts=True)))
    runner = CliRunner()
    for flag, align, off in (([], True, -1_000_000), (["--no-align-clocks"], False, None)):
        r = runner.invoke(app, ["analyze", str(d), "-o", "-", *flag])
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        assert doc["config"]["align_clocks"] is align
        ar = doc["overheads"]["across_ranks"]
        if off is None:  # times as read: rank 2 starts after ranks 0/1 ended
            assert ar["computed"] is False and ar["n_implausible"] == 3
        else:
            assert {h["host"]: h["offset_ns"] for h in ar["hosts"]}["host-b"] == off
