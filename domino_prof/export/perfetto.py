"""An analysis as a Perfetto protobuf trace (``-o FILE.pftrace``): our numbers on the
timeline, where people open traces after the report.

**Why protobuf and this library.** Perfetto's JSON importer is best-effort: it
mis-draws overlapping complete events on one track, which Kineto traces hold. Its
native format is the ``Trace`` protobuf of ``protos/perfetto/trace/perfetto_trace.proto``
(TrackEvent: named tracks, slices as begin/end pairs, instant events with debug
annotations). The ``perfetto`` package on PyPI (Google's, version-locked to the
Perfetto release) ships both parts we need, offline: the compiled published protos
(``perfetto.protos.perfetto.trace.perfetto_trace_pb2``) and a trace builder
(``perfetto.trace_builder.proto_builder.TraceProtoBuilder``). Its trace processor is
*not* offline (``perfetto.trace_processor`` downloads ``trace_processor_shell`` at
first use, and no registry package ships that binary), so :func:`decode` checks an
export against Perfetto's documented TrackEvent rules itself (below). Compiling the
.proto ourselves, or hand-encoding the few messages, would mean keeping a copy of the
schema in step with Perfetto's; the package is that copy, maintained upstream. It is an
optional extra (``pip install 'domino-prof[perfetto]'``; it pulls ``protobuf``), imported
only when a ``.pftrace`` is asked for; nothing here imports torch.

**What is exported** (docs/METRICS.md "Extension: the Perfetto export"). One process
per rank (per mode and rank for several modes), named ``rank R`` (``MODE · rank R``),
with the host and the applied clock offset in its name; times are the trace's own ns
plus the rank's host offset (``across_ranks.hosts``; 0 when not computed or with
``--no-align-clocks``). Its tracks, in this order:

- ``steps``: each ``ProfilerStep#N`` as the rank's device span in the step (first
  start to last end of its device intervals), with that step's ``by_iteration`` row.
- ``micro-batch B``: the op ranges whose name ends ``_batch_B`` (``fwd.layer_attn_{L}_
  batch_{B}`` ...), each the device span of the intervals launched under it in one
  step, with phase / block / layer / batch parsed and the op's ``by_op`` row (all
  steps); ``ranges``: the other named op ranges.
- per device stream ``GPU D stream S``: every device interval (kernel, copy, memset;
  for CPU traces the analysed gloo/op events), named by kernel, category its kind;
  then ``... comm hidden`` and ``... comm exposed``: each comm interval cut at its
  device's compute boundaries (``timeline.split_hidden_exposed``, the routine behind
  every hidden figure), so a stream's hidden slices sum to its ``hidden_ns``.
- ``thread T (NAME)``: the host thread's events (CPU ops, annotations, runtime calls),
  when the trace files are given to read them from.
- ``findings``: each finding as an instant event carrying its numbers (id, severity,
  value, unit, gain, share of step, where, fix), at the start of its step on its rank;
  findings of no rank go on a top-level ``findings`` track.
- extra tracks (:class:`ExtraTrack`), e.g. the critical path of the what-if analysis
  (:data:`CRITICAL_PATH_TRACK`; :func:`critical_path_tracks` is the hook).

**Perfetto's rules, and how they are kept.** Slices on one track must nest: a track
is a stack, and an end event closes the slice begun last on it, so two partially
overlapping slices on one track would be mis-drawn (the end of the first would close
the second). Every track is therefore laid out in *lanes*: slices are taken in
(start, longest first) order and each goes to the first lane where it nests or follows
(:func:`lanes`); a lane after the first is its own track, ``NAME (overlap K)``, placed
after it. Events are written in timestamp order, at one timestamp ends before instants
before begins, ends innermost first and begins outermost first; zero-length slices are
instant events. One packet sequence; event names are interned (its first packet
clears the incremental state, later ones need it). :func:`decode` reads an export back
with the published protos and reports what Perfetto's trace processor would count as
import errors: a track event on an undeclared track, a track whose parent is
undeclared, a name id not interned before use, an end with no open slice on its track
(``misplaced_end_event``), slices left open.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from domino_prof.analysis.document import Analysis
from domino_prof.analysis.ranks import UNKNOWN_HOST
from domino_prof.analysis.timeline import split_hidden_exposed
from domino_prof.engine import Reading
from domino_prof.errors import ConfigError
from domino_prof.io import atomic_write_all
from domino_prof.trace import load_trace

PFTRACE_SUFFIX = ".pftrace"
INSTALL_HINT = "pip install 'domino-prof[perfetto]'"
CRITICAL_PATH_TRACK = "critical path"
SEQUENCE_ID = 1
_BATCH = re.compile(r"_batch_(\d+)$")
_LAYER_OP = re.compile(r"^(fwd|bwd)\.layer_(attn|mlp)_(\d+)_batch_(\d+)$")
# device work, device-side ranges and syncs, the profiler's own span
_HOST_EXCLUDED = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync",
                  "Trace")  # fmt: skip


def require() -> tuple[Any, Any]:
    """(perfetto_trace_pb2, TraceProtoBuilder), or one ConfigError line with the hint."""
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
        from perfetto.trace_builder.proto_builder import TraceProtoBuilder
    except Exception as e:  # ImportError, or protobuf's runtime VersionError
        why = f"{e.name} is missing" if isinstance(e, ImportError) and e.name else str(e)
        raise ConfigError(
            f"a {PFTRACE_SUFFIX} output needs the perfetto package ({why}); {INSTALL_HINT}"
        ) from None
    return pb, TraceProtoBuilder


def available() -> bool:
    """Whether the optional extra is installed (tests skip without it)."""
    try:
        require()
    except ConfigError:
        return False
    return True


@dataclass(frozen=True, kw_only=True)
class ExtraTrack:
    """A track of slices drawn on each rank that has some: ``slices`` has columns
    ``rank, start, end`` (int64 ns, on the trace's clock: the export adds the rank's
    host offset) and ``name``; any other column becomes an argument of its slice."""

    name: str
    slices: pd.DataFrame
    description: str = ""


@dataclass(frozen=True, kw_only=True)
class HostEvents:
    """The host threads' events of a trace: ``events`` with columns ``rank, pid, tid,
    start, end`` (int64 ns), ``name``, ``cat``; ``thread_names`` by (rank, pid, tid)."""

    events: pd.DataFrame
    thread_names: Mapping[tuple[int, int, int], str] = field(default_factory=dict)


def host_events(
    trace_path: str | Path, *, rank: int | None = None, skip_bad: bool = False
) -> HostEvents:
    """The host events of the trace files at ``trace_path`` (read again: the analysis
    keeps no host events), every complete event that is not device work."""
    trace = load_trace(trace_path, rank=rank, skip_bad=skip_bad, progress=False)
    ev = trace.events
    keep = (~ev["cat"].astype(str).isin(_HOST_EXCLUDED).to_numpy()) & (
        ev["stream"].to_numpy() < 0
    )
    ev = ev.loc[keep]
    start = ev["ts"].to_numpy(np.int64)
    out = pd.DataFrame(
        {
            "rank": ev["rank"].to_numpy(np.int64),
            "pid": ev["pid"].to_numpy(np.int64),
            "tid": ev["tid"].to_numpy(np.int64),
            "start": start,
            "end": start + ev["dur"].to_numpy(np.int64),
            "name": ev["name"].astype(str).to_numpy(),
            "cat": ev["cat"].astype(str).to_numpy(),
        }
    )
    names = {
        (int(r), int(pid), int(tid)): str(n)
        for r, meta in trace.ranks.items()
        for (pid, tid), n in meta.thread_names.items()
    }
    return HostEvents(events=out, thread_names=names)


def critical_path_tracks(analysis: Analysis) -> list[ExtraTrack]:
    """The hook for the what-if analysis' critical path: an ``Analysis`` that carries a
    ``critical_path`` frame (``rank, start, end, name``, one row per segment of the
    step's critical path, trace clock) gets it drawn as the :data:`CRITICAL_PATH_TRACK`
    track of each rank. None yet does; the replay model sets it."""
    cp = getattr(analysis, "critical_path", None)
    if not isinstance(cp, pd.DataFrame) or cp.empty:
        return []
    return [ExtraTrack(name=CRITICAL_PATH_TRACK, slices=cp,
                       description="the step's critical path (what-if replay)")]  # fmt: skip


# --------------------------------------------------------------------------- layout
def lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The lane of each slice so that every lane's slices nest or follow each other
    (Perfetto's rule for one track). Input sorted by (start, end descending); lane 0
    for all when no two slices overlap (checked vectorised), else first fit over the
    lanes' stacks of open ends (one pass; only traces whose slices cross need it)."""
    n = len(start)
    out = np.zeros(n, dtype=np.int64)
    if n < 2 or (start[1:] >= np.maximum.accumulate(end)[:-1]).all():
        return out
    stacks: list[list[int]] = []
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        for k, st in enumerate(stacks):
            while st and st[-1] <= s:
                st.pop()
            if not st or st[-1] >= e:
                st.append(e)
                out[i] = k
                break
        else:
            stacks.append([e])
            out[i] = len(stacks) - 1
    return out


@dataclass
class _Track:
    uuid: int
    name: str
    parent: int | None = None
    description: str = ""
    process: tuple[int, str] | None = None  # (pid, name) of a process track


@dataclass
class _Layout:
    """Tracks and the slices / instants on them, before encoding."""

    tracks: list[_Track] = field(default_factory=list)
    slices: list[pd.DataFrame] = field(default_factory=list)  # track, start, end, name, cat, args
    next_uuid: int = 1

    def track(self, name: str, *, parent: int | None, description: str = "",
              process: tuple[int, str] | None = None) -> int:  # fmt: skip
        uuid = self.next_uuid
        self.next_uuid += 1
        self.tracks.append(_Track(uuid, name, parent, description, process))
        return uuid

    def add(self, name: str, parent: int | None, frame: pd.DataFrame, *,
            description: str = "") -> None:  # fmt: skip
        """Slices (``start, end, name, cat, args``) on a track named ``name`` under
        ``parent``, laid out in lanes; instants are the rows with ``start == end``."""
        if frame.empty:
            return
        f = frame.sort_values(["start", "end"], ascending=[True, False], kind="stable")
        f = f.reset_index(drop=True)
        lane = lanes(f["start"].to_numpy(np.int64), f["end"].to_numpy(np.int64))
        for k in range(int(lane.max()) + 1):
            label = name if k == 0 else f"{name} (overlap {k})"
            desc = description if k == 0 else f"slices of '{name}' that cross others there"
            uuid = self.track(label, parent=parent, description=desc)
            self.slices.append(f.loc[lane == k].assign(track=uuid))


def _frame(start, end, name, *, cat="", args=None) -> pd.DataFrame:
    n = len(start)
    return pd.DataFrame(
        {
            "start": np.asarray(start, np.int64),
            "end": np.asarray(end, np.int64),
            "name": np.asarray(name, dtype=object),
            "cat": np.asarray(cat if not isinstance(cat, str) else [cat] * n, dtype=object),
            "args": list(args) if args is not None else [None] * n,
        }
    )


def _records(df: pd.DataFrame, cols: Sequence[str]) -> list[dict]:
    """Rows as dicts of the given columns (plain Python values, NaN left out)."""
    present = [c for c in cols if c in df]
    out = []
    for row in df[present].itertuples(index=False, name=None):
        out.append({c: v for c, v in zip(present, row) if not _missing(v)})
    return out


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and not np.isfinite(v))


def _offsets(analysis: Analysis) -> tuple[dict[int, int], dict[int, str]]:
    """Each rank's host clock offset (ns) and host, from ``across_ranks.hosts``."""
    ar = getattr(getattr(analysis, "overheads", None), "across_ranks", None)
    offs: dict[int, int] = {}
    hosts: dict[int, str] = {}
    if ar is None or not getattr(ar, "computed", False):
        return offs, hosts
    for h in getattr(ar, "hosts", None) or []:
        for r in h.get("ranks", []):
            offs[int(r)] = int(h.get("offset_ns", 0))
            hosts[int(r)] = str(h.get("host", ""))
    return offs, hosts


def _layout_rank(lay: _Layout, a: Analysis, rank: int, proc: int, off: int,
                 host: HostEvents | None, extra: Sequence[ExtraTrack]) -> None:  # fmt: skip
    """The tracks of one rank under its process track ``proc``."""
    iv = a.intervals
    iv = iv.loc[iv["rank"].to_numpy() == rank].reset_index(drop=True)
    start = iv["start"].to_numpy(np.int64) + off
    end = iv["end"].to_numpy(np.int64) + off
    it = iv["iteration"].to_numpy(np.int64)
    # steps: the rank's device span per step, with its by_iteration row
    step = iv.assign(_s=start, _e=end).loc[it >= 0].groupby("iteration", sort=True)
    span = step.agg(s=("_s", "min"), e=("_e", "max")).reset_index()
    if len(span):
        bi = a.by_iteration
        bi = bi.loc[bi["rank"] == rank].set_index("iteration")
        cols = ["wall_ns", "comm_ns", "hidden_ns", "exposed_ns", "hidden_pct"]
        args = _records(bi.reindex(span["iteration"]).reset_index(), ["iteration", *cols])
        lay.add("steps", proc, _frame(span["s"], span["e"],
                                      [f"ProfilerStep#{i}" for i in span["iteration"]],
                                      cat="step", args=args),
                description="each step's device span on this rank, with its row")  # fmt: skip
    # op ranges: micro-batch tracks from the names, then the other ranges
    op = iv["op"].astype(str).to_numpy()
    named = op != "(none)"
    if named.any():
        g = (
            pd.DataFrame({"op": op[named], "iteration": it[named], "s": start[named],
                          "e": end[named]})
            .groupby(["op", "iteration"], sort=True)
            .agg(s=("s", "min"), e=("e", "max"), n=("s", "size"))
            .reset_index()
        )  # fmt: skip
        bo = a.by_op
        bo = bo.loc[bo["rank"] == rank].assign(op=lambda d: d["op"].astype(str)).set_index("op")
        totals = bo.reindex(g["op"])
        batch = g["op"].str.extract(_BATCH)[0]
        args = []
        for row, tot in zip(g.itertuples(index=False), totals.itertuples(index=False)):
            d: dict[str, Any] = {"iteration": int(row.iteration), "n_intervals": int(row.n)}
            m = _LAYER_OP.match(row.op)
            if m:
                d.update(phase=m[1], block=m[2], layer=int(m[3]), batch=int(m[4]))
            for c in ("comm_ns", "hidden_ns", "exposed_ns", "hidden_pct"):
                v = getattr(tot, c, None)
                if not _missing(v) and not (isinstance(v, float) and np.isnan(v)):
                    d[f"op_{c}_all_steps"] = v
            args.append(d)
        g = g.assign(args=args, batch=batch)
        for b in sorted(g["batch"].dropna().unique(), key=int):
            sel = g.loc[g["batch"] == b]
            lay.add(f"micro-batch {b}", proc,
                    _frame(sel["s"], sel["e"], sel["op"], cat="range", args=sel["args"]),
                    description="op ranges of this micro-batch (device span per step)")  # fmt: skip
        sel = g.loc[g["batch"].isna()]
        lay.add("ranges", proc, _frame(sel["s"], sel["e"], sel["op"], cat="range",
                                       args=sel["args"]),
                description="other named op ranges (device span per step)")  # fmt: skip
    # device streams, each with its comm split into hidden and exposed
    pieces = split_hidden_exposed(iv, reference=a.reference)
    src = pieces["src"].to_numpy(np.int64)
    hid = np.zeros(len(iv), np.int64)
    inside = (pieces["part"] == "comm_hidden").to_numpy()
    np.add.at(hid, src[inside], (pieces["end"] - pieces["start"]).to_numpy(np.int64)[inside])
    kind = iv["kind"].astype(str).to_numpy()
    names = iv["name"].astype(str).to_numpy()
    corr = iv["correlation"].to_numpy(np.int64)
    pdev = iv["device"].to_numpy(np.int64)[src]
    pstream = pieces["stream"].to_numpy(np.int64)
    for (dev, stream), rows in iv.groupby(["device", "stream"], sort=True).indices.items():
        label = f"GPU {dev} stream {stream}" if dev >= 0 else f"thread {stream} (device work)"
        args = [
            {"kind": kind[i], "op": op[i], "iteration": int(it[i]),
             "correlation": int(corr[i]),
             **({"hidden_ns": int(hid[i]), "exposed_ns": int(end[i] - start[i] - hid[i])}
                if kind[i] == "comm" else {})}
            for i in rows
        ]  # fmt: skip
        lay.add(label, proc, _frame(start[rows], end[rows], names[rows], cat=kind[rows],
                                    args=args),
                description="device intervals (kernels, copies, memsets)")  # fmt: skip
        for part, what in (("comm_hidden", "hidden"), ("comm_exposed", "exposed")):
            m = (pdev == dev) & (pstream == stream) & (pieces["part"].to_numpy() == part)
            p = pieces.loc[m]
            if p.empty:
                continue
            lay.add(f"{label} comm {what}", proc,
                    _frame(p["start"].to_numpy(np.int64) + off, p["end"].to_numpy(np.int64) + off,
                           p["name"], cat=f"comm_{what}",
                           args=[{"op": o} for o in p["op"]]),
                    description=f"the {what} pieces of this stream's comm intervals "
                    "(docs/METRICS.md Overlap)")  # fmt: skip
    # host threads
    if host is not None and len(host.events):
        he = host.events.loc[host.events["rank"].to_numpy() == rank]
        pids = he["pid"].unique()
        for (pid, tid), rows in he.groupby(["pid", "tid"], sort=True).indices.items():
            h = he.iloc[rows]
            tname = host.thread_names.get((rank, int(pid), int(tid)))
            label = f"thread {tid}" + (f" ({tname})" if tname else "")
            if tname and tname.startswith("thread "):  # Kineto's "thread 656 (python3)"
                label = tname
            if len(pids) > 1:
                label = f"pid {pid} {label}"
            lay.add(label, proc, _frame(h["start"].to_numpy(np.int64) + off,
                                        h["end"].to_numpy(np.int64) + off, h["name"],
                                        cat=h["cat"].to_numpy()),
                    description="host events of this thread (CPU ops, annotations, "
                    "runtime calls)")  # fmt: skip
    # extra tracks (the critical path once the what-if analysis sets it)
    for x in extra:
        s = x.slices.loc[x.slices["rank"].to_numpy() == rank]
        if s.empty:
            continue
        other = [c for c in s.columns if c not in ("rank", "start", "end", "name")]
        lay.add(x.name, proc, _frame(s["start"].to_numpy(np.int64) + off,
                                     s["end"].to_numpy(np.int64) + off, s["name"].astype(str),
                                     cat="extra", args=_records(s, other)),
                description=x.description)  # fmt: skip


def _finding_instants(a: Analysis, lay: _Layout, procs: dict[int, int], offs: dict[int, int],
                      top: str) -> None:  # fmt: skip
    """Each finding as an instant event on its rank's ``findings`` track (else on the
    top-level track named ``top``)."""
    findings = list(getattr(getattr(a, "overheads", None), "findings", None) or [])
    if not findings:
        return
    iv = a.intervals
    off = iv["rank"].map(offs).fillna(0).to_numpy(np.int64)
    t = pd.DataFrame({"rank": iv["rank"].to_numpy(np.int64), "iteration": iv["iteration"],
                      "s": iv["start"].to_numpy(np.int64) + off})  # fmt: skip
    first_step = t.loc[t["iteration"] >= 0].groupby(["rank", "iteration"])["s"].min()
    first_rank = t.groupby("rank")["s"].min()
    t0 = int(t["s"].min()) if len(t) else 0
    per: dict[int | None, list] = {}
    for f in findings:
        w = f.where
        r = w.rank if w.rank in procs else None
        if r is not None and w.iteration is not None and (r, w.iteration) in first_step.index:
            ts = int(first_step.loc[(r, w.iteration)])
        elif r is not None:
            steps = first_step.loc[r] if r in first_step.index.get_level_values(0) else None
            ts = int(steps.iloc[0]) if steps is not None and len(steps) else int(first_rank[r])
        else:
            ts = int(first_step.min()) if len(first_step) else t0
        args = {k: v for k, v in (
            ("id", f.id), ("severity", f.severity), ("value", f.value), ("unit", f.unit),
            ("est_gain_ms_per_step", f.est_gain_ms_per_step),
            ("share_of_step", f.share_of_step), ("where.rank", w.rank),
            ("where.stream", None if w.stream is None else str(w.stream)),
            ("where.op", w.op), ("where.iteration", w.iteration), ("detail", f.detail),
            ("fix", f.fix)) if not _missing(v)}  # fmt: skip
        per.setdefault(r, []).append((ts, f"{f.severity}: {f.title}", args))
    for r, items in per.items():
        parent = procs[r] if r is not None else None
        ts = [x[0] for x in items]
        frame = _frame(ts, ts, [x[1] for x in items], cat="finding", args=[x[2] for x in items])
        lay.add("findings" if r is not None else top, parent, frame,
                description="the analysis' findings, each with its numbers")  # fmt: skip


def layout(analyses: Mapping[str, Analysis], *, host: Mapping[str, HostEvents | None] | None = None,
           extra: Mapping[str, Sequence[ExtraTrack]] | None = None) -> _Layout:  # fmt: skip
    """Every track and slice of the export of ``analyses`` (mode -> Analysis with its
    intervals; mode ``""`` for plain traces)."""
    lay = _Layout()
    pid = 0
    for mode, a in analyses.items():
        if getattr(a, "intervals", None) is None:
            raise ConfigError(
                f"a {PFTRACE_SUFFIX} export needs the analysis' intervals; analyse with "
                "keep_intervals=True"
            )
        offs, hosts = _offsets(a)
        procs: dict[int, int] = {}
        rows = a.by_rank.set_index("rank") if len(a.by_rank) else None
        for r in a.ranks:
            pid += 1
            name = (f"{mode} · " if mode else "") + f"rank {r}"
            if hosts.get(r) and hosts[r] != UNKNOWN_HOST:
                name += f" · {hosts[r]}"
            if offs.get(r):
                name += f" · clock {offs[r] / 1e6:+.3f} ms"
            desc = ""
            if rows is not None and r in rows.index:
                x = rows.loc[r]
                pct = "n/a" if not np.isfinite(x["hidden_pct"]) else f"{x['hidden_pct']:.1f} %"
                desc = (f"comm {x['comm_ns'] / 1e6:.3f} ms, hidden {pct}, exposed "
                        f"{x['exposed_ns'] / 1e6:.3f} ms; clock offset {offs.get(r, 0)} ns")
            procs[r] = lay.track(name, parent=None, description=desc, process=(pid, name))
            _layout_rank(lay, a, r, procs[r], offs.get(r, 0), (host or {}).get(mode),
                         [*(extra or {}).get(mode, ()), *critical_path_tracks(a)])  # fmt: skip
        _finding_instants(a, lay, procs, offs, f"{mode} · findings" if mode else "findings")
    return lay


# --------------------------------------------------------------------------- encoding
def _annotate(ev: Any, args: Mapping[str, Any] | None) -> None:
    for k, v in (args or {}).items():
        d = ev.debug_annotations.add()
        d.name = str(k)
        if isinstance(v, (bool, np.bool_)):
            d.bool_value = bool(v)
        elif isinstance(v, (int, np.integer)):
            d.int_value = int(v)
        elif isinstance(v, (float, np.floating)):
            d.double_value = float(v)
        else:
            d.string_value = str(v)


def encode(lay: _Layout) -> bytes:
    """The Perfetto ``Trace`` bytes of a layout (see the module doc for the order)."""
    pb, Builder = require()
    b = Builder()
    order = pb.TrackDescriptor.ChildTracksOrdering.Value("EXPLICIT")
    rank_in: dict[int | None, int] = {}
    for i, t in enumerate(lay.tracks):
        p = b.add_packet()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        if i == 0:
            p.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        d = p.track_descriptor
        d.uuid = t.uuid
        if t.process is not None:
            d.process.pid, d.process.process_name = t.process
            d.child_ordering = order
        else:
            d.name = t.name
        if t.parent is not None:
            d.parent_uuid = t.parent
        d.sibling_order_rank = rank_in.get(t.parent, 0)
        rank_in[t.parent] = rank_in.get(t.parent, 0) + 1
        if t.description:
            d.description = t.description
    if not lay.slices:
        return b.serialize()
    s = pd.concat(lay.slices, ignore_index=True)
    s = s.sort_values(["track", "start", "end"], ascending=[True, True, False], kind="stable")
    s = s.reset_index(drop=True)
    n = len(s)
    st = s["start"].to_numpy(np.int64)
    en = s["end"].to_numpy(np.int64)
    inst = st == en
    seq = np.arange(n, dtype=np.int64)
    # events: begins (kind 2) and ends (kind 0) of slices, instants (kind 1)
    idx = np.concatenate([seq[~inst], seq[~inst], seq[inst]])
    ts = np.concatenate([st[~inst], en[~inst], st[inst]])
    kind = np.concatenate([np.full((~inst).sum(), 2), np.zeros((~inst).sum(), np.int64),
                           np.ones(inst.sum(), np.int64)])  # fmt: skip
    sec = np.where(kind == 0, -idx, idx)
    o = np.lexsort((sec, kind, ts))
    track = s["track"].to_numpy(np.int64)
    name = s["name"].astype(str).to_numpy()
    cat = s["cat"].astype(str).to_numpy()
    args = s["args"].to_numpy()
    t_begin, t_end, t_inst = (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END,
                              pb.TrackEvent.TYPE_INSTANT)  # fmt: skip
    needs = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    iids: dict[str, int] = {}
    for j in o.tolist():
        i, k = int(idx[j]), int(kind[j])
        p = b.add_packet()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        p.sequence_flags = needs
        p.timestamp = int(ts[j])
        ev = p.track_event
        ev.track_uuid = int(track[i])
        if k == 0:
            ev.type = t_end
            continue
        ev.type = t_begin if k == 2 else t_inst
        nm = name[i]
        iid = iids.get(nm)
        if iid is None:
            iid = iids[nm] = len(iids) + 1
            e = p.interned_data.event_names.add()
            e.iid, e.name = iid, nm
        ev.name_iid = iid
        if cat[i]:
            ev.categories.append(cat[i])
        _annotate(ev, args[i])
    return b.serialize()


def perfetto_trace(
    analyses: Analysis | Mapping[str, Analysis],
    *,
    host: HostEvents | Mapping[str, HostEvents | None] | None = None,
    extra: Sequence[ExtraTrack] | Mapping[str, Sequence[ExtraTrack]] = (),
) -> bytes:
    """The ``.pftrace`` bytes of one Analysis (or of ``{mode: Analysis}``, one process
    per mode and rank), analysed with its intervals. ``host``: the host events to draw
    (:func:`host_events`; per mode for several); ``extra``: more tracks per rank."""
    if not isinstance(analyses, Mapping):
        analyses = {"": analyses}
        host = {"": host} if isinstance(host, HostEvents) or host is None else host
        extra = {"": extra} if not isinstance(extra, Mapping) else extra
    require()  # the install hint before any work
    return encode(layout(analyses, host=host, extra=extra))  # type: ignore[arg-type]


def export_bytes(
    analyses: Mapping[str, Analysis], trace_paths: Mapping[str, Path], *,
    reading: Reading | None = None,
) -> bytes:  # fmt: skip
    """What ``analyze`` / ``report -o FILE.pftrace`` write: the analyses of each mode
    with their host threads, read again from each mode's trace files as ``reading``
    (the command's, which made the analyses) says."""
    require()
    analyses = {m: a for m, a in analyses.items() if getattr(a, "intervals", None) is not None}
    if not analyses:
        raise ConfigError(f"nothing to export to {PFTRACE_SUFFIX}: no mode could be analysed")
    r = Reading() if reading is None else reading
    host = {m: host_events(trace_paths[m], rank=r.rank, skip_bad=r.skip_bad) for m in analyses}
    if len(analyses) == 1:  # one mode: processes named by rank alone
        ((m, a),) = analyses.items()
        return perfetto_trace({"": a}, host={"": host[m]})
    return perfetto_trace(analyses, host=host)


def write_run_exports(
    run_dir: Path, analyses: Mapping[str, Analysis], trace_paths: Mapping[str, Path], *,
    name: str = "trace.pftrace",
) -> list[Path]:  # fmt: skip
    """A run directory's per-mode exports, ``RUN_DIR/<mode>/trace.pftrace``, written all
    or nothing (``io.atomic_write_all``). For ``runs.assemble`` / ``refresh`` to call
    after each mode's analysis when the extra is installed (``available()``)."""
    files = [
        (Path(run_dir) / m / name, export_bytes({"": a}, {"": trace_paths[m]}))
        for m, a in analyses.items()
        if getattr(a, "intervals", None) is not None
    ]
    atomic_write_all(files)
    return [p for p, _ in files]


# --------------------------------------------------------------------------- reading back
@dataclass(frozen=True, kw_only=True)
class Decoded:
    """An export read back as Perfetto's trace processor would: ``tracks`` (uuid ->
    name), ``parents`` (uuid -> parent uuid or None), ``slices`` (``track, name, start,
    end, depth``; instants have ``start == end``), ``args`` (one dict per slice row) and
    ``problems`` (import errors; empty for a good trace)."""

    tracks: dict[int, str]
    parents: dict[int, int | None]
    slices: pd.DataFrame
    args: list[dict]
    problems: list[str]


def decode(data: bytes) -> Decoded:
    """Parse a ``.pftrace`` with the published protos and apply Perfetto's TrackEvent
    rules (module doc): packets are taken in timestamp order, file order at a tie (the
    order :func:`encode` writes them in: ends before instants before begins; we rely on
    the trace processor's sorter keeping a sequence's order at equal timestamps, which
    could not be run here), and each track is a stack of open slices."""
    pb, _ = require()
    trace = pb.Trace()
    trace.ParseFromString(data)
    problems: list[str] = []
    tracks: dict[int, str] = {}
    parents: dict[int, int | None] = {}
    names: dict[int, dict[int, str]] = {}
    cleared: set[int] = set()
    events = []
    for n, p in enumerate(trace.packet):
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            cleared.add(seq)
            names[seq] = {}
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.uuid in tracks:
                problems.append(f"track {d.uuid} declared twice")
            tracks[d.uuid] = d.process.process_name if d.HasField("process") else d.name
            parents[d.uuid] = d.parent_uuid if d.HasField("parent_uuid") else None
        for e in p.interned_data.event_names:
            names.setdefault(seq, {})[e.iid] = e.name
        if not p.HasField("track_event"):
            continue
        if p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE and seq not in cleared:
            problems.append(f"packet {n} needs incremental state its sequence never cleared")
        ev = p.track_event
        if ev.track_uuid not in tracks:
            problems.append(f"packet {n}: track event on undeclared track {ev.track_uuid}")
        name = ev.name
        if ev.HasField("name_iid"):
            name = names.get(seq, {}).get(ev.name_iid)
            if name is None:
                problems.append(f"packet {n}: event name id {ev.name_iid} not interned")
        args = {a.name: _value(a) for a in ev.debug_annotations}
        events.append((p.timestamp, n, ev.type, ev.track_uuid, name, args))
    for u, par in parents.items():
        if par is not None and par not in tracks:
            problems.append(f"track {u} ({tracks[u]!r}) has undeclared parent {par}")
    events.sort(key=lambda x: (x[0], x[1]))
    open_: dict[int, list[int]] = {}
    rows: list[list] = []
    out_args: list[dict] = []
    TB, TE, TI = (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END,
                  pb.TrackEvent.TYPE_INSTANT)  # fmt: skip
    for ts, n, typ, tr, name, args in events:
        stack = open_.setdefault(tr, [])
        if typ == TE:
            if not stack:
                problems.append(f"misplaced_end_event: packet {n} on track {tr} closes nothing")
                continue
            rows[stack.pop()][3] = ts
        elif typ in (TB, TI):
            rows.append([tr, name, ts, ts if typ == TI else -1, len(stack)])
            out_args.append(args)
            if typ == TB:
                stack.append(len(rows) - 1)
        else:
            problems.append(f"packet {n}: unexpected track event type {typ}")
    left = sum(len(s) for s in open_.values())
    if left:
        problems.append(f"{left} slice(s) never closed")
    slices = pd.DataFrame(rows, columns=["track", "name", "start", "end", "depth"])
    slices = slices.astype({"track": np.int64, "start": np.int64, "end": np.int64,
                            "depth": np.int64})  # fmt: skip
    return Decoded(tracks=tracks, parents=parents, slices=slices, args=out_args,
                   problems=problems)  # fmt: skip


def _value(a: Any) -> Any:
    for f in ("int_value", "double_value", "bool_value", "string_value", "uint_value"):
        if a.HasField(f):
            return getattr(a, f)
    return None
