"""Per-rank map, cross-rank reduce: the one way every analysis is computed.

Every figure of docs/METRICS.md is either per rank (the overlap tables, launches,
streams and steps: each keyed by rank first) or a reduction over ranks of small
per-rank pieces (sums, the union of notes, percentiles over the values of every
rank) — except the cross-rank analysis, which needs each rank's collective instances.
So one rank is analysed on its own (:func:`analyze_rank`, where its file is read: in
a pool worker or a Dask worker) into a :class:`RankResult` that holds

- its rows of the seven overlap tables and its counts for the totals and the notes;
- its launch and stream-switch parts (``launches.LaunchPart``, ``switches.SwitchPart``:
  counts, its per-stream / per-step rows, the launch delays and switch gaps whose
  percentiles span all ranks) and its exposed comm's step cost
  (``exposed_cost.CostPart``: per step, and its bubble);
- the compact tables the cross-rank analysis needs: its collectives (group,
  sequence, size, start/end; ``ranks.rank_comm``) and its device span per step;
- optionally its ``intervals`` and compute reference (the report's timeline and the
  gate's selections need them; ``analyze --json`` does not).

:func:`combine` reduces the results of every rank into the :class:`Analysis`, with the
same numbers, to the ns, as one pass over all ranks at once would give (rows of one
rank are independent of the others until the cross-rank step). Only ``RankResult`` s
cross between processes, so the parent's memory holds per-rank results, never
another rank's events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from domino_prof.analysis.attribution import context
from domino_prof.analysis.classify import classify, classify_notes
from domino_prof.analysis.config import (
    COMM_FAMILIES,
    DTOD_COPY,
    P2P_COPY,
    USER_PATTERN,
    AnalysisConfig,
)
from domino_prof.analysis.document import TABLES, Analysis
from domino_prof.analysis.exposed_cost import combine_costs, cost_part
from domino_prof.analysis.findings import build_findings
from domino_prof.analysis.launches import LaunchPart, combine_launches, launch_part
from domino_prof.analysis.overheads import resolve_thresholds
from domino_prof.analysis.overlap import overlap_tables, totals_of
from domino_prof.analysis.overlap_tax import tax_part
from domino_prof.analysis.ranks import rank_comm, summarize_ranks
from domino_prof.analysis.reference import ComputeReference
from domino_prof.analysis.replay import rank_graph_or_note, whatif_of_results
from domino_prof.analysis.results import Launches, Note, Overheads, StreamSwitches, jsonable, tagged
from domino_prof.analysis.switches import SwitchPart, combine_switches, switch_part
from domino_prof.analysis.tables import iteration_spans, iteration_walls
from domino_prof.trace.loader import rank_metadata_problems
from domino_prof.trace.schema import RankMeta, Trace

SKIPPED = "skipped"  # the topic of a note naming a file that was not loaded
NEGATIVE_DURATION = "negative duration"  # in the notes below (check repeats them)
NEGATIVE_DURATION_TOPIC = "negative_duration"  # their Note topic
_SOURCE_ORDER = [f.key for f in (*COMM_FAMILIES, P2P_COPY, DTOD_COPY, USER_PATTERN)] + ["gloo"]


@dataclass
class RankResult:
    """What one rank's analysis hands to :func:`combine` (picklable; see module doc)."""

    rank: int
    mode: str  # "gpu" | "cpu": the mode it was analysed in
    tables: dict[str, pd.DataFrame]
    counts: dict[str, int]  # classification counts, intervals outside steps
    kinds: dict[str, int]  # intervals by kind
    comm_sources: list[dict]
    spans: pd.DataFrame  # iteration_spans: the rank's device span per step
    comm: pd.DataFrame  # ranks.rank_comm: its collectives, for the cross-rank analysis
    switches: SwitchPart | None = None
    launches: LaunchPart | None = None
    intervals: pd.DataFrame | None = None
    reference: object = None  # overlap.ComputeReference of this rank
    meta: RankMeta | None = None  # the rank's file metadata (set where the file is read)
    extra: dict = field(default_factory=dict)


def _thresholds(config: AnalysisConfig) -> dict[str, float]:
    return resolve_thresholds(config.overhead_thresholds)


def analyze_rank(
    trace: Trace,
    config: AnalysisConfig,
    *,
    rank: int,
    mode: str,
    keep_intervals: bool = True,
    graph_nodes: int | None = None,
    procs: int = 1,
) -> RankResult:
    """Analyse one rank: ``trace`` holds that rank's events only; ``mode`` is the whole
    trace's ("gpu" when any rank has device work; a rank without is then empty).
    ``graph_nodes``: the largest replay graph built (``replay.graph_cap``; None: the
    whole ``replay.REPLAY_MAX_NODES``). ``procs`` > 1: the cores this rank may use
    (``PARALLEL_INTERVALS``)."""
    t = _thresholds(config)
    cl = classify(trace, config, mode=mode)
    iv = cl.intervals
    spans = iteration_spans(iv)
    side = None
    if procs > 1 and mode == "gpu" and len(iv) >= PARALLEL_INTERVALS:
        from domino_prof.trace.pool import Forked

        side = Forked(lambda: _device_parts(trace, iv, spans, t, cl.context))
    tables = overlap_tables(cl, [rank])
    out = RankResult(
        rank=rank,
        mode=mode,
        tables=tables,
        counts={**cl.counts, "n_outside": int((iv["iteration"] < 0).sum())},
        kinds={str(k): int(v) for k, v in iv["kind"].value_counts(sort=False).items()},
        comm_sources=cl.comm_sources,
        spans=spans,
        comm=rank_comm(trace, iv),
        meta=trace.ranks.get(rank),
    )
    if side is not None:
        out.switches, out.launches = side.result()
    elif mode == "gpu":
        out.switches, out.launches = _device_parts(trace, iv, spans, t, cl.context)

    out.extra["replay"] = rank_graph_or_note(
        trace.events, iv, rank=rank, mode=mode, reference=cl.reference, max_nodes=graph_nodes
    )
    out.extra["tax"] = tax_part(iv, mode=mode, reference=cl.reference)
    out.extra["exposed_cost"] = cost_part(
        iv, rank=rank, reference=cl.reference, spans=spans,
        host=out.launches.idle_pieces if out.launches is not None else None,
    )  # fmt: skip
    if keep_intervals:
        out.intervals = iv
        out.reference = cl.reference
    return out


# a GPU rank this big (device intervals) analysed with cores to spare (analyze_rank's
# procs) has its launch and switch parts computed in a forked child while this process
# computes the rest; below, the fork and the pickled parts cost more than they save
PARALLEL_INTERVALS = 250_000


def _device_parts(trace: Trace, iv, spans, t, ctx) -> tuple[SwitchPart, LaunchPart]:
    ctx = context(trace.events) if ctx is None else ctx
    walls = iteration_walls(spans)
    sw = switch_part(trace.events, iv, ctx=ctx)
    la = launch_part(
        iv, walls=walls, min_graph_run=int(t["min_graph_run"]),
        host_bound_share=t["host_bound_share"], top_n=int(t["top_n"]),
    )  # fmt: skip
    return sw, la


# --------------------------------------------------------------------------- splitting
def rank_ids_of(trace: Trace) -> list[int]:
    """The ranks a trace's tables list: its rank files, else the ranks of its events."""
    if trace.ranks:
        return sorted(trace.ranks)
    return sorted(int(r) for r in pd.unique(trace.events["rank"]))


def split_ranks(trace: Trace) -> list[tuple[int, Trace]]:
    """One single-rank :class:`Trace` per rank (its events, its metadata), rank order."""
    ev = trace.events
    r = ev["rank"].to_numpy()
    ids = sorted(set(rank_ids_of(trace)) | {int(x) for x in np.unique(r)})
    out = []
    if len(r) and bool((r[1:] >= r[:-1]).all()):  # the loader's (rank, ts) order
        bounds = np.searchsorted(r, ids + [ids[-1] + 1] if ids else [])
        slices = {k: slice(bounds[i], bounds[i + 1]) for i, k in enumerate(ids)}
        parts = {k: ev.iloc[s] for k, s in slices.items()}
    else:
        parts = {k: ev[r == k] for k in ids}
    for k in ids:
        meta = {k: trace.ranks[k]} if k in trace.ranks else {}
        out.append((k, Trace(events=parts[k], ranks=meta, source=trace.source)))
    return out


# --------------------------------------------------------------------------- combining
def concat_frames(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Rows of several ranks in rank order, keeping categorical columns categorical
    (categories: the sorted union; identical categories keep their order)."""
    frames = [f for f in frames if f is not None]
    full = [f for f in frames if len(f)] or frames[:1]
    if len(full) == 1:
        return full[0].reset_index(drop=True)
    cats = {}
    for c in full[0].columns:
        dts = [f[c].dtype for f in full if c in f]
        if any(isinstance(d, pd.CategoricalDtype) for d in dts):
            firsts = [d.categories for d in dts if isinstance(d, pd.CategoricalDtype)]
            if all(isinstance(d, pd.CategoricalDtype) for d in dts) and all(
                f.equals(firsts[0]) for f in firsts
            ):
                continue  # pd.concat keeps it
            values = [f[c].astype("category") for f in full]
            cats[c] = pd.Index(
                sorted(set().union(*(v.cat.categories for v in values))), dtype=object
            )
    if cats:
        full = [f.astype({c: pd.CategoricalDtype(k) for c, k in cats.items()}) for f in full]
    return pd.concat(full, ignore_index=True)


def _sum_counts(dicts: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + int(v)
    return out


def _comm_sources(results: list[RankResult]) -> list[dict]:
    by: dict[str, dict] = {}
    for r in results:
        for s in r.comm_sources:
            got = by.setdefault(s["source"], {**s, "n_intervals": 0, "busy_ns": 0})
            got["n_intervals"] += int(s["n_intervals"])
            got["busy_ns"] += int(s["busy_ns"])
    order = {k: i for i, k in enumerate(_SOURCE_ORDER)}
    return sorted(by.values(), key=lambda s: order.get(s["source"], len(order)))


def _negative_duration_notes(metas: dict[int, RankMeta]) -> list[str]:
    out = []
    for r, m in sorted(metas.items()):
        if not m.negative_durations:
            continue
        n = sum(m.negative_durations.values())
        per = ", ".join(f"{c} {k}" for c, k in sorted(m.negative_durations.items()))
        cat, name, dur = m.worst_negative or ("?", "?", 0)
        out.append(
            f"rank {r}: {n} event(s) with a {NEGATIVE_DURATION} ({per}; worst: {cat} "
            f"{name[:60]!r}, dur {dur / 1000:g} µs) read as 0 ns: the time they carried "
            f"(comm, if a comm kernel) is missing from every figure; the trace {m.path} "
            "is damaged: re-export it"
        )
    return out


def combine(
    results: list[RankResult],
    config: AnalysisConfig,
    *,
    source: str,
    ranks: list[int],
    metas: dict[int, RankMeta],
    skipped: list[tuple[str, str]] = (),
) -> Analysis:
    """The :class:`Analysis` of every rank from their results (see module doc).
    ``ranks``: the ranks the per-rank tables list; ``metas``: each rank file's
    metadata; ``skipped``: (path, why) of the files that were not read."""
    results = sorted(results, key=lambda r: r.rank)
    modes = {r.mode for r in results}
    assert len(modes) == 1, f"ranks analysed in different modes: {modes}"
    mode = modes.pop()

    tables = {name: concat_frames([r.tables[name] for r in results]) for name in TABLES}
    want = set(ranks)
    br = tables["by_rank"]
    tables["by_rank"] = br[br["rank"].isin(want)].reset_index(drop=True)
    counts = _sum_counts([r.counts for r in results])
    notes = tagged(classify_notes(mode, counts), "classify")
    renamed = {k: v for m in metas.values() for k, v in m.renamed_categories.items()}
    if renamed:
        pairs = ", ".join(f"{k} -> {v}" for k, v in sorted(renamed.items()))
        notes.append(
            Note(f"older Kineto trace format: categories read as today's ({pairs})", "format")
        )
    notes += tagged(_negative_duration_notes(metas), NEGATIVE_DURATION_TOPIC)
    notes += tagged(rank_metadata_problems(metas), "rank_metadata")
    in_ns = [r for r, m in sorted(metas.items()) if getattr(m, "time_unit", "us") == "ns"]
    if in_ns:
        notes.append(Note(
            f"rank(s) {in_ns}: ts/dur written in ns, not the µs of Chrome traces (read as µs "
            "they would lie beyond the year 2100); read as ns", "time_unit"))  # fmt: skip
    for path, why in skipped:
        notes.append(Note(f"skipped {path}: {why}", SKIPPED))
    n_out = counts.get("n_outside", 0)
    if n_out:
        notes.append(
            Note(f"{n_out} intervals launched outside any ProfilerStep#N (outside steps)",
                 "outside_steps")
        )  # fmt: skip
    no_comm = [int(x) for x in tables["by_rank"].query("comm_ns == 0")["rank"]]
    if no_comm:
        notes.append(Note(f"ranks without comm (hidden % undefined): {no_comm}", "no_comm"))
    totals = totals_of(tables, n_outside=n_out, kinds=_sum_counts([r.kinds for r in results]))
    # exposed comm's step cost, beside the exposed comm it is the part of
    cost = combine_costs([r.extra.get("exposed_cost") for r in results])
    items = list(totals.items())
    at = list(totals).index("exposed_ms_per_step") + 1
    totals = dict(items[:at] + list(cost.items()) + items[at:])
    totals["comm_sources"] = _comm_sources(results)
    totals["n_negative_durations"] = sum(sum(m.negative_durations.values()) for m in metas.values())
    kept = [r for r in results if r.intervals is not None]
    intervals = reference = None
    if len(kept) == len(results):
        intervals = concat_frames([r.intervals for r in results])
        refs = [r.reference for r in results]
        reference = ComputeReference(
            *(np.concatenate([getattr(x, f) for x in refs]) for f in
              ("rank", "device", "start", "end"))
        )  # fmt: skip
    a = Analysis(
        config=config,
        source=source,
        ranks=list(ranks),
        mode=mode,
        intervals=intervals,
        reference=reference,
        totals=totals,
        notes=notes,
        **tables,
    )
    a.overheads = combine_overheads(results, config, ranks=ranks, metas=metas)
    a.notes.extend(a.overheads.notes)  # what the overheads could not compute, and why
    a.emulation = emulation_label(metas)  # the traces' comm-emulation mark, if any
    if a.emulation:
        a.notes.insert(0, Note(f"{a.emulation}: the collectives of these traces were "
                               "emulated on one GPU (rank 0's shard of the TP group): every "
                               "comm figure is the emulator's, not a network's", "emulation"))  # fmt: skip
    return a


def emulation_label(metas: dict) -> str | None:
    """The label of the ranks' comm-emulation marks (``RankMeta.emulation``), None when
    no rank is marked; ranks with different marks: their labels joined."""
    labels = sorted({m.emulation for m in metas.values() if getattr(m, "emulation", None)})
    return " + ".join(labels) if labels else None


def combine_overheads(
    results: list[RankResult],
    config: AnalysisConfig,
    *,
    ranks: list[int],
    metas: dict[int, RankMeta],
) -> Overheads:
    """Stream switches, launches, cross-rank waits and findings of every rank."""
    t = _thresholds(config)
    top_n = int(t["top_n"])
    results = sorted(results, key=lambda r: r.rank)
    notes: list[str] = []
    spans = concat_frames([r.spans for r in results])
    walls = iteration_walls(spans)
    if walls.empty:
        notes.append(
            Note(
                "per-step figures: not computed: no device interval was launched inside a "
                "ProfilerStep#N window (profile with a torch.profiler schedule and call "
                "prof.step() each iteration).",
                "per_step",
            )
        )
    step_ms = float(walls["wall_ns"].mean()) / 1e6 if len(walls) else None
    if results and results[0].mode == "gpu":
        switches, n1 = combine_switches(
            [r.switches for r in results], walls=walls,
            switch_gap_share=t["switch_gap_share"], top_n=top_n,
        )  # fmt: skip
        launches, n2 = combine_launches([r.launches for r in results], walls=walls, top_n=top_n)
        notes += n1 + n2
    else:
        why = (
            "not applicable: CPU-only trace (no kernel/gpu_memcpy/gpu_memset events, so no "
            "CUDA streams or launch calls)."
        )
        switches = StreamSwitches(computed=False, reason=why)
        launches = Launches(computed=False, reason=why)
        notes.append(Note(f"stream switches and kernel launches: {why}", "launches"))
    comm = concat_frames([r.comm for r in results])
    hosts = {r: (metas[r].host if r in metas else None) for r in ranks}
    across, n3 = summarize_ranks(comm, spans, rank_ids=list(ranks), hosts=hosts, top_n=top_n,
                                 align=getattr(config, "align_clocks", True))  # fmt: skip
    notes += n3

    whatif, n4 = whatif_of_results(results, comm=comm, hosts=hosts)
    notes += n4
    findings = build_findings(
        switches=switches, launches=launches, ranks=across, step_ms=step_ms, thresholds=t,
        whatif=whatif, mode=results[0].mode if results else "gpu",
    )  # fmt: skip
    return Overheads(
        whatif=whatif,
        step_ms=step_ms,
        thresholds=jsonable(t),
        stream_switches=switches,
        launches=launches,
        across_ranks=across,
        findings=findings,
        notes=notes,
    )
