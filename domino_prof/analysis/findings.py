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
when its number passes its threshold (``overheads.DEFAULT_THRESHOLDS``).
"""

from __future__ import annotations

from collections.abc import Mapping

from domino_prof.analysis.results import AcrossRanks, Finding, Launches, StreamSwitches, Where

_SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


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


def build_findings(
    *,
    switches: StreamSwitches | Mapping | None,
    launches: Launches | Mapping | None,
    ranks: AcrossRanks | Mapping | None,
    step_ms: float | None,
    thresholds: Mapping[str, float],
) -> list[Finding]:
    """The ranked findings from the three overhead sections (typed, or their JSON form)."""
    t = thresholds
    sw = switches if isinstance(switches, StreamSwitches) else StreamSwitches.of(switches)
    la = launches if isinstance(launches, Launches) else Launches.of(launches)
    rk = ranks if isinstance(ranks, AcrossRanks) else AcrossRanks.of(ranks)
    out: list[Finding] = []

    def add(fid, title, detail, value, unit, where, fix, gain, amount=None):
        amt = gain if amount is None else amount
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
            gap_ms,
        )
    blk_ms = sw.blocking_sync_ms_per_step
    if blk_ms and (_share(blk_ms, step_ms) or 0) > t["blocking_sync_share"]:
        b = (sw.blocking_syncs or [{}])[0]
        blk_rank, blk_it = _worst_iteration(sw.per_iteration, "blocking_sync_ns")
        add(
            "blocking_sync",
            "Blocking host syncs",
            f"{b.get('api')} and other blocking syncs take {blk_ms:.3f} ms of host time per step",
            blk_ms,
            "ms/step",
            Where(rank=blk_rank, op=b.get("op"), iteration=blk_it),
            "drop .item()/.cpu()/synchronize() from the step; use non_blocking copies",
            blk_ms,
        )
    hb_ms = la.host_bound_device_idle_ms_per_step
    if la.computed and hb_ms and (_share(hb_ms, step_ms) or 0) > t["host_bound_share"]:
        graph_ms = la.graph_device_idle_saving_ms_per_step or 0.0
        top = (la.top_ops or [{}])[0]
        streams = la.per_stream or [{}]  # few rows: one per stream
        worst = max(streams, key=lambda r: r.get("host_bound_device_idle_ns") or 0)
        rank, it = _worst_iteration(la.per_iteration, "host_bound_device_idle_ns")
        add(
            "host_bound_launches",
            "Host-bound launches",
            f"the device waits for kernel launches {hb_ms:.3f} ms per step; "
            f"{la.n_graph_candidates} CUDA-graph candidate runs would recover "
            f"{graph_ms:.3f} ms of it",
            hb_ms,
            "ms/step",
            Where(rank=rank, stream=worst.get("stream"), op=top.get("op"), iteration=it),
            "capture the candidate runs in CUDA graphs (torch.compile "
            "mode='reduce-overhead'), fuse small ops, cut per-op host overhead",
            hb_ms,  # upper bound: the device idle spent waiting for the host
        )
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
    if rk.computed and wait_ms and (_share(wait_ms, step_ms) or 0) > t["skew_share"]:
        late = rk.late_rank
        worst = (rk.worst_instances or [{}])[0]
        add(
            "rank_skew",
            "Cross-rank wait",
            f"ranks wait up to {wait_ms:.3f} ms per step inside collectives for a late "
            f"peer (rank {late} arrives last most often)",
            wait_ms,
            "ms/step",
            Where(rank=late, op=worst.get("coll"), iteration=worst.get("iteration")),
            f"find why rank {late} is late: uneven work or data, host CPU contention, a "
            "slower GPU or link",
            wait_ms,
        )
    out.sort(
        key=lambda f: (
            _SEVERITY_ORDER[f.severity],
            -(f.est_gain_ms_per_step if f.est_gain_ms_per_step is not None else -1.0),
            f.id,
        )
    )
    return out
