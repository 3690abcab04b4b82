"""Findings: the overhead sections turned into a short ranked list of things to fix.

Each finding is a :class:`~domino_prof.analysis.results.Finding`: ``id``, ``severity``
(high / medium / low), ``title`` (short), ``detail`` (one sentence with the number),
``value`` + ``unit``, ``where`` (a ``Where``: rank / stream / op / iteration, None where
not applicable), ``fix`` and ``est_gain_ms_per_step`` (None when the trace gives no
honest estimate).

Severity is the estimated gain (or the value, when there is no estimate) as a share of
the mean step time (``step_ms``: mean over (rank, iteration) of the iteration's device
wall time): >= ``high_share`` high, >= ``medium_share`` medium, else low. The list is
sorted by severity, then by estimated gain (largest first). A finding appears only
when its number passes its threshold (``overheads.DEFAULT_THRESHOLDS``) and the replay
does not put its gain at zero (below ``ZERO_GAIN_MS``: a fix that changes nothing is no
finding; its figure stays in its overhead section).

Gains come from the replay model (``analysis.replay``; docs/METRICS.md "Extension:
replay model"): the replayed step minus the step replayed with the fix applied —
stream-switch idle: cross-stream waits at no latency; blocking syncs: the syncs removed
(so the gain is the device idle they cause, not the host's wait); host-bound launches:
launches at CUDA-graph replay cost; cross-rank wait: every collective at its transfer
time. One lost interval is one finding: when the late rank of the cross-rank wait is
itself host-bound (its critical path is mostly host time), the peers' wait is the same
time as that rank's host-bound launches and is not listed again. Where the unedited
replay does not reproduce the profiled step within 1% (or the document has no replay),
no gain is printed and the detail says why. Fix texts fit the trace's kind (``mode``:
threads and cores on a CPU trace).
"""

from __future__ import annotations

from collections.abc import Mapping

from domino_prof.analysis.results import AcrossRanks, Finding, Launches, StreamSwitches, Where

_SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}
# a replayed gain below this (ms per step) prints as 0.000: such a finding is not listed
ZERO_GAIN_MS = 0.0005


def _severity(amount_ms: float | None, step_ms: float | None, t: Mapping[str, float]) -> str:
    if amount_ms is None or not step_ms:
        return "low"
    share = amount_ms / step_ms
    if share >= t["high_share"]:
        return "high"
    if share >= t["medium_share"]:
        return "medium"
    return "low"


def _worst_iteration(rows: list[dict], col: str) -> tuple[int | None, int | None]:
    best = max(rows, key=lambda r: r.get(col) or 0, default=None)  # per-step rows (few)
    if not best or not best.get(col):
        return None, None
    return int(best["rank"]), int(best["iteration"])


def _share(ms: float | None, step_ms: float | None) -> float | None:
    if ms is None or not step_ms:
        return None
    return ms / step_ms


def _replay_gains(whatif: Mapping | None):
    """(gain of a scenario name -> ms or None, why there is no gain or None)."""
    w = dict(whatif or {})
    if not w:
        return (lambda name: None), "no replay of the step in this analysis: no gain estimate"
    if not w.get("computed"):
        return (lambda name: None), f"no replay of the step ({w.get('reason')}): no gain estimate"
    if not w.get("explained"):
        return (lambda name: None), w.get("reason")
    gains = {r["name"]: r.get("gain_ms") for r in w.get("scenarios") or ()}
    return gains.get, None


def _host_bound_late_rank(whatif: Mapping | None, late: int | None) -> float | None:
    """The late rank's mean host share of its critical path (None if unknown)."""
    rows = [r for r in (dict(whatif or {}).get("critical_path") or ()) if r.get("rank") == late]
    shares = [r.get("host_share") for r in rows if r.get("host_share") is not None]
    return sum(shares) / len(shares) if shares else None


def build_findings(
    *,
    switches: StreamSwitches | Mapping | None,
    launches: Launches | Mapping | None,
    ranks: AcrossRanks | Mapping | None,
    step_ms: float | None,
    thresholds: Mapping[str, float],
    whatif: Mapping | None = None,
    mode: str = "gpu",
) -> list[Finding]:
    """The ranked findings from the three overhead sections (typed, or their JSON form)
    and the replay's what-if table (``analysis.replay``; JSON form)."""
    t = thresholds
    sw = switches if isinstance(switches, StreamSwitches) else StreamSwitches.of(switches)
    la = launches if isinstance(launches, Launches) else Launches.of(launches)
    rk = ranks if isinstance(ranks, AcrossRanks) else AcrossRanks.of(ranks)
    gain_of, no_gain = _replay_gains(whatif)
    out: list[Finding] = []

    def add(fid, title, detail, value, unit, where, fix, gain, amount=None):
        if gain is not None and abs(gain) < ZERO_GAIN_MS:
            return  # the replay says fixing it gains nothing: not a thing to fix
        if no_gain and fid != "tiny_kernels":
            detail = f"{detail} ({no_gain})"
        if amount is not None:
            amt = amount
        elif gain is not None or no_gain is None:
            amt = gain
        else:  # no replay: rank by the raw figure, as an upper bound
            amt = value if unit == "ms/step" else None
        out.append(
            Finding(
                id=fid,
                severity=_severity(amt, step_ms, t),
                title=title,
                detail=detail,
                value=value,
                unit=unit,
                where=where,
                fix=fix,
                est_gain_ms_per_step=gain,
                share_of_step=_share(amt, step_ms),
            )
        )

    gap_ms = sw.switch_gap_ms_per_step
    if gap_ms and (_share(gap_ms, step_ms) or 0) > t["switch_gap_share"]:
        pair = sw.worst_stream_pair or {}
        stream_pair = f"{pair['from_stream']}->{pair['to_stream']}" if pair else None
        top_op = (sw.by_op or [{}])[0].get("op")
        _, it = _worst_iteration(sw.per_iteration, "switch_gap_total_ns")
        count = sw.switch_gap.count if sw.switch_gap is not None else 0
        add(
            "stream_switch_gap",
            "Stream-switch idle",
            f"cross-stream waits leave the waiting stream idle {gap_ms:.3f} ms per step "
            f"({count} waits)",
            gap_ms,
            "ms/step",
            Where(rank=pair.get("rank"), stream=stream_pair, op=top_op, iteration=it),
            "record the event right after the producer, wait as late as possible, give the "
            "waiting stream independent work",
            gain_of("free_waits"),
        )
    blk_ms = sw.blocking_sync_ms_per_step
    if blk_ms and (_share(blk_ms, step_ms) or 0) > t["blocking_sync_share"]:
        b = (sw.blocking_syncs or [{}])[0]
        blk_rank, blk_it = _worst_iteration(sw.per_iteration, "blocking_sync_ns")
        g = gain_of("no_syncs")
        op = b.get("op")
        sites = [(r.get("gain_ms") or 0.0, r["name"].split("@", 1)[1])
                 for r in (dict(whatif or {}).get("scenarios") or ())
                 if r["name"].startswith("no_sync:") and "@" in r["name"]]  # fmt: skip
        if sites:  # the site whose removal gains most (an aten:: op when unannotated)
            op = max(sites, key=lambda x: x[0])[1]
        idle = (f"; the device idles {g:.3f} ms per step for them (replayed without them)"
                if g is not None else "")  # fmt: skip
        where_op = op if op and op != "(none)" else None
        outside = " (outside any annotation)" if where_op is None else ""
        add(
            "blocking_sync",
            "Blocking host syncs",
            f"{b.get('api')}{outside} and other blocking syncs keep the host waiting "
            f"{blk_ms:.3f} ms per step{idle}",
            blk_ms,
            "ms/step",
            Where(rank=blk_rank, op=where_op, iteration=blk_it),
            "drop .item()/.cpu()/synchronize() from the step; use non_blocking copies",
            g,
        )
    merged_skew = False
    hb_ms = la.host_bound_device_idle_ms_per_step
    if la.computed and hb_ms and (_share(hb_ms, step_ms) or 0) > t["host_bound_share"]:
        graph_ms = la.graph_device_idle_saving_ms_per_step or 0.0
        top = (la.top_ops or [{}])[0]
        streams = la.per_stream or [{}]  # few rows: one per stream
        worst = max(streams, key=lambda r: r.get("host_bound_device_idle_ns") or 0)
        rank, it = _worst_iteration(la.per_iteration, "host_bound_device_idle_ns")
        late = rk.late_rank if rk.computed else None
        same = (
            late is not None and late == rank
            and (_host_bound_late_rank(whatif, late) or 0.0) > 0.5
            and rk.max_wait_ms_per_step
        )  # fmt: skip
        peers = (
            f"; its peers wait for rank {late} up to {rk.max_wait_ms_per_step:.3f} ms per "
            "step in collectives: the same lost time, counted here"
            if same else ""
        )  # fmt: skip
        add(
            "host_bound_launches",
            "Host-bound launches",
            f"the device waits for kernel launches {hb_ms:.3f} ms per step; "
            f"{la.n_graph_candidates} CUDA-graph candidate runs hold "
            f"{graph_ms:.3f} ms of it{peers}",
            hb_ms,
            "ms/step",
            Where(rank=rank, stream=worst.get("stream"), op=top.get("op"), iteration=it),
            "capture the candidate runs in CUDA graphs (torch.compile "
            "mode='reduce-overhead'), fuse small ops, cut per-op host overhead",
            gain_of("cuda_graphs"),  # the step replayed with launches at graph cost
        )
        if same:
            merged_skew = True
    tiny = la.tiny_share
    if la.computed and tiny is not None and tiny > t["tiny_share"]:
        top = max(la.top_ops or [{}], key=lambda r: r.get("n_tiny", 0))
        add(
            "tiny_kernels",
            "Tiny kernels",
            f"{100 * tiny:.1f}% of launched kernels run shorter than their launch call; "
            "their idle is counted under host-bound launches",
            100 * tiny,
            "% of launches",
            Where(op=top.get("op")),
            "fuse them (torch.compile, fused/foreach optimizers and norms)",
            None,
        )
    wait_ms = rk.max_wait_ms_per_step
    if (rk.computed and wait_ms and (_share(wait_ms, step_ms) or 0) > t["skew_share"]
            and not merged_skew):  # fmt: skip
        late = rk.late_rank
        worst = (rk.worst_instances or [{}])[0]
        if mode == "cpu":
            fix = (
                f"find why rank {late} is late: on a CPU run the ranks' compute and gloo "
                "threads share the host's cores (see the CPU threads section); give each "
                "rank its own cores (fewer ranks per host, taskset, OMP_NUM_THREADS), or "
                "even out the ranks' work"
            )
        else:
            fix = (
                f"find why rank {late} is late: uneven work or data, host CPU contention, "
                "a slower GPU or link"
            )
        add(
            "rank_skew",
            "Cross-rank wait",
            f"ranks wait up to {wait_ms:.3f} ms per step inside collectives for a late "
            f"peer (rank {late} arrives last most often)",
            wait_ms,
            "ms/step",
            Where(rank=late, op=worst.get("coll"), iteration=worst.get("iteration")),
            fix,
            gain_of("no_skew"),  # every collective at its transfer time (no late peer)
        )
    out.sort(
        key=lambda f: (
            _SEVERITY_ORDER[f.severity],
            -(f.est_gain_ms_per_step if f.est_gain_ms_per_step is not None else -1.0),
            f.id,
        )
    )
    return out
