"""Decoding: JSON text -> typed events (``msgspec``) -> one file's compact columns.

The JSON is decoded straight into small typed structs that declare only the fields
we use (``args`` included), one type per phase (a msgspec tagged union on ``ph``:
``X`` / ``B`` rows, ``E`` ends, ``M`` metadata, every other phase a struct without
fields); unknown keys such as ``"Input Dims"`` are skipped by the decoder without ever
becoming Python objects (see ``loader``'s docstring for the measurements). The rows
become numpy columns in a few C-level passes (:func:`_events_to_part`); ``ph == "M"``
metadata names threads and processes; the top-level keys give the rank and per-rank
metadata. Timestamps are exact to the ns (:func:`_us_to_ns`).
:func:`_parse_whole` decodes one file's text at once; ``chunked`` decodes a big one
in pieces with the same :func:`_events_to_part` and :func:`_finish`.

Begin/end pairs (``ph == "B"`` then ``"E"`` on one pid/tid, nested as a stack) are read
as the complete events they describe: the row is the ``B`` (its name, category and
args, at its place in the file) and its ``dur`` runs to the matching ``E``
(:func:`_pair_begin_end`); a ``B`` never closed has ``dur`` 0.

Time unit: Kineto writes µs. A trace whose ``ts`` read as µs would put its events
beyond the year 2100 (``baseTimeNanoseconds`` + ts × 1000 > :data:`_NS_ABS_LIMIT`) was
written in ns: its ``ts`` and ``dur`` are taken as integer ns, exactly, and
``RankMeta.time_unit`` says so (the analysis turns it into a note).
"""

from __future__ import annotations

import array
import gc
import math
import operator
import re
from decimal import ROUND_HALF_EVEN, Decimal
from itertools import chain, compress, count, repeat
from operator import attrgetter
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np

from domino_prof.errors import TraceError
from domino_prof.trace.read import FileError
from domino_prof.trace.schema import LEGACY_CATEGORIES, RankMeta

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
    grid: Any = None  # kernels: [x, y, z]; any JSON value is read, checked in _grid_column


_NO_ARGS = _Args()
_PID, _TID = attrgetter("pid"), attrgetter("tid")


class _MetaArgs(msgspec.Struct, frozen=True, gc=False):
    name: Any = None  # thread_name / process_name: the label


_NO_META_ARGS = _MetaArgs()
_TAGGED: dict[str, Any] = {"tag_field": "ph", "frozen": True, "gc": False}


class _Row(msgspec.Struct, tag="X", **_TAGGED):
    """``ph == "X"``: a complete event, one row. The phase is the struct's type (a
    tagged union on ``ph``): the decoder picks the type from ``ph`` and builds only the
    fields that type declares."""

    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: _Args = _NO_ARGS


class _Begin(_Row, tag="B"):
    """``ph == "B"``: a row whose ``dur`` runs to its matching ``E``."""


class _End(msgspec.Struct, tag="E", **_TAGGED):
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0


class _Meta(msgspec.Struct, tag="M", **_TAGGED):
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    args: _MetaArgs = _NO_META_ARGS


# Every other phase of the Chrome trace format (flows, instants, counters, async,
# samples, objects, marks ...): a struct without fields, so the decoder skips the
# event's contents without building a value. A phase not listed here (or an event
# without ``ph``) fails the tagged decode: :data:`_EVENTS` then falls back to
# :class:`_Event`, the untagged struct, which reads any ``ph``.
_SKIPPED_PHASES = "iICbnesStTpFfPONDVvRc()"
_SKIPPED = tuple(
    msgspec.defstruct(f"_Skip{ord(ph)}", [], tag=ph, **_TAGGED) for ph in _SKIPPED_PHASES
)
_Tagged = Union[(_Row, _Begin, _End, _Meta, *_SKIPPED)]
_PHASE_OF_TYPE: dict[type, str] = {
    _Row: "X", _Begin: "B", _End: "E", _Meta: "M",
    **{t: ph for t, ph in zip(_SKIPPED, _SKIPPED_PHASES)},
}  # fmt: skip


class _Event(msgspec.Struct, frozen=True, gc=False):
    """Any event, its phase a plain field: what a tagged decode falls back to (an
    unknown or missing ``ph``) and what the sanitising decode builds."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: _Args = _NO_ARGS


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[_Tagged] | None = None  # type: ignore[valid-type]
    distributedInfo: Any = None
    baseTimeNanoseconds: int | None = None
    deviceProperties: Any = None
    hostName: Any = None
    host_name: Any = None
    schema: Any = None  # set in domino-prof's own documents (analysis.json, run.json)
    domino_prof: Any = None  # the comm-emulation mark (emulation.marker)


class _UntaggedDoc(_Doc, gc=False):
    traceEvents: list[_Event] | None = None


class _TsOnly(msgspec.Struct, frozen=True, gc=False):
    ph: str = ""
    ts: Decimal = Decimal(0)


class _TsDoc(msgspec.Struct, gc=False):
    traceEvents: list[_TsOnly] | None = None


class _NsOnly(msgspec.Struct, frozen=True, gc=False):
    ph: str = ""
    ts: int | float = 0
    dur: int | float = 0


class _NsDoc(msgspec.Struct, gc=False):
    traceEvents: list[_NsOnly] | None = None


# A trace may also be a bare JSON array of events (Chrome "JSON Array Format").
# Tried in this order; a msgspec.ValidationError moves on to the next (:func:`_decode`).
_STRICT = msgspec.json.Decoder(_Doc | list[_Tagged])
_LAX = msgspec.json.Decoder(_Doc | list[_Tagged], strict=False)  # "12" -> 12 etc.
_UNTAGGED = msgspec.json.Decoder(_UntaggedDoc | list[_Event])
_UNTAGGED_LAX = msgspec.json.Decoder(_UntaggedDoc | list[_Event], strict=False)
_DOC_DECODERS = (_STRICT, _LAX, _UNTAGGED, _UNTAGGED_LAX)
# the same for a bare '[...]' of events (a chunk of a big file)
_EVENTS = (
    msgspec.json.Decoder(list[_Tagged]),
    msgspec.json.Decoder(list[_Tagged], strict=False),
    msgspec.json.Decoder(list[_Event]),
    msgspec.json.Decoder(list[_Event], strict=False),
)
_TS_EXACT = msgspec.json.Decoder(_TsDoc | list[_TsOnly])
_NS_EXACT = msgspec.json.Decoder(_NsDoc | list[_NsOnly], strict=False)
_GENERIC = msgspec.json.Decoder()

# _us_to_ns is exact below 2**43 µs (about 100 days); beyond, decode decimals.
_EXACT_TS_LIMIT_US = float(2**43)
# 2100-01-01 in ns after the Unix epoch: a µs reading of ts beyond it means ns
_NS_ABS_LIMIT = 4.1e18
_ROW_PH = frozenset(("X", "B"))  # phases that become rows (B: with its matching E)

_RANK_IN_NAME = re.compile(r"(?i)(?<![a-z])rank[-_]?(\d+)(?!\d)")

_INT_ARG_FIELDS = (
    "correlation", "external_id", "stream", "device", "wait_on_stream", "wait_on_corr",
    "msg_nelems", "group_size", "seq", "from_device", "to_device",
)  # fmt: skip


_INT64_MAX = np.iinfo(np.int64).max


def _grid_product(g: Any) -> int:
    """x·y·z of a kernel's ``args.grid``; -1 unless a list of positive ints whose
    product fits an int64."""
    if isinstance(g, list) and g and all(type(v) is int and v > 0 for v in g):
        p = math.prod(g)
        return p if p <= _INT64_MAX else -1
    return -1


def _grid_column(grids: list, n: int) -> np.ndarray:
    """The ``grid`` column: -1 where absent; the product only for the rows that have one
    (kernels). Those are nearly always ``[x, y, z]`` lists of ints: then a few C-level
    passes check that and numpy multiplies; anything else, row by row."""
    out = np.full(n, -1, np.int64)
    has = np.fromiter(map(operator.is_not, grids, repeat(None)), bool, n)
    rows = np.flatnonzero(has)
    if not len(rows):
        return out
    given = list(compress(grids, has))
    if set(map(type, given)) == {list} and set(map(len, given)) == {3}:
        flat = list(chain.from_iterable(given))
        if set(map(type, flat)) == {int}:  # no bool, float or str among them
            try:
                xyz = np.array(flat, np.int64).reshape(-1, 3)
            except OverflowError:
                xyz = None
            # each factor below 2**21: the product fits an int64 exactly
            if xyz is not None and int(xyz.max()) < (1 << 21):
                out[rows] = np.where((xyz > 0).all(axis=1), xyz.prod(axis=1), -1)
                return out
    for i, g in zip(rows.tolist(), given):
        out[i] = _grid_product(g)
    return out


class _Parsed(msgspec.Struct):
    """One rank file as compact columns (what a worker sends back). These result
    classes are msgspec Structs rather than dataclasses: the same attributes and
    pickling, and no code generated when the module is imported (start-up)."""

    path: str
    meta: RankMeta
    ints: dict[str, np.ndarray]
    cats: dict[str, tuple[np.ndarray, list[str]]]  # column -> (codes, categories)
    n: int = 0


def _decode_error(sp: str, data: bytes, e: Exception) -> FileError:
    msg = str(e)
    if "truncated" in msg:
        return FileError(
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
    return FileError(
        sp,
        f"invalid JSON{where}: {reason}",
        "this is not a valid Chrome trace; re-export it with the PyTorch profiler",
    )


def _first_decode(decoders, data):
    """The first of ``decoders`` that validates ``data`` (a msgspec.ValidationError moves
    on to the next: a value of an unexpected type, or for the tagged ones a phase they
    do not list); the last one's ValidationError, and any DecodeError, propagate.

    Whatever decoder succeeds, the rows, ``E`` and ``M`` events get the same values: the
    tagged structs type those fields exactly as :class:`_Event` does, and a lax decode
    converts only values a strict one rejects."""
    for dec in decoders[:-1]:
        try:
            return dec.decode(data)
        except msgspec.ValidationError:
            continue
    return decoders[-1].decode(data)


def _decode(sp: str, data: bytes) -> tuple[dict, list]:
    """-> (top-level fields, events: tagged structs, or :class:`_Event` when the tagged
    decode does not apply); raises FileError for malformed files."""
    gc_was = gc.isenabled()
    gc.disable()  # millions of small objects: generational GC passes only cost time
    try:
        try:
            doc = _first_decode(_DOC_DECODERS, data)
        except msgspec.ValidationError:  # a value no decoder takes: drop such values
            doc = _decode_sanitised(sp, data)
    except msgspec.DecodeError as e:  # malformed JSON (found by any of the decoders)
        raise _decode_error(sp, data, e) from None
    finally:
        if gc_was:
            gc.enable()
    if isinstance(doc, list):
        return {}, doc
    if (
        doc.traceEvents is None
        and isinstance(doc.schema, str)
        and doc.schema.startswith("domino-prof/")
    ):
        raise FileError(
            sp,
            f"this is a domino-prof {doc.schema.split('/', 1)[1]} document, not a profiler trace",
            "pass the trace files or the run directory it was made from",
        )
    if doc.traceEvents is None:
        raise FileError(
            sp,
            "no 'traceEvents' list (not a PyTorch profiler trace)",
            "pass the file written by torch.profiler's export_chrome_trace / "
            "tensorboard_trace_handler",
        )
    return _top_of(doc), doc.traceEvents


def _top_of(doc: _Doc) -> dict:
    """The top-level keys ``_meta_from_top`` reads, from a decoded document (whole-file,
    sanitised and streamed decodes alike: one place to add a key)."""
    return {
        "distributedInfo": doc.distributedInfo,
        "baseTimeNanoseconds": doc.baseTimeNanoseconds,
        "deviceProperties": doc.deviceProperties,
        "hostName": doc.hostName if doc.hostName is not None else doc.host_name,
        "domino_prof": doc.domino_prof,
    }


def _decode_sanitised(sp: str, data: bytes) -> _UntaggedDoc | list[_Event]:
    """Slow path for files whose values have unexpected types: drop such values
    (an unusable arg is treated as absent) rather than reject the whole file."""
    raw = _GENERIC.decode(data)
    evs_raw = (
        raw if isinstance(raw, list) else raw.get("traceEvents") if isinstance(raw, dict) else None
    )
    if not isinstance(raw, (list, dict)):
        raise FileError(sp, "top-level JSON value is not an object", "pass a Chrome trace file")
    events: list[_Event] = []
    if evs_raw is not None:
        if not isinstance(evs_raw, list):
            raise FileError(sp, "'traceEvents' is not a list", "pass a Chrome trace file")
        for i, ev in enumerate(evs_raw):
            if not isinstance(ev, dict):
                continue
            events.append(_sanitise_event(sp, i, ev))
    if isinstance(raw, list):
        return events
    base = raw.get("baseTimeNanoseconds")
    return _UntaggedDoc(
        traceEvents=events if evs_raw is not None else None,
        distributedInfo=raw.get("distributedInfo"),
        baseTimeNanoseconds=base if isinstance(base, int) and not isinstance(base, bool) else None,
        deviceProperties=raw.get("deviceProperties"),
        hostName=raw.get("hostName", raw.get("host_name")),
        domino_prof=raw.get("domino_prof"),
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
                raise FileError(
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


def _factorize(values, n: int | None = None) -> tuple[np.ndarray, list[str]]:
    """Strings -> (int32 codes, categories in order of first appearance), like
    ``pd.factorize(sort=False)`` at half its cost here: one C-level pass of
    ``dict.setdefault`` gives every string the running count at its first appearance;
    those first counts ascend, so ``searchsorted`` turns them into dense codes.
    ``values``: a list, or an iterator of ``n`` strings (no list built)."""
    first: dict[str, int] = {}
    n = len(values) if n is None else n
    ids = np.fromiter(map(first.setdefault, values, count()), np.int64, n)
    starts = np.fromiter(first.values(), np.int64, len(first))
    return np.searchsorted(starts, ids).astype(np.int32), list(first)


def _us_to_ns(us: np.ndarray) -> np.ndarray:
    """float µs -> int64 ns, rounded to the nearest ns, exact for |us| < 2**43.

    ``rint(us * 1000.0)`` rounds the product first and is 1 ns off for ~0.5% of
    values around 5e12 µs. Here ``hi = floor(us)`` (< 2**43, so ``hi * 1000`` is
    an exact integer below 2**53) and ``us - hi`` (exact, few significant bits,
    so ``frac * 1000`` is exact too): the only rounding left is the final rint.
    """
    hi = np.floor(us)
    return (hi * 1000.0).astype(np.int64) + np.rint((us - hi) * 1000.0).astype(np.int64)


def _exact_ts_ns(sp: str, data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Absolute µs timestamps decoded as decimals -> exact int64 ns: (rows (X and B
    events), E events)."""
    try:
        doc = _TS_EXACT.decode(data)
    except msgspec.MsgspecError as e:  # pragma: no cover - the fast decode succeeded
        raise _decode_error(sp, data, e) from None
    evs = doc if isinstance(doc, list) else doc.traceEvents or []
    q = Decimal(1)

    def ns(ph: frozenset) -> np.ndarray:
        return np.fromiter(
            (int((e.ts * 1000).quantize(q, rounding=ROUND_HALF_EVEN)) for e in evs if e.ph in ph),
            dtype=np.int64,
        )

    return ns(_ROW_PH), ns(frozenset("E"))


def _exact_ints(values: list) -> np.ndarray:
    """int | float values -> int64, ints exactly, floats rounded to the nearest."""
    is_f = np.fromiter(map(isinstance, values, repeat(float)), bool, len(values))
    if not is_f.any():
        return np.array(values, dtype=np.int64).reshape(-1)
    out = np.array([0 if f else v for v, f in zip(values, is_f.tolist())], np.int64).reshape(-1)
    out[is_f] = np.rint(np.array([v for v in values if isinstance(v, float)], np.float64))
    return out


def _ns_fields(sp: str, data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A trace written in ns: exact int64 (ts of rows, dur of rows, ts of E events)."""
    try:
        doc = _NS_EXACT.decode(data)
    except msgspec.MsgspecError as e:  # pragma: no cover - the fast decode succeeded
        raise _decode_error(sp, data, e) from None
    evs = doc if isinstance(doc, list) else doc.traceEvents or []
    rows = [e for e in evs if e.ph in _ROW_PH]
    ends = [e for e in evs if e.ph == "E"]
    return (
        _exact_ints([e.ts for e in rows]),
        _exact_ints([e.dur for e in rows]),
        _exact_ints([e.ts for e in ends]),
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
        raise FileError(
            path_s,
            f"distributedInfo.rank is {rank} but rank={rank_arg} was given",
            "drop the rank argument (the file names its rank)",
        )
    if rank is None:
        rank = rank_arg if rank_arg is not None else _rank_from_name(Path(path_s))
    if rank is None:
        raise FileError(
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
        emulation=_emulation(path_s, top),
    )


def _emulation(path_s: str, top: dict) -> str | None:
    """The label of the file's comm-emulation mark (``emulation.trace_marker``), or None."""
    if top.get("domino_prof") is None:  # no mark (emulation.MARKER_KEY): the usual case,
        return None  # without importing the emulation package (start-up)
    from domino_prof.emulation.marker import trace_marker

    try:
        return trace_marker(top)
    except TraceError as e:
        raise FileError(path_s, e.problem, e.fix) from None


class _Ends(msgspec.Struct):
    """The ``E`` events of a run of events, and the rows that are ``B`` events."""

    b_rows: np.ndarray  # int64, rows (of this run) that are B events
    ts: np.ndarray  # int64 ns of each E
    pid: list  # int | str
    tid: list  # int | str
    rows_before: np.ndarray  # int64, rows (of this run) before each E in the file


class _Part(msgspec.Struct):
    """Columns of a run of events (a whole file, or one chunk of a big file).

    String pids/tids are not interned here (a chunk cannot know the ids other
    chunks use): their rows hold 0 and are listed in ``str_rows``."""

    n: int
    ints: dict[str, np.ndarray]
    cats: dict[str, tuple[np.ndarray, list[str]]]
    str_rows: dict[str, tuple[np.ndarray, list[str]]]  # "pid"/"tid" -> (rows, values)
    meta_events: list[tuple[str, int | str, int | str, str]]  # (name, pid, tid, label)
    unit: str | None = None  # "us" | "ns" (None: no timed event in this run)
    ends: _Ends | None = None  # B/E events, when there are any


def _id_column(values, n: int) -> tuple[np.ndarray, tuple[np.ndarray, list[str]] | None]:
    """int | str values (an iterable of ``n``) -> int64 column (strings as 0) + (rows,
    strings) of the strings."""
    if not isinstance(values, list):
        values = list(values)
        try:  # all ints (the usual case): one C pass; a str raises TypeError
            return np.frombuffer(array.array("q", values), np.int64), None
        except (TypeError, OverflowError):
            pass
    fast = np.array(values)
    if fast.dtype.kind == "i" and fast.shape == (n,):
        return fast.astype(np.int64, copy=False), None
    del fast
    is_str = np.fromiter(map(isinstance, values, repeat(str)), bool, n)
    if not is_str.any():
        return np.fromiter(values, np.int64, n), None
    col = np.array(values, dtype=object)
    rows = np.flatnonzero(is_str)
    strs = col[rows].tolist()
    col[rows] = 0
    return col.astype(np.int64), (rows.astype(np.int64), strs)


def _phases(events: list) -> list[str]:
    """Each event's ``ph``: from its type for tagged structs, its field for
    :class:`_Event` (a list holds one kind or the other)."""
    if events and type(events[0]) is _Event:
        return list(map(attrgetter("ph"), events))
    return list(map(_PHASE_OF_TYPE.__getitem__, map(type, events)))


def _events_to_part(events: list, base: int | None, src: bytes, sp: str) -> _Part:
    """Decoded events -> columns. ``src``: the bytes they came from (for exact ts)."""
    phs = _phases(events)
    kinds = set(phs)
    meta_events = [
        (e.name, e.pid, e.tid, e.args.name)
        for e in compress(events, map("M".__eq__, phs))
        if isinstance(e.args.name, str)
    ] if "M" in kinds else []  # fmt: skip
    begin_end = "B" in kinds or "E" in kinds
    if begin_end:
        is_row = list(map(_ROW_PH.__contains__, phs))
        xs = list(compress(events, is_row))
        es = list(compress(events, map("E".__eq__, phs)))
    else:
        xs = list(compress(events, map("X".__eq__, phs)))
        es = []
    n = len(xs)
    ts_dur = np.fromiter(chain.from_iterable(map(_TS_DUR, xs)), np.float64, 2 * n)
    ts_us, dur_us = ts_dur[0::2], ts_dur[1::2]
    e_us = np.fromiter(map(attrgetter("ts"), es), dtype=np.float64, count=len(es))
    big = max(float(np.abs(ts_us).max()) if n else 0.0, float(np.abs(e_us).max()) if es else 0.0)
    unit = None if not (n or es) else "ns" if (base or 0) + big * 1000.0 > _NS_ABS_LIMIT else "us"
    if unit == "ns":
        ts, dur, e_ts = _ns_fields(sp, src)
        assert len(ts) == n and len(e_ts) == len(es)
        if base:
            ts += np.int64(base)
            e_ts += np.int64(base)
    else:
        if base is None and big >= _EXACT_TS_LIMIT_US:
            ts, e_ts = _exact_ts_ns(sp, src)
            assert len(ts) == n and len(e_ts) == len(es)
        else:
            ts, e_ts = _us_to_ns(ts_us), _us_to_ns(e_us)
            if base:
                ts += np.int64(base)
                e_ts += np.int64(base)
        dur = _us_to_ns(dur_us)
    del ts_dur, ts_us, dur_us, e_us
    ends = None
    if begin_end:
        row_flags = np.array(is_row, dtype=bool)
        b_rows = np.flatnonzero(np.fromiter(map("B".__eq__, compress(phs, is_row)), bool, n))
        dur[b_rows] = 0  # set from the matching E in _finish
        e_pos = np.flatnonzero(np.fromiter(map("E".__eq__, phs), bool, len(events)))
        ends = _Ends(
            b_rows=b_rows.astype(np.int64),
            ts=e_ts,
            pid=[e.pid for e in es],
            tid=[e.tid for e in es],
            rows_before=np.cumsum(row_flags)[e_pos] if len(e_pos) else np.empty(0, np.int64),
        )
    del phs
    ints: dict[str, np.ndarray] = {"ts": ts, "dur": dur}
    cats: dict[str, tuple[np.ndarray, list[str]]] = {}
    str_rows: dict[str, tuple[np.ndarray, list[str]]] = {}
    args = list(map(_ARGS, xs))
    _keyed_columns(map(_ROW_KEY, xs), _ROW_KEY_COLS, n, ints, cats, str_rows)
    del xs
    _keyed_columns(map(_ARGS_KEY, args), _ARGS_KEY_COLS, n, ints, cats, str_rows)
    per_row = np.fromiter(
        chain.from_iterable(map(_PER_ROW, args)), np.int64, n * len(_PER_ROW_COLS)
    )
    for i, col in enumerate(_PER_ROW_COLS):
        ints[col] = per_row[i :: len(_PER_ROW_COLS)]
    ints["grid"] = _grid_column(list(map(_GRID, args)), n)
    return _Part(n=n, ints=ints, cats=cats, str_rows=str_rows, meta_events=meta_events,
                 unit=unit, ends=ends)  # fmt: skip


# A row's columns come in a few groups, each read in one C-level pass over the rows (a
# struct is read once per group, not once per column):
# - the fields with few distinct values (names, ids, streams, sizes), in two groups (the
#   row's own fields, its args' fields): the tuple of a group's fields is the key of a
#   dict, each row gets its key's number, and the columns are made from the (few)
#   distinct keys;
# - the args' ints that differ from row to row (correlation ids, sequence numbers): one
#   int64 array, a column every len(_PER_ROW_COLS) values;
# - ts and dur (floats, read before, for the time unit), and the grid (a list).
_ROW_KEY_COLS = ("cat", "name", "pid", "tid")
_ARGS_KEY_COLS = (
    "coll_name", "pg_name", "stream", "device", "wait_on_stream", "msg_nelems",
    "group_size", "from_device", "to_device",
)  # fmt: skip
_PER_ROW_COLS = ("correlation", "external_id", "seq", "wait_on_corr")
_ROW_KEY = attrgetter(*_ROW_KEY_COLS)
_ARGS_KEY = attrgetter(*_ARGS_KEY_COLS)
_PER_ROW = attrgetter(*_PER_ROW_COLS)
_ARGS, _TS_DUR, _GRID = attrgetter("args"), attrgetter("ts", "dur"), attrgetter("grid")
_STR_COLS = frozenset(("cat", "name", "coll_name", "pg_name"))
assert {*_ARGS_KEY_COLS, *_PER_ROW_COLS} == {"coll_name", "pg_name", *_INT_ARG_FIELDS}


def _keyed_columns(keys, cols: tuple[str, ...], n: int, ints: dict, cats: dict,
                   str_rows: dict) -> None:  # fmt: skip
    """The columns ``cols`` of ``n`` rows from each row's key (the tuple of its values
    of ``cols``), added to ``ints`` / ``cats`` / ``str_rows`` as in :class:`_Part`. The
    keys are numbered in order of first appearance, as :func:`_factorize` numbers
    strings; a column is then its values over the distinct keys, taken at each row's
    number. The categories of a string column come out in order of first appearance
    over the rows too (a value first appears in the first key that holds it)."""
    codes, distinct = _factorize(keys, n)
    k = len(distinct)
    by_col = zip(cols, zip(*distinct)) if k else ((c, ()) for c in cols)
    for col, values in by_col:
        if col in _STR_COLS:
            kc, names = _factorize(list(values), k)
            cats[col] = (kc[codes], names)
        elif col in ("pid", "tid"):
            kcol, strs = _id_column(list(values), k)
            ints[col] = kcol[codes]
            if strs is not None:  # the rows whose key holds a string, and that string
                krows, kstrs = strs
                which = np.full(k, -1, np.int64)
                which[krows] = np.arange(len(krows))
                at = which[codes]
                rows = np.flatnonzero(at >= 0)
                str_rows[col] = (rows.astype(np.int64), [kstrs[i] for i in at[rows].tolist()])
        else:
            ints[col] = np.fromiter(values, np.int64, k)[codes]


def _pair_begin_end(ints: dict[str, np.ndarray], parts: list[_Part], ids: dict) -> None:
    """Set the ``dur`` of every B row from its matching E: per (pid, tid), the events
    in time order (file order breaks ties) close the innermost open B (a stack)."""
    if not any(p.ends is not None for p in parts):
        return
    rows, e_ts, e_pid, e_tid, seq_e = [], [], [], [], []
    offset = 0
    for p in parts:
        if p.ends is not None:
            e = p.ends
            rows.append(e.b_rows + offset)
            e_ts.append(e.ts)
            for raw, out, k in ((e.pid, e_pid, "pid"), (e.tid, e_tid, "tid")):
                out.append(np.fromiter((ids[k][v] if isinstance(v, str) else v for v in raw),
                                       np.int64, len(raw)))  # fmt: skip
            seq_e.append(2 * (e.rows_before + offset) - 1)
        offset += p.n
    b = np.concatenate(rows)
    n_b = len(b)
    pid = np.concatenate([ints["pid"][b], *e_pid])
    tid = np.concatenate([ints["tid"][b], *e_tid])
    ts = np.concatenate([ints["ts"][b], *e_ts])
    seq = np.concatenate([2 * b, *seq_e])
    order = np.lexsort((np.arange(len(seq)), seq, ts, tid, pid))
    dur = ints["dur"]
    last = None
    stack: list[int] = []
    for i, p_, t_ in zip(order.tolist(), pid[order].tolist(), tid[order].tolist()):
        if (p_, t_) != last:
            last, stack = (p_, t_), []
        if i < n_b:
            stack.append(i)
        elif stack:
            j = stack.pop()
            dur[b[j]] = ts[i] - ts[j]


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
    if "ns" in {p.unit for p in parts}:
        meta.time_unit = "ns"
    # one column at a time, each part's piece dropped once copied: peak is the
    # columns plus one column, not twice the columns
    ints = {k: np.concatenate([p.ints.pop(k) for p in parts]) for k in list(parts[0].ints)}
    cats = {k: _merge_cats([p.cats.pop(k) for p in parts]) for k in list(parts[0].cats)}
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
    _pair_begin_end(ints, parts, ids)
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
        del ts
        for k in list(ints):  # in place, one column at a time (bounded peak)
            ints[k] = ints[k][order]
        for k in list(cats):
            c, u = cats[k]
            cats[k] = (c[order], u)
    return _Parsed(path=path_s, meta=meta, ints=ints, cats=cats, n=n)


def _parse_whole(path_s: str, data: bytes | bytearray, rank_arg: int | None) -> _Parsed:
    top, events = _decode(path_s, data)
    meta = _meta_from_top(path_s, top, rank_arg)
    part = _events_to_part(events, top.get("baseTimeNanoseconds"), data, path_s)
    del events, data
    return _finish(path_s, meta, [part])
