"""Kineto JSON -> columnar events (one frame, a rank column). No torch import here."""

from domino_prof.trace.loader import find_trace_files, load_trace
from domino_prof.trace.schema import EVENT_COLUMNS, RankMeta, Trace, empty_events

__all__ = ["EVENT_COLUMNS", "RankMeta", "Trace", "empty_events", "find_trace_files", "load_trace"]
