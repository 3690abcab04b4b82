"""One rank file -> its columns: the per-file job the loader maps over rank files
(in-process or in pool workers; see ``pool.map_files``).

Read the file (``read``), then decode it whole (``decode``) or, when it is big or
``nproc`` > 1, streamed in chunks (``chunked``); errors come back as values.
"""

from __future__ import annotations

from pathlib import Path

from domino_prof.trace.chunked import _parse_buffer_in_chunks, _parse_streaming
from domino_prof.trace.decode import _parse_whole, _Parsed
from domino_prof.trace.pool import _peak_bytes
from domino_prof.trace.read import (
    FileError,
    _is_regular,
    _read_stream,
    _uncompressed_size,
    read_bytes,
)

_STREAM_BYTES = 16 * 1024 * 1024  # files this big are decoded chunk by chunk


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
        parsed = _parse_streaming(path_s, rank_arg, nproc)
        if parsed is not None:
            return parsed
    return _parse_whole(path_s, read_bytes(path), rank_arg)


def parse_or_error(path_s: str, nproc: int = 1, *, rank: int | None = None) -> _Parsed | FileError:
    """Worker entry point: errors come back as values (TraceError does not pickle)."""
    try:
        return _parse_file(path_s, rank, nproc)
    except FileError as e:
        return e
    except MemoryError:
        need = _peak_bytes(_uncompressed_size(Path(path_s))) / 1e9
        return FileError(
            path_s,
            f"out of memory while loading (needs about {need:.1f} GB)",
            "load fewer rank files at once (point at a subdirectory) or use more memory",
        )
