"""The per-file job (domino_prof.trace.parse): a big file is streamed in chunks in one
process, with the frame of a whole decode.

Expected values are worked by hand from the tiny traces built here (arithmetic in
comments) or computed independently with the stdlib ``json`` + ``Decimal`` (moved from
tests/test_loader.py, unchanged).
"""

from __future__ import annotations

from trace_checks import (
    _assert_same,
    _gen,
)

from domino_prof.trace import load_trace


def test_chunked_serial_decode_matches_whole_decode(tmp_path, monkeypatch):
    # big files are decoded chunk by chunk in one process: force ~2 kB chunks
    from domino_prof.trace import chunked, parse

    p = _gen(tmp_path, "rank1.pt.trace.json", 4000)
    whole = load_trace(p)  # small file: decoded whole
    monkeypatch.setattr(parse, "_STREAM_BYTES", 0)
    monkeypatch.setattr(chunked, "_CHUNK_TARGET", 2000)
    bounds = chunked._chunk_bounds(*_span(chunked, p), 5000)
    assert len(bounds) > 100  # really many chunks
    _assert_same(whole, load_trace(p, workers=1))
    _assert_same(whole, load_trace(tmp_path, workers=1))


def _span(chunked, p):
    buf = p.read_bytes()
    return (buf, *chunked._events_span(buf))
