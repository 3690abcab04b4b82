"""`domino-prof analyze PATH`: exact comm/compute overlap of a Kineto trace.

Prints a summary a person reads in ten seconds (headline, per-rank table, top exposed
op names, findings) and optionally writes the versioned JSON document and the HTML
report (``-o FILE.json`` / ``-o FILE.html``). PATH takes every form (``domino_prof.runs``):
of a run directory it analyses one mode (``--mode``, else ``domino``) after the run's
comparison of modes. Every number comes from ``domino_prof.analysis``; this module only
parses flags and formats.
"""

from __future__ import annotations

import importlib
import math
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from domino_prof.commands._common import one_output, print_notes, user_errors, write_outputs
from domino_prof.commands._format import modes_table
from domino_prof.commands._options import PathArg, guess_format, mode_option, reading_options
from domino_prof.engine import Reading, skipped_notes
from domino_prof.errors import ConfigError
from domino_prof.rundir import resolve

if TYPE_CHECKING:  # pandas: imported where used (the CLI starts without it)
    from domino_prof.analysis.document import Analysis

NA = "n/a"


class By(str, Enum):
    stream = "stream"
    op = "op"
    iteration = "iteration"
    collective = "collective"
    phase = "phase"


# --------------------------------------------------------------------------- formatting
def pct(x: Any) -> str:
    """A percentage, or ``n/a`` when undefined (no comm): never 0, never NaN."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return NA
    return f"{float(x):.1f}%"


def ms(ns: Any, digits: int = 3) -> str:
    if ns is None or (isinstance(ns, float) and not math.isfinite(ns)):
        return NA
    return f"{float(ns) / 1e6:.{digits}f}"


def ms_value(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return NA
    return f"{float(x):.{digits}f}"


def _table(title: str, columns: list[str], right: set[str]):
    from rich.table import Table

    t = Table(title=title, title_justify="left", header_style="bold", expand=False)
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left", overflow="fold")
    return t


def headline(a: Analysis) -> str:
    t = a.totals
    per_step = (
        f"{ms_value(t['exposed_ms_per_step'])} ms exposed comm per step"
        if t["exposed_ms_per_step"] is not None
        else "exposed comm per step n/a (no ProfilerStep#N windows)"
    )
    step = (
        f"profiled step {ms_value(t['step_ms'])} ms"
        if t["step_ms"] is not None
        else "profiled step n/a"
    )
    emulated = getattr(a, "emulation", None)  # the traces' comm-emulation mark
    return (
        (f"{emulated}: one GPU, rank 0's shard; collectives emulated\n" if emulated else "")
        + f"hidden comm {pct(t['hidden_pct'])} | {per_step} | {step}\n"
        f"{t['n_ranks']} rank(s), {t['n_iterations']} iteration(s) | "
        f"comm {ms(t['comm_ns'])} ms, exposed {ms(t['exposed_ns'])} ms | {a.mode} trace"
    )


def comm_sources_line(a: Analysis) -> str:
    """Which kinds of comm the patterns recognised (docs/METRICS.md), with counts."""
    src = a.totals.get("comm_sources") or []
    if not src:
        return "comm recognised: none"
    parts = [f"{s['label']} {s['n_intervals']} ({ms(s['busy_ns'])} ms)" for s in src]
    # the durations summed, event by event: events that overlap (a collective on two
    # threads or streams) each count, so this is more than the comm above (their union)
    return ("comm recognised: " + ", ".join(parts)
            + " (events, durations summed; overlapping events each count)")  # fmt: skip


def rank_table(a: Analysis, *, top: int):
    import pandas as pd

    r = a.by_rank.copy()
    it = a.by_iteration[a.by_iteration["iteration"] >= 0]
    per = it.groupby("rank").agg(
        steps=("iteration", "nunique"), step_ns=("wall_ns", "mean"), exp_ns=("exposed_ns", "mean")
    )
    r = r.merge(per, left_on="rank", right_index=True, how="left")
    title = "Per rank"
    if len(r) > max(top, 8):
        title = f"Per rank: the {top} with the most exposed comm (of {len(r)}; all in --json)"
        r = r.sort_values(["exposed_ns", "rank"], ascending=[False, True]).head(top)
    t = _table(
        title,
        ["rank", "comm ms", "hidden ms", "exposed ms", "hidden %", "steps", "step ms",
         "exposed ms/step"],
        {"comm ms", "hidden ms", "exposed ms", "hidden %", "steps", "step ms", "exposed ms/step"},
    )  # fmt: skip
    for row in r.to_dict("records"):
        steps = row.get("steps")
        t.add_row(
            str(row["rank"]),
            ms(row["comm_ns"]),
            ms(row["hidden_ns"]),
            ms(row["exposed_ns"]),
            pct(row["hidden_pct"]),
            "0" if steps is None or pd.isna(steps) else str(int(steps)),
            ms(row.get("step_ns")),
            ms(row.get("exp_ns")),
        )
    return t


def top_ops_table(a: Analysis, *, top: int):
    ops = a.by_op[a.by_op["comm_ns"] > 0]
    if len(ops) == 0:
        return None
    if len(a.ranks) <= 4:
        ops = ops.groupby("rank", sort=True, group_keys=False).head(top)
        title = f"Top {top} exposed op names per rank"
    else:
        ops = ops.sort_values(["exposed_ns", "rank"], ascending=[False, True]).head(top)
        title = f"Top {top} exposed (rank, op name) pairs"
    t = _table(title, ["rank", "op", "exposed ms", "comm ms", "hidden %"],
               {"exposed ms", "comm ms", "hidden %"})  # fmt: skip
    for row in ops.to_dict("records"):
        t.add_row(str(row["rank"]), str(row["op"]), ms(row["exposed_ns"]), ms(row["comm_ns"]),
                  pct(row["hidden_pct"]))  # fmt: skip
    return t


_BY_COLUMNS = {
    By.stream: ["rank", "device", "stream"],
    By.op: ["rank", "op"],
    By.iteration: ["rank", "iteration"],
    By.collective: ["rank", "stream", "name", "op", "iteration"],
    By.phase: ["rank", "phase"],
}
_BY_TABLE = {
    By.stream: "by_stream",
    By.op: "by_op",
    By.iteration: "by_iteration",
    By.collective: "by_collective",
    By.phase: "by_phase",
}
MAX_BY_ROWS = 60


def by_table(a: Analysis, by: By):
    df = getattr(a, _BY_TABLE[by])
    keys = _BY_COLUMNS[by]
    extra = ["wall ms", "exposed share"] if by is By.iteration else []
    cols = [*keys, "comm ms", "hidden ms", "exposed ms", "hidden %", *extra]
    n = len(df)
    if by is By.collective:
        df = df.sort_values(["exposed_ns", "rank"], ascending=[False, True])
    title = f"By {by.value}" + (f" (first {MAX_BY_ROWS} of {n} rows; all in --json)"
                                if n > MAX_BY_ROWS else "")  # fmt: skip
    t = _table(title, cols, {"comm ms", "hidden ms", "exposed ms", "hidden %", *extra})
    for row in df.head(MAX_BY_ROWS).to_dict("records"):
        cells = [str(row[k]) if not (k == "iteration" and row[k] < 0) else "outside steps"
                 for k in keys]  # fmt: skip
        cells += [ms(row["comm_ns"]), ms(row["hidden_ns"]), ms(row["exposed_ns"]),
                  pct(row["hidden_pct"])]  # fmt: skip
        if extra:
            share = row["exposed_comm_share"]
            cells += [ms(row["wall_ns"]), pct(None if math.isnan(share) else 100 * share)]
        t.add_row(*cells)
    return t


def collective_type_table(a: Analysis):
    """Per (rank, collective type): all-reduce, reduce-scatter, all-gather, ..."""
    df = a.by_collective_type
    t = _table("By collective type", ["rank", "collective", "count", "comm ms", "hidden ms",
                                      "exposed ms", "hidden %"],
               {"count", "comm ms", "hidden ms", "exposed ms", "hidden %"})  # fmt: skip
    for row in df.to_dict("records"):
        t.add_row(str(row["rank"]), str(row["collective"]), str(row["count"]),
                  ms(row["comm_ns"]), ms(row["hidden_ns"]), ms(row["exposed_ns"]),
                  pct(row["hidden_pct"]))  # fmt: skip
    return t


def findings_renderable(overheads):
    if overheads is None or not overheads.get("findings"):
        return None
    from domino_prof.commands._findings import findings_table

    return findings_table(overheads)


def print_summary(a: Analysis, *, by: By | None, top: int, console=None, mode: str = "") -> None:
    from rich.console import Console
    from rich.markup import escape

    console = console or Console()
    what = f" (mode {escape(mode)})" if mode else ""
    console.print(f"[bold]domino-prof analyze[/bold] {escape(a.source)}{what}")
    console.print(headline(a), soft_wrap=True, highlight=False)
    console.print(comm_sources_line(a), soft_wrap=True, highlight=False, markup=False)
    console.print(rank_table(a, top=top))
    ops = top_ops_table(a, top=top)
    if ops is not None:
        console.print(ops)
    if by is not None:
        if by is By.collective:
            console.print(collective_type_table(a))
        console.print(by_table(a, by))
    f = findings_renderable(a.overheads)
    if f is not None:
        console.print(f)
    if a.overheads is not None:  # the replay's what-if table and critical path
        from domino_prof.commands._findings import whatif_renderables

        for r in whatif_renderables(a.overheads):
            console.print(r, soft_wrap=isinstance(r, str), highlight=False)
    for note in a.notes:
        if getattr(note, "topic", "") != "skipped":  # on stderr, as every command says it
            console.print(f"note: {note}", highlight=False, markup=False)


# --------------------------------------------------------------------------- command
_FORMATS = {".json": "json", ".json.gz": "json", ".html": "html", ".htm": "html",
            ".pftrace": "pftrace"}  # fmt: skip


def register(app: typer.Typer) -> None:
    @app.command()
    @user_errors
    @reading_options(findings=True)
    def analyze(
        path: PathArg,
        output: Annotated[
            list[Path] | None,
            typer.Option(
                "-o",
                "--output",
                metavar="FILE",
                help="Write the result, repeatable: *.json the versioned JSON document, "
                "*.html the report, *.pftrace a Perfetto trace (pip install "
                "'domino-prof[perfetto]'); '-' the JSON on stdout (no summary).",
            ),
        ] = None,
        mode: Annotated[str | None, mode_option("its only mode, else domino")] = None,
        by: Annotated[
            str | None,
            typer.Option(
                metavar="KEY",
                help="Also print one breakdown table: stream, op, iteration, collective or phase.",
            ),
        ] = None,
        top: Annotated[int, typer.Option(help="Rows in the top-N tables (>= 1).")] = 5,
        reading: Reading = Reading(),  # the reading options (reading_options)
        json_out: Annotated[
            Path | None, typer.Option("--json", hidden=True, help="Same as -o FILE.json.")
        ] = None,
        html: Annotated[
            Path | None, typer.Option("--html", hidden=True, help="Same as -o FILE.html.")
        ] = None,
    ) -> None:
        """Exact comm/compute overlap per rank, stream, op and step.

        Also per phase, iteration and collective (--by), with the overheads beyond
        overlap (stream switches, launches, cross-rank waits) as ranked findings."""
        from domino_prof.analysis.document import encode

        by_choice = _parse_by(by)
        if top < 1:
            raise ConfigError(f"--top {top}: give a number of rows >= 1")
        json_path, html_path, pf_path = json_out, html, None
        for p in output or []:
            fmt = "json" if str(p) == "-" else guess_format(p, _FORMATS)
            if fmt == "json":
                json_path = one_output(json_path, p, "JSON")
            elif fmt == "pftrace":
                pf_path = one_output(pf_path, p, "Perfetto")
            else:
                html_path = one_output(html_path, p, "HTML")
        reading.config()  # a bad regex: one line, before the load
        report = _import_report() if html_path is not None else None  # before a long load
        if pf_path is not None:
            from domino_prof.export.perfetto import export_bytes, require

            require()  # the install hint before a long load
        target = resolve(path)
        (m,), notes = target.select(mode, default="one", verb="analysing")
        to_stdout = json_path is not None and str(json_path) == "-"
        print_notes(notes)
        keep = html_path is not None or pf_path is not None
        a = reading.analyse(target.modes[m], keep_intervals=keep)
        print_notes(skipped_notes(a))
        run = target.run.doc if target.run is not None else None
        outputs: list[tuple[Path, str]] = []
        if to_stdout:
            _write_stdout(encode(a.to_json()))
        else:
            if target.is_run_dir and len(target.modes) > 1:
                print_modes = modes_table(run)
                if print_modes is not None:
                    from rich.console import Console

                    Console().print(print_modes)
            print_summary(a, by=by_choice, top=top, mode=m)
            if json_path is not None:
                outputs.append((json_path, encode(a.to_json())))
        if report is not None:
            outputs.append((html_path, report.render_report(a, run=run, mode=m or None)))
        if pf_path is not None:
            outputs.append((pf_path, export_bytes({m: a}, {m: target.modes[m]}, reading=reading)))
        # all or nothing: a failed HTML leaves no JSON that looks complete
        write_outputs(outputs, example="analysis.json")
        for p, _ in outputs:  # as report and baseline say it (stderr when stdout is JSON)
            print(f"wrote {p} ({Path(p).stat().st_size / 1e6:.1f} MB)",
                  file=sys.stderr if to_stdout else sys.stdout)  # fmt: skip


def _write_stdout(data: bytes) -> None:
    sys.stdout.flush()
    out = getattr(sys.stdout, "buffer", None)
    if out is not None:
        out.write(data)
        out.flush()
    else:  # a text-only stream (tests)
        sys.stdout.write(data.decode("utf-8"))


def _parse_by(by: str | None) -> By | None:
    if by is None:
        return None
    try:
        return By(by.strip().lower())
    except ValueError:
        choices = ", ".join(b.value for b in By)
        raise ConfigError(f"--by {by!r} is not a breakdown; choose one of: {choices}") from None


def _import_report():
    try:
        return importlib.import_module("domino_prof.report")
    except ModuleNotFoundError as e:  # plotly missing on a minimal install
        raise ConfigError(
            f"an HTML output needs the report dependencies ({e.name} is missing); "
            "pip install 'domino-prof' with plotly"
        ) from None
