"""The analysis result and its versioned JSON document (``domino-prof/analysis`` v1).

Every number of the :class:`Analysis` tables goes into the document; "undefined"
(hidden % without comm, a share of a zero wall time) is ``null``, never NaN, so
``json.dumps(doc, allow_nan=False)`` always succeeds. The per-interval frame is not
written (it can have millions of rows); its counts by kind are, under ``totals``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import numpy as np
import pandas as pd

from domino_prof.analysis.config import AnalysisConfig
from domino_prof.analysis.results import Note, Overheads

SCHEMA = "domino-prof/analysis"
VERSION = 1
TABLES = (
    "by_rank",
    "by_stream",
    "by_collective",
    "by_collective_type",
    "by_op",
    "by_phase",
    "by_iteration",
)


@dataclass
class Analysis:
    """Everything ``analyze`` computed for one trace (see docs/ARCHITECTURE.md §2)."""

    config: AnalysisConfig
    source: str
    ranks: list[int]
    mode: str  # "gpu" | "cpu"
    intervals: pd.DataFrame
    by_rank: pd.DataFrame
    by_stream: pd.DataFrame
    by_collective: pd.DataFrame
    by_collective_type: pd.DataFrame  # per (rank, all_reduce | reduce_scatter | all_gather ...)
    by_op: pd.DataFrame
    by_phase: pd.DataFrame
    by_iteration: pd.DataFrame
    totals: dict
    overheads: Overheads | None = None
    notes: list[Note] = field(default_factory=list)  # str with a .topic (results.Note)
    # the merged compute time that hides comm, per (rank, device) (overlap.ComputeReference;
    # not written to JSON): what every later hidden/exposed split measures against
    reference: Any = None

    def to_json(self) -> dict:
        """The versioned document: plain JSON types only, ``null`` for undefined."""
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "version": VERSION,
            "source": self.source,
            "mode": self.mode,
            "ranks": [int(r) for r in self.ranks],
            "config": self.config.to_json(),
            "totals": jsonable(self.totals),
        }
        for name in TABLES:
            doc[name] = frame_records(getattr(self, name))
        ov = self.overheads
        doc["overheads"] = ov.to_json() if hasattr(ov, "to_json") else jsonable(ov)
        doc["notes"] = [str(n) for n in self.notes]
        return doc


def frame_records(df: pd.DataFrame) -> list[dict]:
    """A frame as a list of row dicts with native JSON types (NaN -> None)."""
    cols = {}
    for c in df.columns:
        s = df[c]
        if pd.api.types.is_bool_dtype(s.dtype):
            cols[c] = [bool(v) for v in s.tolist()]
        elif pd.api.types.is_integer_dtype(s.dtype):
            cols[c] = [int(v) for v in s.tolist()]
        elif pd.api.types.is_float_dtype(s.dtype):
            cols[c] = [None if not math.isfinite(v) else float(v) for v in s.tolist()]
        else:  # categorical / string / object
            cols[c] = [jsonable(v) if not isinstance(v, str) else v
                       for v in s.astype(object).tolist()]  # fmt: skip
    names = list(cols)
    return [dict(zip(names, row)) for row in zip(*cols.values())] if names else []


def jsonable(obj: Any) -> Any:
    """Recursively turn numpy/pandas values into JSON types; non-finite floats -> None."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, pd.DataFrame):
        return frame_records(obj)
    if isinstance(obj, pd.Series):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [jsonable(v) for v in obj]
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in fields(obj)}
    if obj is pd.NA or obj is pd.NaT:
        return None
    return str(obj)
