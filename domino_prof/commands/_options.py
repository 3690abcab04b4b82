"""The options every command that reads traces shares, defined once.

``analyze``, ``report``, ``compare``, ``check`` and ``baseline`` take the same PATH
forms (a trace file, a directory of rank traces, a run directory, ``RUN_DIR/<mode>``)
and the same ``--mode``, ``--rank``, ``--skip-bad``, ``--comm-pattern``,
``--comm-pattern-only``, ``--memcpy-as-comm`` and ``--scheduler``; those that show findings
(``analyze``, ``report``, ``compare``) take ``--threshold``. Every output file is
``-o/--output PATH`` (docs/ARCHITECTURE.md section 5 states the convention).
The switches here are flags only (no ``--no-`` forms: they default to off).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from domino_prof.engine import Reading
from domino_prof.errors import ConfigError

PathArg = Annotated[
    Path,
    typer.Argument(
        metavar="PATH",
        help="Trace file (.json/.json.gz), directory of rank traces, run directory "
        "(with run.json) or RUN_DIR/<mode>.",
        show_default=False,
    ),
]


def mode_option(default_says: str) -> Any:
    """``--mode NAME`` with the command's default in its help."""
    return typer.Option(
        "--mode", metavar="NAME", help=f"Mode of a run directory (default: {default_says})."
    )


def _rank(value: int | None) -> int | None:
    """--rank N: a usage error (one line, exit 2, before any work) when N < 0."""
    if value is not None and value < 0:
        raise typer.BadParameter(f"{value} is not a rank (ranks count from 0)")
    return value


RankOpt = Annotated[
    int | None,
    typer.Option(
        "--rank",
        metavar="N",
        callback=lambda v: _rank(v),
        help="Rank of a single trace file that does not name one (>= 0).",
    ),
]
SkipBadOpt = Annotated[
    bool,
    typer.Option(
        "--skip-bad",
        help="In a directory, skip unreadable rank files (named in a note) and use the rest.",
    ),
]
CommPatternOpt = Annotated[
    str | None,
    typer.Option(
        "--comm-pattern",
        metavar="REGEX",
        help="Extra regex (re.search, any case) for comm kernel names, OR-ed with the "
        "default (NCCL/RCCL, symmetric memory, NVSHMEM, DeepEP, userbuffers; "
        "docs/METRICS.md).",
    ),
]
CommPatternOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--comm-pattern-only",
        help="Use --comm-pattern instead of the default pattern, not in addition.",
    ),
]
MemcpyAsCommOpt = Annotated[
    bool,
    typer.Option(
        "--memcpy-as-comm",
        help="Also count same-device DtoD copies as comm (e.g. async-TP copies from peer "
        "buffers); copies between devices are comm anyway.",
    ),
]
SchedulerOpt = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        metavar="ADDRESS",
        help="Analyse the rank files on a Dask cluster: its scheduler's address "
        "(tcp://HOST:8786; it must answer within 10 s and have a worker within 30 s), "
        "or 'local' for a LocalCluster here (pip install 'domino-prof[dask]'). Default: a "
        "local process pool.",
    ),
]
NoAlignClocksOpt = Annotated[
    bool,
    typer.Option(
        "--no-align-clocks",
        help="Use each host's times as read: no clock offset from matched collectives "
        "(docs/METRICS.md \"Across ranks\").",
    ),
]
THRESHOLD_KEYS = ("switch_gap_share", "host_bound_share", "tiny_share", "blocking_sync_share",
                  "skew_share", "min_graph_run", "high_share", "medium_share", "top_n")  # fmt: skip
ThresholdOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--threshold",
        metavar="KEY=VALUE",
        # the keys of analysis.overheads.DEFAULT_THRESHOLDS (not imported here: it would
        # load pandas at start-up; tests/test_first_run.py keeps the two the same)
        help="Findings threshold, repeatable (e.g. top_n=10). Keys: " + ", ".join(THRESHOLD_KEYS)
        + '; their defaults and meanings: docs/METRICS.md "Glossary".',
    ),
]


def parse_thresholds(items: list[str] | None) -> dict[str, float]:
    """``KEY=VALUE`` strings -> dict; the overheads module validates keys and values."""
    out: dict[str, float] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--threshold {item!r} is not KEY=VALUE; e.g. --threshold top_n=5")
        try:
            out[key] = float(value)
        except ValueError:
            raise ConfigError(
                f"--threshold {item!r}: {value!r} is not a number; give KEY=NUMBER"
            ) from None
    from domino_prof.analysis.overheads import resolve_thresholds

    resolve_thresholds(out)  # fail before a long load on a bad key or value
    return out


# the reading options, in the order --help lists them; `threshold` and `no_align_clocks`
# only where findings are shown (analyze, report, compare)
READING_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("comm_pattern", CommPatternOpt, None),
    ("comm_pattern_only", CommPatternOnlyOpt, False),
    ("memcpy_as_comm", MemcpyAsCommOpt, False),
    ("rank", RankOpt, None),
    ("skip_bad", SkipBadOpt, False),
    ("scheduler", SchedulerOpt, None),
)
FINDINGS_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("no_align_clocks", NoAlignClocksOpt, False),
    ("threshold", ThresholdOpt, None),
)
F = TypeVar("F", bound=Callable[..., Any])


def reading_options(*, findings: bool = False) -> Callable[[F], F]:
    """Give a command the reading options, declared once (:data:`READING_OPTIONS`, with
    ``findings`` also :data:`FINDINGS_OPTIONS`): the command's ``reading: Reading``
    parameter becomes these options at its place in the signature typer reads, and the
    command is called with the one :class:`~domino_prof.engine.Reading` built from their
    values (``--threshold`` parsed and checked: one ConfigError line)."""
    declared = READING_OPTIONS + (FINDINGS_OPTIONS if findings else ())

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn, eval_str=True)
        if "reading" not in sig.parameters:
            raise TypeError(f"{fn.__name__} takes no `reading` parameter to expand")
        params: list[inspect.Parameter] = []
        for p in sig.parameters.values():
            if p.name != "reading":
                params.append(p)
                continue
            params += [inspect.Parameter(name, p.kind, default=default, annotation=hint)
                       for name, hint, default in declared]  # fmt: skip

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name, default) for name, _, default in declared}
            if findings:
                given["thresholds"] = parse_thresholds(given.pop("threshold"))
            return fn(*args, reading=Reading(**given), **kwargs)

        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command  # type: ignore[return-value]

    return decorate


HTML_FORMATS = {".html": "html", ".htm": "html"}  # report, compare
BASELINE_FORMATS = {".json": "json"}  # baseline


def guess_format(path: Path, formats: dict[str, str], *, option: str = "-o") -> str:
    """The output format a file name's suffix names (``formats``: suffix -> format). Every
    command checks its -o this way before any work: an unknown suffix is one ConfigError
    line listing the endings it takes (never HTML or JSON under another name)."""
    name = str(path).lower()
    for suffix, fmt in formats.items():
        if name.endswith(suffix):
            return fmt
    listed = ", ".join(formats)
    raise ConfigError(
        f"{option} {path}: cannot tell the format from the file name; end it in {listed}"
    )
