"""Overheads beyond overlap: stream switches, kernel launches, cross-rank waits, findings.

Entry point :func:`analyze_overheads` takes the loaded ``Trace``, the ``intervals``
frame of ``analysis.intervals``/``analyze`` (docs/ARCHITECTURE.md section 2) and the
``AnalysisConfig``; it returns an :class:`~domino_prof.analysis.results.Overheads`
(typed sections, findings and topic-tagged notes; ``to_json()`` is the document's
``overheads``: ints, floats, str, bool, None, lists, dicts; never NaN):

``{"step_ms": float | None, "thresholds": {...}, "stream_switches": {...},
"launches": {...}, "across_ranks": {...}, "findings": [...], "notes": [...]}``

Thresholds (``config.overhead_thresholds``; any subset, unknown keys are an error):

=====================  =======  ====================================================
switch_gap_share       0.02     flag stream-switch gaps above this share of step time
host_bound_share       0.05     flag device idle waiting for launches above this share
tiny_share             0.25     flag when this share of launched kernels is tiny
blocking_sync_share    0.0      flag blocking host syncs above this share (0: any)
skew_share             0.02     flag cross-rank waits above this share of step time
min_graph_run          3        shortest run of host-bound/tiny intervals to call a
                                CUDA-graph candidate
high_share             0.05     a finding whose gain is >= this share of step is high
medium_share           0.01     ... >= this share is medium (else low)
top_n                  5        rows kept in each "top" list
=====================  =======  ====================================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from domino_prof.analysis.attribution import Context, context
from domino_prof.analysis.findings import build_findings
from domino_prof.analysis.launches import summarize_launches
from domino_prof.analysis.ranks import summarize_ranks
from domino_prof.analysis.results import (
    Launches,
    Note,
    Overheads,
    StreamSwitches,
    jsonable,
)
from domino_prof.analysis.switches import summarize_switches
from domino_prof.analysis.tables import iteration_walls
from domino_prof.errors import ConfigError
from domino_prof.trace.schema import DEVICE_CATS, Trace

DEFAULT_THRESHOLDS: Mapping[str, float] = {
    "switch_gap_share": 0.02,
    "host_bound_share": 0.05,
    "tiny_share": 0.25,
    "blocking_sync_share": 0.0,
    "skew_share": 0.02,
    "min_graph_run": 3,
    "high_share": 0.05,
    "medium_share": 0.01,
    "top_n": 5,
}
_INT_KEYS = ("min_graph_run", "top_n")


def resolve_thresholds(user: Mapping[str, float] | None) -> dict[str, float]:
    """Defaults overridden by ``user``; ConfigError for an unknown key or a bad value."""
    out = dict(DEFAULT_THRESHOLDS)
    valid = ", ".join(DEFAULT_THRESHOLDS)
    for key, value in (user or {}).items():
        if key not in DEFAULT_THRESHOLDS:
            raise ConfigError(f"unknown overhead threshold {key!r}; valid keys are: {valid}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"overhead threshold {key}={value!r} is not a number; give a number"
            ) from None
        if not math.isfinite(v) or v < 0:
            raise ConfigError(f"overhead threshold {key}={value!r} must be a finite number >= 0")
        if key in _INT_KEYS:
            if v < 1 or v != int(v):
                raise ConfigError(f"overhead threshold {key}={value!r} must be a whole number >= 1")
            v = int(v)
        out[key] = v
    return out


def analyze_overheads(
    trace: Trace, intervals: pd.DataFrame, config: Any, *, ctx: Context | None = None
) -> Overheads:
    """Stream switches, launches, cross-rank waits and ranked findings (JSON-ready).
    ``ctx``: the trace's attribution context (the one its intervals were attributed
    with; built here when not given)."""
    t = resolve_thresholds(getattr(config, "overhead_thresholds", None))
    top_n = int(t["top_n"])
    events = trace.events
    notes: list[str] = []
    ctx = context(events) if ctx is None else ctx
    walls = iteration_walls(intervals)
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
    gpu = bool(events["cat"].astype(str).isin(DEVICE_CATS).any())
    if gpu:
        switches, n1 = summarize_switches(
            events, intervals, walls=walls, switch_gap_share=t["switch_gap_share"],
            top_n=top_n, ctx=ctx,
        )  # fmt: skip
        launches, n2 = summarize_launches(
            intervals, walls=walls, min_graph_run=int(t["min_graph_run"]),
            host_bound_share=t["host_bound_share"], top_n=top_n,
        )  # fmt: skip
        notes += n1 + n2
    else:
        why = (
            "not applicable: CPU-only trace (no kernel/gpu_memcpy/gpu_memset events, so no "
            "CUDA streams or launch calls)."
        )
        switches = StreamSwitches(computed=False, reason=why)
        launches = Launches(computed=False, reason=why)
        notes.append(Note(f"stream switches and kernel launches: {why}", "launches"))
    across, n3 = summarize_ranks(trace, intervals, top_n=top_n)
    notes += n3
    findings = build_findings(
        switches=switches, launches=launches, ranks=across, step_ms=step_ms, thresholds=t
    )
    return Overheads(
        step_ms=step_ms,
        thresholds=jsonable(t),
        stream_switches=switches,
        launches=launches,
        across_ranks=across,
        findings=findings,
        notes=notes,
    )
