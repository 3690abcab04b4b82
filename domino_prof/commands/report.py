"""`domino-prof report` (one self-contained HTML report) and `domino-prof compare` (A vs B).

PATH / A / B may be:

- a trace file (``.json``/``.json.gz``) or a directory of per-rank traces;
- a run directory written by ``domino-prof run`` (it has ``run.json``): ``report``
  draws every mode plus the comparison of modes; ``compare`` needs it to hold one
  mode (else point at ``RUN_DIR/<mode>``);
- ``RUN_DIR/<mode>``: that mode's traces, with the run's configuration.

The loading helpers here print nothing; the command bodies print one summary.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from domino_prof.commands._common import user_errors, write_outputs
from domino_prof.errors import ConfigError, TraceError

RUN_SCHEMA = "domino-prof/run"

RankOpt = Annotated[
    int | None,
    typer.Option(help="Rank of a single trace file that lacks distributedInfo.rank."),
]
SkipBadOpt = Annotated[
    bool,
    typer.Option(
        "--skip-bad",
        help="In a trace directory, skip unreadable rank files (named on stderr) and use the rest.",
    ),
]


@dataclass
class Source:
    """What a PATH argument resolved to."""

    path: Path
    run: dict | None  # run.json when PATH is (inside) a run directory
    run_dir: Path | None
    modes: dict[str, Path]  # mode -> trace directory (run) ; {"": path} for plain traces


def read_run_json(run_dir: Path) -> dict:
    f = run_dir / "run.json"
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(f, f"cannot read run.json ({e})", "re-run `domino-prof run`") from None
    if (
        not isinstance(doc, dict)
        or doc.get("schema") != RUN_SCHEMA
        or not isinstance(doc.get("modes"), dict)
    ):
        raise TraceError(
            f,
            f"not a domino-prof run.json (expected schema {RUN_SCHEMA!r} with a 'modes' table)",
            "point at a trace file or directory instead",
        )
    return doc


def _mode_dir(run_dir: Path, run: dict, mode: str) -> Path:
    info = run["modes"].get(mode) or {}
    sub = info.get("trace_dir", mode) if isinstance(info, dict) else mode
    return run_dir / str(sub)


def resolve(path: str | Path) -> Source:
    """PATH -> trace location(s) and run context. TraceError when it does not exist."""
    p = Path(path)
    if not p.exists():
        raise TraceError(p, "no such file or directory", "check the path")
    if p.is_file() and p.name == "run.json":
        p = p.parent
    if p.is_dir() and (p / "run.json").is_file():
        run = read_run_json(p)
        if not run["modes"]:
            raise TraceError(p / "run.json", "lists no modes", "re-run `domino-prof run`")
        return Source(p, run, p, {m: _mode_dir(p, run, m) for m in run["modes"]})
    parent = p.parent if p.is_dir() else None
    if parent is not None and (parent / "run.json").is_file():
        run = read_run_json(parent)
        for m in run["modes"]:
            if _mode_dir(parent, run, m).resolve() == p.resolve():
                return Source(p, run, parent, {m: p})
    return Source(p, None, None, {"": p})


def _config(trace_dir: Path, comm_pattern: str | None) -> Any:
    from domino_prof.analysis import AnalysisConfig, combine_comm_pattern

    if comm_pattern:
        return AnalysisConfig(comm_pattern=combine_comm_pattern(comm_pattern))
    # a run's analysis.json records the comm pattern it was analysed with
    doc = trace_dir / "analysis.json" if trace_dir.is_dir() else None
    if doc is not None and doc.is_file():
        try:
            pat = json.loads(doc.read_text(encoding="utf-8"))["config"]["comm_pattern"]
            return AnalysisConfig(comm_pattern=str(pat))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return AnalysisConfig()


def analyse(
    trace_path: Path,
    *,
    comm_pattern: str | None = None,
    rank: int | None = None,
    skip_bad: bool = False,
) -> Any:
    """Load and analyse one trace file/dir (Analysis)."""
    from domino_prof.analysis import analyze
    from domino_prof.trace import load_trace

    if not trace_path.exists():
        raise TraceError(
            trace_path,
            "trace directory named in run.json is missing",
            "re-run `domino-prof run` or point at the traces",
        )
    trace = load_trace(trace_path, rank=rank, skip_bad=skip_bad)
    return analyze(trace, _config(trace_path, comm_pattern))


def analyse_for_report(
    trace_path: Path,
    *,
    comm_pattern: str | None,
    in_run: bool,
    rank: int | None = None,
    skip_bad: bool = False,
) -> Any:
    """Like :func:`analyse`, but a trace that loads and cannot be analysed (no device or
    gloo activity, e.g. a run's ``nocomm`` mode on CPU) becomes an ``Unavailable`` that
    the page shows in place of its figures. In a run, a mode whose traces cannot be
    loaded does too; a plain trace that cannot be loaded stays an error."""
    from domino_prof.analysis import analyze
    from domino_prof.report.figures import Unavailable
    from domino_prof.trace import load_trace

    try:
        if not trace_path.exists():
            raise TraceError(trace_path, "trace directory named in run.json is missing")
        trace = load_trace(trace_path, rank=rank, skip_bad=skip_bad)
    except TraceError as e:
        if not in_run:
            raise
        return Unavailable(f"Not analysed: {e}")
    try:
        return analyze(trace, _config(trace_path, comm_pattern))
    except TraceError as e:
        return Unavailable(f"Not analysed: {e}")


def single(
    path: str | Path,
    *,
    comm_pattern: str | None = None,
    rank: int | None = None,
    skip_bad: bool = False,
) -> tuple[Any, str, Source]:
    """PATH that must stand for one analysis -> (Analysis, label, source)."""
    src = resolve(path)
    if len(src.modes) > 1:
        listed = ", ".join(f"{src.path}/{m}" for m in src.modes)
        raise ConfigError(
            f"{src.path} is a run with {len(src.modes)} modes; compare one mode "
            f"at a time: give one of {listed}"
        )
    mode, tdir = next(iter(src.modes.items()))
    label = mode or src.path.name.removesuffix(".gz").removesuffix(".json") or str(src.path)
    return analyse(tdir, comm_pattern=comm_pattern, rank=rank, skip_bad=skip_bad), label, src


def _write_guard(out: Path, example: str) -> None:
    if out.is_dir():
        raise ConfigError(f"-o {out} is a directory; give a file name such as {out / example}")


def _size(p: Path) -> str:
    return f"{p.stat().st_size / 1e6:.1f} MB"


def _fmt(x: object, spec: str) -> str:
    from domino_prof.report.figures import fmt

    return fmt(x, spec)


def register(app: typer.Typer) -> None:
    @app.command("report")
    @user_errors
    def report_cmd(
        path: Annotated[
            Path,
            typer.Argument(
                help="Run directory (with run.json), RUN_DIR/<mode>, trace file or trace directory."
            ),
        ],
        output: Annotated[
            Path | None,
            typer.Option(
                "-o",
                "--output",
                help="HTML file to write (default: RUN_DIR/report.html, else ./report.html).",
            ),
        ] = None,
        title: Annotated[str | None, typer.Option(help="Page title.")] = None,
        comm_pattern: Annotated[
            str | None,
            typer.Option(
                "--comm-pattern", help="Extra regex of comm kernel names (added to the default)."
            ),
        ] = None,
        rank: RankOpt = None,
        skip_bad: SkipBadOpt = False,
    ) -> None:
        """Write one self-contained HTML report (opens offline: plotly.js is inlined)."""
        from domino_prof.report.page import render_report, render_run_report

        src = resolve(path)
        at_run = src.run_dir is not None and src.run_dir == src.path
        out = output or (src.path / "report.html" if at_run else Path("report.html"))
        _write_guard(out, "report.html")
        analyses = {
            m: analyse_for_report(
                d, comm_pattern=comm_pattern, in_run=src.run is not None, rank=rank,
                skip_bad=skip_bad,
            )
            for m, d in src.modes.items()
        }  # fmt: skip
        for m, a in analyses.items():  # gating or not, a skipped file is said
            for n in getattr(a, "notes", []):
                if n.startswith("skipped "):
                    print(f"{m + ': ' if m else ''}note: {n}", file=sys.stderr)
        if src.run is not None and len(analyses) > 1:
            html = render_run_report(analyses, run=src.run, title=title)
        else:
            mode, a = next(iter(analyses.items()))
            html = render_report(a, run=src.run, title=title, mode=mode or None)
        write_outputs([(out, html)], example="report.html")
        for m, a in analyses.items():
            t = getattr(a, "totals", None)
            if t is None:
                print(f"{m + ': ' if m else ''}{a.reason}", file=sys.stderr)
                continue
            print(
                f"{m + ': ' if m else ''}hidden {_fmt(t.get('hidden_pct'), '.1f')} %, "
                f"exposed {_fmt(t.get('exposed_ms_per_step'), '.3f')} ms/step, "
                f"step {_fmt(t.get('step_ms'), '.2f')} ms"
            )
        print(f"wrote {out} ({_size(out)})")

    @app.command("compare")
    @user_errors
    def compare_cmd(
        a: Annotated[
            Path, typer.Argument(help="Baseline: traces, a one-mode run or RUN_DIR/<mode>.")
        ],
        b: Annotated[Path, typer.Argument(help="Candidate, same forms as A.")],
        output: Annotated[Path, typer.Option("-o", "--output", help="HTML file to write.")] = Path(
            "compare.html"
        ),
        labels: Annotated[
            str | None,
            typer.Option(help="Two labels, comma-separated (default: mode or file names)."),
        ] = None,
        comm_pattern: Annotated[
            str | None,
            typer.Option(
                "--comm-pattern", help="Extra regex of comm kernel names (added to the default)."
            ),
        ] = None,
        rank: RankOpt = None,
        skip_bad: SkipBadOpt = False,
    ) -> None:
        """Compare two traces or modes: headline numbers side by side and per-op deltas."""
        from domino_prof.report.page import render_compare

        _write_guard(output, "compare.html")
        if labels is not None:
            parts = [x.strip() for x in labels.split(",")]
            if len(parts) != 2 or not all(parts):
                raise ConfigError(
                    f"--labels {labels!r}: give two names separated by a comma, "
                    "e.g. --labels tp,domino"
                )
        an_a, la, _ = single(a, comm_pattern=comm_pattern, rank=rank, skip_bad=skip_bad)
        an_b, lb, _ = single(b, comm_pattern=comm_pattern, rank=rank, skip_bad=skip_bad)
        for an in (an_a, an_b):
            for n in an.notes:
                if n.startswith("skipped "):
                    print(f"note: {n}", file=sys.stderr)
        lab = (parts[0], parts[1]) if labels is not None else (la, lb)
        if lab[0] == lab[1]:
            lab = (f"A: {lab[0]}", f"B: {lab[1]}")
        write_outputs([(output, render_compare(an_a, an_b, labels=lab))], example="compare.html")
        print_compare(an_a, an_b, labels=lab)
        print(f"wrote {output} ({_size(output)})")


def print_compare(a: Any, b: Any, *, labels: tuple[str, str], top: int = 8) -> None:
    """A short rich table on stdout: headline numbers and the largest per-op deltas."""
    from rich.console import Console
    from rich.table import Table

    from domino_prof.report.figures import compare_headline, compare_ops_figure

    console = Console(file=sys.stdout, soft_wrap=True)
    head = compare_headline(a, b, labels=labels).body
    t = Table(title=f"{labels[0]} vs {labels[1]}")
    for i, c in enumerate(head.columns):
        t.add_column(str(c), justify="right" if i else "left")
    for r in head.rows:
        t.add_row(*map(str, r))
    console.print(t)
    sec = compare_ops_figure(a, b, labels=labels, top=top)
    if sec.extra:
        ops = sec.extra[0]
        t2 = Table(title=f"exposed comm per op (µs per step and rank), top {top} changes")
        for i, c in enumerate(ops.columns[:4]):
            t2.add_column(str(c), justify="right" if i else "left")
        for r in ops.rows:
            t2.add_row(*map(str, r[:4]))
        console.print(t2)
