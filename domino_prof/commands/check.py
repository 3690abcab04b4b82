"""`domino-prof check` (a CI gate on comm/compute overlap) and `domino-prof baseline`.

Thin commands: parse the flags, call the gate library (``domino_prof.gate``, also
behind ``domino_prof.pytest_plugin``), print its table, write its reports. Exit codes
of ``check``: 0 every rule holds, 1 a regression (a rule failed), 2 bad input
(docs/ci.md). PATH forms and which modes of a run directory are gated:
``domino_prof.gate``'s module docstring.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from domino_prof.commands._common import (
    one_output,
    print_notes,
    same_file,
    user_errors,
    write_outputs,
)
from domino_prof.commands._options import (
    BASELINE_FORMATS,
    PathArg,
    guess_format,
    mode_option,
    reading_options,
)
from domino_prof.engine import Reading
from domino_prof.errors import ConfigError, DominoProfError, message
from domino_prof.gate import (
    CheckOutcome,
    baseline_document,
    error_annotation,
    format_markdown,
    format_table,
    github_annotations,
    junit_xml,
    run_check,
)


def _is_step_summary(p: Path) -> bool:
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    return bool(summary) and same_file(p, Path(summary))


def write_reports(
    outcome: CheckOutcome | None,
    *,
    junit: Path | None,
    markdown: Path | None,
    error: str | None = None,
) -> None:
    """--junit and --markdown, all or nothing (one ConfigError, exit 2, if a path cannot
    be written: never a traceback, which would exit 1 like a regression)."""
    files: list[tuple[Path, str]] = []
    append: list[tuple[Path, str]] = []
    if junit is not None:
        files.append((junit, junit_xml(outcome, error=error)))
    if markdown is not None and outcome is not None:
        text = format_markdown(outcome)
        (append if _is_step_summary(markdown) else files).append((markdown, text))
    write_outputs(files, append=append, example="gate.xml")


def _annotate_error(text: str) -> None:
    if os.environ.get("GITHUB_ACTIONS") == "true":
        print(error_annotation(text))


_REPORT_FORMATS = {".xml": "junit", ".md": "markdown"}


@user_errors
@reading_options()
def check(
    path: PathArg,
    min_hidden: Annotated[
        float | None,
        typer.Option(metavar="PCT", help="Fail if a rank's hidden comm % is below PCT."),
    ] = None,
    phase: Annotated[
        str, typer.Option(metavar="fwd|bwd|all", help="Restrict comm to one phase.")
    ] = "all",
    max_exposed_ms: Annotated[
        float | None,
        typer.Option(metavar="MS", help="Fail if a rank's exposed comm per step exceeds MS."),
    ] = None,
    max_critical_comm: Annotated[
        float | None,
        typer.Option(metavar="MS", help="Fail if a rank's exposed comm on its critical path "
                     "exceeds MS per step."),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Baseline written by `domino-prof baseline`."),
    ] = None,
    max_drop: Annotated[
        float | None,
        typer.Option(metavar="PP", help="Tolerated hidden % drop vs --baseline, in points."),
    ] = None,
    min_speedup: Annotated[
        float | None,
        typer.Option(
            metavar="X",
            help="Fail unless the 95% interval of each gated mode's speedup over its "
            "synchronous mode (domino vs tp, domino-sp vs sp; a run directory's timed "
            "steps) lies at or above X.",
        ),
    ] = None,
    op_pattern: Annotated[
        str | None,
        typer.Option(metavar="REGEX", help="Only comm launched by ops matching REGEX."),
    ] = None,
    mode: Annotated[
        str | None, mode_option("every mode that overlaps comm by design: domino, domino-sp")
    ] = None,
    reading: Reading = Reading(),  # the reading options (reading_options)
    output: Annotated[
        list[Path] | None,
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            help="Write the result, repeatable: *.xml JUnit, *.md markdown.",
        ),
    ] = None,
    junit: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Write JUnit XML (one case per check).")
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Write a markdown table ($GITHUB_STEP_SUMMARY: append)."),
    ] = None,
) -> None:
    """Gate CI on overlap: exit 0 pass, 1 regression, 2 bad input.

    Exit 0 when every rule holds on every rank, 1 when a rule fails, 2 when the input
    cannot be gated (docs/ci.md)."""
    for p in output or []:
        if guess_format(p, _REPORT_FORMATS) == "junit":
            junit = one_output(junit, p, "JUnit")
        else:
            markdown = one_output(markdown, p, "markdown")
    try:
        outcome = run_check(
            path,
            min_hidden=min_hidden,
            phase=phase,
            max_exposed_ms=max_exposed_ms,
            baseline=baseline,
            max_drop=max_drop,
            op_pattern=op_pattern,
            mode=mode,
            reading=reading,
            max_critical_comm_ms=max_critical_comm,
            min_speedup=min_speedup,
        )
    except DominoProfError as e:
        text = message(e, cli=True)
        _annotate_error(text)
        if junit is not None:
            try:
                write_reports(None, junit=junit, markdown=None, error=text)
            except ConfigError as w:  # still one line: the input error, then the write's
                raise ConfigError(f"{text}; and {w}") from None
        raise
    print_notes(outcome.notes_for(cli=True))
    print(f"domino-prof check {path}")
    if outcome.emulation:  # every figure below stands on emulated collectives
        print(f"{outcome.emulation}: one GPU, rank 0's shard; collectives emulated")
    print(format_table(outcome.results))
    print(outcome.summary)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_annotations(outcome):
            print(line)
    write_reports(outcome, junit=junit, markdown=markdown)
    if outcome.exit_code == 2:
        first = next(r for r in outcome.results if r.verdict == "n/a")
        print(f"domino-prof: error: {first.message}; the input cannot be gated", file=sys.stderr)
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)


@user_errors
@reading_options()
def baseline(
    path: PathArg,
    output: Annotated[
        Path,
        typer.Option("-o", "--output", "--out", metavar="FILE", help="Baseline JSON to write."),
    ],
    mode: Annotated[str | None, mode_option("its only mode, else domino")] = None,
    reading: Reading = Reading(),  # the reading options (reading_options)
) -> None:
    """Record the overlap figures that check --baseline compares to.

    Per rank, phase and op name, as versioned JSON (docs/ci.md)."""
    import json

    if output.is_dir():  # before a long load
        raise ConfigError(
            f"-o {output} is a directory; give a file name such as {output / 'baseline.json'}"
        )
    guess_format(output, BASELINE_FORMATS)  # JSON under .json only, as every command checks
    doc, notes = baseline_document(
        path,
        mode=mode,
        reading=reading,
    )
    print_notes(notes)
    write_outputs([(output, json.dumps(doc, indent=2, allow_nan=False) + "\n")],
                  example="baseline.json")  # fmt: skip
    pcts = ", ".join(
        f"rank {r}: " + ("n/a" if v["hidden_pct"] is None else f"{v['hidden_pct']:.2f}%")
        for r, v in doc["per_rank"].items()
    )
    print(f"wrote baseline {output} ({len(doc['per_rank'])} ranks; hidden {pcts})")


def register(app: typer.Typer) -> None:
    app.command("check")(check)
    app.command("baseline")(baseline)
