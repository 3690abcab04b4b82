"""Big files: the ``traceEvents`` array decoded in chunks (bounded memory, several cores).

A file of ``parse._STREAM_BYTES`` or more (16 MB) is decoded in ~16 MB chunks cut at
event boundaries of its ``traceEvents`` array, from a copy-on-write mmap, so only one
chunk's structs are alive at a time (peak memory ~ one chunk + columns);
``workers=N`` spreads the chunks of one file over N forked processes. Any doubt
about a split and None comes back: the caller decodes the file whole instead (and
reports any error precisely).
"""

from __future__ import annotations

import gc
import mmap
import os
import re
from pathlib import Path
from typing import Any

import msgspec

from domino_prof.trace.decode import (
    _LAX,
    _STRICT,
    _Event,
    _events_to_part,
    _finish,
    _meta_from_top,
    _Parsed,
    _Part,
)
from domino_prof.trace.read import _read_bytes

# --------------------------------------------------------------------------- #
# Big files: the traceEvents array in chunks (bounded memory, several cores)   #
# --------------------------------------------------------------------------- #

# Between two objects of an array: '}' ',' '{' '"'. Inside a JSON string a '"'
# is always escaped, so this cannot match inside a string; it can only match
# between objects of some array. A split inside an event's own nested array
# leaves brackets unbalanced, so that chunk fails to decode and we fall back.
_EVENT_GAP = re.compile(rb"\}\s*,\s*\{\s*\"")
_EVENTS_KEY = re.compile(rb"\"traceEvents\"\s*:\s*\[")
_CHUNK_DEC = msgspec.json.Decoder(list[_Event])
_CHUNK_TARGET = 16 * 1024 * 1024  # bytes of JSON per chunk: bounds the structs alive
_SHARED: Any = None  # the buffer, inherited by forked chunk workers


def _events_span(data) -> tuple[int, int] | None:
    """(start, end) of the traceEvents array's contents: data[start] == '{',
    data[end - 1] == '}'; None when the layout is not the plain Kineto one."""
    # The first match is a real key ('"' is escaped inside strings); were it a
    # nested one, the top-level decode of head + tail fails and we fall back.
    # (No scan for a second match: on a mmap it would page in the whole file.)
    m = _EVENTS_KEY.search(data)
    if m is None:
        return None
    start = m.end()
    while start < len(data) and data[start] in b" \t\r\n":
        start += 1
    if start >= len(data) or data[start] != ord("{"):
        return None
    # the array's ']' is followed by the rest of the top-level object: take the
    # last ']' preceded by an event's '}' whose tail decodes as an object's end.
    # (A trailing key holding a list of objects could fool this; then the last
    # chunk fails to decode and the caller falls back to one plain decode.)
    pos = len(data)
    window = max(start, len(data) - (1 << 20))
    while True:
        pos = data.rfind(b"]", window, pos)
        if pos < 0:
            return None
        j = pos - 1
        while j > start and data[j] in b" \t\r\n":
            j -= 1
        if data[j] != ord("}"):
            continue
        try:
            msgspec.json.decode(b'{"_": 0' + bytes(data[pos + 1 :]))
        except msgspec.DecodeError:
            continue
        return start, j + 1


def _chunk_bounds(data, start: int, end: int, k: int) -> list[tuple[int, int]]:
    """``k`` (lo, hi) byte ranges of whole events: data[lo] == '{', data[hi-1] == '}'."""
    bounds, lo = [], start
    for i in range(1, k):
        target = start + (end - start) * i // k
        if target <= lo:
            continue
        m = _EVENT_GAP.search(data, target, end)
        if m is None:
            break
        cut = data.rfind(b"}", m.start(), m.end()) + 1
        bounds.append((lo, cut))
        lo = data.find(b"{", cut, m.end())
    bounds.append((lo, end))
    return bounds


def _decode_chunks(buf, bounds: list[tuple[int, int]], base: int | None, sp: str) -> list[_Part]:
    """Decode chunks one after the other, in place: '[' / ']' are written over the
    separators around each (``buf`` is a private, copy-on-write mapping or a
    bytearray), so no chunk is copied and only one chunk's structs are alive."""
    parts = []
    page = mmap.PAGESIZE
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for lo, hi in bounds:
            saved = buf[lo - 1], buf[hi]
            buf[lo - 1] = ord("[")
            buf[hi] = ord("]")
            try:
                with memoryview(buf) as mv:
                    chunk = None
                    try:  # the view is released even when Ctrl-C lands mid-decode
                        chunk = mv[lo - 1 : hi + 1]
                        try:
                            events = _CHUNK_DEC.decode(chunk)
                        except msgspec.ValidationError:
                            events = _LAX.decode(chunk)
                        parts.append(_events_to_part(events, base, chunk, sp))
                        del events
                    finally:
                        if chunk is not None:
                            chunk.release()
            finally:  # the buffer stays valid JSON: a fallback may decode it whole
                buf[lo - 1], buf[hi] = saved
            if isinstance(buf, mmap.mmap) and hasattr(buf, "madvise"):
                a, b = (lo - 1) // page * page, hi // page * page
                if b > a:  # done with these pages: drop them from this process
                    buf.madvise(mmap.MADV_DONTNEED, a, b - a)
    finally:
        if gc_was:
            gc.enable()
    return parts


def _chunk_worker(
    conn, bounds: list[tuple[int, int]], base: int | None, sp: str
) -> None:  # pragma: no cover
    """Forked child: decode its chunks, send their columns, exit without freeing."""
    try:
        conn.send(("ok", _decode_chunks(_SHARED, bounds, base, sp)))
    except BaseException as e:  # noqa: BLE001 - anything: the parent falls back
        conn.send(("fail", repr(e)))
    finally:
        conn.close()
        os._exit(0)  # skip freeing millions of objects: the OS reclaims them at once


def _decode_forked(buf, groups, base: int | None, sp: str) -> list[_Part] | None:
    import multiprocessing as mp

    global _SHARED
    ctx = mp.get_context("fork")
    _SHARED = buf
    procs, conns = [], []
    try:
        for bounds in groups:
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_chunk_worker, args=(send, bounds, base, sp))
            p.start()
            send.close()
            procs.append(p)
            conns.append(recv)
    finally:
        _SHARED = None
    parts: list[_Part] = []
    ok = True
    for recv in conns:
        try:
            status, payload = recv.recv()
        except EOFError:
            status, payload = "fail", "worker died"
        if status == "ok":
            parts.extend(payload)
        else:
            ok = False
        recv.close()
    for p in procs:
        p.join()
    return parts if ok else None


def _open_buffer(path: Path):
    """A writable private view of the file's JSON: a copy-on-write mmap for plain
    files (pages come from the page cache and can be dropped as we go), a
    bytearray for gzip. Returns (buffer, close)."""
    with path.open("rb") as f:
        magic = f.read(2)
        if magic != b"\x1f\x8b" and hasattr(mmap, "ACCESS_COPY"):
            try:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            except (OSError, ValueError):
                mm = None
            if mm is not None:
                return mm, mm.close
    data = _read_bytes(path, mutable=True)
    return data, lambda: None


def _parse_in_chunks(path_s: str, rank_arg: int | None, nproc: int) -> _Parsed | None:
    """Parse one file's events chunk by chunk (in ``nproc`` forked processes when
    > 1); None when the layout is not plain Kineto or a chunk does not decode:
    the caller then decodes the file whole (and reports any error precisely)."""
    path = Path(path_s)
    try:
        buf, close = _open_buffer(path)
    except OSError:
        return None  # the plain path reports the read error
    try:
        return _parse_buffer_in_chunks(path_s, buf, rank_arg, nproc)
    finally:
        try:
            close()
        except BufferError:  # a view still exported (an exception in flight): GC frees it
            pass


def _parse_buffer_in_chunks(path_s: str, buf, rank_arg: int | None, nproc: int) -> _Parsed | None:
    """:func:`_parse_in_chunks` on a writable buffer (mmap or bytearray) already read;
    the buffer is left as it was when this returns None (the caller decodes it whole)."""
    span = _events_span(buf)
    if span is None:
        return None
    start, end = span
    try:
        top_doc = _STRICT.decode(bytes(buf[:start]) + b"]" + _tail(buf, end))
    except msgspec.MsgspecError:
        return None
    if isinstance(top_doc, list) or top_doc.traceEvents is None:
        return None
    top = {
        "distributedInfo": top_doc.distributedInfo,
        "baseTimeNanoseconds": top_doc.baseTimeNanoseconds,
        "deviceProperties": top_doc.deviceProperties,
        "hostName": top_doc.hostName if top_doc.hostName is not None else top_doc.host_name,
    }
    meta = _meta_from_top(path_s, top, rank_arg)  # may raise a _FileError: fine
    base = top["baseTimeNanoseconds"]
    n_chunks = max(nproc, -(-(end - start) // _CHUNK_TARGET))
    bounds = _chunk_bounds(buf, start, end, n_chunks)
    import multiprocessing as mp

    if nproc > 1 and len(bounds) > 1 and "fork" in mp.get_all_start_methods():
        k = min(nproc, len(bounds))
        groups = [bounds[i * len(bounds) // k : (i + 1) * len(bounds) // k] for i in range(k)]
        parts = _decode_forked(buf, groups, base, path_s)
    else:
        try:
            parts = _decode_chunks(buf, bounds, base, path_s)
        except msgspec.MsgspecError:
            parts = None
    if parts is None:
        return None
    return _finish(path_s, meta, parts)


def _tail(data, end: int) -> bytes:
    """What follows the events array's ']' (the rest of the top-level object)."""
    return bytes(data[data.find(b"]", end) + 1 :])
