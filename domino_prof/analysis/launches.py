"""Kernel launches: launch delay, host-bound idle, tiny kernels, CUDA-graph candidates.

Definitions: ``docs/METRICS.md`` "Kernel launches" (and its "Extension:" notes).
Works on the ``intervals`` frame (device intervals joined to their launch calls by
correlation). Per interval, on its stream in start order:

- ``launch_delay = start - launch_end`` (>= 0; a negative value, host/device clock
  disagreement, counts as 0 and is reported in ``n_negative_delay``). Only the first
  device interval of each launch call counts (a ``cudaGraphLaunch`` runs many kernels
  under one correlation; the later ones queue behind the first, not behind the host).
- ``host_bound_idle = start - prev_end`` when the launch call started after the
  previous interval on the stream ended (``launch_start > prev_end``), else 0.
  ``host_bound_device_idle`` is the part of it during which no other stream of the
  device was busy either (the device itself was idle).
- ``tiny``: ``dur < launch_end - launch_start`` (graph-launched kernels excluded).
- graph candidate: a maximal run (>= ``min_graph_run``) of consecutive intervals on a
  stream, within one iteration, each host-bound (its previous interval in the same
  iteration) or tiny; saving = sum of the run's host-bound idle (device-idle part too).
- ``launch_cpu_ns``: the call's host time, once per call (its first interval).
- Blocking copies (``hipMemcpyWithStream``, ``cudaMemcpy``, ...) are launches for
  host-bound idle, but their call time is a wait: no launch delay, no launch CPU time,
  never tiny, never in a graph candidate run.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from domino_prof.analysis.attribution import GRAPH_APIS, api_name, tuple_ids
from domino_prof.analysis.intervals import (
    grouped_difference,
    grouped_intersection,
    grouped_merge,
    grouped_searchsorted,
)
from domino_prof.analysis.results import Launches, Note, tagged
from domino_prof.analysis.tables import grouped_stats, prev_end_on_stream, stats_ns

# Calls that put device work on a stream (joined to it by correlation), without CUPTI's
# ``_vNNNNN`` suffix (docs/METRICS.md "Kernel launches" and its Extension).
KERNEL_LAUNCH_APIS: tuple[str, ...] = (
    # CUDA runtime / driver
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel",
    # HIP (hipBLASLt GEMMs come through hipExtModuleLaunchKernel)
    "hipLaunchKernel", "hipLaunchKernelExC", "hipExtLaunchKernel", "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel", "hipLaunchCooperativeKernel",
    "hipModuleLaunchCooperativeKernel",
)  # fmt: skip
COPY_LAUNCH_APIS: tuple[str, ...] = (
    "cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpyPeerAsync", "cudaMemsetAsync",
    "cudaMemset2DAsync", "cuMemcpyAsync", "cuMemcpyPeerAsync", "cuMemcpyDtoDAsync",
    "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemsetD8Async", "cuMemsetD16Async",
    "cuMemsetD32Async",
    "hipMemcpyAsync", "hipMemcpy2DAsync", "hipMemcpyPeerAsync", "hipMemcpyDtoDAsync",
    "hipMemcpyHtoDAsync", "hipMemcpyDtoHAsync", "hipMemsetAsync", "hipMemsetD8Async",
    "hipMemsetD16Async", "hipMemsetD32Async",
)  # fmt: skip
# Copies/sets whose call returns only when the work is done: they are launches (the gap
# before them is host-bound) but their call time is a wait, not launch overhead, so they
# have no launch delay, add no launch CPU time and are never tiny.
BLOCKING_LAUNCH_APIS: tuple[str, ...] = (
    "hipMemcpyWithStream", "hipMemcpy", "hipMemset", "cudaMemcpy", "cudaMemset",
)  # fmt: skip
LAUNCH_APIS: tuple[str, ...] = (
    KERNEL_LAUNCH_APIS + COPY_LAUNCH_APIS + GRAPH_APIS + BLOCKING_LAUNCH_APIS
)


def launch_table(intervals: pd.DataFrame) -> pd.DataFrame:
    """One row per device interval in (rank, device, stream, start) order, with
    ``api``, ``launched``, ``launch_cpu_ns``, ``launch_delay_ns``, ``delay_counted``,
    ``host_bound``, ``host_bound_idle_ns``, ``host_bound_device_idle_ns``, ``tiny``,
    ``graph_launched``."""
    iv = prev_end_on_stream(intervals)
    api = api_name(iv["launch_name"]) if len(iv) else pd.Series([], dtype=str)
    iv["api"] = api.to_numpy()
    launched = iv["api"].isin(LAUNCH_APIS).to_numpy() & (iv["launch_start"] >= 0).to_numpy()
    iv["launched"] = launched
    iv["graph_launched"] = iv["api"].isin(GRAPH_APIS).to_numpy() & launched
    blocking = iv["api"].isin(BLOCKING_LAUNCH_APIS).to_numpy() & launched
    iv["blocking_launch"] = blocking
    # first device interval of each launch call (graph launches run many)
    first = ~iv.sort_values("start", kind="stable").duplicated(["rank", "correlation"])
    first = first.reindex(iv.index).to_numpy() | (iv["correlation"] < 0).to_numpy()
    call_ns = np.where(launched, iv["launch_end"] - iv["launch_start"], 0)
    # a call's host time counts once (on its first interval), and not for blocking calls
    iv["launch_cpu_ns"] = np.where(first & ~blocking, call_ns, 0)
    delay_raw = (iv["start"] - iv["launch_end"]).to_numpy(np.int64)
    iv["delay_counted"] = launched & first & ~blocking
    iv["delay_negative"] = iv["delay_counted"] & (delay_raw < 0)
    iv["launch_delay_ns"] = np.where(iv["delay_counted"], np.clip(delay_raw, 0, None), 0)
    prev_end = iv["prev_end"].to_numpy(np.int64)
    hb = launched & (prev_end >= 0) & (iv["launch_start"].to_numpy(np.int64) > prev_end)
    idle = np.where(hb, np.clip(iv["start"].to_numpy(np.int64) - prev_end, 0, None), 0)
    iv["host_bound"] = hb
    iv["host_bound_idle_ns"] = idle.astype(np.int64)
    # the part of each host-bound gap during which the whole device was idle
    dev_key = tuple_ids(iv["rank"].to_numpy(), iv["device"].to_numpy())
    mk, ms, me = grouped_merge(dev_key, iv["start"].to_numpy(), iv["end"].to_numpy())
    gap_s = np.where(hb, prev_end, 0)
    gap_e = np.where(hb, iv["start"].to_numpy(np.int64), 0)
    busy = grouped_intersection(dev_key, gap_s, np.maximum(gap_e, gap_s), mk, ms, me)
    iv["host_bound_device_idle_ns"] = np.where(hb, idle - busy, 0).astype(np.int64)
    it = iv["iteration"].to_numpy(np.int64)
    iv["in_step_gap"] = hb & (iv["prev_iteration"].to_numpy(np.int64) == it) & (it >= 0)
    iv["tiny"] = (
        launched
        & ~iv["graph_launched"].to_numpy()
        & ~blocking
        & (iv["dur"].to_numpy(np.int64) < call_ns)
    )
    return iv


def device_idle_pieces(lt: pd.DataFrame) -> pd.DataFrame:
    """The device-idle part of the in-step host-bound gaps as disjoint pieces: per
    device, (union of the in-step host-bound gaps of all its streams) minus (union of its
    busy time), each piece with the iteration of a gap holding it. Columns ``rank``,
    ``device``, ``iteration``, ``start``, ``end`` (int64), sorted by device and start."""
    cols = ["rank", "device", "iteration", "start", "end"]
    empty = pd.DataFrame({c: pd.Series(dtype=np.int64) for c in cols})
    sel = lt["in_step_gap"].to_numpy()
    if not sel.any():
        return empty
    dev_key = tuple_ids(lt["rank"].to_numpy(), lt["device"].to_numpy())
    g = lt.loc[sel]
    gk = dev_key[sel]
    gs, ge = g["prev_end"].to_numpy(np.int64), g["start"].to_numpy(np.int64)
    k, ps, pe = grouped_difference(
        gk, gs, ge, dev_key, lt["start"].to_numpy(np.int64), lt["end"].to_numpy(np.int64)
    )
    if len(k) == 0:
        return empty
    # attribute each idle piece to the iteration of a gap holding it: among the gaps of
    # its device starting at or before the piece, the one reaching furthest (cummax)
    o = np.lexsort((gs, gk))
    gk, gs, ge = gk[o], gs[o], ge[o]
    git = g["iteration"].to_numpy(np.int64)[o]
    pos = np.arange(len(gk), dtype=np.float64)
    run_max = pd.Series(ge).groupby(gk, sort=False).cummax().to_numpy()
    at_max = pd.Series(np.where(ge == run_max, pos, np.nan))
    arg = at_max.groupby(gk, sort=False).ffill().to_numpy().astype(np.int64)
    j = grouped_searchsorted(gk, gs, k, ps, side="right") - 1
    first = np.unique(dev_key, return_index=True)[1]  # dense key -> its first row
    return pd.DataFrame({
        "rank": lt["rank"].to_numpy(np.int64)[first][k],
        "device": lt["device"].to_numpy(np.int64)[first][k],
        "iteration": git[arg[j]],
        "start": ps,
        "end": pe,
    })  # fmt: skip


def device_idle_by_iteration(lt: pd.DataFrame, pieces: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (rank, iteration): |(union of the in-step host-bound gaps of all streams of a
    device) minus (union of that device's busy time)|, summed over devices. Gaps on two
    streams that are idle at the same time count once (a per-gap sum would not).
    ``pieces``: :func:`device_idle_pieces` of ``lt``, when already computed."""
    p = device_idle_pieces(lt) if pieces is None else pieces
    out = p.assign(len=p["end"] - p["start"])
    out = out.groupby(["rank", "iteration"], sort=True)["len"].sum().reset_index()
    out = out.rename(columns={"len": "host_bound_device_idle_ns"})
    return out.astype(np.int64)


def graph_candidates(lt: pd.DataFrame, *, min_run: int, ops_for: int | None = None) -> pd.DataFrame:
    """Runs of consecutive host-bound/tiny intervals per (rank, device, stream, iteration),
    best first. ``ops``: the run's top 3 ops by host-bound idle (then by count), for
    every run, or only for the first ``ops_for`` runs ([] for the others)."""
    cols = ["rank", "device", "stream", "iteration", "n_intervals", "n_host_bound", "n_tiny",
            "start", "end", "saving_ns", "device_idle_saving_ns", "ops"]  # fmt: skip
    same_it = lt["prev_iteration"].to_numpy() == lt["iteration"].to_numpy()
    hb_in = lt["host_bound"].to_numpy() & same_it
    flag = (hb_in | lt["tiny"].to_numpy()) & ~lt["graph_launched"].to_numpy()
    flag &= ~lt["blocking_launch"].to_numpy()  # a blocking copy cannot join a graph
    flag &= lt["iteration"].to_numpy() >= 0
    if not flag.any():
        return pd.DataFrame(columns=cols)
    # rows are in (rank, device, stream, start) order: a group changes where any key does
    changed = np.zeros(len(lt) - 1, dtype=bool)
    for c in ("rank", "device", "stream", "iteration"):  # four columns, not rows
        v = lt[c].to_numpy()
        changed |= v[1:] != v[:-1]
    # a new run starts at a flagged interval whose predecessor (same group) is not flagged
    brk = np.ones(len(lt), dtype=bool)
    brk[1:] = changed | ~flag[:-1]
    run = np.cumsum(brk & flag)
    d = lt.assign(
        _run=run,
        _hb=hb_in,
        _idle=np.where(hb_in, lt["host_bound_idle_ns"], 0),
        _didle=np.where(hb_in, lt["host_bound_device_idle_ns"], 0),
    ).loc[flag]
    g = d.groupby("_run", sort=True)
    runs = g.agg(
        rank=("rank", "first"), device=("device", "first"), stream=("stream", "first"),
        iteration=("iteration", "first"), n_intervals=("start", "size"),
        n_host_bound=("_hb", "sum"), n_tiny=("tiny", "sum"), start=("start", "min"),
        end=("end", "max"), saving_ns=("_idle", "sum"), device_idle_saving_ns=("_didle", "sum"),
    )  # fmt: skip
    runs = runs.loc[runs["n_intervals"] >= min_run]
    runs = runs.sort_values(
        ["saving_ns", "rank", "stream", "start"], ascending=[False, True, True, True],
        kind="stable",
    )  # fmt: skip
    # the ops responsible: top 3 by host-bound idle within the run (then by count)
    named = runs.index if ops_for is None else runs.index[:ops_for]
    d = d.loc[d["_run"].isin(named)]
    o = d.assign(op=d["op"].astype(str)).groupby(["_run", "op"], sort=False)
    ops = o.agg(idle=("_idle", "sum"), n=("start", "size")).reset_index()
    ops = ops.sort_values(["_run", "idle", "n", "op"], ascending=[True, False, False, True])
    ops = ops.groupby("_run").head(3)
    runs = runs.reset_index()
    runs["ops"] = _lists_by(runs, ops, ["_run"], "op")
    return runs.reset_index(drop=True)[cols]


def _per_group(lt: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    launched = lt.loc[lt["launched"]]
    base = lt.groupby(keys, observed=True, sort=True).agg(
        n_intervals=("start", "size"),
        n_launched=("launched", "sum"),
        launch_cpu_ns=("launch_cpu_ns", "sum"),
        n_host_bound=("host_bound", "sum"),
        host_bound_idle_ns=("host_bound_idle_ns", "sum"),
        host_bound_device_idle_ns=("host_bound_device_idle_ns", "sum"),
        n_tiny=("tiny", "sum"),
    )
    tiny_dur = lt.loc[lt["tiny"]].groupby(keys, observed=True)["dur"].sum()
    base["tiny_dur_ns"] = tiny_dur.reindex(base.index).fillna(0)
    delays = grouped_stats(
        launched.loc[launched["delay_counted"]], keys, "launch_delay_ns", "launch_delay"
    )
    out = base.reset_index().merge(delays.drop(columns="n_launch_delay"), on=keys, how="left")
    out["launch_delay_total_ns"] = out["launch_delay_total_ns"].fillna(0)
    for c in out.columns:
        if c.startswith("n_") or c.endswith("_ns") and not c.endswith(("p50_ns", "p95_ns")):
            out[c] = out[c].astype(np.int64)
    return out


def top_ops(lt: pd.DataFrame, n: int, keys: list[str] | None = None) -> pd.DataFrame:
    """Ops ranked by host-bound idle (device-idle part first), with tiny-kernel counts."""
    d = lt.loc[lt["host_bound"] | lt["tiny"]].assign(op=lambda x: x["op"].astype(str))
    k = (keys or []) + ["op"]
    g = d.groupby(k, observed=True).agg(
        host_bound_device_idle_ns=("host_bound_device_idle_ns", "sum"),
        host_bound_idle_ns=("host_bound_idle_ns", "sum"),
        n_host_bound=("host_bound", "sum"),
        n_tiny=("tiny", "sum"),
    )
    g = g.reset_index().sort_values(
        ["host_bound_device_idle_ns", "host_bound_idle_ns", "n_tiny", "op"],
        ascending=[False, False, False, True],
        kind="stable",
    )
    if keys:
        return g.groupby(keys, observed=True).head(n)
    return g.head(n)


@dataclass
class LaunchPart:
    """One rank's launch figures: what :func:`combine_launches` needs from it (counts,
    sums, its rows of the per-stream and per-iteration tables, its best graph-candidate
    runs and the launch delays whose percentiles span every rank)."""

    counts: dict[str, int]
    other_apis: dict[str, int]  # calls joined to device work that are not launch APIs
    delays: np.ndarray  # launch_delay_ns of the counted intervals
    per_stream: pd.DataFrame
    per_iteration: pd.DataFrame | None
    top_ops: pd.DataFrame  # per op: the sums top_ops ranks by
    graph_candidates: pd.DataFrame  # the rank's best runs (top_n), ops included
    # device_idle_pieces: where the device waited for the host, per step (the exposed
    # comm's step cost leaves this time to the host part: analysis.exposed_cost)
    idle_pieces: pd.DataFrame | None = None


_COUNTS = (
    "n_intervals", "n_launched", "n_without_launch_call", "n_negative_delay",
    "n_graph_launched", "n_blocking_launches", "launch_cpu_ns", "n_host_bound",
    "host_bound_idle_ns", "n_tiny", "tiny_dur_ns", "n_graph_candidates", "graph_saving_ns",
    "graph_device_idle_saving_ns", "host_bound_between_steps_ns", "in_steps_host_bound_idle_ns",
    "in_steps_launch_cpu_ns", "graph_saving_in_steps_ns",
)  # fmt: skip
_TOP_OP_SUMS = ("host_bound_device_idle_ns", "host_bound_idle_ns", "n_host_bound", "n_tiny")


def launch_part(
    intervals: pd.DataFrame,
    *,
    walls: pd.DataFrame,
    min_graph_run: int,
    host_bound_share: float,
    top_n: int,
) -> LaunchPart:
    """The launch figures of one rank's ``intervals`` (walls: that rank's steps)."""
    lt = launch_table(intervals)
    keys_s = ["rank", "device", "stream"]
    other = lt.loc[~lt["launched"] & (lt["launch_start"] >= 0).to_numpy(), "api"]
    per_stream = _per_group(lt, keys_s)
    st_ops = top_ops(lt, 3, keys_s)
    per_stream["top_ops"] = _lists_by(per_stream, st_ops, keys_s, "op")
    cands = graph_candidates(lt, min_run=min_graph_run, ops_for=top_n)
    # per-step figures count only gaps inside one iteration (the gap before a stream's
    # first interval of a step spans the host's between-step work) and take the
    # device-idle part as a union over the device's streams
    in_steps = lt.loc[lt["iteration"] >= 0]
    sgap = in_steps["in_step_gap"].to_numpy()
    in_steps = in_steps.assign(
        host_bound=sgap,
        host_bound_idle_ns=np.where(sgap, in_steps["host_bound_idle_ns"], 0),
        host_bound_device_idle_ns=np.where(sgap, in_steps["host_bound_device_idle_ns"], 0),
    )
    pieces = device_idle_pieces(lt)
    union = device_idle_by_iteration(lt, pieces)
    per_it = _per_group(in_steps, ["rank", "iteration"]) if len(in_steps) else None
    if per_it is not None:
        per_it = per_it.drop(columns="host_bound_device_idle_ns").merge(
            union, on=["rank", "iteration"], how="left"
        )
        per_it["host_bound_device_idle_ns"] = (
            per_it["host_bound_device_idle_ns"].fillna(0).astype(np.int64)
        )
        sav = cands.groupby(["rank", "iteration"])[["saving_ns", "device_idle_saving_ns"]].sum()
        sav = sav.rename(columns=lambda c: "graph_" + c).reset_index()
        per_it = per_it.merge(sav, on=["rank", "iteration"], how="left")
        per_it = per_it.merge(walls, on=["rank", "iteration"], how="left")
        for c in ("graph_saving_ns", "graph_device_idle_saving_ns"):
            per_it[c] = per_it[c].fillna(0).astype(np.int64)
        # runs on two streams may share idle time: never claim more than the union
        per_it["graph_device_idle_saving_ns"] = np.minimum(
            per_it["graph_device_idle_saving_ns"], per_it["host_bound_device_idle_ns"]
        )
        share = per_it["host_bound_device_idle_ns"] / per_it["wall_ns"].where(per_it["wall_ns"] > 0)
        per_it["host_bound_share"] = share
        per_it["flagged"] = (share > host_bound_share).fillna(False).astype(bool)
        keys_i = ["rank", "iteration"]
        per_it["top_ops"] = _lists_by(per_it, top_ops(in_steps, 3, keys_i), keys_i, "op")
    d = lt.loc[lt["host_bound"] | lt["tiny"]]
    op_sums = (
        d.assign(op=d["op"].astype(str))
        .groupby("op", observed=True)
        .agg(
            host_bound_device_idle_ns=("host_bound_device_idle_ns", "sum"),
            host_bound_idle_ns=("host_bound_idle_ns", "sum"),
            n_host_bound=("host_bound", "sum"),
            n_tiny=("tiny", "sum"),
        )
        .reset_index()
    )
    counted = lt["delay_counted"].to_numpy()
    counts = {
        "n_intervals": len(lt),
        "n_launched": int(lt["launched"].sum()),
        "n_without_launch_call": int((~lt["launched"]).sum()),
        "n_negative_delay": int(lt["delay_negative"].sum()),
        "n_graph_launched": int(lt["graph_launched"].sum()),
        "n_blocking_launches": int(lt["blocking_launch"].sum()),
        "launch_cpu_ns": int(lt["launch_cpu_ns"].sum()),
        "n_host_bound": int(lt["host_bound"].sum()),
        "host_bound_idle_ns": int(lt["host_bound_idle_ns"].sum()),
        "n_tiny": int(lt["tiny"].sum()),
        "tiny_dur_ns": int(lt.loc[lt["tiny"], "dur"].sum()),
        "n_graph_candidates": len(cands),
        "graph_saving_ns": int(cands["saving_ns"].sum()),
        "graph_device_idle_saving_ns": int(cands["device_idle_saving_ns"].sum()),
        "graph_saving_in_steps_ns": int(cands.loc[cands["iteration"] >= 0, "saving_ns"].sum()),
        "host_bound_between_steps_ns": int(
            lt.loc[lt["host_bound"] & ~lt["in_step_gap"], "host_bound_idle_ns"].sum()
        ),
        "in_steps_host_bound_idle_ns": int(in_steps["host_bound_idle_ns"].sum()),
        "in_steps_launch_cpu_ns": int(in_steps["launch_cpu_ns"].sum()),
    }
    return LaunchPart(
        counts=counts,
        other_apis={str(k): int(v) for k, v in other.value_counts(sort=False).items()},
        delays=lt["launch_delay_ns"].to_numpy(np.int64)[counted],
        per_stream=per_stream,
        per_iteration=per_it,
        top_ops=op_sums,
        graph_candidates=cands.head(top_n),
        idle_pieces=pieces,
    )


def _lists_by(rows: pd.DataFrame, ranked: pd.DataFrame, keys: list[str], col: str) -> list:
    """Per row of ``rows``, the ``col`` values of ``ranked`` with the same ``keys``, in
    ``ranked``'s order ([] when none): one factorize and one split, no per-group apply."""
    if len(rows) == 0:
        return []
    if len(ranked) == 0:
        return [[] for _ in range(len(rows))]
    both = pd.concat([rows[keys], ranked[keys]], ignore_index=True)
    code = both.groupby(keys, sort=False, observed=True).ngroup().to_numpy()
    row_code, r_code = code[: len(rows)], code[len(rows) :]
    order = np.argsort(r_code, kind="stable")
    vals = ranked[col].astype(str).to_numpy(dtype=object)[order]
    bounds = np.searchsorted(r_code[order], np.arange(int(code.max()) + 2))
    groups = [vals[a:b].tolist() for a, b in itertools.pairwise(bounds)]
    return [groups[c] for c in row_code]


def _concat(frames: list[pd.DataFrame | None]) -> pd.DataFrame | None:
    """Rows of several ranks, in rank order (empty parts add nothing)."""
    got = [f for f in frames if f is not None]
    full = [f for f in got if len(f)]
    if not full:
        return got[0] if got else None
    return full[0] if len(full) == 1 else pd.concat(full, ignore_index=True)


def combine_launches(
    parts: list[LaunchPart], *, walls: pd.DataFrame, top_n: int
) -> tuple[Launches, list[Note]]:
    """The "launches" section of every rank and notes on what is missing."""
    notes: list[str] = []
    tot = {k: sum(p.counts[k] for p in parts) for k in _COUNTS}
    other: dict[str, int] = {}
    for p in parts:
        for k, v in p.other_apis.items():
            other[k] = other.get(k, 0) + v
    n_launched = tot["n_launched"]
    if other:  # joined to a call that is not a known launch API: say which
        top = sorted(other.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        listed = ", ".join(f"{k} {v}" for k, v in top)
        notes.append(
            f"kernel launches: {sum(other.values())} device interval(s) are joined to calls "
            f"that are not known launch APIs ({listed}); they are not counted as launched "
            "(docs/METRICS.md lists the launch APIs)."
        )
    if n_launched == 0:
        why = (
            "no device interval is joined to a launch call (a CUDA/HIP kernel, copy, "
            "memset or graph launch API; docs/METRICS.md lists them); the trace has no "
            "runtime/driver events or their correlations are missing."
        )
        notes.append(f"kernel launches: not computed: {why}")
        return Launches(computed=False, reason=why), tagged(notes, "launches")
    n_neg = tot["n_negative_delay"]
    if n_neg:
        notes.append(
            f"kernel launches: {n_neg} interval(s) started before their launch call ended "
            "(host/device clock disagreement); their launch_delay counts as 0."
        )
    per_stream = _concat([p.per_stream for p in parts])
    per_it = _concat([p.per_iteration for p in parts])
    cands = _concat([p.graph_candidates for p in parts])
    cands = cands.sort_values(
        ["saving_ns", "rank", "stream", "start"], ascending=[False, True, True, True],
        kind="stable",
    ).reset_index(drop=True)  # fmt: skip
    ops = _concat([p.top_ops for p in parts])
    if len(parts) > 1 and len(ops):
        ops = ops.groupby("op", sort=True)[list(_TOP_OP_SUMS)].sum().reset_index()
    ops = ops.sort_values(
        ["host_bound_device_idle_ns", "host_bound_idle_ns", "n_tiny", "op"],
        ascending=[False, False, False, True],
        kind="stable",
    )
    n_rank_steps = len(walls)

    def per_step(total: float) -> float | None:
        if not n_rank_steps:
            return None
        return float(total) / n_rank_steps / 1e6

    pit = (
        per_it
        if per_it is not None
        else pd.DataFrame({"host_bound_device_idle_ns": [], "graph_device_idle_saving_ns": []})
    )
    delays = np.concatenate([p.delays for p in parts]) if parts else np.empty(0, np.int64)
    section = {
        "computed": True,
        "n_intervals": tot["n_intervals"],
        "n_launched": n_launched,
        "n_without_launch_call": tot["n_without_launch_call"],
        "n_negative_delay": n_neg,
        "n_graph_launched": tot["n_graph_launched"],
        "n_blocking_launches": tot["n_blocking_launches"],
        "launch_cpu_ns": tot["launch_cpu_ns"],
        "launch_delay": stats_ns(delays),
        "n_host_bound": tot["n_host_bound"],
        "host_bound_idle_ns": tot["host_bound_idle_ns"],
        # union over the device's streams, in-step gaps only (see device_idle_by_iteration)
        "host_bound_device_idle_ns": int(pit["host_bound_device_idle_ns"].sum()),
        "n_tiny": tot["n_tiny"],
        "tiny_dur_ns": tot["tiny_dur_ns"],
        "tiny_share": float(tot["n_tiny"]) / n_launched,
        "n_graph_candidates": tot["n_graph_candidates"],
        "graph_saving_ns": tot["graph_saving_ns"],
        "graph_device_idle_saving_ns": tot["graph_device_idle_saving_ns"],
        "n_rank_steps": n_rank_steps,
        "host_bound_between_steps_ns": tot["host_bound_between_steps_ns"],
        "host_bound_idle_ms_per_step": per_step(tot["in_steps_host_bound_idle_ns"]),
        "host_bound_device_idle_ms_per_step": per_step(pit["host_bound_device_idle_ns"].sum()),
        "launch_cpu_ms_per_step": per_step(tot["in_steps_launch_cpu_ns"]),
        "graph_saving_ms_per_step": per_step(tot["graph_saving_in_steps_ns"]),
        "graph_device_idle_saving_ms_per_step": per_step(pit["graph_device_idle_saving_ns"].sum()),
        "n_flagged_iterations": int(per_it["flagged"].sum()) if per_it is not None else 0,
        "per_stream": per_stream.to_dict("records"),
        "per_iteration": per_it.to_dict("records") if per_it is not None else [],
        "top_ops": ops.head(top_n).to_dict("records"),
        "graph_candidates": cands.head(top_n).to_dict("records"),
    }
    return Launches.of(section), tagged(notes, "launches")
