"""Big files: the ``traceEvents`` array decoded in chunks, streamed (bounded memory,
every core).

A file of ``parse._STREAM_BYTES`` or more (16 MB), or one asked to use several
processes, is streamed (:func:`_parse_streaming`): its JSON text arrives in blocks from
``read.iter_blocks`` (gzip inflated by a background thread, overlapping the decode),
is cut into ~:data:`_CHUNK_TARGET` chunks at event boundaries of its ``traceEvents``
array, and each chunk is decoded into columns (``decode._events_to_part``) and dropped:
neither the whole JSON text nor all the decoded events are ever in memory, only the
columns and a few chunks. With ``nproc`` > 1 the chunks go to ``nproc`` forked
workers, each holding one chunk at a time, which send the chunk's columns back (the
parent keeps them in file order and concatenates them column by column). The chunk and
its columns cross through two shared memory slots per worker (:class:`_Workers`), not
through the pipe, which only carries who, what size, and the small rest: on the
project's 2-core VM a pipe moved 8 MB messages at 0.24 GB/s, and the one-big-file set
(644 MB of JSON) sent ~1.1 GB through them. Any doubt
about a split and None comes back: the caller decodes the file whole instead (and
reports any error precisely). A FIFO / pipe, read once into memory, is cut the same
way from its buffer (:func:`_parse_buffer_in_chunks`).
"""

from __future__ import annotations

import contextlib
import gc
import mmap
import os
import pickle
import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from domino_prof.trace.decode import (
    _EVENTS,
    _STRICT,
    _events_to_part,
    _finish,
    _first_decode,
    _meta_from_top,
    _Parsed,
    _Part,
    _top_of,
)
from domino_prof.trace.read import iter_blocks

# --------------------------------------------------------------------------- #
# Big files: the traceEvents array in chunks (bounded memory, several cores)   #
# --------------------------------------------------------------------------- #

# Between two objects of an array: '}' ',' '{' '"'. Inside a JSON string a '"'
# is always escaped, so this cannot match inside a string; it can only match
# between objects of some array. A split inside an event's own nested array
# leaves brackets unbalanced, so that chunk fails to decode and we fall back.
_EVENT_GAP = re.compile(rb"\}\s*,\s*\{\s*\"")
_EVENTS_KEY = re.compile(rb"\"traceEvents\"\s*:\s*\[")
_CHUNK_TARGET = 8 * 1024 * 1024  # bytes of JSON per chunk: bounds the structs alive
_SHARED: Any = None  # the buffer, inherited by forked chunk workers
_SLOT_BYTES: int | None = None  # a chunk worker's slots (None: 2 * _CHUNK_TARGET)


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
                        events = _first_decode(_EVENTS, chunk)
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
    top = _top_of(top_doc)
    meta = _meta_from_top(path_s, top, rank_arg)  # may raise a FileError: fine
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


# --------------------------------------------------------------------------- #
# Streaming: blocks -> chunks of whole events -> columns                       #
# --------------------------------------------------------------------------- #


class _NotPlain(Exception):
    """The file's layout is not one the streaming cut can trust: decode it whole."""


_HEAD_LIMIT = 64 << 20  # no '"traceEvents": [' within this many bytes: not plain


def _array_end(buf) -> tuple[int, int] | None:
    """In the last piece of the events array (``buf[0] == '{'``): (end of the last
    event, position of the array's ']'); None when it cannot be found for sure."""
    pos = len(buf)
    window = max(0, len(buf) - (1 << 20))
    while True:
        pos = buf.rfind(b"]", window, pos)
        if pos < 0:
            return None
        j = pos - 1
        while j > 0 and buf[j] in b" \t\r\n":
            j -= 1
        if buf[j] != ord("}"):
            continue
        try:
            msgspec.json.decode(b'{"_": 0' + bytes(buf[pos + 1 :]))
        except msgspec.DecodeError:
            continue
        return j + 1, pos


def _wrap(buf, lo: int, hi: int) -> bytes:
    """``'[' + buf[lo:hi] + ']'``: one copy."""
    with memoryview(buf) as mv:
        return b"".join((b"[", mv[lo:hi], b"]"))


def _stream_chunks(blocks, target: int):
    """Yield ``("head", bytes)`` (the text before the events array's first event),
    then ``("chunk", b"[...]")`` per run of whole events, then ``("tail", bytes)``
    (what follows the array's ']'). Raises :class:`_NotPlain`."""
    buf = bytearray()
    it = iter(blocks)
    for block in it:
        buf += block
        m = _EVENTS_KEY.search(buf)
        if m is None:
            if len(buf) > _HEAD_LIMIT:
                raise _NotPlain
            continue
        start = m.end()
        while start < len(buf) and buf[start] in b" \t\r\n":
            start += 1
        if start >= len(buf):
            continue  # the first event is in the next block
        if buf[start] != ord("{"):
            raise _NotPlain  # an empty array, or not objects
        yield "head", bytes(buf[:start])
        del buf[:start]
        break
    else:
        raise _NotPlain
    done = False
    while not done:
        block = next(it, None)
        if block is None:
            done = True
        else:
            buf += block
            del block
        while len(buf) > target:
            m = _EVENT_GAP.search(buf, target)
            if m is None:
                break  # the next event boundary is in a later block
            cut = buf.rfind(b"}", m.start(), m.end()) + 1
            nxt = buf.find(b"{", cut, m.end())
            yield "chunk", _wrap(buf, 0, cut)
            del buf[:nxt]
    end = _array_end(buf)
    if end is None:
        raise _NotPlain
    j, pos = end
    yield "chunk", _wrap(buf, 0, j)
    yield "tail", bytes(buf[pos + 1 :])


def _decode_chunk(chunk: bytes, base: int | None, sp: str) -> _Part:
    events = _first_decode(_EVENTS, chunk)
    part = _events_to_part(events, base, chunk, sp)
    del events
    return part


def _pack(part: _Part, box: mmap.mmap | None) -> tuple[bytes, list[int] | None]:
    """``part`` pickled, its arrays' bytes written to ``box`` one after the other when
    they fit: (the pickle, the arrays' sizes); else (the whole pickle, None)."""
    if box is None:
        return pickle.dumps(part, protocol=5), None
    part.ints = {k: np.ascontiguousarray(v) for k, v in part.ints.items()}  # out of band
    bufs: list[pickle.PickleBuffer] = []
    data = pickle.dumps(part, protocol=5, buffer_callback=bufs.append)
    raws = [b.raw() for b in bufs]
    if sum(r.nbytes for r in raws) > len(box):
        return pickle.dumps(part, protocol=5), None
    sizes, off = [], 0
    for r in raws:
        box[off : off + r.nbytes] = r
        off += r.nbytes
        sizes.append(r.nbytes)
        r.release()
    return data, sizes


def _unpack(data: bytes, sizes: list[int] | None, box: mmap.mmap | None) -> _Part:
    """:func:`_pack`'s part again, its arrays copied out of ``box`` (which the worker
    overwrites with its next part)."""
    if sizes is None or box is None:
        return pickle.loads(data)
    bufs, off = [], 0
    with memoryview(box) as mv:
        for n in sizes:
            bufs.append(bytearray(mv[off : off + n]))
            off += n
    return pickle.loads(data, buffers=bufs)


def _stream_worker(tasks, results, sp: str, inbox: mmap.mmap | None,
                   outbox: mmap.mmap | None) -> None:  # pragma: no cover - forked child  # fmt: skip
    """Forked child: decode the chunks it is sent (in ``inbox``, or in the message when
    larger), send back each chunk's columns (through ``outbox``: :func:`_pack`)."""
    gc.disable()
    try:
        while True:
            msg = tasks.recv()
            if msg is None:
                break
            base, chunk = msg  # the chunk, or its size in inbox
            if isinstance(chunk, int):
                with memoryview(inbox) as mv, mv[:chunk] as view:
                    part = _decode_chunk(view, base, sp)
            else:
                part = _decode_chunk(chunk, base, sp)
            results.send(("ok", *_pack(part, outbox)))
            del chunk, msg, part
    except BaseException as e:  # noqa: BLE001 - anything: the parent falls back
        with contextlib.suppress(BaseException):  # the parent may be gone already
            results.send(("fail", repr(e), None))
    finally:
        os._exit(0)


class _Workers:
    """``k`` forked chunk decoders, one chunk at a time each, results in order.

    Each worker has two shared memory slots of ``2 * _CHUNK_TARGET`` bytes (anonymous
    ``MAP_SHARED`` maps made before the fork): its chunk in, its columns out. A slot is
    reused only when the worker's previous result has been received (and copied out
    of it): a worker holds one chunk at a time. A chunk or a result too big for its
    slot goes through the pipe, as everything did before."""

    def __init__(self, k: int, sp: str) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        self.procs, self.tasks, self.results = [], [], []
        self.inboxes: list[mmap.mmap | None] = []
        self.outboxes: list[mmap.mmap | None] = []
        self.pending: list[int] = []  # worker of each chunk sent, not yet received
        self.sent = 0
        self.through_slots = {"chunks": 0, "results": 0}  # the rest took the pipe
        slot = _SLOT_BYTES or 2 * _CHUNK_TARGET
        for _ in range(k):
            t_recv, t_send = ctx.Pipe(duplex=False)
            r_recv, r_send = ctx.Pipe(duplex=False)
            try:
                inbox, outbox = mmap.mmap(-1, slot), mmap.mmap(-1, slot)
            except (OSError, ValueError):  # no shared memory here: all through the pipe
                inbox = outbox = None
            self.inboxes.append(inbox)
            self.outboxes.append(outbox)
            p = ctx.Process(target=_stream_worker, args=(t_recv, r_send, sp, inbox, outbox),
                            daemon=True)  # fmt: skip
            p.start()
            t_recv.close()
            r_send.close()
            self.procs.append(p)
            self.tasks.append(t_send)
            self.results.append(r_recv)

    def _receive(self) -> _Part:
        w = self.pending.pop(0)
        try:
            status, payload, sizes = self.results[w].recv()
        except (EOFError, OSError):
            status, payload, sizes = "fail", "worker died", None
        if status != "ok":
            raise _NotPlain(payload)
        self.through_slots["results"] += sizes is not None
        return _unpack(payload, sizes, self.outboxes[w])

    def submit(self, base: int | None, chunk: bytes) -> list[_Part]:
        """Send ``chunk`` to the next worker; the parts that came back meanwhile
        (a worker holds one chunk: its previous result is taken first)."""
        out = []
        if len(self.pending) >= len(self.procs):
            out.append(self._receive())
        w = self.sent % len(self.procs)
        box = self.inboxes[w]
        if box is not None and len(chunk) <= len(box):
            box[: len(chunk)] = chunk
            self.tasks[w].send((base, len(chunk)))
            self.through_slots["chunks"] += 1
        else:
            self.tasks[w].send((base, chunk))
        self.pending.append(w)
        self.sent += 1
        return out

    def drain(self) -> list[_Part]:
        return [self._receive() for _ in range(len(self.pending))]

    def close(self) -> None:
        for t in self.tasks:
            try:
                t.send(None)
                t.close()
            except OSError:
                pass
        for r in self.results:
            r.close()
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
        for box in (*self.inboxes, *self.outboxes):
            if box is not None:
                box.close()


def _parse_streaming(path_s: str, rank_arg: int | None, nproc: int) -> _Parsed | None:
    """Stream one file's events in chunks (module doc), on ``nproc`` forked workers
    when > 1; None when the layout is not plain Kineto or a chunk does not decode
    (the caller decodes the file whole)."""
    import multiprocessing as mp

    workers = None
    if nproc > 1 and "fork" in mp.get_all_start_methods():
        workers = _Workers(nproc, path_s)  # forked before the inflating thread starts
    blocks = iter_blocks(Path(path_s))
    parts: list[_Part] = []
    base: int | None = None
    head = b""
    top_doc = None
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for kind, data in _stream_chunks(blocks, _CHUNK_TARGET):
            if kind == "head":
                head = data
                try:
                    doc = _STRICT.decode(head + b"]}")
                except msgspec.MsgspecError:
                    raise _NotPlain from None
                if isinstance(doc, list):
                    raise _NotPlain
                base = doc.baseTimeNanoseconds
            elif kind == "chunk":
                if workers is None:
                    parts.append(_decode_chunk(data, base, path_s))
                else:
                    parts.extend(workers.submit(base, data))
                del data
            else:  # tail: the whole top-level object, less its events
                if workers is not None:
                    parts.extend(workers.drain())
                try:
                    top_doc = _STRICT.decode(head + b"]" + data)
                except msgspec.MsgspecError:
                    raise _NotPlain from None
                if isinstance(top_doc, list) or top_doc.traceEvents is None:
                    raise _NotPlain
                if top_doc.baseTimeNanoseconds != base:
                    raise _NotPlain  # a base after the events: the chunks did without it
    except (_NotPlain, msgspec.MsgspecError):
        return None
    finally:
        blocks.close()
        if workers is not None:
            workers.close()
        if gc_was:
            gc.enable()
    if top_doc is None or len({p.unit for p in parts} - {None}) > 1:
        return None  # chunks disagree on the time unit: the whole file decides
    meta = _meta_from_top(path_s, _top_of(top_doc), rank_arg)  # may raise a FileError
    return _finish(path_s, meta, parts)


_parse_in_chunks = _parse_streaming  # the name tests/test_trace_chunked.py calls
