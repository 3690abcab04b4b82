"""Kineto (PyTorch profiler) Chrome trace files -> one :class:`~.schema.Trace`.

How a file becomes rows (see ``schema.py`` for the columns):

1. plain files are memory-mapped (big ones) or read; gzip (detected by its
   magic bytes, not the suffix) is inflated in-process with :mod:`zlib`
   (measured ~430 MB/s of JSON, ~15% of a load; a subprocess ``gzip -dc``
   would only add a copy through a pipe);
2. the JSON is decoded by ``msgspec`` straight into small typed structs that
   declare only the fields we use (``args`` included), one struct type per phase
   (a tagged union on ``ph``): flow, instant, counter ... events become structs
   without fields. Unknown keys such as ``"Input Dims"`` or ``"Concrete Inputs"``
   are skipped by the decoder without ever becoming Python objects. This is the
   fastest correct way we measured (``benchmarks/bench_analyze.py``, 1M events /
   257 MB: the same columns via ``orjson.loads`` dicts took 6.8 s CPU and 2.1 GB
   peak; this loader plus the whole overlap analysis 4.0 s and 0.35 GB; stdlib
   ``json`` is slower than orjson). Our typed decode alone is cheaper than
   orjson's dict decode;
3. the rows (``ph`` X and B) become numpy columns in a few C-level passes: the
   low-cardinality fields of a row as one dict key (columns made from the distinct
   keys), the per-row ints in one pass, ts/dur in one (``decode._events_to_part``).

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

The jobs live in their own modules: ``read`` (bytes of a file, gzip, FIFOs), ``decode``
(typed msgspec decode, one file's columns), ``chunked`` (big files in chunks),
``parse`` (the per-file job: read, then decode whole or in chunks), ``pool``
(discovery of rank files, the process pool, progress); this module assembles the
files' columns into one :class:`~.schema.Trace`.
"""

from __future__ import annotations

import os
import re
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from domino_prof.errors import ConfigError, TraceError
from domino_prof.trace.decode import _Parsed
from domino_prof.trace.parse import parse_or_error
from domino_prof.trace.pool import _ignored_beside, find_trace_files, map_files
from domino_prof.trace.read import FileError
from domino_prof.trace.schema import (
    CATEGORY_COLUMNS,
    EVENT_COLUMNS,
    INT_COLUMNS,
    RankMeta,
    Trace,
)

__all__ = ["find_trace_files", "load_trace", "rank_metadata_problems", "trace_files"]


# --------------------------------------------------------------------------- #
# Assembly                                                                     #
# --------------------------------------------------------------------------- #


def assemble_events(parsed: list[_Parsed]) -> pd.DataFrame:
    """The events frame of parsed rank files (columns ``EVENT_COLUMNS``, rank order).
    One file's int columns are taken as they are, not copied: the frame shares them
    with ``parsed``, which the callers drop once it is built."""
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
            # one file (a rank job): its column as is, not a copy (the parsed columns
            # and the frame's would otherwise both be whole here: twice the memory)
            pieces = [p.ints[col] for p in parsed]
            whole = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
            data[col] = whole.astype(INT_COLUMNS[col], copy=False)
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


def trace_files(
    path: str | os.PathLike, *, rank: int | None = None
) -> tuple[Path, list[Path], bool]:
    """The rank files PATH names: (path, files, is_dir); TraceError / ConfigError when it
    names none (a missing path, an empty directory, ``rank`` given for a directory)."""
    p = Path(path)
    try:
        is_dir = p.is_dir()
        exists = p.exists()
    except OSError as e:
        raise TraceError(p, f"cannot access ({e})", "check the path") from None
    if not exists:
        raise TraceError(p, "no such file or directory", "check the path")
    if not is_dir:
        return p, [p], False
    if rank is not None:
        raise ConfigError(f"{p}: rank={rank} only applies to a single trace file, not a directory")
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
    return p, files, True


MORE_NAMED = 3  # sort_results: the other bad files named beside the first


def sort_results(
    p: Path, files: list[Path], results: list, *, is_dir: bool, skip_bad: bool
) -> tuple[list, list[tuple[str, str]]]:
    """Split per-file results into the good ones and ``skipped`` (path, why): a bad
    file is a TraceError naming it (and the fix; the other bad files, if any, by name)
    unless ``skip_bad`` in a directory; no good file at all is one too. Other JSON files
    beside Kineto-named ones are listed as skipped (not read), so that nothing is left out
    silently."""
    bad = [r for r in results if isinstance(r, FileError)]
    if bad and not (is_dir and skip_bad):
        # the first bad file with its problem, the next MORE_NAMED by name: several can
        # fail at once for one cause (a Dask worker that dies fails every task it held,
        # the file that killed it among them, in no fixed order)
        first, rest = bad[0], bad[1:]
        also = (f" (and {len(rest)} more bad: {', '.join(r.path for r in rest[:MORE_NAMED])}"
                f"{', ...' if len(rest) > MORE_NAMED else ''})" if rest else "")  # fmt: skip
        hint = first.fix + (" (or use --skip-bad to skip bad files)" if is_dir else "")
        raise TraceError(first.path, first.problem + also, hint)
    good: list = []
    skipped: list[tuple[str, str]] = []
    for r in results:
        if isinstance(r, FileError):
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
    return good, skipped


def check_unique_ranks(p: Path, ranked: list[tuple[int, str]]) -> None:
    """TraceError when two files claim one rank (``ranked``: (rank, path) per file)."""
    seen: dict[int, str] = {}
    for r, path in ranked:
        if r in seen:
            raise TraceError(
                p,
                f"two files claim rank {r}: {seen[r]} and {path}",
                "point at one run / mode subdirectory (one file per rank)",
            )
        seen[r] = path


# a rank in a file name: rank3, rank-3, rank_3 (as trace.decode reads a name)
_RANK_IN_NAME = re.compile(r"(?i)(?<![a-z])rank[-_]?(\d+)(?!\d)")


def rank_in_name(path: str | os.PathLike) -> int | None:
    """The one rank a file name carries (``rank3.json``), else None."""
    found = {int(m) for m in _RANK_IN_NAME.findall(Path(path).name)}
    return found.pop() if len(found) == 1 else None


def rank_metadata_problems(metas: dict[int, RankMeta]) -> list[str]:
    """What the rank files say about their ranks that does not add up (notes, in rank
    order): a file name naming another rank than the one read (``distributedInfo.rank``
    or the given rank wins), a rank not below its file's world size."""
    out = []
    for r, m in sorted(metas.items()):
        named = rank_in_name(m.path)
        if named is not None and named != r:
            out.append(
                f"{m.path}: the file name says rank {named} but the trace is rank {r} "
                f"(its distributedInfo.rank, or the rank given): analysed as rank {r}; "
                "rename the file if the name is wrong"
            )
        if m.world_size is not None and not 0 <= r < m.world_size:
            out.append(
                f"{m.path}: rank {r} with world size {m.world_size} (ranks run from 0 to "
                f"{m.world_size - 1}): the ranks' distributedInfo do not come from one run"
            )
    return out


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
    p, files, is_dir = trace_files(path, rank=rank)
    results = map_files(
        partial(parse_or_error, rank=rank), files, workers=workers, progress=progress
    )

    good, skipped = sort_results(p, files, results, is_dir=is_dir, skip_bad=skip_bad)
    check_unique_ranks(p, [(r.meta.rank, r.path) for r in good])
    by_rank = {r.meta.rank: r for r in good}
    events = assemble_events(good)
    return Trace(
        events=events,
        ranks={k: by_rank[k].meta for k in sorted(by_rank)},
        source=str(p),
        skipped=skipped,
    )
