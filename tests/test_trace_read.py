"""Reading a trace file (domino_prof.trace.read): a bad, missing or unreadable file is one
TraceError line naming the file, the problem and the fix.

Expected values are worked by hand from the tiny traces built here (arithmetic in
comments) or computed independently with the stdlib ``json`` + ``Decimal`` (moved from
tests/test_loader.py, unchanged).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from trace_checks import (
    _bad,
    small_trace,
)

from domino_prof.errors import TraceError
from domino_prof.trace import load_trace

BAD = {
    # kind: (words in the problem, words in the fix)
    "truncated_gz": ("truncated gzip", "re-copy the file or re-export"),
    "invalid_json": ("invalid JSON at byte 21 (line 1)", "re-export it"),
    "truncated_json": ("ends early (truncated)", "re-export"),
    "empty": ("empty file", "re-export"),
    "no_trace_events": ("no 'traceEvents' list", "export_chrome_trace"),
    "not_a_trace": ("not an object", "Chrome trace"),
    "our_analysis": ("a domino-prof analysis document, not a profiler trace", "run directory"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_file(tmp_path, kind):
    p = _bad(tmp_path, kind)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    problem, fix = BAD[kind]
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and problem in msg and fix in msg, msg
    assert "\n" not in msg
    assert e.value.path == str(p)


def test_nonexistent_path(tmp_path):
    with pytest.raises(TraceError, match=r"nope\.json: no such file or directory; check the path"):
        load_trace(tmp_path / "nope.json")


def test_unreadable_file(tmp_path, monkeypatch):
    p = small_trace().write(tmp_path / "rank0.json")

    def denied(self):
        raise PermissionError(13, "Permission denied")

    # chmod 000 does not stop root (CI containers), so deny the read itself
    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}: permission denied; make the file readable (chmod +r)"
