"""Reading a trace file's JSON text: plain files, gzip (inflated in-process, detected by
its magic bytes, not the suffix), FIFOs and ``<(cmd)`` pipes (read exactly once, gzip
inflated as it arrives). A UTF-8 byte-order mark before the JSON is read past.
:func:`iter_blocks` streams a file's JSON text in blocks (the inflated text is never
whole in memory; ``chunked`` decodes it block by block), inflating in a background
thread so that gzip overlaps the decode. Errors are :class:`FileError` values that
name the file, the problem and the fix (they pickle, so a worker process can send them
back; the loader raises them as ``TraceError``).

The inflater is the fastest installed of ``isal`` (ISA-L) and ``zlib-ng``
(``pip install 'domino-prof[fast-gzip]'``), else the stdlib :mod:`zlib`; all three
give the same bytes. ``DOMINO_PROF_INFLATER=zlib`` forces the stdlib one."""

from __future__ import annotations

import os
import stat
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

BOM = b"\xef\xbb\xbf"  # UTF-8 byte-order mark: some editors and writers put it first


def _inflater():
    """(module with ``decompressobj(wbits=31)``, its name): the fastest installed."""
    want = os.environ.get("DOMINO_PROF_INFLATER", "")
    if want != "zlib":
        try:
            from isal import isal_zlib

            return isal_zlib, "isal"
        except ImportError:
            pass
        try:
            from zlib_ng import zlib_ng

            return zlib_ng, "zlib-ng"
        except ImportError:
            pass
    return zlib, "zlib"


def _strip_bom(data):
    """``data`` without a leading UTF-8 BOM (the same object when there is none)."""
    if data[:3] == BOM:
        del_ok = isinstance(data, bytearray)
        if del_ok:
            del data[:3]
            return data
        return data[3:]
    return data


class FileError(Exception):
    """A per-file problem, raised as TraceError by the parent (picklable)."""

    def __init__(self, path: str, problem: str, fix: str) -> None:
        super().__init__(path, problem, fix)
        self.path, self.problem, self.fix = path, problem, fix


def read_bytes(path: Path, *, mutable: bool = False) -> bytes | bytearray:
    """The file's JSON text (gzip inflated); a bytearray when ``mutable``."""
    sp = str(path)
    try:
        if mutable:
            with path.open("rb") as f:
                data = bytearray(os.fstat(f.fileno()).st_size)
                got = f.readinto(data)
                del data[got:]
        else:
            data = path.read_bytes()
    except FileNotFoundError:
        raise FileError(sp, "no such file", "check the path") from None
    except PermissionError:
        raise FileError(sp, "permission denied", "make the file readable (chmod +r)") from None
    except IsADirectoryError:
        raise FileError(sp, "is a directory", "pass the directory itself") from None
    except OSError as e:
        raise FileError(sp, f"cannot read ({e.strerror or e})", "check the file") from None
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(bytes(data), sp)
        if mutable:
            data = bytearray(data)
    data = _strip_bom(data)
    if not data[:4096].strip() and not data.strip():  # strip() copies: only when needed
        raise FileError(sp, "empty file", "re-export the trace (the profiler wrote nothing)")
    return data


def _gunzip(data: bytes, sp: str) -> bytes:
    """Inflate all gzip members; a stream that stops early is a truncated file."""
    parts = []
    z = _inflater()[0]
    while data:
        d = z.decompressobj(wbits=31)
        try:
            parts.append(d.decompress(data))
            parts.append(d.flush())
        except (zlib.error, z.error) as e:
            raise FileError(
                sp, f"corrupt gzip data ({e})", "re-copy or re-export the trace"
            ) from None
        if not d.eof:
            raise FileError(
                sp,
                "truncated gzip file (the compressed stream ends early)",
                "re-copy the file or re-export the trace (the writer was probably interrupted)",
            )
        data = d.unused_data
        if data and data[:2] != b"\x1f\x8b":
            break  # trailing garbage after the last member: ignore, as gzip does
    parts = [x for x in parts if x]
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _is_regular(path: Path) -> bool:
    """A regular file (after symlinks); False for FIFOs, ``<(cmd)`` pipes, devices."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True  # let the read report the problem


def _read_stream(path: Path) -> bytearray:
    """The JSON text of a FIFO, a ``<(cmd)`` pipe or another non-regular file, read
    exactly once (a second open would block on a FIFO or miss what was read): the
    blocks of :func:`_raw_blocks`, so gzip is inflated as the data arrives and the
    compressed bytes are never all held. Errors as for files."""
    out = bytearray()
    for block in _raw_blocks(path):
        out += block
    if not out.strip():
        raise FileError(
            str(path), "empty file", "re-export the trace (the profiler wrote nothing)"
        )
    return out


class _StreamGunzip:
    """Incremental gzip inflation of all members (trailing garbage ignored, as gzip does)."""

    def __init__(self, sp: str) -> None:
        self.sp = sp
        self.z = _inflater()[0]
        self.d = self.z.decompressobj(wbits=31)
        self.started = False  # the current member has received data
        self.ignore = False  # after the last member: trailing garbage

    def feed(self, data: bytes, out: bytearray) -> None:
        while data and not self.ignore:
            if not self.started and len(data) >= 2 and data[:2] != b"\x1f\x8b":
                self.ignore = True  # not a new member: trailing garbage
                return
            self.started = True
            try:
                out += self.d.decompress(data)
            except (zlib.error, self.z.error) as e:
                raise FileError(
                    self.sp, f"corrupt gzip data ({e})", "re-copy or re-export the trace"
                ) from None
            if not self.d.eof:
                return
            data = self.d.unused_data
            self.d = self.z.decompressobj(wbits=31)
            self.started = False

    def finish(self) -> None:
        if self.started and not self.ignore:
            raise FileError(
                self.sp,
                "truncated gzip file (the compressed stream ends early)",
                "re-copy the file or re-export the trace (the writer was probably interrupted)",
            )


def _uncompressed_size(path: Path) -> int:
    """File size, or for gzip the size stored in its trailer (mod 4 GiB); 0 for a FIFO
    or pipe, which must not be opened twice (its data would be consumed)."""
    if not _is_regular(path):
        return 0
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if f.read(2) != b"\x1f\x8b" or size < 18:
                return size
            f.seek(-4, os.SEEK_END)
            isize = int.from_bytes(f.read(4), "little")
        # ISIZE wraps at 4 GiB; deflate ratio of JSON is rarely above 20x
        while isize < size:
            isize += 1 << 32
        return isize
    except OSError:
        return 0


# --------------------------------------------------------------------------- #
# Streaming: a file's JSON text in blocks, inflated in a background thread     #
# --------------------------------------------------------------------------- #

BLOCK = 8 << 20  # bytes of JSON text a block holds (at least)
_READ = 1 << 20  # bytes read from the file at a time


def _raw_blocks(path: Path) -> Iterator[bytes]:
    """The file's JSON text, gzip inflated, in blocks of about :data:`BLOCK` bytes
    (the first without its BOM); errors as :class:`FileError`."""
    sp = str(path)
    try:
        f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise FileError(sp, "no such file", "check the path") from None
    except PermissionError:
        raise FileError(sp, "permission denied", "make the file readable (chmod +r)") from None
    except IsADirectoryError:
        raise FileError(sp, "is a directory", "pass the directory itself") from None
    except OSError as e:
        raise FileError(sp, f"cannot read ({e.strerror or e})", "check the file") from None
    out = bytearray()
    gz: _StreamGunzip | None = None
    first, seen = True, False
    with f:
        while True:
            try:
                chunk = f.read(_READ if gz is not None or first else BLOCK)
            except OSError as e:
                raise FileError(sp, f"cannot read ({e.strerror or e})", "check the file") from None
            if not chunk:
                break
            if first:
                first = False
                if chunk[:2] == b"\x1f\x8b":
                    gz = _StreamGunzip(sp)
            if gz is None:
                out += chunk
            else:
                gz.feed(chunk, out)
            if len(out) >= BLOCK:
                if not seen:
                    out = _strip_bom(out)
                    seen = bool(out)
                yield bytes(out)
                out = bytearray()
    if gz is not None:
        gz.finish()
    if not seen:
        out = _strip_bom(out)
    if out:
        yield bytes(out)


def iter_blocks(path: Path, *, prefetch: int = 2) -> Iterator[bytes]:
    """:func:`_raw_blocks` read (and inflated) by a background thread, up to
    ``prefetch`` blocks ahead: zlib / ISA-L / zlib-ng release the GIL, so inflating
    the next block overlaps decoding this one. A read error is raised here, in the
    caller's thread. Closing the iterator early stops the thread."""
    import queue

    q: queue.Queue = queue.Queue(maxsize=max(1, prefetch))
    stop = threading.Event()
    end = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for block in _raw_blocks(path):
                if not put(block):
                    return
            put(end)
        except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
            put(e)

    t = threading.Thread(target=produce, name="domino-prof-inflate", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        t.join()
