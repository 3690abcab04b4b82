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

from domino_prof.analysis.attribution import Context
from domino_prof.analysis.results import Overheads
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
    """Stream switches, launches, cross-rank waits and ranked findings (JSON-ready) of a
    trace and its ``intervals``: each rank's part, then the cross-rank reduction
    (``rankwise.combine_overheads``, which ``analyze`` uses). ``ctx``: the trace's
    attribution context when it has one rank (built per rank otherwise)."""
    from domino_prof.analysis.ranks import rank_comm
    from domino_prof.analysis.rankwise import (
        RankResult,
        _device_parts,
        combine_overheads,
        rank_ids_of,
        split_ranks,
    )
    from domino_prof.analysis.tables import iteration_spans

    t = resolve_thresholds(getattr(config, "overhead_thresholds", None))
    gpu = bool(trace.events["cat"].astype(str).isin(DEVICE_CATS).any())
    iv_rank = intervals["rank"].to_numpy()
    parts = []
    split = split_ranks(trace)
    for r, one in split:
        iv = intervals[iv_rank == r].reset_index(drop=True)
        spans = iteration_spans(iv)
        res = RankResult(rank=r, mode="gpu" if gpu else "cpu", tables={}, counts={}, kinds={},
                         comm_sources=[], spans=spans, comm=rank_comm(one, iv))  # fmt: skip
        if gpu:
            one_ctx = ctx if ctx is not None and len(split) == 1 else None
            res.switches, res.launches = _device_parts(one, iv, spans, t, one_ctx)
        from domino_prof.analysis.replay import rank_graph_or_note

        res.extra["replay"] = rank_graph_or_note(one.events, iv, rank=r, mode=res.mode)
        parts.append(res)
    return combine_overheads(parts, config, ranks=rank_ids_of(trace), metas=trace.ranks)
