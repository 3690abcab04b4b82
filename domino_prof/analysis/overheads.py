"""Overheads beyond overlap: stream switches, kernel launches, cross-rank waits, findings.

The thresholds (:func:`resolve_thresholds`) and the reduction of the per-rank parts
(``analysis.rankwise`` builds them per rank and reduces them across ranks; the
engine's ``analyze`` / ``analyse_path`` run it: ``Analysis.overheads``). The result is
an :class:`~domino_prof.analysis.results.Overheads` (typed sections, findings and
topic-tagged notes; ``to_json()`` is the document's ``overheads``: ints, floats, str,
bool, None, lists, dicts; never NaN):

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

from domino_prof.errors import ConfigError

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
