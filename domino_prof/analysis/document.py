"""The analysis result and its versioned JSON document (``domino-prof/analysis`` v2).

Every number of the :class:`Analysis` tables goes into the document; "undefined"
(hidden % without comm, a share of a zero wall time) is ``null``, never NaN, so
``json.dumps(doc, allow_nan=False)`` always succeeds. The per-interval frame is not
written (it can have millions of rows); its counts by kind are, under ``totals``.

Version 2 writes the seven tables (``by_rank`` ... ``by_iteration``; ``by_collective``
has one row per comm kernel) as compact columns: an object of one list per field, all
of one length (``doc["by_op"]["hidden_pct"][i]`` is row ``i``), instead of version 1's
list of row objects. :func:`encode` writes a document with msgspec's encoder (one
top-level key per line); it stays plain JSON (``json.load`` reads it).
:func:`read_document` reads versions 1 and 2, :func:`table` gives a table of either as
a DataFrame.
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
VERSION = 2
READABLE_VERSIONS = (1, 2)
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
    # "emulated comm (profile NAME)" when the traces carry the comm-emulation mark
    # (docs/EMULATION.md section 7); written as the document's "emulation" key only then
    emulation: str | None = None

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
            doc[name] = frame_columns(getattr(self, name))
        ov = self.overheads
        doc["overheads"] = ov.to_json() if hasattr(ov, "to_json") else jsonable(ov)
        doc["notes"] = [str(n) for n in self.notes]
        if self.emulation:  # absent for real collectives (older documents read the same)
            doc["emulation"] = {"comm": "emulated", "label": self.emulation}
        return doc


def _column(s: pd.Series) -> list:
    """One column as a list of native JSON values (NaN -> None), built by numpy."""
    if pd.api.types.is_bool_dtype(s.dtype):
        return s.to_numpy(bool).tolist()
    if pd.api.types.is_integer_dtype(s.dtype):
        return s.to_numpy(np.int64).tolist()
    if pd.api.types.is_float_dtype(s.dtype):
        a = s.to_numpy(np.float64)
        out = a.tolist()
        for i in np.flatnonzero(~np.isfinite(a)).tolist():
            out[i] = None
        return out
    if isinstance(s.dtype, pd.CategoricalDtype):
        cats = np.asarray([jsonable(c) for c in s.cat.categories] + [None], dtype=object)
        codes = s.cat.codes.to_numpy()
        return cats[np.where(codes >= 0, codes, len(cats) - 1)].tolist()
    return [v if isinstance(v, str) else jsonable(v) for v in s.astype(object).tolist()]


def frame_columns(df: pd.DataFrame) -> dict[str, list]:
    """A frame as compact columns: ``{column: [value per row]}`` (NaN -> None)."""
    return {str(c): _column(df[c]) for c in df.columns}


def encode(doc: Mapping) -> bytes:
    """A document as JSON bytes, with msgspec's encoder: one top-level key per line,
    each value compact. Loadable by the stdlib ``json``."""
    import msgspec

    enc = msgspec.json.Encoder()
    lines = [enc.encode(str(k)) + b": " + enc.encode(v) for k, v in doc.items()]
    return b"{\n" + b",\n".join(lines) + b"\n}\n"


def read_document(doc_or_path: Any) -> dict:
    """An analysis document (a dict, or the path of an analysis.json) of version 1 or 2,
    checked: ValueError naming what is wrong."""
    import json
    from pathlib import Path

    doc = doc_or_path
    if not isinstance(doc, Mapping):
        doc = json.loads(Path(doc_or_path).read_text(encoding="utf-8"))
    if not isinstance(doc, Mapping) or doc.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} document")
    if doc.get("version") not in READABLE_VERSIONS:
        raise ValueError(
            f"{SCHEMA} version {doc.get('version')!r} is not supported (this domino-prof "
            f"reads versions {', '.join(map(str, READABLE_VERSIONS))})"
        )
    return dict(doc)


def table(doc: Mapping, name: str) -> pd.DataFrame:
    """Table ``name`` of a document as a frame: version 2's columns or version 1's rows."""
    if name not in TABLES:
        raise KeyError(name)
    value = doc.get(name)
    if isinstance(value, Mapping):  # v2: {column: [values]}
        return pd.DataFrame({k: list(v) for k, v in value.items()})
    return pd.DataFrame.from_records(list(value or []))


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
