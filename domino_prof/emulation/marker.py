"""The mark an emulated run leaves in its traces, and how the analyzer recognises
emulated comm. Torch-free (the analyzer imports this; ``reference_model.emulate`` too).

A trace whose collectives were emulated carries a top-level key::

    "domino_prof": {"comm": "emulated", "profile": "h200-nvlink-tp8", "ranks": 8,
                    "label": "emulated comm (profile h200-nvlink-tp8)"}

(``run --comm emulate`` writes it as the first key while it exports each trace;
:func:`mark_trace_file` adds it to a trace already written), and its emulated kernels
are named ``emulated_allreduce_*``, ``emulated_reducescatter_*``,
``emulated_allgather_*`` (:data:`KERNEL_PATTERN`), which the analyzer counts as comm
(:data:`FAMILY`, for ``analysis/config.py``'s COMM_FAMILIES).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from domino_prof.errors import TraceError
from domino_prof.io import atomic_write_bytes

MARKER_KEY = "domino_prof"
# searched (re.search, case-insensitive) in the demangled kernel name, as COMM_FAMILIES are
KERNEL_PATTERN = r"^(?:void\s+)?emulated_(?:allreduce|reducescatter|allgather)_"
# (key, label, pattern) of a CommFamily: analysis.config.CommFamily(*FAMILY)
FAMILY: tuple[str, str, str] = ("emulated", "emulated comm (domino-prof)", KERNEL_PATTERN)


def label(profile_name: str) -> str:
    """The one wording of every emulated number."""
    return f"emulated comm (profile {profile_name})"


def comm_marker(profile_name: str, *, ranks: int, rank: int = 0, kernel: str | None = None,
                ctas: int | None = None, engine: str | None = None) -> dict:  # fmt: skip
    """The mark; ``kernel`` (the stand-in: paced | burst) and ``ctas`` (--comm-ctas) are
    written when given, ``engine`` (--comm-engine) when it is not the default ``sm``."""
    m = {"comm": "emulated", "profile": profile_name, "ranks": ranks, "rank": rank,
         "label": label(profile_name)}  # fmt: skip
    if kernel is not None:
        m["kernel"] = kernel
    if ctas is not None:
        m["ctas"] = ctas
    if engine not in (None, "sm"):
        m["engine"] = engine
    return m


def trace_marker(top: Any) -> str | None:
    """The label of a trace's top level (a dict: the decoded JSON, or its top-level keys)
    when its comm was emulated, else None. A malformed mark is a TraceError line."""
    if not isinstance(top, dict) or MARKER_KEY not in top:
        return None
    m = top[MARKER_KEY]
    if not isinstance(m, dict) or m.get("comm") != "emulated":
        return None
    name = m.get("profile")
    if not isinstance(name, str) or not name:
        raise TraceError(
            "<trace>", f"'{MARKER_KEY}.comm' is 'emulated' but names no profile",
            "re-run `domino-prof run --comm emulate`; a hand-edited mark needs 'profile'",
        )  # fmt: skip
    return label(name)


def add_marker(doc: dict, marker: dict) -> dict:
    """``doc`` (a Chrome trace object) with the mark set (in place; returned)."""
    doc[MARKER_KEY] = marker
    return doc


def mark_trace_file(path: str | Path, marker: dict) -> None:
    """Add the mark to an exported trace file (plain or gzip JSON), atomically."""
    p = Path(path)
    raw = p.read_bytes()
    gz = raw[:2] == b"\x1f\x8b"
    doc = json.loads(gzip.decompress(raw) if gz else raw)
    if not isinstance(doc, dict):
        raise TraceError(p, "is a bare event array; cannot carry the emulation mark",
                         "export with torch.profiler's export_chrome_trace")  # fmt: skip
    data = json.dumps(add_marker(doc, marker)).encode()
    atomic_write_bytes(p, gzip.compress(data, mtime=0) if gz else data)
