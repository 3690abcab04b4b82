"""The one builder of `domino-prof run`-style directories for tests (ARCHITECTURE.md §4):
DIR/run.json and a DIR/<mode>/ per mode holding that mode's traces.

Tests say what their run holds (the modes' entries, the config, the comparison, ...);
this module owns the layout: the schema and version, each mode's ``trace_dir``, where
the traces go, and the file name."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

RUN_SCHEMA = "domino-prof/run"


def write_run_dir(
    d: Path,
    modes: dict[str, dict],
    *,
    traces: Callable[[Path, str], object] | None = None,
    config: dict | None = None,
    **fields: object,
) -> Path:
    """Write ``d``/run.json, ``{"schema", "version": 1, "config", "modes", **fields}``
    (``fields``: ``comparison=``, ``verdict=``, ``status=``, ...), each mode's entry
    ``{"trace_dir": mode, **entry}``; ``traces(d / mode, mode)`` writes a mode's traces
    (else its directory is made, empty). Returns ``d``."""
    d.mkdir(parents=True, exist_ok=True)
    for mode in modes:
        if traces is not None:
            traces(d / mode, mode)
        else:
            (d / mode).mkdir(parents=True, exist_ok=True)
    doc = {"schema": RUN_SCHEMA, "version": 1, "config": config if config is not None else {}}
    doc["modes"] = {m: {"trace_dir": m, **entry} for m, entry in modes.items()}
    doc.update(fields)
    (d / "run.json").write_text(json.dumps(doc))
    return d
