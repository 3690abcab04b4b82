"""Typed results of the overhead analysis, and notes that say what they are about.

The overheads analysis (``analysis.rankwise``) returns an :class:`Overheads`: frozen
dataclasses for the sections (:class:`StreamSwitches`, :class:`Launches`, :class:`AcrossRanks`), their
summary statistics (:class:`Stats`) and the ranked :class:`Finding` list. A section
that could not be computed says so in ``computed`` and why in ``reason``: a reader
never parses note text. Tables of rows (``per_iteration``, ``by_op``, ``stragglers``
...) are tuples of records: dicts of plain JSON values, one key per column, as in
the JSON document.

Every result also reads as the JSON document reads (``section["n_edges"]``,
``.get(key)``; ``to_json()`` writes it): code and tests written against
``analysis.json`` keep working, and the document keeps its keys (it gains
``computed`` and ``reason`` on every section).

:class:`Note` is a ``str`` (the JSON keeps plain strings) with a ``topic``: where it
comes from (``"skipped"``, ``"negative_duration"``, ``"stream_switches"`` ...), so
commands and figures select notes by topic, not by their wording.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd


class Note(str):
    """A note for the reader: its text, and its ``topic``."""

    topic: str

    def __new__(cls, text: str, topic: str = "") -> Note:  # noqa: PYI034
        self = super().__new__(cls, str(text))
        self.topic = topic
        return self

    def __reduce__(self):  # pickles (e.g. from a worker process) keep the topic
        return (Note, (str(self), self.topic))


def notes_about(notes: list, topic: str) -> list[Note]:
    return [n for n in notes if getattr(n, "topic", None) == topic]


def tagged(notes: list[str], topic: str) -> list[Note]:
    """``notes`` as Notes of ``topic`` (a Note keeps the topic it has)."""
    return [n if isinstance(n, Note) and n.topic else Note(n, topic) for n in notes]


def jsonable(obj: Any) -> Any:
    """Plain Python values only: numpy scalars -> int/float, NaN/inf -> None; results
    -> their JSON form."""
    if isinstance(obj, Record):
        return obj.to_json()
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if obj is None or obj is pd.NA or obj is pd.NaT:
        return None
    if isinstance(obj, str):
        return str(obj)
    return str(obj)


def _rows(rows: Any) -> list[dict]:
    return [jsonable(r) for r in rows or ()]


class Record:
    """Read access by JSON key for the frozen result dataclasses (see module doc)."""

    _hide_when_absent: tuple[str, ...] = ()

    def _keys(self) -> list[str]:
        out = []
        hide = self._hide_when_absent
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if f.name in hide and (v is None or (isinstance(v, list) and not v)):
                continue
            out.append(f.name)
        return out

    def __eq__(self, other: object) -> bool:
        """Equal to the same result, or to its JSON form (a dict with its keys)."""
        if isinstance(other, Record):
            return type(other) is type(self) and other.to_json() == self.to_json()
        if isinstance(other, Mapping):  # values compared as given (pytest.approx works)
            return self.to_json() == {str(k): v for k, v in other.items()}
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable rows inside: not hashable

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self._keys() else default

    def keys(self) -> list[str]:
        return self._keys()

    def __contains__(self, key: object) -> bool:
        return key in self._keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def to_json(self) -> dict:
        return {k: jsonable(getattr(self, k)) for k in self._keys()}


def _field_names(cls) -> set[str]:
    return {f.name for f in fields(cls)}


@dataclass(frozen=True, kw_only=True, eq=False)
class Stats(Record):
    """count, total and p50/p95 (linear interpolation) of a set of ns durations."""

    count: int = 0
    total_ns: int = 0
    p50_ns: float | None = None
    p95_ns: float | None = None

    @staticmethod
    def of(d: Mapping | None) -> Stats:
        d = jsonable(dict(d or {}))
        return Stats(**{k: v for k, v in d.items() if k in _field_names(Stats)})


# --------------------------------------------------------------------------- sections
_SWITCH_ROWS = ("per_iteration", "by_op", "by_stream_pair", "blocking_syncs")


@dataclass(frozen=True, kw_only=True, eq=False)
class StreamSwitches(Record):
    """The "stream_switches" section (docs/METRICS.md "Stream switches")."""

    computed: bool = True
    reason: str | None = None
    source: str = "none"  # "cuda_sync" | "runtime_calls" | "none"
    n_edges: int | None = None
    n_inferred: int | None = None
    n_unresolved: int | None = None
    n_unmatched: int | None = None
    n_negative: int | None = None
    switch_gap: Stats | None = None
    switch_cpu_ns: int | None = None
    n_switch_calls: int | None = None
    blocking_sync_ns: int | None = None
    n_blocking_sync: int | None = None
    n_rank_steps: int | None = None
    switch_gap_ms_per_step: float | None = None
    switch_cpu_ms_per_step: float | None = None
    blocking_sync_ms_per_step: float | None = None
    n_flagged_iterations: int | None = None
    per_iteration: list[dict] = field(default_factory=list)
    by_op: list[dict] = field(default_factory=list)
    by_stream_pair: list[dict] = field(default_factory=list)
    worst_stream_pair: dict | None = None
    blocking_syncs: list[dict] = field(default_factory=list)

    @property
    def _hide_when_absent(self) -> tuple[str, ...]:  # type: ignore[override]
        return () if self.computed else tuple(_field_names(StreamSwitches) - {"computed"})

    @staticmethod
    def of(d: Mapping | None) -> StreamSwitches:
        d = dict(d or {"computed": False})
        kw = {k: v for k, v in jsonable(d).items() if k in _field_names(StreamSwitches)}
        if "switch_gap" in kw:
            kw["switch_gap"] = Stats.of(kw["switch_gap"])
        for k in _SWITCH_ROWS:
            if k in kw:
                kw[k] = _rows(kw[k])
        kw.setdefault("computed", "n_edges" in kw)
        return StreamSwitches(**kw)


_LAUNCH_ROWS = ("per_stream", "per_iteration", "top_ops", "graph_candidates")


@dataclass(frozen=True, kw_only=True, eq=False)
class Launches(Record):
    """The "launches" section (docs/METRICS.md "Kernel launches")."""

    computed: bool = True
    reason: str | None = None
    n_intervals: int | None = None
    n_launched: int | None = None
    n_without_launch_call: int | None = None
    n_negative_delay: int | None = None
    n_graph_launched: int | None = None
    n_blocking_launches: int | None = None
    launch_cpu_ns: int | None = None
    launch_delay: Stats | None = None
    n_host_bound: int | None = None
    host_bound_idle_ns: int | None = None
    host_bound_device_idle_ns: int | None = None
    n_tiny: int | None = None
    tiny_dur_ns: int | None = None
    tiny_share: float | None = None
    n_graph_candidates: int | None = None
    graph_saving_ns: int | None = None
    graph_device_idle_saving_ns: int | None = None
    n_rank_steps: int | None = None
    host_bound_between_steps_ns: int | None = None
    host_bound_idle_ms_per_step: float | None = None
    host_bound_device_idle_ms_per_step: float | None = None
    launch_cpu_ms_per_step: float | None = None
    graph_saving_ms_per_step: float | None = None
    graph_device_idle_saving_ms_per_step: float | None = None
    n_flagged_iterations: int | None = None
    per_stream: list[dict] = field(default_factory=list)
    per_iteration: list[dict] = field(default_factory=list)
    top_ops: list[dict] = field(default_factory=list)
    graph_candidates: list[dict] = field(default_factory=list)

    @property
    def _hide_when_absent(self) -> tuple[str, ...]:  # type: ignore[override]
        return () if self.computed else tuple(_field_names(Launches) - {"computed"})

    @staticmethod
    def of(d: Mapping | None) -> Launches:
        d = dict(d or {"computed": False})
        kw = {k: v for k, v in jsonable(d).items() if k in _field_names(Launches)}
        if "launch_delay" in kw:
            kw["launch_delay"] = Stats.of(kw["launch_delay"])
        for k in _LAUNCH_ROWS:
            if k in kw:
                kw[k] = _rows(kw[k])
        kw.setdefault("computed", "n_launched" in kw)
        return Launches(**kw)


_RANK_ROWS = ("hosts", "stragglers", "per_iteration", "worst_instances")


@dataclass(frozen=True, kw_only=True, eq=False)
class AcrossRanks(Record):
    """The "across_ranks" section (docs/METRICS.md "Across ranks")."""

    computed: bool = True
    reason: str | None = None
    matching: str | None = None  # "process_group+seq" | "order_within_group"
    n_implausible: int | None = None
    n_ranks: int | None = None
    n_instances: int | None = None
    n_left_out_groups: int | None = None
    hosts: list[dict] = field(default_factory=list)
    skew: Stats | None = None
    wait_ns: int | None = None
    transfer_ns: int | None = None
    wait_share: float | None = None
    late_rank: int | None = None
    skew_ms_per_step: float | None = None
    max_wait_ms_per_step: float | None = None
    stragglers: list[dict] = field(default_factory=list)
    per_iteration: list[dict] = field(default_factory=list)
    worst_instances: list[dict] = field(default_factory=list)

    @property
    def _hide_when_absent(self) -> tuple[str, ...]:  # type: ignore[override]
        if not self.computed:
            return tuple(_field_names(AcrossRanks) - {"computed"})
        return ("n_implausible",)

    @staticmethod
    def of(d: Mapping | None) -> AcrossRanks:
        d = dict(d or {"computed": False})
        kw = {k: v for k, v in jsonable(d).items() if k in _field_names(AcrossRanks)}
        if "skew" in kw:
            kw["skew"] = Stats.of(kw["skew"])
        for k in _RANK_ROWS:
            if k in kw:
                kw[k] = _rows(kw[k])
        return AcrossRanks(**kw)


# --------------------------------------------------------------------------- findings
@dataclass(frozen=True, kw_only=True, eq=False)
class Where(Record):
    """Where a finding is: any of rank, stream ("7->13" for a pair), op, iteration."""

    rank: int | None = None
    stream: int | str | None = None
    op: str | None = None
    iteration: int | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class Finding(Record):
    """One ranked finding (analysis.findings)."""

    id: str
    severity: str  # "high" | "medium" | "low"
    title: str
    detail: str
    value: float | None
    unit: str
    where: Where
    fix: str
    est_gain_ms_per_step: float | None
    share_of_step: float | None

    @staticmethod
    def of(d: Mapping) -> Finding:
        kw = {k: v for k, v in jsonable(dict(d)).items() if k in _field_names(Finding)}
        kw["where"] = Where(**(kw.get("where") or {}))
        return Finding(**kw)


@dataclass(frozen=True, kw_only=True, eq=False)
class Overheads(Record):
    """What the overheads analysis found; ``notes`` say what could not be computed."""

    step_ms: float | None = None
    thresholds: dict = field(default_factory=dict)
    stream_switches: StreamSwitches = field(default_factory=StreamSwitches.of)
    launches: Launches = field(default_factory=Launches.of)
    across_ranks: AcrossRanks = field(default_factory=AcrossRanks.of)
    findings: list[Finding] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    # the replay model's what-if table and critical paths (analysis.replay.WhatIf's
    # JSON form; docs/METRICS.md "Extension: replay model"); {} when not computed
    whatif: dict = field(default_factory=dict)

    @staticmethod
    def of(d: Mapping | None) -> Overheads:
        """From a JSON-shaped dict (e.g. an analysis.json's ``overheads``); missing
        sections are not computed."""
        if isinstance(d, Overheads):
            return d
        d = dict(d or {})
        return Overheads(
            step_ms=jsonable(d.get("step_ms")),
            thresholds=jsonable(d.get("thresholds") or {}),
            stream_switches=_section(StreamSwitches, d.get("stream_switches")),
            launches=_section(Launches, d.get("launches")),
            across_ranks=_section(AcrossRanks, d.get("across_ranks")),
            findings=[
                f if isinstance(f, Finding) else Finding.of(f) for f in d.get("findings") or ()
            ],
            notes=[n if isinstance(n, Note) else Note(n) for n in d.get("notes") or ()],
            whatif=jsonable(d.get("whatif") or {}),
        )


def _section(cls, d):
    if isinstance(d, cls):
        return d
    return cls.of(d)
