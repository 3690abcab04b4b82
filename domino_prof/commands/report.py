"""`domino-prof report` (one self-contained HTML report) and `domino-prof compare` (A vs B).

PATH / A / B take the forms of every command (``domino_prof.runs``): trace files or
directories, a run directory, ``RUN_DIR/<mode>``. ``report`` of a run directory draws
every mode (``--mode`` one) plus the comparison of modes; ``compare`` takes one mode
of each side: ``--mode`` (for the sides that are run directories), else the run's only
mode or ``domino``. In a run, a mode whose traces cannot be analysed is shown as a
note in its place; traces outside a run that cannot be loaded are an error.

Every number comes from ``domino_prof.analysis``; this module parses flags and prints.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from domino_prof.commands._common import print_notes, user_errors, write_outputs
from domino_prof.commands._options import (
    HTML_FORMATS,
    PathArg,
    guess_format,
    mode_option,
    reading_options,
)
from domino_prof.engine import Reading, skipped_notes
from domino_prof.errors import ConfigError, NoActivityError, OptionError, TraceError, opt
from domino_prof.rundir import resolve, trace_missing

if TYPE_CHECKING:  # pandas / plotly: imported where used (the CLI starts without them)
    from domino_prof.analysis.document import Analysis
    from domino_prof.report.figures import Unavailable


def analyse_for_report(
    reading: Reading, trace_path: Path, *, in_run: bool, mode: str = ""
) -> Analysis | Unavailable:
    """An Analysis, or an ``Unavailable`` the page shows in its place: a trace that loads
    and cannot be analysed (no device or gloo activity, e.g. a CPU run's ``nocomm``
    mode), or in a run a mode whose traces cannot be loaded. A plain trace that cannot
    be loaded stays an error."""
    from domino_prof.report.figures import not_analysed

    try:
        if not trace_path.exists():
            raise trace_missing(trace_path)
        return reading.analyse(trace_path)
    except NoActivityError as e:  # loads, but nothing to analyse (nocomm: one line why)
        return not_analysed(mode, str(e))
    except TraceError as e:
        if not in_run:
            raise
        return not_analysed(mode, str(e))


def _write_guard(out: Path, example: str, formats: dict = HTML_FORMATS) -> None:
    if out.is_dir():
        raise ConfigError(f"-o {out} is a directory; give a file name such as {out / example}")
    guess_format(out, formats)  # the suffixes this command writes, as every command checks


def _size(p: Path) -> str:
    return f"{p.stat().st_size / 1e6:.1f} MB"


def _fmt(x: object, spec: str) -> str:
    from domino_prof.report.figures import fmt

    return fmt(x, spec)


def register(app: typer.Typer) -> None:
    @app.command("report")
    @user_errors
    @reading_options(findings=True)
    def report_cmd(
        path: PathArg,
        output: Annotated[
            Path | None,
            typer.Option(
                "-o",
                "--output",
                metavar="FILE",
                help="HTML file to write (default: RUN_DIR/report.html for a whole run, "
                "else ./report.html); *.pftrace writes a Perfetto trace of the same "
                "modes instead (pip install 'domino-prof[perfetto]').",
            ),
        ] = None,
        mode: Annotated[str | None, mode_option("every mode, with the comparison")] = None,
        title: Annotated[str | None, typer.Option(help="Page title.")] = None,
        reading: Reading = Reading(),  # the reading options (reading_options)
    ) -> None:
        """Write one self-contained HTML report (opens offline).

        plotly.js is inlined once; nothing is fetched from the network."""
        from domino_prof.report.page import render_report, render_run_report

        reading.config()  # a bad regex: one line, before the load
        target = resolve(path)
        modes, notes = target.select(mode, default="all")
        whole_run = target.is_run_dir and len(modes) == len(target.modes) > 0
        out = output or (target.path / "report.html" if whole_run else Path("report.html"))
        _write_guard(out, "report.html", {**HTML_FORMATS, ".pftrace": "pftrace"})
        pftrace = str(out).lower().endswith(".pftrace")
        if pftrace:
            from domino_prof.export.perfetto import export_bytes, require

            require()  # the install hint before a long load
        in_run = target.run is not None
        analyses = {
            m: analyse_for_report(reading, target.modes[m], in_run=in_run, mode=m)
            for m in modes
        }
        print_notes(notes)
        for m, a in analyses.items():  # gating or not, a skipped file is said
            print_notes(_skipped(a), prefix=f"{m}: " if m else "")
        run = target.run.doc if target.run is not None else None
        if pftrace:
            html = export_bytes(analyses, target.modes, reading=reading)
        elif run is not None and len(analyses) > 1:
            html = render_run_report(analyses, run=run, title=title)
        else:
            m, a = next(iter(analyses.items()))
            html = render_report(a, run=run, title=title, mode=m or None)
        write_outputs([(out, html)], example="report.html")
        for m, a in analyses.items():
            t = getattr(a, "totals", None)
            if t is None:
                print(f"{m + ': ' if m else ''}{a.reason}", file=sys.stderr)
                continue
            print(
                f"{m + ': ' if m else ''}hidden {_fmt(t.get('hidden_pct'), '.1f')} %, "
                f"exposed {_fmt(t.get('exposed_ms_per_step'), '.3f')} ms/step, "
                f"profiled step {_fmt(t.get('step_ms'), '.2f')} ms"
            )
        print(f"wrote {out} ({_size(out)})")

    @app.command("compare")
    @user_errors
    @reading_options(findings=True)
    def compare_cmd(
        a: Annotated[
            Path,
            typer.Argument(
                metavar="A", help="Baseline side: any PATH form (see `report`).", show_default=False
            ),
        ],
        b: Annotated[
            Path,
            typer.Argument(
                metavar="B", help="Candidate side, same forms as A.", show_default=False
            ),
        ],
        output: Annotated[
            Path, typer.Option("-o", "--output", metavar="FILE", help="HTML file to write.")
        ] = Path("compare.html"),
        labels: Annotated[
            str | None,
            typer.Option(
                metavar="A,B", help="Two labels, comma-separated (default: mode or file names)."
            ),
        ] = None,
        mode: Annotated[
            str | None, mode_option("a run's only mode, else domino; applies to run dirs")
        ] = None,
        reading: Reading = Reading(),  # the reading options (reading_options)
    ) -> None:
        """Compare two traces or modes: headlines and per-op deltas.

        Headline numbers side by side (the timed step too when both sides come from
        runs) and the exposed comm per op name; an op seen on one side only shows
        "—" on the other."""
        from domino_prof.report.page import render_compare

        _write_guard(output, "compare.html")
        if labels is not None:
            parts = [x.strip() for x in labels.split(",")]
            if len(parts) != 2 or not all(parts):
                raise ConfigError(
                    f"--labels {labels!r}: give two names separated by a comma, "
                    "e.g. --labels tp,domino"
                )
        reading.config()  # a bad regex: one line, before the load
        sides = [resolve(a), resolve(b)]
        if mode is not None and not any(t.is_run_dir for t in sides):
            raise OptionError(
                f"{opt('mode')} {mode!r} applies to a run directory (one with run.json), and "
                f"neither {a} nor {b} is one; drop {opt('mode')} or point at a run directory"
            )
        picked, an, timed = [], [], []
        for side, t in zip("AB", sides):
            (m,), notes = t.select(mode if t.is_run_dir else None, default="one",
                                   verb=f"{side}:")  # fmt: skip
            print_notes(notes)
            x = reading.analyse(t.modes[m])
            print_notes(_skipped(x))
            picked.append(t.label(m))
            an.append(x)
            row = t.run.comparison(m) if t.run is not None else None
            timed.append(row.get("step_ms") if row else None)
        lab = (parts[0], parts[1]) if labels is not None else (picked[0], picked[1])
        if lab[0] == lab[1]:
            lab = (f"A: {lab[0]}", f"B: {lab[1]}")
        from domino_prof.report.figures import mixed_hardware_note

        mixed = mixed_hardware_note(an[0], an[1], labels=lab)
        print_notes([mixed] if mixed else [])
        how = {"step": "each alone (--timing step)", "stream": "back to back (--timing stream)"}
        runs_ = [t.run for t in sides]
        if None not in runs_ and None not in timed and runs_[0].timing != runs_[1].timing:
            # a step timed alone waits for the host at its start where one timed back to
            # back need not (docs/METRICS.md, timed steps): not a like-for-like difference
            note = (f"timed steps not compared: {lab[0]}'s were timed "
                    f"{how.get(runs_[0].timing, runs_[0].timing)}, {lab[1]}'s "
                    f"{how.get(runs_[1].timing, runs_[1].timing)}; run one again with the "
                    "other's --timing to compare them")  # fmt: skip
            print_notes([note])
            timed = [None, None]
        steps = (timed[0], timed[1]) if None not in timed else None
        html = render_compare(an[0], an[1], labels=lab, timed_step_ms=steps)
        write_outputs([(output, html)], example="compare.html")
        print_compare(an[0], an[1], labels=lab, timed_step_ms=steps)
        print(f"wrote {output} ({_size(output)})")


def _skipped(a: Analysis | Unavailable) -> list[str]:
    return skipped_notes(a)


def print_compare(
    a: Analysis,
    b: Analysis,
    *,
    labels: tuple[str, str],
    top: int = 8,
    timed_step_ms: tuple[float, float] | None = None,
) -> None:
    """A short rich table on stdout: headline numbers and the largest per-op deltas."""
    from rich.console import Console
    from rich.table import Table

    from domino_prof.report.figures import compare_headline, compare_ops_figure

    console = Console(file=sys.stdout, soft_wrap=True)
    head = compare_headline(a, b, labels=labels, timed_step_ms=timed_step_ms).body
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
