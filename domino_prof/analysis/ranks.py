"""Across ranks: matched collective instances, clock alignment, arrival skew, stragglers.

Definitions: ``docs/METRICS.md`` "Across ranks" (and its "Extension:" notes).

- A collective instance is one comm interval per rank, keyed by (process group,
  ``Seq``) when every comm interval carries a sequence number, else by (process group,
  collective name — the kernel name when the trace has none —, iteration, order of
  occurrence on the rank within that iteration). Several intervals of one rank under one key are one arrival (first start,
  last end). Only instances seen on two or more ranks are used.
- Ranks on one host share a clock. Each other host gets one offset: the median, over
  the instances it shares with the reference host (the host of the lowest rank), of
  (earliest kernel end on the reference host - earliest kernel end on that host); see
  :func:`align_hosts` for why the earliest end, and the median, survive jitter and a
  late rank. The offset is added to that host's times and reported. Hosts come from
  the traces' ``hostName``; with none, every rank is on one host (a note, topic
  ``clock_alignment``). ``align=False`` (``--no-align-clocks``) applies no offset.
- Confidence (docs/METRICS.md "Extension: matching with confidence"): copies and
  point-to-point kernels are not collectives and are left out; in order matching a
  (group, collective, iteration) whose ranks have different counts, and any group
  where one instance's kernel names or sizes disagree across ranks, is dropped
  (noted); if a matched instance does not overlap in time across ranks on the common
  clock (the latest start after some rank's kernel had already ended), the ranks
  profiled different steps or their clocks disagree: nothing is reported.
- arrival skew = latest start - earliest start (aligned). The late rank is the one
  with the latest start (lowest rank on a tie; none when skew is 0). ``transfer`` =
  the late rank's kernel duration (it did not wait for a peer); ``wait_share`` =
  skew / (skew + transfer). A rank's ``wait`` = latest start - its own start; per
  step, the union of its wait intervals ``[own start, latest start)``.
- Invariant: no per-step figure exceeds its step (a rank's wait per iteration <= its
  wall; an iteration's skew union <= the iteration's extent over ranks). A violation
  means the matching is wrong: nothing is reported (noted).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from domino_prof.analysis import intervals as iv
from domino_prof.analysis.attribution import match_names
from domino_prof.analysis.results import AcrossRanks, Note, tagged
from domino_prof.analysis.tables import stats_ns
from domino_prof.trace.schema import Trace

# comm that is not a collective with arrivals on every rank: copies (one-sided) and
# point-to-point send/recv kernels are not matched across ranks
_NOT_COLLECTIVE = re.compile(
    r"^Memcpy|SendRecv|(?:^|[:_\s])(?:send|recv)(?:$|[_\s(])", re.IGNORECASE
)
_NONEMPTY = re.compile(r".", re.DOTALL)
_MEMCPY = re.compile(r"^Memcpy")
# sizes legitimately differ across ranks for these (uneven splits)
_UNEVEN_SIZES = re.compile(r"all_?to_?all|alltoallv?|all_to_allv", re.IGNORECASE)
# slack for "overlaps in time" on a common clock (GPU->host timestamp conversion)
OVERLAP_SLACK_NS = 1_000


def _matches(values, pattern: re.Pattern[str]) -> np.ndarray:
    """``pattern.search`` over a column of strings, evaluated once per distinct value."""
    codes, uniq = pd.factorize(np.asarray(values, dtype=object))
    hit = np.fromiter((bool(pattern.search(str(u))) for u in uniq), bool, len(uniq))
    return hit[codes] if len(uniq) else np.zeros(len(codes), dtype=bool)


COMM_COLUMNS = ("rank", "start", "end", "name", "coll_name", "iteration", "stream", "nelems",
                "pg_name", "seq")  # fmt: skip


def rank_comm(trace: Trace, intervals: pd.DataFrame) -> pd.DataFrame:
    """The compact table of one trace's (or one rank's) collectives that the cross-rank
    analysis needs: one row per comm interval that is a collective (not a copy, not
    point-to-point), :data:`COMM_COLUMNS`, with its process group and ``Seq`` from the
    interval's own event. Names stay categorical (rows of many ranks are concatenated)."""
    comm = intervals.loc[intervals["kind"].to_numpy() == "comm"]
    if len(comm) == 0:
        comm = comm.assign(name=pd.Categorical([]), coll_name=pd.Categorical([]))
    name = comm["name"]
    coll_name = comm["coll_name"] if "coll_name" in comm else pd.Series([""] * len(comm))
    has_coll = match_names(coll_name, _NONEMPTY)
    p2p = np.where(has_coll, match_names(coll_name, _NOT_COLLECTIVE),
                   match_names(name, _NOT_COLLECTIVE)) | match_names(name, _MEMCPY)  # fmt: skip
    keep = ~p2p
    comm = comm.loc[keep]
    c = pd.DataFrame(
        {
            "rank": comm["rank"].to_numpy(np.int64),
            "start": comm["start"].to_numpy(np.int64),
            "end": comm["end"].to_numpy(np.int64),
            "name": pd.Categorical(comm["name"]).remove_unused_categories(),
            "coll_name": pd.Categorical(
                coll_name.loc[keep] if "coll_name" in comm else [""] * len(comm)
            ).remove_unused_categories(),
            "iteration": comm["iteration"].to_numpy(np.int64),
            "stream": comm["stream"].to_numpy(np.int64),
            "nelems": comm["msg_nelems"].to_numpy(np.int64)
            if "msg_nelems" in comm
            else np.full(len(comm), -1, np.int64),
        }
    )
    if "pg_name" in comm and "seq" in comm:  # frames that carry them already
        c["pg_name"] = pd.Categorical(comm["pg_name"].astype(str).to_numpy(dtype=object))
        c["seq"] = comm["seq"].to_numpy(np.int64)
        return c[list(COMM_COLUMNS)]
    ev = trace.events
    m = ((ev["seq"] >= 0) | (ev["pg_name"] != "")).to_numpy()
    stream = np.where(ev["stream"].to_numpy() >= 0, ev["stream"].to_numpy(), ev["tid"].to_numpy())
    # the interval's own event: same rank, start, name and stream (two groups may
    # launch the same kernel at the same time on different streams)
    tags = pd.DataFrame(
        {
            "rank": ev.loc[m, "rank"].to_numpy(np.int64),
            "start": ev.loc[m, "ts"].to_numpy(np.int64),
            "name": ev.loc[m, "name"].astype(str).to_numpy(),
            "stream": stream[m].astype(np.int64),
            "pg_name": ev.loc[m, "pg_name"].astype(str).to_numpy(),
            "seq": ev.loc[m, "seq"].to_numpy(np.int64),
        }
    ).drop_duplicates(["rank", "start", "name", "stream"])
    if len(tags) == 0 or len(c) == 0:
        c["pg_name"] = pd.Categorical([""] * len(c))
        c["seq"] = np.full(len(c), -1, np.int64)
        return c[list(COMM_COLUMNS)]
    key = ["rank", "start", "name", "stream"]
    j = c[key].astype({"name": object}).merge(tags, on=key, how="left")
    c["pg_name"] = pd.Categorical(j["pg_name"].fillna("").to_numpy(dtype=object))
    c["seq"] = j["seq"].fillna(-1).astype(np.int64).to_numpy()
    return c[list(COMM_COLUMNS)]


def _as_text(c: pd.DataFrame) -> pd.DataFrame:
    """The name columns as plain strings (rows of several ranks: one vocabulary)."""
    return c.astype({k: object for k in ("name", "coll_name", "pg_name")})


def collective_instances(comm: pd.DataFrame) -> tuple[pd.DataFrame, str, list[str]]:
    """One row per (instance, rank): iid, rank, start, end, iteration, pg_name, key, coll,
    from the :func:`rank_comm` rows of every rank.

    Returns (frame, matching, dropped) with matching "process_group+seq" or
    "order_within_group" and ``dropped`` the reasons groups were left out (one line
    each): instances that cannot be matched with confidence are not in the frame.
    """
    c = _as_text(comm).reset_index(drop=True)
    c["coll"] = np.where(c["coll_name"] != "", c["coll_name"], c["name"])
    if len(c) and (c["seq"] >= 0).all():
        matching = "process_group+seq"
        c["key"] = c["seq"]
        keys = ["pg_name", "key"]
        group = ["pg_name"]
    else:
        matching = "order_within_group"
        c = c.sort_values(["rank", "start"], kind="stable")
        # order within the iteration: robust to ranks whose profiles start at
        # different collectives (steps are numbered alike on every rank)
        c["key"] = c.groupby(["rank", "pg_name", "coll", "iteration"], sort=False).cumcount()
        keys = ["pg_name", "coll", "iteration", "key"]
        group = ["pg_name", "coll", "iteration"]
    aggs = {
        "start": ("start", "min"),
        "end": ("end", "max"),
        "name": ("name", "first"),
        "nelems": ("nelems", "max"),
    }
    for col in ("iteration", "coll"):
        if col not in keys:
            aggs[col] = (col, "first")
    per = c.groupby(keys + ["rank"], sort=True).agg(**aggs).reset_index()
    per["iid"] = per.groupby(keys, sort=True).ngroup()
    per, dropped = _drop_unconfident(per, group, matching)
    n = per.groupby("iid")["rank"].transform("size")
    per = per.loc[n >= 2].reset_index(drop=True)
    return per.drop(columns=["name", "nelems"]), matching, dropped


def _drop_unconfident(
    per: pd.DataFrame, group: list[str], matching: str
) -> tuple[pd.DataFrame, list[str]]:
    """Leave out the groups whose instances cannot be matched with confidence."""
    dropped: list[str] = []
    if per.empty:
        return per, dropped
    bad = pd.Series(False, index=per.index)
    if matching == "order_within_group":
        # every rank in a (group, collective, iteration) must have as many arrivals
        # (counted before instances seen on one rank only are dropped)
        cnt = per.groupby([*group, "rank"], sort=False)["key"].transform("size")
        lo = cnt.groupby([per[g] for g in group]).transform("min")
        hi = cnt.groupby([per[g] for g in group]).transform("max")
        uneven = lo != hi
        if uneven.any():
            ex = per.loc[uneven].iloc[0]
            same = np.logical_and.reduce([(per[g] == ex[g]).to_numpy() for g in group])
            cr = per.loc[same].groupby("rank")["key"].size().to_dict()
            n_g = per.loc[uneven, group].drop_duplicates().shape[0]
            dropped.append(
                f"{n_g} (group, collective, step) set(s) have different counts on different "
                f"ranks (e.g. {ex['coll']!r} in step {int(ex['iteration'])}: "
                + ", ".join(f"rank {r} {k}" for r, k in sorted(cr.items()))
                + ")"
            )
            bad |= uneven
    # one instance: the same kernel (collective) and, where both are known, the same size
    names_differ = per.groupby("iid", sort=False)["name"].transform("nunique") > 1
    pos = per["nelems"].where(per["nelems"] >= 0).groupby(per["iid"], sort=False)
    sizes_differ = (pos.transform("max") > pos.transform("min")) & ~_matches(
        per["coll"], _UNEVEN_SIZES
    )
    for what, m in (("kernel names", names_differ), ("message sizes", sizes_differ)):
        if m.any():
            ex = per.loc[m].iloc[0]
            inst = per.loc[per["iid"] == ex["iid"]]
            vals = "nelems" if what == "message sizes" else "name"
            shown = ", ".join(f"rank {int(r)} {v!r}"[:80] for r, v in zip(inst["rank"],
                                                                         inst[vals]))  # fmt: skip
            n_g = per.loc[m, group].drop_duplicates().shape[0]
            dropped.append(
                f"{n_g} group(s) pair instances whose {what} differ across ranks "
                f"(e.g. {ex['coll']!r}: {shown})"
            )
            # the whole group is suspect: its order (or numbering) does not line up
            grp = per.loc[m, group].drop_duplicates()
            bad |= per.set_index(group).index.isin(grp.set_index(group).index)
    return per.loc[~bad.to_numpy()].reset_index(drop=True), dropped


ALIGN_TOPIC = "clock_alignment"  # the topic of the notes on host clock alignment


def align_hosts(
    inst: pd.DataFrame, host_of: dict[int, str], *, align: bool = True
) -> tuple[pd.DataFrame, list[dict], list[str]]:
    """Add ``host``, ``a_start``, ``a_end`` (aligned ns); per-host offsets; notes.

    The offset of host h against the reference host (that of the lowest rank) is
    ``median_i (E_ref,i - E_h,i)`` over the instances i both hosts take part in, where
    ``E_h,i`` is the *earliest* kernel end of instance i on host h. Why this holds
    under real timing (docs/METRICS.md "Extension: host clock offsets under jitter"):

    - A collective's result depends on every rank's input, so no rank ends before the
      last one has joined, and once it has, every rank ends about one transfer later:
      the ends of one instance are one physical moment, seen on several clocks, plus
      per-rank noise. Starts are not (they carry the skew this module measures).
    - A late rank moves that moment for everyone (the offset is unaffected), and it
      may end later than its peers itself (it still has its part of the transfer to
      do after joining, or its host's ranks wait on it for an intra-host stage). Such
      delays only ever make an end *later*: the earliest end on a host is its least
      delayed rank, so a host with one punctual rank gives an unbiased end, where the
      median over the host's ranks moved with the late one (with two ranks a host,
      by half its delay).
    - Per-instance jitter (the clock conversion, the completion of the last chunk)
      is noise around that moment: the median over instances ignores the instances
      where it is large (up to half of them), where a mean would not. The minimum of
      k noisy ends sits below the true one by the same expected amount on every host
      with k ranks, so with equal ranks per host it cancels in the difference;
      otherwise the bias is below the jitter's amplitude.

    What it cannot see: a delay shared by *every* rank of a host on every instance is
    indistinguishable from a clock offset. The p95 of ``|difference - offset|`` is
    reported (``residual_p95_ns``) and widens the overlap check's slack.

    ``align=False``: offsets are 0 (times are used as read); each host's residual is
    still reported, against 0, so a large one says the clocks disagree.
    """
    notes: list[str] = []
    inst = inst.assign(host=inst["rank"].map(host_of))
    ranks = sorted(host_of)
    ref = host_of[ranks[0]]
    hosts_tbl = []
    offsets = {ref: 0}
    # differences in float64 only on times relative to the earliest end (absolute ns
    # ~1e18 exceed float64's 53-bit mantissa)
    t0 = int(inst["end"].min()) if len(inst) else 0
    inst = inst.assign(_rel_end=inst["end"] - t0)
    # earliest end of each instance on each host: iid x host
    first = inst.groupby(["host", "iid"], sort=True)["_rel_end"].min()
    ends_ref = first.loc[ref] if ref in first.index.get_level_values(0) else first.iloc[:0]
    for h in sorted(set(host_of.values()) - {ref}):  # one pass per host (few)
        ends_h = first.loc[h] if h in first.index.get_level_values(0) else first.iloc[:0]
        d = (ends_ref - ends_h).dropna()
        if d.empty:
            notes.append(
                Note(
                    f"across ranks: host {h!r} shares no collective with host {ref!r}; its "
                    "ranks were not aligned and are left out of the skew figures.",
                    ALIGN_TOPIC,
                )
            )
            continue
        dv = d.to_numpy(np.float64)
        off = int(np.round(np.median(dv))) if align else 0
        offsets[h] = off
        hosts_tbl.append(
            {"host": h, "offset_ns": off, "n_instances": len(d),
             "residual_p95_ns": float(np.percentile(np.abs(dv - off), 95))}
        )  # fmt: skip
    hosts_tbl.insert(
        0, {"host": ref, "offset_ns": 0, "n_instances": int(ends_ref.size),
            "residual_p95_ns": 0.0}
    )  # fmt: skip
    for row in hosts_tbl:
        row["ranks"] = [r for r in ranks if host_of[r] == row["host"]]
        row["reference"] = row["host"] == ref
    if not align and len(hosts_tbl) > 1:
        worst = max(hosts_tbl[1:], key=lambda r: r["residual_p95_ns"])
        notes.append(
            Note(
                f"across ranks: clock alignment off (--no-align-clocks): the "
                f"{len(hosts_tbl)} hosts' times are used as read (host {worst['host']!r}'s "
                f"collective ends differ from host {ref!r}'s by up to "
                f"{worst['residual_p95_ns'] / 1e3:.1f} µs, p95).",
                ALIGN_TOPIC,
            )
        )
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


def implausible(inst: pd.DataFrame, slack_ns: dict[str, int]) -> pd.DataFrame:
    """Instances that do not overlap in time across ranks on the common clock: the latest
    aligned start comes after some rank's kernel had ended (more than the slack of the
    hosts involved). A collective cannot finish on one rank before a peer joins, so
    such a pairing is wrong (different steps profiled, or clocks that disagree)."""
    g = inst.groupby("iid", sort=True)
    slack = inst["host"].map(slack_ns).fillna(OVERLAP_SLACK_NS).groupby(inst["iid"]).max()
    out = pd.DataFrame({"latest": g["a_start"].max(), "first_end": g["a_end"].min()})
    out["gap_ns"] = out["latest"] - out["first_end"]
    return out.loc[out["gap_ns"] > slack.reindex(out.index)]


def per_step_waits(inst: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, iteration): ``wait_ns`` = |∪ [own aligned start, latest aligned start)|
    over the rank's instances (concurrent collectives count once)."""
    latest = inst.groupby("iid")["a_start"].transform("max")
    key = inst[["rank", "iteration"]].drop_duplicates().sort_values(["rank", "iteration"])
    key = key.reset_index(drop=True)
    idx = pd.MultiIndex.from_frame(key).get_indexer(pd.MultiIndex.from_frame(inst[["rank",
                                                                                  "iteration"]]))  # fmt: skip
    key["wait_ns"] = iv.grouped_union_length(
        idx, inst["a_start"].to_numpy(np.int64), latest.to_numpy(np.int64), len(key)
    )
    return key


def per_iteration_skew(per: pd.DataFrame) -> pd.DataFrame:
    """Per iteration >= 0: n_instances, skew_total_ns = |∪ [earliest, latest)| of its
    instances (concurrent collectives count once), max_skew_ns."""
    pi = per.loc[per["iteration"] >= 0]
    cols = ["iteration", "n_instances", "skew_total_ns", "max_skew_ns"]
    if pi.empty:
        return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in cols})
    its = np.sort(pi["iteration"].unique())
    k = np.searchsorted(its, pi["iteration"].to_numpy())
    out = pd.DataFrame({"iteration": its})
    out["n_instances"] = np.bincount(k, minlength=len(its)).astype(np.int64)
    out["skew_total_ns"] = iv.grouped_union_length(
        k, pi["earliest"].to_numpy(np.int64), pi["latest"].to_numpy(np.int64), len(its)
    )
    out["max_skew_ns"] = pi.groupby("iteration")["skew_ns"].max().reindex(its).to_numpy()
    return out


def step_invariant_violations(
    waits: pd.DataFrame, per_it: pd.DataFrame, intervals: pd.DataFrame, offsets: dict[int, int]
) -> list[str]:
    """Per-step figures that exceed their step: a rank's wait in an iteration above that
    rank's wall (its device span in the iteration), an iteration's skew above the
    iteration's extent over ranks (aligned). Empty when the figures are consistent.
    ``intervals``: rows with rank, iteration, start, end (the intervals frame, or each
    rank's span per step)."""
    d = intervals.loc[intervals["iteration"] >= 0, ["rank", "iteration", "start", "end"]]
    if d.empty:
        return []
    span = d.groupby(["rank", "iteration"]).agg(first=("start", "min"), last=("end", "max"))
    span = span.reset_index()
    span["wall_ns"] = span["last"] - span["first"]
    out = []
    w = waits.merge(span, on=["rank", "iteration"], how="inner")
    over = w.loc[w["wait_ns"] > w["wall_ns"]]
    if len(over):
        r = over.iloc[0]
        out.append(
            f"rank {int(r['rank'])} would wait {r['wait_ns'] / 1e6:.3f} ms in step "
            f"{int(r['iteration'])}, whose wall is {r['wall_ns'] / 1e6:.3f} ms"
        )
    off = span["rank"].map(offsets).fillna(0).astype(np.int64)
    span = span.assign(a_first=span["first"] + off, a_last=span["last"] + off)
    ext = span.groupby("iteration").agg(a_first=("a_first", "min"), a_last=("a_last", "max"))
    ext = (ext["a_last"] - ext["a_first"]).rename("extent_ns").reset_index()
    s = per_it.merge(ext, on="iteration", how="inner")
    over = s.loc[s["skew_total_ns"] > s["extent_ns"]]
    if len(over):
        r = over.iloc[0]
        out.append(
            f"step {int(r['iteration'])} would have {r['skew_total_ns'] / 1e6:.3f} ms of "
            f"skew in {r['extent_ns'] / 1e6:.3f} ms"
        )
    return out


UNKNOWN_HOST = "(unknown host)"


def hosts_of(
    rank_ids: list[int], hosts: dict[int, str | None]
) -> tuple[dict[int, str], list[str]]:
    """Each rank's host, and notes. A rank's host is its trace's ``hostName``. When no
    trace names one, every rank is on one host (one clock; said so): that is what the
    traces say, and ranks on one host share a clock, while a guess of several would
    align clocks that may well be one. When some traces name a host and others do not,
    the unnamed ranks are one more host, ``(unknown host)``, aligned like any other
    (said so): the named ones say the run spans hosts, so sharing a clock with any
    of them is not to be assumed."""
    given = {r: hosts[r] for r in rank_ids if hosts.get(r)}
    notes: list[str] = []
    if not given:
        notes.append(
            Note(
                "across ranks: the traces name no host; all ranks are taken to share one "
                "clock (no alignment applied). Traces of several hosts need their "
                "hostName to be aligned.",
                ALIGN_TOPIC,
            )
        )
    elif len(given) < len(rank_ids):
        missing = [r for r in rank_ids if r not in given]
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        notes.append(
            Note(
                f"across ranks: {len(missing)} rank(s) name no host (rank {shown}); they "
                f"are taken as one more host, {UNKNOWN_HOST!r}, with its own clock.",
                ALIGN_TOPIC,
            )
        )
    return {r: given.get(r, UNKNOWN_HOST) for r in rank_ids}, notes


def _not_computed(
    matching: str | None, notes: list[str], why: str, **extra
) -> tuple[AcrossRanks, list[Note]]:
    notes.append(f"across ranks: not computed: {why}; no skew or cross-rank wait is reported.")
    section = AcrossRanks(computed=False, matching=matching, reason=why, **extra)
    return section, tagged(notes, "across_ranks")


def summarize_ranks(
    comm: pd.DataFrame,
    spans: pd.DataFrame,
    *,
    rank_ids: list[int],
    hosts: dict[int, str | None],
    top_n: int,
    align: bool = True,
) -> tuple[AcrossRanks, list[Note]]:
    """The "across_ranks" section and notes on what is missing, from the cross-rank
    tables of every rank: ``comm`` (:func:`rank_comm` rows), ``spans`` (each rank's
    device span per step, ``tables.iteration_spans``) and each rank's host.
    ``align``: estimate host clock offsets (:func:`align_hosts`); False uses the times
    as read."""
    notes: list[str] = []
    if len(rank_ids) < 2:
        why = ("the trace has one rank; load all ranks' files (a directory) to match "
               "collectives across ranks.")  # fmt: skip
        notes.append(f"across ranks: not computed: {why}")
        return AcrossRanks(computed=False, reason=why), tagged(notes, "across_ranks")
    inst, matching, dropped = collective_instances(comm)
    for why in dropped:
        notes.append(f"across ranks: left out, cannot be matched with confidence: {why}.")
    if inst.empty:
        why = (
            "no collective could be matched with confidence across ranks"
            if dropped
            else "no comm interval was found on two or more ranks under one collective key"
        )
        return _not_computed(matching, notes, why)
    host_of, hnotes = hosts_of(rank_ids, hosts)
    notes += hnotes
    inst, hosts_tbl, anotes = align_hosts(inst, host_of, align=align)
    notes += anotes
    if inst.empty:
        return _not_computed(matching, notes, "no collective is shared by aligned ranks")
    # the alignment's own spread widens the slack; unaligned, the residual is the clocks'
    # disagreement, which is what the check is there to catch
    slack = {
        h["host"]: max(OVERLAP_SLACK_NS, int(np.ceil(h["residual_p95_ns"])) if align else 0)
        for h in hosts_tbl
    }
    bad = implausible(inst, slack)
    if len(bad):
        ex = bad.sort_values("gap_ns", ascending=False, kind="stable").iloc[0]
        row = inst.loc[inst["iid"] == ex.name].sort_values("a_start")
        late, first = row.iloc[-1], row.loc[row["a_end"].idxmin()]
        why = (
            f"{len(bad)} of {inst['iid'].nunique()} matched collectives do not overlap in "
            f"time across ranks (e.g. {late['coll']!r}: rank {int(late['rank'])} starts "
            f"{ex['gap_ns'] / 1e6:.3f} ms after rank {int(first['rank'])}'s kernel ended): "
            "the ranks profiled different steps or their clocks disagree"
        )
        return _not_computed(matching, notes, why, n_implausible=len(bad))
    per = instance_skew(inst)
    waits = per_step_waits(inst)
    per_it = per_iteration_skew(per)
    offsets = {r: next((h["offset_ns"] for h in hosts_tbl if r in h["ranks"]), 0) for r in rank_ids}
    broken = step_invariant_violations(waits, per_it, spans, offsets)
    if broken:
        why = "a per-step figure would exceed its step (" + "; ".join(broken) + ")"
        return _not_computed(matching, notes, why)
    # each rank's wait: latest arrival - own arrival, per instance (totals) / union per step
    latest = inst["iid"].map(per.set_index("iid")["latest"])
    inst = inst.assign(wait_ns=(latest - inst["a_start"]).astype(np.int64))
    steps = waits.loc[waits["iteration"] >= 0]
    n_steps = steps.groupby("rank")["iteration"].nunique()
    strag = inst.groupby("rank").agg(n_instances=("iid", "size"))
    strag["wait_ns"] = waits.groupby("rank")["wait_ns"].sum().reindex(strag.index).fillna(0)
    strag["wait_ns"] = strag["wait_ns"].astype(np.int64)
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
        "n_left_out_groups": len(dropped),
        "hosts": hosts_tbl,
        "skew": stats_ns(per["skew_ns"]),
        "wait_ns": wait_total,
        "transfer_ns": transfer_total,
        "wait_share": wait_total / denom if denom > 0 else None,
        "late_rank": late_rank,
        "skew_ms_per_step": float(per_it["skew_total_ns"].sum()) / len(per_it) / 1e6
        if len(per_it)
        else None,
        "max_wait_ms_per_step": float(max_wait) if pd.notna(max_wait) else None,
        "stragglers": strag.to_dict("records"),
        "per_iteration": per_it.to_dict("records"),
        "worst_instances": worst.to_dict("records"),
    }
    return AcrossRanks.of(section), tagged(notes, "across_ranks")
