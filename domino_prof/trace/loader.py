"""Kineto (PyTorch profiler) Chrome trace files -> one :class:`~.schema.Trace`.

How a file becomes rows (see ``schema.py`` for the columns):

1. plain files are memory-mapped (big ones) or read; gzip (detected by its
   magic bytes, not the suffix) is inflated in-process with :mod:`zlib`
   (measured ~430 MB/s of JSON, ~15% of a load; a subprocess ``gzip -dc``
   would only add a copy through a pipe);
2. the JSON is decoded by ``msgspec`` straight into small typed structs that
   declare only the fields we use (``args`` included). Unknown keys such as
   ``"Input Dims"`` or ``"Concrete Inputs"`` are skipped by the decoder without
   ever becoming Python objects. This is the fastest correct way we measured
   (``benchmarks/bench_analyze.py``, 1M events / 257 MB: the same columns via
   ``orjson.loads`` dicts took 6.8 s CPU and 2.1 GB peak; this loader plus the
   whole overlap analysis 4.0 s and 0.35 GB; stdlib ``json`` is slower than
   orjson). Our typed decode alone is cheaper than orjson's dict decode;
3. the ``ph == "X"`` structs are turned into numpy columns (names interned).

Several rank files are parsed in parallel by a process pool bounded by the
cores and by the memory a file needs (estimated from its size); the parent
only concatenates compact numpy columns. A big file (>= 16 MB) is decoded in
~16 MB chunks cut at event boundaries of its ``traceEvents`` array, from a
copy-on-write mmap, so only one chunk's structs are alive at a time (peak
memory ~ one chunk + columns); ``workers=N`` spreads the chunks of one file
over N forked processes. See ``_parse_in_chunks``; any doubt
about a split and the file is decoded whole instead.

Timestamps: absolute ns = ``baseTimeNanoseconds`` + round(ts_us * 1000); traces
without a base have absolute ``ts``. Real Kineto "relative" ``ts`` are still
large (~5e12 µs, 3 decimals), where a plain ``rint(ts * 1000.0)`` is off by 1 ns
for ~0.5% of events (the product is rounded before ``rint``). ``_us_to_ns``
splits the float into integer and fraction parts, whose products by 1000 are
exact, which gives the exact ns for |ts| < 2**43 µs (~100 days). Beyond that
(old absolute-µs traces, ~1.7e15 µs) a float64 cannot hold the ns digits, so
``ts`` is decoded a second time as exact decimals. Nothing is rounded to whole
microseconds.
"""

from __future__ import annotations

import gc
import mmap
import os
import re
import stat
import sys
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from domino_prof.errors import ConfigError, TraceError
from domino_prof.trace.schema import (
    CATEGORY_COLUMNS,
    EVENT_COLUMNS,
    INT_COLUMNS,
    LEGACY_CATEGORIES,
    RankMeta,
    Trace,
)

__all__ = ["find_trace_files", "load_trace"]

# --------------------------------------------------------------------------- #
# Typed decoding (msgspec): only the fields we need; unknown keys are skipped. #
# --------------------------------------------------------------------------- #


class _Args(msgspec.Struct, frozen=True, gc=False):
    correlation: int = -1
    external_id: int = msgspec.field(default=-1, name="External id")
    stream: int = -1
    device: int = -1
    wait_on_stream: int = -1
    wait_on_corr: int = msgspec.field(default=-1, name="wait_on_cuda_event_record_corr_id")
    coll_name: str = msgspec.field(default="", name="Collective name")
    pg_name: str = msgspec.field(default="", name="Process Group Name")
    msg_nelems: int = msgspec.field(default=-1, name="In msg nelems")
    group_size: int = msgspec.field(default=-1, name="Group size")
    seq: int = msgspec.field(default=-1, name="Seq")
    from_device: int = msgspec.field(default=-1, name="fromDevice")  # memcpy source
    to_device: int = msgspec.field(default=-1, name="toDevice")  # memcpy destination
    name: Any = None  # metadata events: thread_name / process_name


_NO_ARGS = _Args()
_PH, _PID, _TID = attrgetter("ph"), attrgetter("pid"), attrgetter("tid")


class _Event(msgspec.Struct, frozen=True, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: _Args = _NO_ARGS


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None
    distributedInfo: Any = None
    baseTimeNanoseconds: int | None = None
    deviceProperties: Any = None
    hostName: Any = None
    host_name: Any = None


class _TsOnly(msgspec.Struct, frozen=True, gc=False):
    ph: str = ""
    ts: Decimal = Decimal(0)


class _TsDoc(msgspec.Struct, gc=False):
    traceEvents: list[_TsOnly] | None = None


# A trace may also be a bare JSON array of events (Chrome "JSON Array Format").
_STRICT = msgspec.json.Decoder(_Doc | list[_Event])
_LAX = msgspec.json.Decoder(_Doc | list[_Event], strict=False)  # "12" -> 12 etc.
_TS_EXACT = msgspec.json.Decoder(_TsDoc | list[_TsOnly])
_GENERIC = msgspec.json.Decoder()

# _us_to_ns is exact below 2**43 µs (about 100 days); beyond, decode decimals.
_EXACT_TS_LIMIT_US = float(2**43)

_RANK_IN_NAME = re.compile(r"(?i)(?<![a-z])rank[-_]?(\d+)(?!\d)")
_TRACE_SUFFIXES = (".json", ".json.gz")
# domino-prof's own outputs that live beside traces in a run directory.
_NOT_TRACES = {"run.json", "analysis.json", "config.json"}  # domino-prof run outputs
_PROGRESS_BYTES = 50 * 1024 * 1024
_POOL_BYTES = 32 * 1024 * 1024  # below this, a pool costs more than it saves

_INT_ARG_FIELDS = (
    "correlation", "external_id", "stream", "device", "wait_on_stream", "wait_on_corr",
    "msg_nelems", "group_size", "seq", "from_device", "to_device",
)  # fmt: skip


class _FileError(Exception):
    """A per-file problem, raised as TraceError by the parent (picklable)."""

    def __init__(self, path: str, problem: str, fix: str) -> None:
        super().__init__(path, problem, fix)
        self.path, self.problem, self.fix = path, problem, fix


@dataclass
class _Parsed:
    """One rank file as compact columns (what a worker sends back)."""

    path: str
    meta: RankMeta
    ints: dict[str, np.ndarray]
    cats: dict[str, tuple[np.ndarray, list[str]]]  # column -> (codes, categories)
    n: int = 0


# --------------------------------------------------------------------------- #
# Reading                                                                      #
# --------------------------------------------------------------------------- #


def _read_bytes(path: Path, *, mutable: bool = False) -> bytes | bytearray:
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
        raise _FileError(sp, "no such file", "check the path") from None
    except PermissionError:
        raise _FileError(sp, "permission denied", "make the file readable (chmod +r)") from None
    except IsADirectoryError:
        raise _FileError(sp, "is a directory", "pass the directory itself") from None
    except OSError as e:
        raise _FileError(sp, f"cannot read ({e.strerror or e})", "check the file") from None
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(bytes(data), sp)
        if mutable:
            data = bytearray(data)
    if not data[:4096].strip() and not data.strip():  # strip() copies: only when needed
        raise _FileError(sp, "empty file", "re-export the trace (the profiler wrote nothing)")
    return data


def _gunzip(data: bytes, sp: str) -> bytes:
    """Inflate all gzip members; a stream that stops early is a truncated file."""
    parts = []
    while data:
        d = zlib.decompressobj(wbits=31)
        try:
            parts.append(d.decompress(data))
            parts.append(d.flush())
        except zlib.error as e:
            raise _FileError(
                sp, f"corrupt gzip data ({e})", "re-copy or re-export the trace"
            ) from None
        if not d.eof:
            raise _FileError(
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


_STREAM_READ = 1 << 20


def _read_stream(path: Path) -> bytearray:
    """The JSON text of a FIFO, a ``<(cmd)`` pipe or another non-regular file, read
    exactly once (a second open would block on a FIFO or miss what was read), in 1 MB
    reads; gzip is inflated as the data arrives, so the compressed bytes are never
    all held. Errors as for files."""
    sp = str(path)
    try:
        f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise _FileError(sp, "no such file", "check the path") from None
    except PermissionError:
        raise _FileError(sp, "permission denied", "make the file readable (chmod +r)") from None
    except OSError as e:
        raise _FileError(sp, f"cannot read ({e.strerror or e})", "check the file") from None
    out = bytearray()
    gz: _StreamGunzip | None = None
    first = True
    with f:
        while True:
            try:
                chunk = f.read(_STREAM_READ)
            except OSError as e:
                raise _FileError(sp, f"cannot read ({e.strerror or e})", "check the file") from None
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
    if gz is not None:
        gz.finish()
    if not out.strip():
        raise _FileError(sp, "empty file", "re-export the trace (the profiler wrote nothing)")
    return out


class _StreamGunzip:
    """Incremental gzip inflation of all members (trailing garbage ignored, as gzip does)."""

    def __init__(self, sp: str) -> None:
        self.sp = sp
        self.d = zlib.decompressobj(wbits=31)
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
            except zlib.error as e:
                raise _FileError(
                    self.sp, f"corrupt gzip data ({e})", "re-copy or re-export the trace"
                ) from None
            if not self.d.eof:
                return
            data = self.d.unused_data
            self.d = zlib.decompressobj(wbits=31)
            self.started = False

    def finish(self) -> None:
        if self.started and not self.ignore:
            raise _FileError(
                self.sp,
                "truncated gzip file (the compressed stream ends early)",
                "re-copy the file or re-export the trace (the writer was probably interrupted)",
            )


def _decode_error(sp: str, data: bytes, e: Exception) -> _FileError:
    msg = str(e)
    if "truncated" in msg:
        return _FileError(
            sp,
            "invalid JSON: the file ends early (truncated)",
            "re-copy the file or re-export the trace (the writer was probably interrupted)",
        )
    m = re.search(r"byte (\d+)", msg)
    where = ""
    if m:
        pos = int(m.group(1))
        line = data.count(b"\n", 0, pos) + 1
        where = f" at byte {pos} (line {line})"
    reason = msg.split(" - ")[0].replace("JSON is malformed: ", "")
    reason = re.sub(r"\s*\(byte \d+\)", "", reason)
    return _FileError(
        sp,
        f"invalid JSON{where}: {reason}",
        "this is not a valid Chrome trace; re-export it with the PyTorch profiler",
    )


def _decode(sp: str, data: bytes) -> tuple[dict, list[_Event]]:
    """-> (top-level fields, events); raises _FileError for malformed files."""
    gc_was = gc.isenabled()
    gc.disable()  # millions of small objects: generational GC passes only cost time
    try:
        try:
            doc = _STRICT.decode(data)
        except msgspec.ValidationError:  # a value of an unexpected type somewhere
            try:
                doc = _LAX.decode(data)
            except msgspec.ValidationError:
                doc = _decode_sanitised(sp, data)
    except msgspec.DecodeError as e:  # malformed JSON (found by any of the decoders)
        raise _decode_error(sp, data, e) from None
    finally:
        if gc_was:
            gc.enable()
    if isinstance(doc, list):
        return {}, doc
    if doc.traceEvents is None:
        raise _FileError(
            sp,
            "no 'traceEvents' list (not a PyTorch profiler trace)",
            "pass the file written by torch.profiler's export_chrome_trace / "
            "tensorboard_trace_handler",
        )
    top = {
        "distributedInfo": doc.distributedInfo,
        "baseTimeNanoseconds": doc.baseTimeNanoseconds,
        "deviceProperties": doc.deviceProperties,
        "hostName": doc.hostName if doc.hostName is not None else doc.host_name,
    }
    return top, doc.traceEvents


def _decode_sanitised(sp: str, data: bytes) -> _Doc | list[_Event]:
    """Slow path for files whose values have unexpected types: drop such values
    (an unusable arg is treated as absent) rather than reject the whole file."""
    raw = _GENERIC.decode(data)
    evs_raw = (
        raw if isinstance(raw, list) else raw.get("traceEvents") if isinstance(raw, dict) else None
    )
    if not isinstance(raw, (list, dict)):
        raise _FileError(sp, "top-level JSON value is not an object", "pass a Chrome trace file")
    events: list[_Event] = []
    if evs_raw is not None:
        if not isinstance(evs_raw, list):
            raise _FileError(sp, "'traceEvents' is not a list", "pass a Chrome trace file")
        for i, ev in enumerate(evs_raw):
            if not isinstance(ev, dict):
                continue
            events.append(_sanitise_event(sp, i, ev))
    if isinstance(raw, list):
        return events
    base = raw.get("baseTimeNanoseconds")
    return _Doc(
        traceEvents=events if evs_raw is not None else None,
        distributedInfo=raw.get("distributedInfo"),
        baseTimeNanoseconds=base if isinstance(base, int) and not isinstance(base, bool) else None,
        deviceProperties=raw.get("deviceProperties"),
        hostName=raw.get("hostName", raw.get("host_name")),
    )


_EVENT_TYPES = {fi.name: fi.type for fi in msgspec.structs.fields(_Event)}


def _sanitise_event(sp: str, i: int, ev: dict) -> _Event:
    args = ev.get("args")
    clean_args = _NO_ARGS
    if isinstance(args, dict):
        kw = {}
        for fi in msgspec.structs.fields(_Args):
            if fi.encode_name in args:
                try:
                    kw[fi.name] = msgspec.convert(args[fi.encode_name], fi.type, strict=False)
                except (msgspec.ValidationError, TypeError):
                    pass
        clean_args = _Args(**kw)
    out: dict[str, Any] = {"args": clean_args}
    for f in ("ph", "cat", "name", "pid", "tid", "ts", "dur"):
        if f not in ev or ev[f] is None:
            continue
        try:
            out[f] = msgspec.convert(ev[f], _EVENT_TYPES[f], strict=False)
        except (msgspec.ValidationError, TypeError):
            if f in ("ts", "dur") and ev.get("ph") == "X":
                raise _FileError(
                    sp,
                    f"traceEvents[{i}].{f} is {ev[f]!r}, not a number",
                    "fix or re-export the trace",
                ) from None
            if f in ("ph", "cat", "name"):
                out[f] = str(ev[f])
    return _Event(**out)


# --------------------------------------------------------------------------- #
# One file -> columns                                                          #
# --------------------------------------------------------------------------- #


def _rank_from_name(path: Path) -> int | None:
    found = {int(m) for m in _RANK_IN_NAME.findall(path.name)}
    return found.pop() if len(found) == 1 else None


def _json_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return None


_THREAD_LABEL = re.compile(r"\(([^()]*)\)\s*$")


def _pick_thread_name(labels: list[str], process_name: str | None) -> str:
    """One name for a thread that Kineto named more than once.

    A gloo runloop thread can appear both as "thread 9500 (python)" (the name it
    inherited from its process) and "thread 9500 (pt_gloo_runloop)", in either
    order: prefer a name that is not the inherited process name, else the first.
    """
    if len(labels) == 1:
        return labels[0]
    generic = {process_name or "python", "python"}
    for label in labels:
        m = _THREAD_LABEL.search(label)
        if (m.group(1) if m else label) not in generic:
            return label
    return labels[0]


def _factorize(values: list[str]) -> tuple[np.ndarray, list[str]]:
    codes, uniques = pd.factorize(np.array(values, dtype=object), sort=False)
    return codes.astype(np.int32, copy=False), [str(u) for u in uniques]


def _us_to_ns(us: np.ndarray) -> np.ndarray:
    """float µs -> int64 ns, rounded to the nearest ns, exact for |us| < 2**43.

    ``rint(us * 1000.0)`` rounds the product first and is 1 ns off for ~0.5% of
    values around 5e12 µs. Here ``hi = floor(us)`` (< 2**43, so ``hi * 1000`` is
    an exact integer below 2**53) and ``us - hi`` (exact, few significant bits,
    so ``frac * 1000`` is exact too): the only rounding left is the final rint.
    """
    hi = np.floor(us)
    return (hi * 1000.0).astype(np.int64) + np.rint((us - hi) * 1000.0).astype(np.int64)


def _exact_ts_ns(sp: str, data: bytes) -> np.ndarray:
    """Absolute µs timestamps decoded as decimals -> exact int64 ns (X events only)."""
    try:
        doc = _TS_EXACT.decode(data)
    except msgspec.MsgspecError as e:  # pragma: no cover - the fast decode succeeded
        raise _decode_error(sp, data, e) from None
    evs = doc if isinstance(doc, list) else doc.traceEvents or []
    q = Decimal(1)
    return np.fromiter(
        (int((e.ts * 1000).quantize(q, rounding=ROUND_HALF_EVEN)) for e in evs if e.ph == "X"),
        dtype=np.int64,
    )


def _meta_from_top(path_s: str, top: dict, rank_arg: int | None) -> RankMeta:
    """Rank and per-rank metadata from the top-level keys of one file."""
    dist = top.get("distributedInfo")
    if isinstance(dist, str):  # some writers store it as an embedded JSON string
        try:
            dist = msgspec.json.decode(dist)
        except msgspec.DecodeError:
            dist = None
    if not isinstance(dist, dict):
        dist = {}
    rank = _json_int(dist.get("rank"))
    if rank is not None and rank_arg is not None and rank != rank_arg:
        raise _FileError(
            path_s,
            f"distributedInfo.rank is {rank} but rank={rank_arg} was given",
            "drop the rank argument (the file names its rank)",
        )
    if rank is None:
        rank = rank_arg if rank_arg is not None else _rank_from_name(Path(path_s))
    if rank is None:
        raise _FileError(
            path_s,
            "no distributedInfo.rank in the file and no unambiguous rank in its name",
            "give the rank (--rank N / rank=N) or name the file like rank3.json",
        )
    pg = dist.get("pg_config")
    if isinstance(pg, dict):  # older writers: {pg_name: {...}}
        pg = [{"pg_name": k, **v} if isinstance(v, dict) else {"pg_name": k} for k, v in pg.items()]
    elif not isinstance(pg, list):
        pg = []
    dev_props = top.get("deviceProperties")
    base = top.get("baseTimeNanoseconds")
    host = top.get("hostName")
    return RankMeta(
        rank=rank,
        path=path_s,
        world_size=_json_int(dist.get("world_size")),
        backend=dist.get("backend") if isinstance(dist.get("backend"), str) else None,
        base_time_ns=base or 0,
        host=host if isinstance(host, str) else None,
        pg_config=[p for p in pg if isinstance(p, dict)],
        device_properties=[d for d in dev_props if isinstance(d, dict)]
        if isinstance(dev_props, list)
        else [],
    )


@dataclass
class _Part:
    """Columns of a run of events (a whole file, or one chunk of a big file).

    String pids/tids are not interned here (a chunk cannot know the ids other
    chunks use): their rows hold 0 and are listed in ``str_rows``."""

    n: int
    ints: dict[str, np.ndarray]
    cats: dict[str, tuple[np.ndarray, list[str]]]
    str_rows: dict[str, tuple[np.ndarray, list[str]]]  # "pid"/"tid" -> (rows, values)
    meta_events: list[tuple[str, int | str, int | str, str]]  # (name, pid, tid, label)


def _id_column(values: list, n: int) -> tuple[np.ndarray, tuple[np.ndarray, list[str]] | None]:
    """int | str values -> int64 column (strings as 0) + (rows, strings) of the strings."""
    if not any(isinstance(v, str) for v in set(values)):
        return np.fromiter(values, np.int64, n), None
    rows = [i for i, v in enumerate(values) if isinstance(v, str)]
    strs = [values[i] for i in rows]
    col = np.fromiter((0 if isinstance(v, str) else v for v in values), np.int64, n)
    return col, (np.asarray(rows, dtype=np.int64), strs)


def _events_to_part(events: list[_Event], base: int | None, src: bytes, sp: str) -> _Part:
    """Decoded events -> columns. ``src``: the bytes they came from (for exact ts)."""
    meta_events = [
        (e.name, e.pid, e.tid, e.args.name)
        for e in compress(events, map("M".__eq__, map(_PH, events)))
        if isinstance(e.args.name, str)
    ]
    xs = list(compress(events, map("X".__eq__, map(_PH, events))))
    n = len(xs)
    ts_us = np.fromiter(map(attrgetter("ts"), xs), dtype=np.float64, count=n)
    if base is None and n and float(np.abs(ts_us).max()) >= _EXACT_TS_LIMIT_US:
        ts = _exact_ts_ns(sp, src)
        assert len(ts) == n
    else:
        ts = _us_to_ns(ts_us)
        if base:
            ts += np.int64(base)
    del ts_us
    dur = _us_to_ns(np.fromiter(map(attrgetter("dur"), xs), dtype=np.float64, count=n))
    ints: dict[str, np.ndarray] = {"ts": ts, "dur": dur}
    str_rows = {}
    for col, get in (("pid", _PID), ("tid", _TID)):
        ints[col], strs = _id_column(list(map(get, xs)), n)
        if strs is not None:
            str_rows[col] = strs
    args = list(map(attrgetter("args"), xs))
    for f in _INT_ARG_FIELDS:
        ints[f] = np.fromiter(map(attrgetter(f), args), np.int64, n)
    cats = {
        "cat": _factorize(list(map(attrgetter("cat"), xs))),
        "name": _factorize(list(map(attrgetter("name"), xs))),
        "coll_name": _factorize(list(map(attrgetter("coll_name"), args))),
        "pg_name": _factorize(list(map(attrgetter("pg_name"), args))),
    }
    return _Part(n=n, ints=ints, cats=cats, str_rows=str_rows, meta_events=meta_events)


def _merge_cats(pieces: list[tuple[np.ndarray, list[str]]]) -> tuple[np.ndarray, list[str]]:
    """Concatenate factorized pieces onto their sorted union of categories."""
    cats = sorted(set().union(*(u for _, u in pieces)))
    index = {c: i for i, c in enumerate(cats)}
    out = []
    for codes, uniques in pieces:
        remap = np.fromiter((index[x] for x in uniques), np.int32, len(uniques))
        out.append(remap[codes] if len(uniques) else codes.astype(np.int32))
    return (np.concatenate(out) if out else np.empty(0, np.int32)), cats


def _modern_categories(
    codes: np.ndarray, cats: list[str], meta: RankMeta
) -> tuple[np.ndarray, list[str]]:
    """Older Kineto category names (``Kernel``, ``Memcpy``, ``Runtime`` ...) -> today's;
    the renames made are recorded in ``meta.renamed_categories``."""
    old = [c for c in cats if c in LEGACY_CATEGORIES]
    if not old:
        return codes, cats
    meta.renamed_categories = {c: LEGACY_CATEGORIES[c] for c in old}
    renamed = [LEGACY_CATEGORIES.get(c, c) for c in cats]
    new = sorted(set(renamed))
    index = {c: i for i, c in enumerate(new)}
    remap = np.fromiter((index[c] for c in renamed), np.int32, len(renamed))
    return remap[codes], new


def _clamp_negative_durations(ints: dict, cats: dict, meta: RankMeta) -> None:
    """A negative ``dur`` cannot be measured time: read it as 0 and record what and how
    many (the analysis turns this into a note; it is never silent)."""
    dur = ints["dur"]
    neg = dur < 0
    if not neg.any():
        return
    codes, names = cats["cat"]
    per = np.bincount(codes[neg], minlength=len(names))
    meta.negative_durations = {names[i]: int(n) for i, n in enumerate(per) if n}
    worst = int(np.argmin(dur))
    ncodes, nnames = cats["name"]
    meta.worst_negative = (names[codes[worst]], nnames[ncodes[worst]], int(dur[worst]))
    ints["dur"] = np.where(neg, 0, dur)


def _finish(path_s: str, meta: RankMeta, parts: list[_Part]) -> _Parsed:
    """Parts of one file -> its sorted columns; string ids interned; metadata resolved."""
    n = sum(p.n for p in parts)
    meta.n_events = n
    ints = {k: np.concatenate([p.ints[k] for p in parts]) for k in parts[0].ints}
    cats = {k: _merge_cats([p.cats[k] for p in parts]) for k in parts[0].cats}
    cats["cat"] = _modern_categories(*cats["cat"], meta)
    _clamp_negative_durations(ints, cats, meta)
    meta_events = [m for p in parts for m in p.meta_events]

    # string pids / tids -> negative ids below every real (possibly negative) id
    ids: dict[str, dict[str, int]] = {}
    for k, pos in (("pid", 1), ("tid", 2)):
        strs = {s for p in parts if k in p.str_rows for s in p.str_rows[k][1]}
        strs |= {m[pos] for m in meta_events if isinstance(m[pos], str)}
        ints_meta = [m[pos] for m in meta_events if not isinstance(m[pos], str)]
        lo = min([0, *ints_meta, int(ints[k].min()) if n else 0])
        ids[k] = {s: lo - 1 - i for i, s in enumerate(sorted(strs))}
        offset = 0
        for p in parts:
            if k in p.str_rows:
                rows, vals = p.str_rows[k]
                ints[k][rows + offset] = np.fromiter((ids[k][v] for v in vals), np.int64, len(vals))
            offset += p.n
    meta.pid_labels = {v: s for s, v in ids["pid"].items()}

    def pid_of(v: int | str) -> int:
        return ids["pid"][v] if isinstance(v, str) else v

    def tid_of(v: int | str) -> int:
        return ids["tid"][v] if isinstance(v, str) else v

    names: dict[tuple[int, int], list[str]] = {}
    for name, pid, tid, label in meta_events:
        if name == "thread_name":
            names.setdefault((pid_of(pid), tid_of(tid)), []).append(label)
        elif name == "process_name":
            meta.process_names.setdefault(pid_of(pid), label)
    for key, labels in names.items():
        meta.thread_names[key] = _pick_thread_name(labels, meta.process_names.get(key[0]))
    tid_label = {v: s for s, v in ids["tid"].items() if s}
    if tid_label:  # a string tid ("PyTorch Profiler") is its own best label
        mask = np.isin(ints["tid"], np.fromiter(tid_label, np.int64, len(tid_label)))
        for pid, tid in set(zip(ints["pid"][mask].tolist(), ints["tid"][mask].tolist())):
            meta.thread_names.setdefault((pid, tid), tid_label[tid])

    ts = ints["ts"]
    if n and not bool(np.all(ts[1:] >= ts[:-1])):  # sorted by ts, file order breaks ties
        order = np.argsort(ts, kind="stable")
        ints = {k: v[order] for k, v in ints.items()}
        cats = {k: (c[order], u) for k, (c, u) in cats.items()}
    return _Parsed(path=path_s, meta=meta, ints=ints, cats=cats, n=n)


def _parse_file(path_s: str, rank_arg: int | None, nproc: int = 1) -> _Parsed:
    path = Path(path_s)
    if not _is_regular(path):  # a FIFO or pipe: one read, then parse from memory
        data = _read_stream(path)
        if len(data) >= _STREAM_BYTES or nproc > 1:
            parsed = _parse_buffer_in_chunks(path_s, data, rank_arg, nproc)
            if parsed is not None:
                return parsed
        return _parse_whole(path_s, data, rank_arg)
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    if size >= _STREAM_BYTES or nproc > 1:
        parsed = _parse_in_chunks(path_s, rank_arg, nproc)
        if parsed is not None:
            return parsed
    return _parse_whole(path_s, _read_bytes(path), rank_arg)


def _parse_whole(path_s: str, data: bytes | bytearray, rank_arg: int | None) -> _Parsed:
    top, events = _decode(path_s, data)
    meta = _meta_from_top(path_s, top, rank_arg)
    part = _events_to_part(events, top.get("baseTimeNanoseconds"), data, path_s)
    del events, data
    return _finish(path_s, meta, [part])


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
_STREAM_BYTES = 16 * 1024 * 1024  # files this big are decoded chunk by chunk
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


def _parse_or_error(path_s: str, rank_arg: int | None, nproc: int = 1) -> _Parsed | _FileError:
    """Worker entry point: errors come back as values (TraceError does not pickle)."""
    try:
        return _parse_file(path_s, rank_arg, nproc)
    except _FileError as e:
        return e
    except MemoryError:
        need = _peak_bytes(_uncompressed_size(Path(path_s))) / 1e9
        return _FileError(
            path_s,
            f"out of memory while loading (needs about {need:.1f} GB)",
            "load fewer rank files at once (point at a subdirectory) or use more memory",
        )


# --------------------------------------------------------------------------- #
# Directories, parallelism, progress                                           #
# --------------------------------------------------------------------------- #


def _is_trace_name(name: str) -> bool:
    return name.endswith(_TRACE_SUFFIXES) and not name.startswith(".") and name not in _NOT_TRACES


def find_trace_files(directory: str | os.PathLike) -> list[Path]:
    """Trace files under ``directory`` (recursive): ``*.pt.trace.json[.gz]`` if any
    exist, else every ``*.json`` / ``*.json.gz`` except domino-prof's own outputs."""
    root = Path(directory)
    found = sorted(p for p in root.rglob("*") if _is_trace_name(p.name) and p.is_file())
    kineto = [p for p in found if ".pt.trace.json" in p.name]
    return kineto or found


def _ignored_beside(directory: Path, taken: list[Path]) -> list[Path]:
    """JSON files under ``directory`` that :func:`find_trace_files` passed over."""
    chosen = set(taken)
    return sorted(
        q
        for q in directory.rglob("*")
        if _is_trace_name(q.name) and q.is_file() and q not in chosen
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


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30


def _peak_bytes(json_bytes: int) -> int:
    """Worker peak for one file: JSON text + decoded structs + columns (~3.5x)."""
    return int(json_bytes * 3.5) + (64 << 20)


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _plan_chunks(size: int, workers: int | None) -> int:
    """Processes for one file (its events array is split among them).

    Auto is 1: measured on 2 shared cores, forked chunk workers cost more CPU
    (each result is pickled back) and about twice the peak memory of one
    process streaming the chunks, for a wall-time gain that only shows on idle
    cores. ``workers=N`` asks for the split explicitly."""
    del size
    return 1 if workers is None else max(1, workers)


def _plan_workers(sizes: list[int], workers: int | None) -> int:
    """Processes for several files, bounded by cores and by memory."""
    if len(sizes) <= 1:
        return 1
    cores = _cores()
    if workers is None:
        if sum(sizes) < _POOL_BYTES:
            return 1
        workers = cores or 1
    by_mem = max(1, int(_available_memory() * 0.8) // max(_peak_bytes(max(sizes)), 1))
    return max(1, min(workers, len(sizes), by_mem))


class _Progress:
    """A rich progress bar on stderr (bytes of JSON done), or nothing."""

    def __init__(self, total: int, n_files: int, enabled: bool) -> None:
        self.bar = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("loading {task.fields[files]}"),
            BarColumn(),
            DownloadColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
            auto_refresh=False,  # no refresh thread: workers are forked while it shows
        )
        self.task = self.bar.add_task("load", total=total, files=f"{n_files} trace file(s)")
        self.bar.start()
        self.bar.refresh()

    def advance(self, nbytes: int) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, nbytes)
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _pool_context():
    import multiprocessing as mp

    # fork: workers inherit the imported modules (no re-import cost). All workers
    # are started at the first submit, before any progress thread exists.
    methods = mp.get_all_start_methods()
    return mp.get_context("fork" if "fork" in methods else "spawn")


def _parse_all(
    files: list[Path], rank_arg: int | None, workers: int | None, progress: bool | None
) -> list[_Parsed | _FileError]:
    sizes = [_uncompressed_size(p) for p in files]
    total = sum(sizes)
    show = progress if progress is not None else total > _PROGRESS_BYTES and sys.stderr.isatty()
    n_workers = _plan_workers(sizes, workers)
    results: list[_Parsed | _FileError] = []
    if n_workers <= 1:
        nproc = _plan_chunks(sizes[0], workers) if len(files) == 1 else 1
        bar = _Progress(total, len(files), bool(show))
        try:
            for p, s in zip(files, sizes):
                results.append(_parse_or_error(str(p), rank_arg, nproc))
                bar.advance(s)
        finally:
            bar.close()
        return results
    # biggest first: better packing of the pool
    order = sorted(range(len(files)), key=lambda i: -sizes[i])
    with ProcessPoolExecutor(max_workers=n_workers, mp_context=_pool_context()) as ex:
        futs = {i: ex.submit(_parse_or_error, str(files[i]), rank_arg) for i in order}
        bar = _Progress(total, len(files), bool(show))
        try:
            out: dict[int, _Parsed | _FileError] = {}
            for i in order:
                out[i] = futs[i].result()
                bar.advance(sizes[i])
        finally:
            bar.close()
    return [out[i] for i in range(len(files))]


# --------------------------------------------------------------------------- #
# Assembly                                                                     #
# --------------------------------------------------------------------------- #


def _assemble(parsed: list[_Parsed]) -> pd.DataFrame:
    parsed = sorted(parsed, key=lambda p: p.meta.rank)
    n_total = sum(p.n for p in parsed)
    data: dict[str, Any] = {}
    data["rank"] = np.concatenate(
        [np.full(p.n, p.meta.rank, dtype=np.int32) for p in parsed] or [np.empty(0, np.int32)]
    )
    for col in EVENT_COLUMNS:
        if col == "rank":
            continue
        if col in INT_COLUMNS:
            data[col] = np.concatenate([p.ints[col] for p in parsed]).astype(
                INT_COLUMNS[col], copy=False
            )
            continue
        # categorical: union of per-file categories (sorted), codes remapped
        cats = sorted(set().union(*(p.cats[col][1] for p in parsed)))
        index = {c: i for i, c in enumerate(cats)}
        codes = np.empty(n_total, dtype=np.int32)
        pos = 0
        for p in parsed:
            c, u = p.cats[col]
            remap = np.fromiter((index[x] for x in u), np.int32, len(u))
            codes[pos : pos + p.n] = remap[c] if len(u) else c
            pos += p.n
        data[col] = pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))
    assert set(data) == set(EVENT_COLUMNS) and all(c in data for c in CATEGORY_COLUMNS)
    return pd.DataFrame({c: data[c] for c in EVENT_COLUMNS}, copy=False)


def load_trace(
    path: str | os.PathLike,
    *,
    rank: int | None = None,
    skip_bad: bool = False,
    workers: int | None = None,
    progress: bool | None = None,
) -> Trace:
    """Load one Kineto trace file, or every rank file under a directory.

    ``rank``: the rank of a single file that does not say (``distributedInfo.rank``
    wins when present; a different value is an error). ``skip_bad``: in a
    directory, skip files that cannot be loaded (listed in ``Trace.skipped``) as
    long as one loads. ``workers``: processes for parsing rank files (None: auto,
    bounded by cores and memory; 1: in-process); for a single file, N > 1
    splits its events over N forked processes (auto: one process). ``progress``: a progress bar on
    stderr (None: only for loads over 50 MB on a terminal).
    """
    p = Path(path)
    try:
        is_dir = p.is_dir()
        exists = p.exists()
    except OSError as e:
        raise TraceError(p, f"cannot access ({e})", "check the path") from None
    if not exists:
        raise TraceError(p, "no such file or directory", "check the path")
    if is_dir:
        if rank is not None:
            raise ConfigError(
                f"{p}: rank={rank} only applies to a single trace file, not a directory"
            )
        try:
            files = find_trace_files(p)
        except OSError as e:
            raise TraceError(p, f"cannot list directory ({e})", "check its permissions") from None
        if not files:
            raise TraceError(
                p,
                "directory has no trace files (*.json, *.json.gz)",
                "point at the directory holding the rank*.pt.trace.json(.gz) files",
            )
    else:
        files = [p]
    results = _parse_all(files, rank, workers, progress)

    good: list[_Parsed] = []
    skipped: list[tuple[str, str]] = []
    for r in results:
        if isinstance(r, _FileError):
            if not (is_dir and skip_bad):
                hint = r.fix + (" (or use --skip-bad to skip bad files)" if is_dir else "")
                raise TraceError(r.path, r.problem, hint)
            skipped.append((r.path, r.problem))
        else:
            good.append(r)
    if not good:
        first = skipped[0]
        raise TraceError(
            p,
            f"no loadable trace file ({len(skipped)} bad; first: {first[0]}: {first[1]})",
            "fix or re-export the traces",
        )
    if is_dir:  # other JSON files beside Kineto-named ones are not read: say so, not silently
        skipped += [
            (str(q), "not read: only *.pt.trace.json(.gz) files are taken when any exist")
            for q in _ignored_beside(p, files)
        ]
    by_rank: dict[int, _Parsed] = {}
    for r in good:
        other = by_rank.get(r.meta.rank)
        if other is not None:
            raise TraceError(
                p,
                f"two files claim rank {r.meta.rank}: {other.path} and {r.path}",
                "point at one run / mode subdirectory (one file per rank)",
            )
        by_rank[r.meta.rank] = r
    events = _assemble(good)
    return Trace(
        events=events,
        ranks={k: by_rank[k].meta for k in sorted(by_rank)},
        source=str(p),
        skipped=skipped,
    )
