"""Stream switches: cross-stream dependency edges and the device idle they cause.

Definitions: ``docs/METRICS.md`` "Stream switches" (and its "Extension:" notes).

An edge is one "Stream Wait Event" (category ``cuda_sync``): stream B waits on an
event recorded on stream A. It is joined to the ``cudaEventRecord`` call through
``wait_on_corr`` (= the record call's correlation) and to the ``cudaStreamWaitEvent``
call through its own correlation.

- producer = last device interval on A whose launch call started before the record
  call started; consumer = first device interval on B whose launch call started
  after the wait call started.
- ``switch_gap = consumer.start - max(producer.end, end of B's previous interval)``.
  A negative value means the consumer did not wait at all (B was idle-free across
  the dependency): it is clipped to 0 and counted in ``n_negative``.
- When several waits precede one consumer, the consumer's idle is counted once, on
  the edge whose producer ended last (the binding one); the others get 0.

Without ``cuda_sync`` events the edges come from ``cudaStreamWaitEvent`` runtime
calls: the record is the last ``cudaEventRecord`` on the same thread before the wait,
the producer the last interval launched from that thread before the record (its
stream is A) and the consumer the first interval launched from that thread after the
wait (its stream is B); a pair with A == B is not a switch and is dropped.

Step windows, the op of a host call and the runtime-call table come from the
attribution core (``analysis.attribution``), shared with the overlap analysis. Pure
functions: frames in, frames out; no printing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from domino_prof.analysis.attribution import (
    Context,
    context,
    runtime_calls,
)
from domino_prof.analysis.results import Note, StreamSwitches, tagged
from domino_prof.analysis.tables import grouped_stats, prev_end_on_stream, stats_ns

RECORD_CALLS: tuple[str, ...] = (
    "cudaEventRecord", "cudaEventRecordWithFlags", "cuEventRecord", "cuEventRecordWithFlags",
    "hipEventRecord",
)  # fmt: skip
WAIT_CALLS: tuple[str, ...] = ("cudaStreamWaitEvent", "cuStreamWaitEvent", "hipStreamWaitEvent")
BLOCKING_CALLS: tuple[str, ...] = (
    "cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize",
    "cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize",
    "hipStreamSynchronize", "hipEventSynchronize", "hipDeviceSynchronize",
)  # fmt: skip


# --- edges ---------------------------------------------------------------------------
EDGE_COLUMNS = (
    "rank", "device", "stream", "wait_on_stream", "record_start", "wait_start",
    "producer", "consumer", "producer_end", "consumer_start", "prev_end", "gap_raw_ns",
    "switch_gap_ns", "binding", "inferred", "unresolved", "iteration", "op", "producer_op",
    "consumer_name",
)  # fmt: skip


def _interval_table(intervals: pd.DataFrame) -> pd.DataFrame:
    iv = prev_end_on_stream(intervals)
    iv["_row"] = np.arange(len(iv), dtype=np.int64)
    return iv


def _join_launch(
    edges: pd.DataFrame, iv: pd.DataFrame, by: list[str], *, on: str, out: str, direction: str
) -> pd.DataFrame:
    """Per edge, the row of the interval launched last strictly before (``backward``) or
    first strictly after (``forward``) the edge's ``on`` time, within the ``by`` keys,
    as column ``out`` (-1: none)."""
    launched = iv.loc[iv["launch_start"] >= 0]
    right = launched[by + ["launch_start", "_row"]].rename(
        columns={"launch_start": on, "_row": out}
    )
    right = right.sort_values(on, kind="stable")
    left = edges.sort_values(on, kind="stable")
    m = pd.merge_asof(left, right, on=on, by=by, direction=direction, allow_exact_matches=False)
    m[out] = m[out].fillna(-1).astype(np.int64)
    return m


def _join_producer(edges: pd.DataFrame, iv: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Last interval (by launch start) launched strictly before ``record_start``."""
    return _join_launch(edges, iv, by, on="record_start", out="producer", direction="backward")


def _join_consumer(edges: pd.DataFrame, iv: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """First interval (by launch start) launched strictly after ``wait_start``."""
    return _join_launch(edges, iv, by, on="wait_start", out="consumer", direction="forward")


def _last_record_on_thread(e: pd.DataFrame, calls: pd.DataFrame) -> pd.Series:
    """Start of the last record call on the wait call's thread at or before it (Int64)."""
    rec = calls.loc[calls["api"].isin(RECORD_CALLS), ["rank", "tid", "start"]]
    rec = rec.assign(wait_start=rec["start"]).rename(columns={"start": "_rec"})
    rec = rec.sort_values("wait_start", kind="stable").astype({"_rec": "Int64"})
    q = e[["rank", "wait_tid", "wait_start"]].rename(columns={"wait_tid": "tid"})
    q = q.assign(_i=np.arange(len(q))).sort_values("wait_start", kind="stable")
    m = pd.merge_asof(q, rec, on="wait_start", by=["rank", "tid"], direction="backward")
    out = pd.Series(pd.array([pd.NA] * len(e), dtype="Int64"))
    out.iloc[m["_i"].to_numpy()] = m["_rec"].to_numpy()
    return out


def _edges_from_sync(sync: pd.DataFrame, calls: pd.DataFrame, iv: pd.DataFrame) -> pd.DataFrame:
    stream = np.where(sync["stream"] >= 0, sync["stream"], sync["tid"])
    device = np.where(sync["device"] >= 0, sync["device"], sync["pid"])
    e = pd.DataFrame(
        {
            "rank": sync["rank"].to_numpy(np.int64),
            "device": device.astype(np.int64),
            "stream": stream.astype(np.int64),
            "wait_on_stream": sync["wait_on_stream"].to_numpy(np.int64),
            "wait_corr": sync["correlation"].to_numpy(np.int64),
            "record_corr": sync["wait_on_corr"].to_numpy(np.int64),
            "sync_ts": sync["ts"].to_numpy(np.int64),
        }
    )
    e = e.loc[e["wait_on_stream"] != e["stream"]]
    rec = calls.loc[calls["api"].isin(RECORD_CALLS) & (calls["correlation"] >= 0)]
    rec = rec[["rank", "correlation", "start"]].drop_duplicates(["rank", "correlation"])
    rec = rec.astype({"start": "Int64"})  # nullable: no float64 for absolute ns
    e = e.merge(
        rec.rename(columns={"correlation": "record_corr", "start": "record_start"}),
        on=["rank", "record_corr"],
        how="left",
    )
    wt = calls.loc[calls["api"].isin(WAIT_CALLS) & (calls["correlation"] >= 0)]
    wt = wt[["rank", "correlation", "start", "tid"]].drop_duplicates(["rank", "correlation"])
    wt = wt.astype({"start": "Int64", "tid": "Int64"})
    e = e.merge(
        wt.rename(columns={"correlation": "wait_corr", "start": "wait_start", "tid": "wait_tid"}),
        on=["rank", "wait_corr"],
        how="left",
    )
    e["wait_start"] = e["wait_start"].fillna(e["sync_ts"]).astype(np.int64)
    e["wait_tid"] = e["wait_tid"].fillna(-1).astype(np.int64)
    # Events without the record's correlation (CUPTI 13 writes -1 there and in
    # wait_on_stream): the record is the last record call on the wait call's thread
    e["inferred"] = e["record_start"].isna() & (e["wait_tid"] >= 0)
    if e["inferred"].any():
        e.loc[e["inferred"], "record_start"] = _last_record_on_thread(
            e.loc[e["inferred"]], calls
        ).to_numpy()
    # producer: on stream A when the event names it, else the last interval launched
    # from the waiting thread before the record (its stream is then A)
    has_rec = e["record_start"].notna()
    known_a = has_rec & (e["wait_on_stream"] >= 0)
    by_thread = has_rec & (e["wait_on_stream"] < 0) & (e["wait_tid"] >= 0)
    parts = [e.loc[~(known_a | by_thread)].assign(producer=-1, record_start=-1)]
    if known_a.any():
        p = _join_producer(
            e.loc[known_a]
            .astype({"record_start": np.int64})
            .rename(columns={"stream": "_b", "wait_on_stream": "stream"}),
            iv,
            ["rank", "device", "stream"],
        ).rename(columns={"stream": "wait_on_stream", "_b": "stream"})
        parts.append(p)
    if by_thread.any():
        lt = iv.assign(tid=iv["launch_tid"].astype(np.int64))
        q = e.loc[by_thread].astype({"record_start": np.int64})
        q = q.rename(columns={"wait_tid": "tid"})
        p = _join_producer(q, lt, ["rank", "tid"]).rename(columns={"tid": "wait_tid"})
        found = p["producer"] >= 0
        pi = p["producer"].to_numpy(np.int64)
        p["wait_on_stream"] = np.where(
            found, iv["stream"].to_numpy(np.int64)[np.where(found, pi, 0)], -1
        )
        same = found & (p["wait_on_stream"] == p["stream"]).to_numpy()
        parts.append(p.loc[~same])  # recorded on the waiting stream itself: no switch
    parts = [x for x in parts if len(x)]
    if not parts:  # e.g. every wait was on an event recorded on the waiting stream
        return _empty_edges()
    e = pd.concat(parts, ignore_index=True)
    e["record_start"] = e["record_start"].astype(np.int64)
    e = _join_consumer(e, iv, ["rank", "device", "stream"])
    return e


def _edges_from_calls(calls: pd.DataFrame, iv: pd.DataFrame) -> pd.DataFrame:
    waits = calls.loc[calls["api"].isin(WAIT_CALLS), ["rank", "tid", "start"]]
    waits = waits.rename(columns={"start": "wait_start"}).sort_values("wait_start")
    rec = calls.loc[calls["api"].isin(RECORD_CALLS), ["rank", "tid", "start"]]
    rec = rec.assign(wait_start=rec["start"]).rename(columns={"start": "record_start"})
    rec = rec.sort_values("wait_start", kind="stable").astype({"record_start": "Int64"})
    e = pd.merge_asof(waits, rec, on="wait_start", by=["rank", "tid"], direction="backward")
    e = e.loc[e["record_start"].notna()].astype({"record_start": np.int64})
    lt = iv.assign(tid=iv["launch_tid"].astype(np.int64))
    e = _join_producer(e, lt, ["rank", "tid"])
    e = _join_consumer(e, lt, ["rank", "tid"])
    ok = (e["producer"] >= 0) & (e["consumer"] >= 0)
    e = e.loc[ok].copy()
    prod = iv.iloc[e["producer"].to_numpy()]
    cons = iv.iloc[e["consumer"].to_numpy()]
    e["device"] = cons["device"].to_numpy(np.int64)
    e["stream"] = cons["stream"].to_numpy(np.int64)
    e["wait_on_stream"] = prod["stream"].to_numpy(np.int64)
    cross = (e["stream"] != e["wait_on_stream"]) | (
        e["device"] != prod["device"].to_numpy(np.int64)
    )
    return e.loc[cross]


def _empty_edges() -> pd.DataFrame:
    text = ("op", "producer_op", "consumer_name")
    cols = {
        c: pd.Series(
            dtype=object
            if c in text
            else bool
            if c in ("binding", "inferred", "unresolved")
            else np.int64
        )
        for c in EDGE_COLUMNS
    }
    return pd.DataFrame(cols)


def switch_edges(
    events: pd.DataFrame, intervals: pd.DataFrame, *, calls: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, str]:
    """Cross-stream dependency edges with producer/consumer and ``switch_gap_ns``.

    Returns (edges, source) where source is "cuda_sync", "runtime_calls" (fallback) or
    "none". Edge columns: :data:`EDGE_COLUMNS`; ``producer``/``consumer`` are -1 when
    not found, and then ``switch_gap_ns`` is -1 (undefined, excluded from statistics).
    """
    calls = runtime_calls(events) if calls is None else calls
    iv = _interval_table(intervals)
    sync = events.loc[(events["cat"] == "cuda_sync") & (events["name"] == "Stream Wait Event")]
    if len(sync):
        e, source = _edges_from_sync(sync, calls, iv), "cuda_sync"
    elif calls["api"].isin(WAIT_CALLS).any():
        e, source = _edges_from_calls(calls, iv), "runtime_calls"
    else:
        return _empty_edges(), "none"
    e = e.reset_index(drop=True)
    if e.empty:
        return _empty_edges(), source
    if "inferred" not in e:
        e["inferred"] = source == "runtime_calls"
    pi = e["producer"].to_numpy(np.int64)
    ci = e["consumer"].to_numpy(np.int64)
    has_p, has_c = pi >= 0, ci >= 0
    end = iv["end"].to_numpy(np.int64)
    start = iv["start"].to_numpy(np.int64)
    prev_end = iv["prev_end"].to_numpy(np.int64)
    e["producer_end"] = np.where(has_p, end[np.where(has_p, pi, 0)], -1)
    e["consumer_start"] = np.where(has_c, start[np.where(has_c, ci, 0)], -1)
    e["prev_end"] = np.where(has_c, prev_end[np.where(has_c, ci, 0)], -1)
    ok = has_p & has_c
    # an inferred producer that ended after the consumer started cannot be what the
    # consumer waited for: the guess is provably wrong, the edge is unresolved
    cstart, pend = e["consumer_start"].to_numpy(), e["producer_end"].to_numpy()
    e["unresolved"] = ok & e["inferred"].to_numpy(bool) & (cstart < pend)
    ok = ok & ~e["unresolved"].to_numpy()
    ready = np.maximum(e["producer_end"].to_numpy(), e["prev_end"].to_numpy())
    e["gap_raw_ns"] = np.where(ok, e["consumer_start"].to_numpy() - ready, -1)
    # one consumer waited on several events: its idle counts once, on the binding edge
    # (the producer that ended last; ties -> the first edge)
    okd = e.loc[ok].sort_values(
        ["consumer", "producer_end"], ascending=[True, False], kind="stable"
    )
    binding = okd.index[~okd["consumer"].duplicated()]
    e["binding"] = False
    e.loc[binding, "binding"] = True
    e["switch_gap_ns"] = np.where(ok, 0, -1).astype(np.int64)
    e.loc[binding, "switch_gap_ns"] = np.clip(e.loc[binding, "gap_raw_ns"], 0, None)
    e["switch_gap_ns"] = e["switch_gap_ns"].astype(np.int64)
    # iteration = the step holding the consumer's launch (the wait call if no consumer)
    iters = iv["iteration"].to_numpy(np.int64)
    ops = iv["op"].astype(str).to_numpy()
    names = iv["name"].astype(str).to_numpy()
    e["iteration"] = np.where(has_c, iters[np.where(has_c, ci, 0)], -1)
    e["op"] = np.where(has_c, ops[np.where(has_c, ci, 0)], "(none)")
    e["consumer_name"] = np.where(has_c, names[np.where(has_c, ci, 0)], "")
    e["producer_op"] = np.where(has_p, ops[np.where(has_p, pi, 0)], "(none)")
    return e[list(EDGE_COLUMNS)], source


# --- summary -------------------------------------------------------------------------
_MATCHED_COLUMNS = ("rank", "device", "wait_on_stream", "stream", "iteration", "op",
                    "switch_gap_ns")  # fmt: skip


@dataclass
class SwitchPart:
    """One rank's stream-switch figures: what :func:`combine_switches` needs from it.
    ``matched``: its edges with a ``switch_gap`` (percentiles span every rank);
    ``calls``: record/wait call time per (rank, iteration); ``blocking``: its blocking
    sync calls (rank, iteration, api, op, dur)."""

    source: str  # of this rank alone: "cuda_sync" | "runtime_calls" | "none"
    counts: dict[str, int]
    matched: pd.DataFrame
    calls: pd.DataFrame
    blocking: pd.DataFrame


_EDGE_COUNTS = ("n_edges", "n_inferred", "n_unresolved", "n_unmatched", "n_negative")
_CALL_COUNTS = ("switch_cpu_ns", "n_switch_calls", "cpu_steps_ns")


def switch_part(
    events: pd.DataFrame, intervals: pd.DataFrame, *, ctx: Context | None = None
) -> SwitchPart:
    """The stream-switch figures of one rank's events and intervals."""
    ctx = context(events) if ctx is None else ctx
    calls = ctx.calls
    edges, source = switch_edges(events, intervals, calls=calls)
    n_inferred = int(edges["inferred"].sum()) if source == "cuda_sync" else 0
    # iteration of edges without a consumer: the step holding the wait call
    no_it = edges["iteration"].to_numpy(np.int64) < 0 if len(edges) else np.zeros(0, bool)
    if no_it.any():
        it = ctx.iteration_at(
            edges.loc[no_it, "rank"].to_numpy(np.int64),
            edges.loc[no_it, "wait_start"].to_numpy(np.int64),
        )
        edges.loc[no_it, "iteration"] = it
    matched = edges.loc[edges["switch_gap_ns"] >= 0] if len(edges) else edges
    n_unresolved = int(edges["unresolved"].sum()) if len(edges) else 0
    n_negative = (
        int(((matched["gap_raw_ns"] < 0) & matched["binding"]).sum()) if len(matched) else 0
    )
    # host-side costs: event record/wait calls, and blocking syncs (flagged separately)
    sw_calls = calls.loc[calls["api"].isin(RECORD_CALLS + WAIT_CALLS)].copy()
    sw_calls["iteration"] = ctx.iteration_at(
        sw_calls["rank"].to_numpy(), sw_calls["start"].to_numpy()
    )
    blk = calls.loc[calls["api"].isin(BLOCKING_CALLS)].copy()
    blk["iteration"] = ctx.iteration_at(blk["rank"].to_numpy(), blk["start"].to_numpy())
    blk["op"] = ctx.op_at(
        blk["rank"].to_numpy(), blk["pid"].to_numpy(), blk["tid"].to_numpy(),
        blk["start"].to_numpy(),
    )  # fmt: skip
    keys = ["rank", "iteration"]
    cpu = sw_calls.groupby(keys).agg(switch_cpu_ns=("dur", "sum"), n_switch_calls=("dur", "size"))
    counts = {
        "n_edges": len(edges),
        "n_inferred": n_inferred,
        "n_unresolved": n_unresolved,
        "n_unmatched": int(len(edges) - len(matched)) - n_unresolved,
        "n_negative": n_negative,
        "switch_cpu_ns": int(sw_calls["dur"].sum()),
        "n_switch_calls": len(sw_calls),
        "cpu_steps_ns": int(sw_calls.loc[sw_calls["iteration"] >= 0, "dur"].sum()),
    }
    return SwitchPart(
        source=source,
        counts=counts,
        matched=matched[list(_MATCHED_COLUMNS)].reset_index(drop=True),
        calls=cpu.reset_index(),
        blocking=blk[["rank", "iteration", "api", "op", "dur"]].reset_index(drop=True),
    )


def _rows(frames: list[pd.DataFrame]) -> pd.DataFrame:
    full = [f for f in frames if len(f)]
    if not full:
        return frames[0]
    return full[0] if len(full) == 1 else pd.concat(full, ignore_index=True)


def combine_switches(
    parts: list[SwitchPart], *, walls: pd.DataFrame, switch_gap_share: float, top_n: int
) -> tuple[StreamSwitches, list[Note]]:
    """The "stream_switches" section of every rank, and notes on what is missing.

    The edges' source is the trace's: ``cuda_sync`` when any rank has Stream Wait Events
    (then a rank without them has no edges), else the runtime-call fallback, else none."""
    notes: list[str] = []
    local = {p.source for p in parts}
    source = next((s for s in ("cuda_sync", "runtime_calls") if s in local), "none")
    with_edges = [p for p in parts if p.source == source]
    ec = {k: sum(p.counts[k] for p in with_edges) for k in _EDGE_COUNTS}
    cc = {k: sum(p.counts[k] for p in parts) for k in _CALL_COUNTS}
    if source == "runtime_calls":
        notes.append(
            "stream switches: the trace has no cuda_sync 'Stream Wait Event' events; fell "
            "back to cudaStreamWaitEvent runtime calls (streams inferred from the launches "
            "around each call on the calling thread). Enable CUDA sync events in the "
            "profiler for exact edges."
        )
    elif source == "none":
        notes.append(
            "stream switches: not computed: the trace has neither cuda_sync 'Stream Wait "
            "Event' events nor cudaStreamWaitEvent runtime calls."
        )
    n_inferred = ec["n_inferred"]
    if n_inferred:
        notes.append(
            f"stream switches: {n_inferred} of {ec['n_edges']} 'Stream Wait Event' events "
            "do not say which event they wait for (the profiler left that field at -1, as "
            "CUDA 13's does); each was matched to the last cudaEventRecord on the waiting "
            "thread, and its producer to the last work launched from there before it."
        )
    empty = pd.DataFrame({c: pd.Series(dtype=object if c == "op" else np.int64)
                          for c in _MATCHED_COLUMNS})  # fmt: skip
    matched = _rows([empty] + [p.matched for p in with_edges])
    n_unresolved = ec["n_unresolved"]
    n_unmatched = ec["n_unmatched"]
    if n_unresolved:
        notes.append(
            f"stream switches: {n_unresolved} inferred edge(s) are unresolved: the guessed "
            "producer ended after the consumer started, so the wait was on an earlier "
            "record (typical of work.wait() on an older async collective); they have no "
            "switch_gap. The remaining inferred gaps can understate the idle (when the "
            "guessed record is a later one on the producer's stream)."
        )
    if n_unmatched:
        notes.append(
            f"stream switches: {n_unmatched} wait edge(s) had no producer or no consumer "
            "device interval with a launch call (record call missing, or nothing launched "
            "after the wait); they are counted but have no switch_gap."
        )
    blk = _rows([p.blocking for p in parts])
    cpu = _rows([p.calls for p in parts])

    # per (rank, iteration)
    keys = ["rank", "iteration"]
    per_it = walls.copy()
    if len(matched):
        m = matched.astype({"rank": np.int64, "iteration": np.int64})
        g = grouped_stats(m, keys, "switch_gap_ns", "switch_gap")
        per_it = per_it.merge(g, on=keys, how="outer")
    for col in ("n_switch_gap", "switch_gap_total_ns"):
        if col not in per_it:
            per_it[col] = 0
    for col in ("switch_gap_p50_ns", "switch_gap_p95_ns"):
        if col not in per_it:
            per_it[col] = np.nan
    bk = blk.groupby(keys).agg(blocking_sync_ns=("dur", "sum"), n_blocking_sync=("dur", "size"))
    per_it = per_it.merge(cpu, on=keys, how="outer")
    per_it = per_it.merge(bk.reset_index(), on=keys, how="outer")
    per_it = per_it.loc[per_it["iteration"] >= 0].sort_values(keys).reset_index(drop=True)
    for col in (
        "n_switch_gap",
        "switch_gap_total_ns",
        "switch_cpu_ns",
        "n_switch_calls",
        "blocking_sync_ns",
        "n_blocking_sync",
    ):
        per_it[col] = per_it[col].fillna(0).astype(np.int64)
    per_it = per_it.rename(columns={"n_switch_gap": "n_switches"})
    share = per_it["switch_gap_total_ns"] / per_it["wall_ns"].where(per_it["wall_ns"] > 0)
    per_it["switch_gap_share"] = share
    per_it["flagged"] = (share > switch_gap_share).fillna(False).astype(bool)

    # per consumer op
    if len(matched):
        by_op = grouped_stats(
            matched.assign(op=matched["op"].astype(str)), ["op"], "switch_gap_ns", "switch_gap"
        )
        by_op = by_op.rename(columns={"n_switch_gap": "n_switches"})
        by_op = by_op.sort_values(["switch_gap_total_ns", "op"], ascending=[False, True])
        pair_keys = ["rank", "device", "wait_on_stream", "stream"]
        by_pair = (
            matched.groupby(pair_keys)["switch_gap_ns"]
            .agg(n_switches="size", switch_gap_total_ns="sum")
            .reset_index()
            .rename(columns={"wait_on_stream": "from_stream", "stream": "to_stream"})
            .sort_values("switch_gap_total_ns", ascending=False, kind="stable")
        )
    else:
        by_op = pd.DataFrame(columns=["op", "n_switches", "switch_gap_total_ns"])
        by_pair = pd.DataFrame(columns=["rank", "device", "from_stream", "to_stream"])
    blocking = (
        blk.assign(in_step=blk["iteration"] >= 0)
        .groupby(["api", "op"])
        .agg(count=("dur", "size"), total_ns=("dur", "sum"), in_steps=("in_step", "sum"))
        .reset_index()
        .sort_values(["total_ns", "api", "op"], ascending=[False, True, True], kind="stable")
    )
    in_steps = matched.loc[matched["iteration"] >= 0] if len(matched) else matched
    n_rank_steps = len(walls)
    gap_steps = int(in_steps["switch_gap_ns"].sum()) if len(in_steps) else 0
    blk_steps = int(blk.loc[blk["iteration"] >= 0, "dur"].sum())
    cpu_steps = cc["cpu_steps_ns"]
    worst = by_pair.head(1).to_dict("records")
    section = {
        "source": source,
        "n_edges": ec["n_edges"],
        "n_inferred": n_inferred,
        "n_unresolved": n_unresolved,
        "n_unmatched": n_unmatched,
        "n_negative": ec["n_negative"],
        "switch_gap": stats_ns(matched["switch_gap_ns"] if len(matched) else []),
        "switch_cpu_ns": cc["switch_cpu_ns"],
        "n_switch_calls": cc["n_switch_calls"],
        "blocking_sync_ns": int(blk["dur"].sum()),
        "n_blocking_sync": len(blk),
        "n_rank_steps": n_rank_steps,
        "switch_gap_ms_per_step": gap_steps / n_rank_steps / 1e6 if n_rank_steps else None,
        "switch_cpu_ms_per_step": cpu_steps / n_rank_steps / 1e6 if n_rank_steps else None,
        "blocking_sync_ms_per_step": blk_steps / n_rank_steps / 1e6 if n_rank_steps else None,
        "n_flagged_iterations": int(per_it["flagged"].sum()),
        "per_iteration": per_it.to_dict("records"),
        "by_op": by_op.head(top_n).to_dict("records"),
        "by_stream_pair": by_pair.head(top_n).to_dict("records"),
        "worst_stream_pair": worst[0] if worst else None,
        "blocking_syncs": blocking.head(top_n).to_dict("records"),
    }
    return StreamSwitches.of(section), tagged(notes, "stream_switches")
