"""Across ranks: matched collective instances, clock alignment, arrival skew, stragglers.

Definitions: ``docs/METRICS.md`` "Across ranks" (and its "Extension:" notes).

- A collective instance is one comm interval per rank, keyed by (process group,
  ``Seq``) when every comm interval carries a sequence number, else by (process group,
  collective name — the kernel name when the trace has none —, iteration, order of
  occurrence on the rank within that iteration). Several intervals of one rank under one key are one arrival (first start,
  last end). Only instances seen on two or more ranks are used.
- Ranks on one host share a clock. Each other host gets one offset: the median, over
  the instances it shares with the reference host (the host of the lowest rank), of
  (median kernel end on the reference host - median kernel end on that host). The
  offset is added to that host's times and reported.
- arrival skew = latest start - earliest start (aligned). The late rank is the one
  with the latest start (lowest rank on a tie; none when skew is 0). ``transfer`` =
  the late rank's kernel duration (it did not wait for a peer); ``wait_share`` =
  skew / (skew + transfer). A rank's ``wait`` = latest start - its own start, summed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from domino_prof.analysis.switches import stats_ns
from domino_prof.trace.schema import Trace


def _comm_with_group(trace: Trace, intervals: pd.DataFrame) -> pd.DataFrame:
    comm = intervals.loc[intervals["kind"].astype(str) == "comm"]
    c = pd.DataFrame(
        {
            "rank": comm["rank"].to_numpy(np.int64),
            "start": comm["start"].to_numpy(np.int64),
            "end": comm["end"].to_numpy(np.int64),
            "name": comm["name"].astype(str).to_numpy(),
            "coll_name": comm["coll_name"].astype(str).to_numpy() if "coll_name" in comm else "",
            "iteration": comm["iteration"].to_numpy(np.int64),
        }
    )
    if "pg_name" in comm and "seq" in comm:
        c["pg_name"] = comm["pg_name"].astype(str).to_numpy()
        c["seq"] = comm["seq"].to_numpy(np.int64)
        return c
    ev = trace.events
    m = (ev["seq"] >= 0) | (ev["pg_name"] != "")
    tags = pd.DataFrame(
        {
            "rank": ev.loc[m, "rank"].to_numpy(np.int64),
            "start": ev.loc[m, "ts"].to_numpy(np.int64),
            "name": ev.loc[m, "name"].astype(str).to_numpy(),
            "pg_name": ev.loc[m, "pg_name"].astype(str).to_numpy(),
            "seq": ev.loc[m, "seq"].to_numpy(np.int64),
        }
    ).drop_duplicates(["rank", "start", "name"])
    c = c.merge(tags, on=["rank", "start", "name"], how="left")
    c["pg_name"] = c["pg_name"].fillna("")
    c["seq"] = c["seq"].fillna(-1).astype(np.int64)
    return c


def collective_instances(trace: Trace, intervals: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """One row per (instance, rank): iid, rank, start, end, iteration, pg_name, key, coll.

    Returns (frame, matching) with matching "process_group+seq" or "order_within_group".
    """
    c = _comm_with_group(trace, intervals)
    c["coll"] = np.where(c["coll_name"] != "", c["coll_name"], c["name"])
    if len(c) and (c["seq"] >= 0).all():
        matching = "process_group+seq"
        c["key"] = c["seq"]
        keys = ["pg_name", "key"]
    else:
        matching = "order_within_group"
        c = c.sort_values(["rank", "start"], kind="stable")
        # order within the iteration: robust to ranks whose profiles start at
        # different collectives (steps are numbered alike on every rank)
        c["key"] = c.groupby(["rank", "pg_name", "coll", "iteration"], sort=False).cumcount()
        keys = ["pg_name", "coll", "iteration", "key"]
    aggs = {"start": ("start", "min"), "end": ("end", "max")}
    for col in ("iteration", "coll"):
        if col not in keys:
            aggs[col] = (col, "first")
    per = c.groupby(keys + ["rank"], sort=True).agg(**aggs).reset_index()
    per["iid"] = per.groupby(keys, sort=True).ngroup()
    n = per.groupby("iid")["rank"].transform("size")
    per = per.loc[n >= 2].reset_index(drop=True)
    return per, matching


def align_hosts(
    inst: pd.DataFrame, host_of: dict[int, str]
) -> tuple[pd.DataFrame, list[dict], list[str]]:
    """Add ``host``, ``a_start``, ``a_end`` (aligned ns); per-host offsets; notes."""
    notes: list[str] = []
    inst = inst.assign(host=inst["rank"].map(host_of))
    ranks = sorted(host_of)
    ref = host_of[ranks[0]]
    hosts_tbl = []
    offsets = {ref: 0}
    # medians in float64 only on times relative to the earliest end (absolute ns ~1e18
    # exceed float64's 53-bit mantissa)
    t0 = int(inst["end"].min()) if len(inst) else 0
    inst = inst.assign(_rel_end=inst["end"] - t0)
    ends_ref = inst.loc[inst["host"] == ref].groupby("iid")["_rel_end"].median()
    for h in sorted(set(host_of.values()) - {ref}):  # one pass per host (few)
        ends_h = inst.loc[inst["host"] == h].groupby("iid")["_rel_end"].median()
        d = (ends_ref - ends_h).dropna()
        if d.empty:
            notes.append(
                f"across ranks: host {h!r} shares no collective with host {ref!r}; its "
                "ranks were not aligned and are left out of the skew figures."
            )
            continue
        off = int(np.round(np.median(d.to_numpy(np.float64))))
        offsets[h] = off
        res = np.abs(d.to_numpy(np.float64) - off)
        hosts_tbl.append(
            {"host": h, "offset_ns": off, "n_instances": len(d),
             "residual_p95_ns": float(np.percentile(res, 95))}
        )  # fmt: skip
    hosts_tbl.insert(
        0, {"host": ref, "offset_ns": 0, "n_instances": int(ends_ref.size),
            "residual_p95_ns": 0.0}
    )  # fmt: skip
    for row in hosts_tbl:
        row["ranks"] = [r for r in ranks if host_of[r] == row["host"]]
        row["reference"] = row["host"] == ref
    inst = inst.loc[inst["host"].isin(list(offsets))]
    off = inst["host"].map(offsets).astype(np.int64)
    inst = inst.assign(a_start=inst["start"] + off, a_end=inst["end"] + off)
    inst = inst.drop(columns="_rel_end")
    # an instance may have lost ranks to unaligned hosts
    n = inst.groupby("iid")["rank"].transform("size")
    return inst.loc[n >= 2].reset_index(drop=True), hosts_tbl, notes


def instance_skew(inst: pd.DataFrame) -> pd.DataFrame:
    """Per instance: n_ranks, skew_ns, late_rank (-1 if skew 0), transfer_ns, wait_share,
    iteration (the lowest rank's), pg_name, key, coll."""
    s = inst.sort_values(["iid", "a_start", "rank"], ascending=[True, False, True],
                         kind="stable")  # fmt: skip
    late = s.drop_duplicates("iid").set_index("iid")
    g = inst.groupby("iid")
    out = pd.DataFrame(
        {
            "n_ranks": g["rank"].size(),
            "earliest": g["a_start"].min(),
            "latest": g["a_start"].max(),
        }
    )
    out["skew_ns"] = (out["latest"] - out["earliest"]).astype(np.int64)
    out["late_rank"] = np.where(out["skew_ns"] > 0, late["rank"].reindex(out.index), -1)
    out["transfer_ns"] = (late["a_end"] - late["a_start"]).reindex(out.index).astype(np.int64)
    tot = (out["skew_ns"] + out["transfer_ns"]).astype(np.float64)
    out["wait_share"] = out["skew_ns"] / tot.where(tot > 0)
    low = inst.sort_values(["iid", "rank"], kind="stable").drop_duplicates("iid").set_index("iid")
    out["iteration"] = low["iteration"].reindex(out.index).astype(np.int64)
    out["pg_name"] = low["pg_name"].reindex(out.index)
    out["key"] = low["key"].reindex(out.index).astype(np.int64)
    out["coll"] = low["coll"].reindex(out.index) if "coll" in low else ""
    return out.reset_index()


def summarize_ranks(trace: Trace, intervals: pd.DataFrame, *, top_n: int) -> tuple[dict, list[str]]:
    """The "across_ranks" section (plain Python values) and notes on what is missing."""
    notes: list[str] = []
    rank_ids = sorted(trace.ranks) if trace.ranks else sorted(set(intervals["rank"].tolist()))
    if len(rank_ids) < 2:
        notes.append("across ranks: not computed: the trace has one rank; load all ranks' "
                     "files (a directory) to match collectives across ranks.")  # fmt: skip
        return {"computed": False}, notes
    inst, matching = collective_instances(trace, intervals)
    if inst.empty:
        notes.append("across ranks: not computed: no comm interval was found on two or "
                     "more ranks under one collective key.")  # fmt: skip
        return {"computed": False, "matching": matching}, notes
    metas = trace.ranks
    hosts_given = {r: metas[r].host for r in rank_ids if r in metas and metas[r].host}
    if not hosts_given:
        notes.append("across ranks: the traces name no host; all ranks are taken to share "
                     "one clock (no alignment applied).")  # fmt: skip
    host_of = {r: hosts_given.get(r, "(unknown host)") for r in rank_ids}
    inst, hosts_tbl, anotes = align_hosts(inst, host_of)
    notes += anotes
    per = instance_skew(inst)
    # each rank's wait: latest arrival - own arrival, per instance
    latest = inst["iid"].map(per.set_index("iid")["latest"])
    inst = inst.assign(wait_ns=(latest - inst["a_start"]).astype(np.int64))
    steps = inst.loc[inst["iteration"] >= 0]
    n_steps = steps.groupby("rank")["iteration"].nunique()
    strag = inst.groupby("rank").agg(n_instances=("iid", "size"), wait_ns=("wait_ns", "sum"))
    strag["wait_ms_per_step"] = (steps.groupby("rank")["wait_ns"].sum() / n_steps / 1e6).reindex(
        strag.index
    )
    late = (
        per.loc[per["late_rank"] >= 0]
        .groupby("late_rank")
        .agg(n_late=("iid", "size"), skew_caused_ns=("skew_ns", "sum"))
    )
    strag = strag.join(late.rename_axis("rank")).reset_index()
    strag["n_late"] = strag["n_late"].fillna(0).astype(np.int64)
    strag["skew_caused_ns"] = strag["skew_caused_ns"].fillna(0).astype(np.int64)
    strag = strag.sort_values(["skew_caused_ns", "rank"], ascending=[False, True],
                              kind="stable")  # fmt: skip
    top = strag.iloc[0]
    late_rank = int(top["rank"]) if top["skew_caused_ns"] > 0 else None
    pi = per.loc[per["iteration"] >= 0]
    per_it = pi.groupby("iteration").agg(
        n_instances=("iid", "size"), skew_total_ns=("skew_ns", "sum"),
        max_skew_ns=("skew_ns", "max"),
    ).reset_index()  # fmt: skip
    wait_total = int(per["skew_ns"].sum())
    transfer_total = int(per["transfer_ns"].sum())
    denom = wait_total + transfer_total
    worst = per.sort_values(["skew_ns", "iid"], ascending=[False, True], kind="stable")
    worst = worst.head(top_n)[
        ["pg_name", "coll", "key", "iteration", "n_ranks", "late_rank", "skew_ns",
         "transfer_ns", "wait_share"]
    ]  # fmt: skip
    max_wait = strag["wait_ms_per_step"].max()
    section = {
        "computed": True,
        "matching": matching,
        "n_ranks": len(rank_ids),
        "n_instances": len(per),
        "hosts": hosts_tbl,
        "skew": stats_ns(per["skew_ns"]),
        "wait_ns": wait_total,
        "transfer_ns": transfer_total,
        "wait_share": wait_total / denom if denom > 0 else None,
        "late_rank": late_rank,
        "skew_ms_per_step": float(pi["skew_ns"].sum()) / len(per_it) / 1e6 if len(per_it) else None,
        "max_wait_ms_per_step": float(max_wait) if pd.notna(max_wait) else None,
        "stragglers": strag.to_dict("records"),
        "per_iteration": per_it.to_dict("records"),
        "worst_instances": worst.to_dict("records"),
    }
    return section, notes
