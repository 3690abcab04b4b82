"""Analyse a PATH of rank files: per-rank map where each file is read, cross-rank reduce.

:func:`analyse_path` is what every command runs. Each rank file is parsed **and
analysed** by one job (:func:`rank_job`), in-process, in the local process pool
(``trace.pool.map_files``, bounded by cores and memory) or on a Dask distributed
cluster (``scheduler``: an address, or ``"local"`` for a ``LocalCluster`` on this
machine); the job returns the rank's ``analysis.rankwise.RankResult`` (its per-rank
results and the compact tables the cross-rank analysis needs), never its events. The
parent reduces them with ``rankwise.combine``: its peak memory is bounded by the
largest rank file times the workers plus the per-rank results, not by the sum of all
ranks' events, and the numbers are those of :func:`analyze` on the loaded trace (the
engine's entry for a trace already in memory: tests, benchmarks). These two are the
only ways to analyse; every command, the gate and ``runs`` come here.

The trace's mode is GPU when a rank has device work, else CPU when a rank has gloo
collectives; rank files of both kinds (a GPU run's and a CPU run's ranks) are one
TraceError naming the files of each kind (``classify.mixed_modes_error``).

A rank file that cannot be read or analysed comes back as an error value naming the
file: one TraceError line (exit 2), or with ``skip_bad`` a skipped file and a note.
A worker that dies (out of memory, killed) is reported the same way, for its file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from domino_prof.errors import ConfigError, DominoProfError, TraceError, message

if TYPE_CHECKING:  # pandas-heavy: imported where used (the CLI starts without them)
    from domino_prof.analysis.config import AnalysisConfig
    from domino_prof.analysis.document import Analysis
    from domino_prof.analysis.rankwise import RankResult
    from domino_prof.trace.read import FileError
    from domino_prof.trace.schema import Trace

LOCAL = "local"  # --scheduler local: a LocalCluster on this machine
CONNECT_TIMEOUT_S = 10.0  # --scheduler ADDRESS: the scheduler must answer (handshake) within
WORKER_WAIT_S = 30.0  # --scheduler ADDRESS: how long to wait for a first worker
# a job's peak memory over a plain load's (trace.pool._peak_bytes): the events frame,
# the intervals and the analysis' temporaries are alive at once (measured on the
# tiled H200 trace: ~1.6x)
ANALYSIS_PEAK_FACTOR = 2.0


@dataclass(frozen=True, kw_only=True)
class Reading:
    """How traces are read and classified: the options every command that reads traces
    shares (``--rank``, ``--skip-bad``, ``--comm-pattern``, ``--comm-pattern-only``,
    ``--memcpy-as-comm``, ``--scheduler``, ``--no-align-clocks``, ``--threshold``),
    bundled. Built once where the options come in (the CLI's
    ``commands._options.reading_options``, the keywords of
    ``pytest_plugin.assert_overlap``) and carried unchanged through the gate to
    :func:`analyse_path`."""

    rank: int | None = None
    skip_bad: bool = False
    comm_pattern: str | None = None
    comm_pattern_only: bool = False
    memcpy_as_comm: bool = False
    thresholds: dict[str, float] = field(default_factory=dict)
    scheduler: str | None = None
    no_align_clocks: bool = False

    def config(self) -> AnalysisConfig:
        """The AnalysisConfig (a bad regex or threshold is one ConfigError line)."""
        from domino_prof.analysis.config import AnalysisConfig, combine_comm_pattern

        return AnalysisConfig(
            comm_pattern=combine_comm_pattern(self.comm_pattern, replace=self.comm_pattern_only),
            memcpy_as_comm=self.memcpy_as_comm,
            overhead_thresholds=self.thresholds,
            align_clocks=not self.no_align_clocks,
        )

    def analyse(self, trace_path: str | os.PathLike, *, keep_intervals: bool = True) -> Analysis:
        """The Analysis of one trace file or directory (:func:`analyse_path`);
        ``keep_intervals``: the report's timeline and the gate's selections need every
        interval, the JSON and the summary do not."""
        return analyse_path(
            trace_path, self.config(), rank=self.rank, skip_bad=self.skip_bad,
            scheduler=self.scheduler, keep_intervals=keep_intervals,
        )  # fmt: skip


def skipped_notes(analysis: Analysis) -> list[str]:
    """The notes naming the rank files a directory load skipped (``skip_bad``): every
    command says them on stderr, the gate in its notes."""
    from domino_prof.analysis.rankwise import SKIPPED
    from domino_prof.analysis.results import notes_about

    return notes_about(getattr(analysis, "notes", []), SKIPPED)


@dataclass
class _NoActivity:
    """A rank file without device work or gloo collectives (fine if another rank has)."""

    path: str
    meta: Any


def rank_job(
    path_s: str,
    nproc: int = 1,
    *,
    rank: int | None,
    config: Any,
    keep_intervals: bool,
    mode: str | None = None,
    graph_nodes: int | None = None,
) -> RankResult | _NoActivity | FileError:
    """Parse and analyse one rank file (a worker's job; picklable results only):
    a ``RankResult``, a ``_NoActivity`` or a ``trace.read.FileError`` naming the file.
    ``mode``: the whole trace's mode, when a first pass found this rank's own differs.
    ``graph_nodes``: the largest replay graph built (``replay.graph_cap``; None: the
    whole ``replay.REPLAY_MAX_NODES``)."""
    from domino_prof.trace.parse import parse_or_error
    from domino_prof.trace.read import FileError

    parsed = parse_or_error(path_s, nproc, rank=rank)
    if isinstance(parsed, FileError):
        return parsed
    try:
        from domino_prof.analysis.classify import trace_mode
        from domino_prof.analysis.rankwise import analyze_rank
        from domino_prof.trace.loader import assemble_events
        from domino_prof.trace.schema import Trace

        meta = parsed.meta
        trace = Trace(events=assemble_events([parsed]), ranks={meta.rank: meta}, source=path_s)
        del parsed  # the columns now live in the frame
        mode = trace_mode(trace.events) if mode is None else mode
        if mode is None:
            return _NoActivity(path_s, meta)
        out = analyze_rank(trace, config, rank=meta.rank, mode=mode, procs=nproc,
                           keep_intervals=keep_intervals, graph_nodes=graph_nodes)  # fmt: skip
        out.meta = meta
        return out
    except DominoProfError as e:
        return FileError(path_s, message(e), "fix or re-export this rank's trace")
    except MemoryError:
        return FileError(path_s, "out of memory while analysing", "use fewer workers")
    except Exception as e:  # noqa: BLE001  (a bug: name the rank file, and what it was)
        return FileError(
            path_s,
            f"analysis failed ({type(e).__name__}: {e})",
            "report it to domino-prof with this trace file",
        )


def analyze(trace: Trace, config: AnalysisConfig | None = None) -> Analysis:
    """The Analysis of a trace already loaded (``trace.load_trace``, or built in a test):
    the same per-rank jobs as :func:`analyse_path` (``rankwise.analyze_rank``), here in
    this process, then the same cross-rank reduction, so the documents are those of
    ``analyse_path`` on the files (tests/test_engine.py). Every number:
    docs/METRICS.md."""
    from domino_prof.analysis.classify import mixed_modes_error, no_activity_error, trace_mode
    from domino_prof.analysis.config import AnalysisConfig
    from domino_prof.analysis.rankwise import analyze_rank, combine, rank_ids_of, split_ranks

    config = AnalysisConfig() if config is None else config
    mode = trace_mode(trace.events)
    if mode is None:
        raise no_activity_error(trace)
    parts = split_ranks(trace)
    own = {r: trace_mode(one.events) for r, one in parts}
    if {"gpu", "cpu"} <= set(own.values()):  # a GPU run's and a CPU run's ranks
        path = {r: m.path for r, m in trace.ranks.items()}
        raise mixed_modes_error(trace.source or "trace", *(
            [path.get(r, f"rank {r}") for r, m in own.items() if m == k] for k in ("gpu", "cpu")
        ))  # fmt: skip
    results = [
        analyze_rank(one, config, rank=r, mode=mode, keep_intervals=True) for r, one in parts
    ]
    return combine(
        results, config, source=trace.source, ranks=rank_ids_of(trace), metas=trace.ranks,
        skipped=trace.skipped,
    )  # fmt: skip


def analyse_path(
    path: str | os.PathLike,
    config: Any,
    *,
    rank: int | None = None,
    skip_bad: bool = False,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool | None = None,
    keep_intervals: bool = True,
) -> Analysis:
    """The ``Analysis`` of a trace file or a directory of rank files (module doc).
    ``keep_intervals``: also bring back every rank's intervals and compute reference
    (the report's timeline and the gate's phase/op selections need them)."""
    from domino_prof.analysis.classify import mixed_modes_error, no_activity_error
    from domino_prof.analysis.rankwise import RankResult, combine
    from domino_prof.analysis.replay import graph_cap, graphs_to_build
    from domino_prof.trace.loader import check_unique_ranks, sort_results, trace_files
    from domino_prof.trace.schema import Trace, empty_events

    p, files, is_dir = trace_files(path, rank=rank)
    job = partial(rank_job, rank=rank, config=config, keep_intervals=keep_intervals)
    results = _map(partial(job, graph_nodes=graph_cap(len(files))), files, workers=workers,
                   scheduler=scheduler, progress=progress)  # fmt: skip
    good, skipped = sort_results(p, files, results, is_dir=is_dir, skip_bad=skip_bad)
    check_unique_ranks(p, [(r.meta.rank, r.path if isinstance(r, _NoActivity) else
                            r.meta.path) for r in good])  # fmt: skip
    metas = {r.meta.rank: r.meta for r in good}
    modes = {r.mode for r in good if isinstance(r, RankResult)}
    if modes == {"gpu", "cpu"}:  # a GPU run's and a CPU run's rank files: refused
        raise mixed_modes_error(str(p), *([r.meta.path for r in good if isinstance(r, RankResult)
                                           and r.mode == m] for m in ("gpu", "cpu")))  # fmt: skip
    mode = "gpu" if "gpu" in modes else "cpu" if "cpu" in modes else None
    if mode is None:
        raise no_activity_error(Trace(events=empty_events(), ranks=metas, source=str(p)))
    # a rank whose own mode is not the trace's (no device work in a GPU trace): again,
    # in the trace's mode (rare; its file is read a second time)
    again = [i for i, r in enumerate(good) if isinstance(r, _NoActivity) or r.mode != mode]
    pool = {"workers": workers, "scheduler": scheduler, "progress": progress}
    if again:
        good = _rerun(good, again, partial(job, mode=mode, graph_nodes=graph_cap(len(files))),
                      skipped=skipped if is_dir and skip_bad else None, **pool)  # fmt: skip
        metas = {r.meta.rank: r.meta for r in good}
    # ranks of unequal sizes whose graphs add up to a replay after all (graph_cap):
    # those whose graph was not built are analysed again, their graphs built
    build = graphs_to_build(good)
    if build:  # a file read a moment ago that fails now: its error is raised as is
        good = _rerun(good, build, partial(job, mode=mode), skipped=None, **pool)
    return combine(good, config, source=str(p), ranks=sorted(metas), metas=metas,
                   skipped=skipped)  # fmt: skip


def _path_of(r: Any) -> str:
    return r.path if isinstance(r, _NoActivity) else r.meta.path


def _rerun(good: list, idx: list[int], job, *, skipped: list | None, **pool) -> list:
    """``good`` with the ranks ``good[i]`` (i in ``idx``) analysed again by ``job``. A rank
    that fails now raises its ``TraceError``; with ``skipped`` (a list: ``--skip-bad`` on
    a directory) it is noted there instead and left out."""
    from domino_prof.trace.read import FileError

    redo = _map(job, [Path(_path_of(good[i])) for i in idx], **pool)
    good = list(good)
    for i, r in zip(idx, redo):
        if isinstance(r, FileError):
            if skipped is None:
                raise TraceError(r.path, r.problem, r.fix)
            skipped.append((r.path, r.problem))
            r = None
        good[i] = r
    return [r for r in good if r is not None]


def _map(job, files: list[Path], *, workers, scheduler, progress) -> list[Any]:
    if scheduler is None:
        from domino_prof.trace.pool import map_files

        return map_files(job, files, workers=workers, progress=progress, what="analysing",
                         peak_factor=ANALYSIS_PEAK_FACTOR)  # fmt: skip
    return dask_map(job, files, scheduler=scheduler, progress=progress, workers=workers)


# --------------------------------------------------------------------------- Dask
def _import_distributed():
    try:
        import distributed
    except ModuleNotFoundError:
        raise ConfigError(
            "--scheduler needs Dask distributed (not installed); pip install 'domino-prof[dask]'"
        ) from None
    return distributed


def _unreachable(scheduler: str, e: Exception) -> ConfigError:
    return ConfigError(
        f"--scheduler {scheduler}: cannot reach the Dask scheduler ({e}); "
        "give its address (tcp://HOST:8786) or 'local'"
    )


def _not_dask(scheduler: str, why: str) -> ConfigError:
    return ConfigError(
        f"--scheduler {scheduler}: something answers there but it is not a Dask scheduler "
        f"({why}); give the scheduler's address (tcp://HOST:8786) or 'local'"
    )


def _is_dask_handshake(data: bytes) -> bool:
    """The start of a Dask TCP message: uint64 total length, uint64 frame count (LE),
    then the msgpack'd handshake (its keys include ``compression``)."""
    if len(data) < 16:
        return False
    total = int.from_bytes(data[0:8], "little")
    n_frames = int.from_bytes(data[8:16], "little")
    return 16 <= total < 1 << 24 and 1 <= n_frames <= 64


def _check_reachable(scheduler: str, timeout_s: float) -> None:
    """Parse a tcp/tls scheduler address and open (then close) a plain socket to it,
    before any ``distributed.Client`` exists: a Client whose connection failed is left
    half-built, and its ``__del__`` can deadlock at garbage collection (seen in the test
    suite: a 600 s hang). On tcp, also read the first bytes: a Dask server sends its
    handshake as soon as it accepts, while something else on the port (an HTTP server
    waits for a request) made the Client's own handshake read hang for good (over 400 s;
    its timeout does not cover that read). Other schemes go straight to the Client."""
    import socket
    import time

    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, loc = parse_address(scheduler)
        if scheme not in ("tcp", "tls"):
            return
        host, port = parse_host_port(loc)  # ValueError: no port ("bogus")
        t0 = time.monotonic()
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except (OSError, ValueError) as e:
        raise _unreachable(scheduler, e) from None
    with sock:
        if scheme != "tcp":  # TLS: the handshake is encrypted; the Client checks it
            return
        data = b""
        try:
            while len(data) < 16:
                sock.settimeout(max(0.05, timeout_s - (time.monotonic() - t0)))
                chunk = sock.recv(64)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            if not data:
                raise _not_dask(scheduler, f"no Dask handshake within {timeout_s:g} s") from None
        except OSError as e:
            raise _unreachable(scheduler, e) from None
    if not _is_dask_handshake(data):
        said = f"it sent {data[:24]!r}" if data else "it closed the connection at once"
        raise _not_dask(scheduler, said)


def dask_map(
    job,
    files: list[Path],
    *,
    scheduler: str,
    progress: bool | None,
    workers: int | None = None,
    timeout_s: float | None = None,
) -> list[Any]:
    """``job(path)`` for every file on a Dask cluster, results in file order, with a
    progress bar over ranks. ``scheduler``: a scheduler address (``tcp://host:8786``)
    or ``"local"``: a ``LocalCluster`` of worker processes on this machine (one per
    core, at most one per file, or ``workers``), started and closed here. A job that
    raises or whose worker dies comes back as an error naming its file. A scheduler
    that is not an address, does not answer with a Dask handshake within ``timeout_s``
    (default ``CONNECT_TIMEOUT_S``), or has no worker after ``WORKER_WAIT_S``, is a
    ConfigError (one line) before any rank file is read."""
    import logging

    distributed = _import_distributed()
    from domino_prof.trace.pool import Progress, cpu_cores, show_progress
    from domino_prof.trace.read import FileError

    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    cluster = None
    try:
        if scheduler == LOCAL:
            n = max(1, min(workers or cpu_cores(), len(files)))
            cluster = distributed.LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                silence_logs=logging.ERROR,
            )  # fmt: skip
            address: Any = cluster
        else:
            address = scheduler
            _check_reachable(scheduler, timeout_s)
        try:
            client = distributed.Client(address, timeout=f"{timeout_s}s")
        except (OSError, TimeoutError, ValueError) as e:
            raise _unreachable(scheduler, e) from None
        with client:
            if cluster is None:
                try:
                    client.wait_for_workers(1, timeout=WORKER_WAIT_S)
                except TimeoutError:
                    raise ConfigError(
                        f"--scheduler {scheduler}: the scheduler has no workers (waited "
                        f"{WORKER_WAIT_S:g} s for one); start some with `dask worker "
                        f"{scheduler}`, or use --scheduler local"
                    ) from None
            paths = [str(f) for f in files]
            futs = client.map(job, paths, key=[f"domino-prof-rank-{i}" for i in range(len(paths))],
                              pure=False)  # fmt: skip
            index = {f.key: i for i, f in enumerate(futs)}
            out: list[Any] = [None] * len(files)
            bar = Progress(len(files), show_progress(files, progress), what="analysing")
            try:
                for fut in distributed.as_completed(futs):
                    i = index[fut.key]
                    try:
                        out[i] = fut.result()
                    except Exception as e:  # noqa: BLE001  (the job raised, or its worker died)
                        out[i] = FileError(
                            paths[i],
                            f"its Dask worker failed ({type(e).__name__}: {e})",
                            "check the worker's memory and logs",
                        )
                    bar.advance()
            finally:
                bar.close()
            return out
    finally:
        if cluster is not None:
            cluster.close()
