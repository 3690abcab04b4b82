"""One file split across processes (domino_prof.trace.chunked): the same frame as one
process, and a fall-back to a whole decode where a split cannot be trusted.

Expected values are worked by hand from the tiny traces built here (arithmetic in
comments) or computed independently with the stdlib ``json`` + ``Decimal`` (moved from
tests/test_loader.py, unchanged).
"""

from __future__ import annotations

import pytest
from trace_checks import (
    _assert_same,
    _gen,
    _raw_trace,
    _x,
    small_trace,
)

from domino_prof.trace import load_trace


@pytest.mark.parametrize("name", ["rank1.pt.trace.json", "rank1.pt.trace.json.gz"])
def test_split_file_matches_one_process(tmp_path, name):
    from domino_prof.trace import chunked

    p = _gen(tmp_path, name, 4000)
    serial = load_trace(p, workers=1)
    for k in (2, 3):
        _assert_same(serial, load_trace(p, workers=k))
    # the split path really ran (it returns None when it falls back)
    for k in (1, 3):
        parsed = chunked._parse_in_chunks(str(p), None, k)
        assert parsed is not None and parsed.n == len(serial.events)


def test_split_file_with_string_ids_metadata_and_exact_ts(tmp_path):
    # metadata, string pids/tids and decimal-exact absolute ts spread over chunks
    from domino_prof.trace import chunked

    evs = [_x(f"e{i}", f"17900000000{i:05d}.{i % 1000:03d}") for i in range(300)]
    evs.insert(
        150, '{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "t1"}}'
    )
    evs.insert(
        250, '{"ph": "X", "cat": "Trace", "name": "s", "pid": "Spans", "tid": "PT", "ts": 1.5}'
    )
    p = _raw_trace(tmp_path / "r.json", evs, base=None)
    serial = load_trace(p, workers=1)
    assert serial.ranks[0].thread_names == {(1, 1): "t1", (-1, -1): "PT"}
    # e7 at 1790000000000007.007 µs (a 1.79e15 µs absolute ts: decimal path)
    e7 = serial.events[serial.events["name"] == "e7"]
    assert e7["ts"].tolist() == [1_790_000_000_000_007_007]
    assert chunked._parse_in_chunks(str(p), None, 3) is not None
    _assert_same(serial, load_trace(p, workers=3))


def test_split_falls_back_when_events_hold_object_lists(tmp_path):
    # '}, {"' also occurs inside these events' args: a split there cannot decode,
    # and the loader must fall back to one process with the same result
    b = small_trace()
    for i in range(200):
        b.cpu(f"op{i}", 20 + i, 1, extra=[{"a": i}, {"b": i}])
    p = b.write(tmp_path / "rank0.json")
    _assert_same(load_trace(p, workers=1), load_trace(p, workers=4))


def test_chunked_decode_falls_back_on_a_nested_trace_events_key(tmp_path, monkeypatch):
    # the first '"traceEvents": [' is inside another key: the chunk path must not
    # take it for the real array (it falls back to a whole decode)
    from domino_prof.trace import chunked, parse

    monkeypatch.setattr(parse, "_STREAM_BYTES", 0)
    monkeypatch.setattr(chunked, "_CHUNK_TARGET", 50)
    p = tmp_path / "rank0.json"
    p.write_text(
        '{"meta": {"traceEvents": [' + _x("decoy", "1") + "]}, "
        '"distributedInfo": {"rank": 0}, "traceEvents": ['
        + ", ".join(_x(f"e{i}", str(10 + i)) for i in range(5))
        + "]}"
    )
    assert chunked._parse_in_chunks(str(p), None, 1) is None
    t = load_trace(p)
    assert t.events["name"].astype(str).tolist() == ["e0", "e1", "e2", "e3", "e4"]


@pytest.mark.parametrize("slot", [1, 1 << 22, None], ids=["pipe", "slots", "no-shm"])
def test_chunks_and_columns_cross_by_slot_or_pipe_alike(tmp_path, monkeypatch, slot):
    """A chunk worker gets its chunk, and sends its columns, through a shared memory
    slot, or through the pipe when they do not fit or when no shared memory can be
    mapped (None here): the frame is the one-process frame either way, and the path
    asked for is the one taken."""
    import types

    from domino_prof.trace import chunked, parse

    if slot is None:

        def no_shm(*a, **k):
            raise OSError(12, "Cannot allocate memory")

        monkeypatch.setattr(chunked, "mmap", types.SimpleNamespace(mmap=no_shm))

    p = _gen(tmp_path, "rank1.pt.trace.json.gz", 4000)
    serial = load_trace(p, workers=1)
    monkeypatch.setattr(parse, "_STREAM_BYTES", 0)
    monkeypatch.setattr(chunked, "_CHUNK_TARGET", 64 * 1024)
    monkeypatch.setattr(chunked, "_SLOT_BYTES", slot)
    made = []

    class Spy(chunked._Workers):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr(chunked, "_Workers", Spy)
    parsed = chunked._parse_in_chunks(str(p), None, 2)
    (w,) = made
    assert parsed is not None and parsed.n == len(serial.events) and w.sent > 2
    want = w.sent if slot and slot > 1 else 0
    assert w.through_slots == {"chunks": want, "results": want}
    _assert_same(serial, load_trace(p, workers=2))


def test_a_chunk_worker_that_fails_sends_the_whole_file_back_to_one_decode(
    tmp_path, monkeypatch
):
    """Events whose args hold lists of objects: a cut inside one makes a chunk that
    does not decode in its worker; the worker says so, the streamed parse gives up
    (None) and the loader decodes the file whole, with the one-process frame."""
    from domino_prof.trace import chunked, parse

    b = small_trace()
    for i in range(400):
        b.cpu(f"op{i}", 20 + i, 1, extra=[{"a": i}, {"b": i}])
    p = b.write(tmp_path / "rank0.json")
    serial = load_trace(p, workers=1)
    monkeypatch.setattr(parse, "_STREAM_BYTES", 0)
    monkeypatch.setattr(chunked, "_CHUNK_TARGET", 2000)
    assert chunked._parse_in_chunks(str(p), None, 2) is None
    _assert_same(serial, load_trace(p, workers=2))


def test_a_chunk_worker_that_dies_sends_the_whole_file_back_to_one_decode(
    tmp_path, monkeypatch
):
    """A chunk worker killed while it holds a chunk (here: it exits on the chunk that
    holds event e150): the streamed parse gives up (None) and the loader decodes the
    file whole, with the one-process frame; nothing hangs."""
    import os

    from domino_prof.trace import chunked, parse

    p = _raw_trace(tmp_path / "r.json", [_x(f"e{i}", str(10 + i)) for i in range(400)], base=None)
    serial = load_trace(p, workers=1)
    monkeypatch.setattr(parse, "_STREAM_BYTES", 0)
    monkeypatch.setattr(chunked, "_CHUNK_TARGET", 2000)
    decode = chunked._decode_chunk

    def dies_on_e150(chunk, base, sp):  # runs in the forked workers
        if b'"e150"' in bytes(chunk):
            os._exit(1)
        return decode(chunk, base, sp)

    monkeypatch.setattr(chunked, "_decode_chunk", dies_on_e150)
    assert chunked._parse_in_chunks(str(p), None, 2) is None
    _assert_same(serial, load_trace(p, workers=2))
