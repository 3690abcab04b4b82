"""Discovery and the pool: which files of a directory are traces, and running the
per-file job over them in-process or in a process pool bounded by the cores and by
the memory a file needs (estimated from its size), with a progress bar.

:func:`map_files` is generic: it maps ``job(path, nproc)`` over files and returns the
results in file order (a job returns errors as values). The loader maps the per-file
parse over rank files; a per-rank analysis can be mapped the same way.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from domino_prof.trace.read import _uncompressed_size

_TRACE_SUFFIXES = (".json", ".json.gz")
# domino-prof's own outputs that live beside traces in a run directory.
_NOT_TRACES = {"run.json", "analysis.json", "config.json"}  # domino-prof run outputs
_PROGRESS_BYTES = 50 * 1024 * 1024
_POOL_BYTES = 32 * 1024 * 1024  # below this, a pool costs more than it saves


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


def cpu_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


_SPLIT_BYTES = 64 * 1024 * 1024  # one file this big: its chunks on every core


def _plan_chunks(size: int, workers: int | None) -> int:
    """Processes for one file (its chunks are decoded by that many forked workers).

    Auto: every core for a file of 64 MB of JSON or more, else 1. The workers are
    streamed one chunk at a time and send back only columns (``chunked``), so the
    split costs no memory beyond a chunk per worker; below 64 MB forking costs more
    than it saves. ``workers=N`` asks for N explicitly."""
    if workers is not None:
        return max(1, workers)
    return cpu_cores() if size >= _SPLIT_BYTES else 1


def _plan_workers(sizes: list[int], workers: int | None, *, peak_factor: float = 1.0) -> int:
    """Processes for several files, bounded by cores and by memory (``peak_factor``:
    a job's peak over a plain load's, :func:`_peak_bytes`)."""
    if len(sizes) <= 1:
        return 1
    cores = cpu_cores()
    if workers is None:
        if sum(sizes) < _POOL_BYTES:
            return 1
        workers = cores or 1
    peak = int(_peak_bytes(max(sizes)) * peak_factor)
    by_mem = max(1, int(_available_memory() * 0.8) // max(peak, 1))
    return max(1, min(workers, len(sizes), by_mem))


class Progress:
    """A rich progress bar on stderr over rank files (done / total), or nothing."""

    def __init__(self, n_files: int, enabled: bool, *, what: str = "loading") -> None:
        self.bar = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as Bar

        self.bar = Bar(
            SpinnerColumn(),
            TextColumn(f"{what} rank files"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
            auto_refresh=False,  # no refresh thread: workers are forked while it shows
        )
        self.task = self.bar.add_task(what, total=n_files)
        self.bar.start()
        self.bar.refresh()

    def advance(self, n_files: int = 1) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, n_files)
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


def show_progress(files: list[Path], progress: bool | None) -> bool:
    """Whether to draw the bar: as asked, else for loads over 50 MB on a terminal."""
    if progress is not None:
        return bool(progress)
    return sum(_uncompressed_size(p) for p in files) > _PROGRESS_BYTES and sys.stderr.isatty()


def map_files(
    job: Callable[[str, int], Any],
    files: list[Path],
    *,
    workers: int | None,
    progress: bool | None,
    what: str = "loading",
    peak_factor: float = 1.0,
) -> list[Any]:
    """``job(str(path), nproc)`` for every file, results in file order. One file, or
    loads too small for a pool: in-process (one file may still split its events over
    ``nproc`` forked processes); else a pool of processes bounded by cores and memory,
    the biggest files first. ``job`` must return its errors as values and pickle."""
    sizes = [_uncompressed_size(p) for p in files]
    total = sum(sizes)
    show = progress if progress is not None else total > _PROGRESS_BYTES and sys.stderr.isatty()
    n_workers = _plan_workers(sizes, workers, peak_factor=peak_factor)
    results: list[Any] = []
    if n_workers <= 1:
        nproc = _plan_chunks(sizes[0], workers) if len(files) == 1 else 1
        bar = Progress(len(files), bool(show), what=what)
        try:
            for p in files:
                results.append(job(str(p), nproc))
                bar.advance()
        finally:
            bar.close()
        return results
    # biggest first: better packing of the pool
    order = sorted(range(len(files)), key=lambda i: -sizes[i])
    with ProcessPoolExecutor(max_workers=n_workers, mp_context=_pool_context()) as ex:
        futs = {i: ex.submit(job, str(files[i]), 1) for i in order}
        bar = Progress(len(files), bool(show), what=what)
        try:
            out: dict[int, Any] = {}
            for i in order:
                out[i] = futs[i].result()
                bar.advance()
        finally:
            bar.close()
    return [out[i] for i in range(len(files))]


# --------------------------------------------------------------------------- #
# One call on another core                                                     #
# --------------------------------------------------------------------------- #


class Forked:
    """``fn()`` computed in a forked child while the caller goes on; :meth:`result`
    returns its value, pickled back through a pipe. The child inherits the caller's
    memory (nothing is sent to it), so ``fn`` may close over large frames.

    Whatever keeps the child from giving a value (no ``fork`` here, a daemonic caller, a
    child that dies, ``fn`` raising, a result that does not pickle) makes :meth:`result`
    compute ``fn()`` in the caller: the same value, or the same exception, as a serial
    call; only the time differs. ``fn`` must not change state the caller reads later
    (the child's changes are lost)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.proc = None
        self.conn = None
        try:
            import multiprocessing as mp

            if "fork" not in mp.get_all_start_methods():
                return
            ctx = mp.get_context("fork")
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_forked_call, args=(fn, send), daemon=True)
            proc.start()
        except (OSError, ValueError, AssertionError):  # AssertionError: a daemonic caller
            return
        send.close()
        self.proc, self.conn = proc, recv

    def result(self) -> Any:
        if self.proc is not None:
            status, value = "fail", None
            try:
                status, value = self.conn.recv()
            except Exception:  # noqa: BLE001 - EOF (the child died), an unpickling error
                pass
            finally:
                self.conn.close()
                self.proc.join(timeout=5)
                if self.proc.is_alive():
                    self.proc.kill()
                    self.proc.join()
                self.proc = None
            if status == "ok":
                return value
        return self.fn()


def _forked_call(fn, send) -> None:  # pragma: no cover - forked child
    gc.disable()  # short-lived: no collection walking the inherited heap
    try:
        send.send(("ok", fn()))
    except BaseException:  # noqa: BLE001 - the parent computes it again, and raises
        try:
            send.send(("fail", None))
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(0)
