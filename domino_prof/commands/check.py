"""`domino-prof check` (a CI gate on comm/compute overlap) and `domino-prof baseline`.

Exit codes of ``check``: 0 every rule holds, 1 a regression (a rule failed),
2 bad input (unreadable trace or baseline, no rule, an op pattern that matches
nothing, a figure that is n/a such as hidden % with no comm). See docs/ci.md.

PATH is a trace file, a directory of per-rank traces, or a run directory
written by ``domino-prof run`` (it has ``run.json``). A run directory with one
mode is checked as is; with several, ``--mode NAME`` picks one and without it
the ``domino`` mode is checked (a note says so); without a ``domino`` mode the
command asks for ``--mode``.

The functions here (``load_analysis``, ``run_check``, the formatters) are the
library behind the CLI and ``domino_prof.pytest_plugin``; they print nothing.
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from domino_prof.commands._common import user_errors
from domino_prof.errors import ConfigError, DominoProfError, TraceError

if TYPE_CHECKING:  # pandas-heavy; imported inside the command bodies at run time
    from domino_prof.analysis.baseline import RuleResult

RUN_SCHEMA = "domino-prof/run"
DEFAULT_MODE = "domino"


# --------------------------------------------------------------------------- loading
def resolve_path(path: str | os.PathLike, *, mode: str | None = None) -> tuple[Path, list[str]]:
    """PATH (trace file/dir or run directory) -> (trace path to load, notes)."""
    p = Path(path)
    if not p.exists():
        raise TraceError(p, "no such file or directory", "check the path")
    run_json = p / "run.json" if p.is_dir() else (p if p.name == "run.json" else None)
    if run_json is None or not run_json.is_file():
        if mode is not None:
            raise ConfigError(
                f"--mode {mode!r} applies to a run directory (one with run.json), "
                f"and {p} is not one; drop --mode or point at the run directory"
            )
        return p, []
    try:
        doc = json.loads(run_json.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(run_json, f"cannot read run.json ({e})", "re-run `domino-prof run`")
    modes = doc.get("modes") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("schema") != RUN_SCHEMA or not isinstance(modes, dict):
        raise TraceError(
            run_json,
            f"not a domino-prof run.json (expected schema {RUN_SCHEMA!r} with a 'modes' table)",
            "point at a trace file or directory instead",
        )
    if not modes:
        raise TraceError(run_json, "lists no modes", "re-run `domino-prof run`")
    notes: list[str] = []
    if mode is None:
        if len(modes) == 1:
            mode = next(iter(modes))
        elif DEFAULT_MODE in modes:
            mode = DEFAULT_MODE
            others = ", ".join(m for m in modes if m != DEFAULT_MODE)
            notes.append(f"checking mode '{mode}' of {run_json} (also has: {others}; use --mode)")
        else:
            raise ConfigError(f"{run_json} has modes {', '.join(modes)}: pick one with --mode NAME")
    elif mode not in modes:
        raise ConfigError(f"--mode {mode!r} is not in {run_json} (modes: {', '.join(modes)})")
    entry = modes[mode] if isinstance(modes[mode], dict) else {}
    trace_dir = run_json.parent / str(entry.get("trace_dir", mode))
    return trace_dir, notes


def load_analysis(
    path: str | os.PathLike,
    *,
    mode: str | None = None,
    comm_pattern: str | None = None,
    comm_pattern_only: bool = False,
    memcpy_as_comm: bool = False,
    rank: int | None = None,
    skip_bad: bool = False,
) -> tuple[Any, list[str]]:
    """Load and analyse PATH (see module doc) -> (Analysis, notes).

    ``comm_pattern`` is OR-ed with the default comm regex (replaces it with
    ``comm_pattern_only``), exactly as ``domino-prof analyze`` does; ``rank`` and
    ``skip_bad`` are passed to the loader (skipped files become notes)."""
    from domino_prof.analysis import AnalysisConfig, analyze
    from domino_prof.analysis.config import combine_comm_pattern
    from domino_prof.trace import load_trace

    config = AnalysisConfig(
        comm_pattern=combine_comm_pattern(comm_pattern, replace=comm_pattern_only),
        memcpy_as_comm=memcpy_as_comm,
    )
    trace_path, notes = resolve_path(path, mode=mode)
    trace = load_trace(trace_path, rank=rank, skip_bad=skip_bad)
    notes += [f"skipped {p}: {why}" for p, why in trace.skipped]
    return analyze(trace, config), notes


def read_baseline(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a baseline JSON file (ConfigError, exit 2, when unusable)."""
    from domino_prof.analysis.baseline import validate_baseline

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{p}: baseline not found; write one with `domino-prof baseline PATH -o {p}`"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read the baseline ({e})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{p}: baseline is not valid JSON ({e}); regenerate it with "
            "`domino-prof baseline PATH -o FILE`"
        ) from None
    return validate_baseline(doc, source=str(p))


# --------------------------------------------------------------------------- checking
@dataclass
class CheckOutcome:
    """What a gate run found: the rows, the exit code and notes for the reader."""

    path: str
    results: list[RuleResult]
    exit_code: int
    notes: list[str] = field(default_factory=list)

    @property
    def n_failed(self) -> int:
        return sum(1 for r in self.results if r.verdict == "fail")

    @property
    def n_na(self) -> int:
        return sum(1 for r in self.results if r.verdict == "n/a")

    @property
    def summary(self) -> str:
        n = len(self.results)
        if self.exit_code == 0:
            return f"PASS: all {n} checks hold"
        if self.exit_code == 2:
            first = next(r for r in self.results if r.verdict == "n/a")
            return f"ERROR: {self.n_na} of {n} checks cannot be measured ({first.message})"
        return f"FAIL: {self.n_failed} of {n} checks failed"


def run_check(
    path: str | os.PathLike,
    *,
    min_hidden: float | None = None,
    phase: str | None = "all",
    max_exposed_ms: float | None = None,
    baseline: str | os.PathLike | None = None,
    max_drop: float | None = None,
    op_pattern: str | None = None,
    mode: str | None = None,
    comm_pattern: str | None = None,
    comm_pattern_only: bool = False,
    memcpy_as_comm: bool = False,
    rank: int | None = None,
    skip_bad: bool = False,
) -> CheckOutcome:
    """Evaluate the gate on PATH; raises DominoProfError (exit 2) on bad input."""
    from domino_prof.analysis.baseline import (
        CheckRules,
        config_mismatch,
        evaluate,
        exit_code,
        parse_phase,
    )
    from domino_prof.analysis.overlap import NEGATIVE_DURATION

    # Validate the options before the (possibly slow) load.
    base_doc = read_baseline(baseline) if baseline is not None else None
    rules = CheckRules(
        min_hidden=min_hidden,
        max_exposed_ms=max_exposed_ms,
        baseline=base_doc,
        max_drop=max_drop,
        phase=parse_phase(phase),
        op_pattern=op_pattern,
    )
    analysis, notes = load_analysis(
        path,
        mode=mode,
        comm_pattern=comm_pattern,
        comm_pattern_only=comm_pattern_only,
        memcpy_as_comm=memcpy_as_comm,
        rank=rank,
        skip_bad=skip_bad,
    )
    if base_doc is not None and (note := config_mismatch(base_doc, analysis)):
        notes.append(note)
    # damaged input that changes the gated figures is said here too, not only in analyze
    notes += [n for n in analysis.notes if NEGATIVE_DURATION in n]
    results = evaluate(analysis, rules)
    return CheckOutcome(path=str(path), results=results, exit_code=exit_code(results), notes=notes)


# --------------------------------------------------------------------------- formatting
def _measured(r: RuleResult) -> str:
    if r.unit == "":
        return "present" if r.verdict == "pass" else "missing"
    if r.measured is None:
        return "n/a"
    return f"{r.measured:.2f}%" if r.unit == "%" else f"{r.measured:.3f} ms"


def _limit(r: RuleResult) -> str:
    if r.unit == "":
        return "present"
    if r.limit is None:
        return "n/a"
    value = f"{r.limit:.2f}%" if r.unit == "%" else f"{r.limit:.3f} ms"
    return f"{r.op} {value}"


def _rows(results: list[RuleResult]) -> list[tuple[str, str, str, str, str]]:
    return [
        (
            r.label,
            str(r.rank),
            _measured(r),
            _limit(r),
            r.verdict.upper() if not r.ok else r.verdict,
        )
        for r in results
    ]


HEADER = ("rule", "rank", "measured", "limit", "verdict")


def format_table(results: list[RuleResult]) -> str:
    """A plain-text table: rule, rank, measured, limit, verdict (FAIL / N/A upper-case)."""
    rows = [HEADER, *_rows(results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    right = {1, 2, 3}
    lines = []
    for row in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def format_markdown(outcome: CheckOutcome) -> str:
    """A GitHub-flavoured markdown section (for $GITHUB_STEP_SUMMARY or a PR comment)."""
    icon = {0: "✅", 1: "❌", 2: "⚠️"}[outcome.exit_code]
    lines = [
        f"### {icon} domino-prof check: {outcome.summary}",
        "",
        f"Trace: `{outcome.path}`",
        "",
        "| Rule | Rank | Measured | Limit | Verdict |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for label, rank, measured, limit, verdict in _rows(outcome.results):
        v = verdict if verdict in ("pass", "skip") else f"**{verdict}**"
        label = label.replace("|", "\\|")
        lines.append(f"| {label} | {rank} | {measured} | {limit} | {v} |")
    for note in outcome.notes:
        lines += ["", f"> {note}"]
    return "\n".join(lines) + "\n"


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def github_annotations(outcome: CheckOutcome) -> list[str]:
    """GitHub Actions workflow commands: ``::error`` per failed/n/a check,
    ``::warning`` per skipped check and note."""
    f = _escape_prop(outcome.path)
    lines = []
    for r in outcome.results:
        if r.verdict in ("fail", "n/a"):
            title = _escape_prop(f"domino-prof check: {r.label}")
            lines.append(f"::error file={f},title={title}::{_escape_data(r.message)}")
        elif r.verdict == "skip":
            title = _escape_prop(f"domino-prof check: {r.label}")
            lines.append(f"::warning file={f},title={title}::{_escape_data(r.message)}")
    for note in outcome.notes:
        lines.append(f"::warning title=domino-prof check::{_escape_data(note)}")
    return lines


def junit_xml(outcome: CheckOutcome | None, *, error: str | None = None) -> str:
    """JUnit XML: one testcase per rule and rank; fail -> <failure>, n/a -> <error>,
    skip -> <skipped>. With ``error`` (bad input), one errored testcase."""
    suites = ET.Element("testsuites", name="domino-prof")
    suite = ET.SubElement(suites, "testsuite", name="domino-prof check")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    if error is not None or outcome is None:
        case = ET.SubElement(suite, "testcase", classname="domino-prof.check", name="input")
        ET.SubElement(case, "error", message=error or "no result").text = error or ""
        counts.update(tests=1, errors=1)
    else:
        for r in outcome.results:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"domino-prof.check.{r.rule.replace(' ', '-')}",
                name=f"{r.label} rank {r.rank}",
            )
            counts["tests"] += 1
            if r.verdict == "fail":
                counts["failures"] += 1
                ET.SubElement(
                    case, "failure", message=r.message
                ).text = f"measured {_measured(r)}, limit {_limit(r)}"
            elif r.verdict == "n/a":
                counts["errors"] += 1
                ET.SubElement(case, "error", message=r.message).text = r.message
            elif r.verdict == "skip":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=r.message)
            else:
                ET.SubElement(case, "system-out").text = r.message
    for el in (suite, suites):
        for k, v in counts.items():
            if el is suites and k == "skipped":
                continue
            el.set(k, str(v))
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def write_markdown(path: str | os.PathLike, text: str) -> None:
    """Atomic write, except to $GITHUB_STEP_SUMMARY, which by convention is appended to."""
    from domino_prof.io import atomic_write_text

    p = Path(path)
    if _is_step_summary(p):
        with open(p, "a", encoding="utf-8") as f:
            f.write(text)
        return
    atomic_write_text(p, text)


def _is_step_summary(p: Path) -> bool:
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    return bool(summary) and _same_file(p, Path(summary))


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def write_reports(
    outcome: CheckOutcome | None,
    *,
    junit: Path | None,
    markdown: Path | None,
    error: str | None = None,
) -> None:
    """--junit and --markdown, all or nothing (one ConfigError, exit 2, if a path cannot
    be written: never a traceback, which would exit 1 like a regression)."""
    from domino_prof.commands._common import write_outputs

    files: list[tuple[Path, str]] = []
    append: list[tuple[Path, str]] = []
    if junit is not None:
        files.append((junit, junit_xml(outcome, error=error)))
    if markdown is not None and outcome is not None:
        text = format_markdown(outcome)
        (append if _is_step_summary(markdown) else files).append((markdown, text))
    write_outputs(files, append=append, example="gate.xml")


# --------------------------------------------------------------------------- commands
def _annotate_error(message: str) -> None:
    if os.environ.get("GITHUB_ACTIONS") == "true":
        print(f"::error title=domino-prof check::{_escape_data(message)}")


PathArg = Annotated[
    Path, typer.Argument(help="Trace file, directory of rank traces, or run directory.")
]
CommPatternOpt = Annotated[
    str | None,
    typer.Option(
        metavar="REGEX", help="Extra regex for comm kernel names (OR-ed with the default)."
    ),
]
CommPatternOnlyOpt = Annotated[
    bool, typer.Option(help="Use --comm-pattern alone, not OR-ed with the default.")
]
MemcpyAsCommOpt = Annotated[
    bool,
    typer.Option(
        help="Also count same-device DtoD copies as comm; copies between devices are comm anyway."
    ),
]
ModeOpt = Annotated[
    str | None,
    typer.Option("--mode", help="Mode of a run directory (default: its only mode, else 'domino')."),
]
RankOpt = Annotated[
    int | None,
    typer.Option(help="Rank of a single trace file that lacks distributedInfo.rank."),
]
SkipBadOpt = Annotated[
    bool,
    typer.Option(
        "--skip-bad",
        help="In a directory, skip unreadable rank files (named in the notes) and use the rest.",
    ),
]


@user_errors
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
    baseline: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Baseline written by `domino-prof baseline`."),
    ] = None,
    max_drop: Annotated[
        float | None,
        typer.Option(metavar="PP", help="Tolerated hidden % drop vs --baseline, in points."),
    ] = None,
    op_pattern: Annotated[
        str | None,
        typer.Option(metavar="REGEX", help="Only comm launched by ops matching REGEX."),
    ] = None,
    mode: ModeOpt = None,
    comm_pattern: CommPatternOpt = None,
    comm_pattern_only: CommPatternOnlyOpt = False,
    memcpy_as_comm: MemcpyAsCommOpt = False,
    rank: RankOpt = None,
    skip_bad: SkipBadOpt = False,
    junit: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Write JUnit XML (one case per check).")
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Write a markdown table ($GITHUB_STEP_SUMMARY: append)."),
    ] = None,
) -> None:
    """Gate CI on overlap: exit 0 all rules hold, 1 a regression, 2 bad input."""
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
            comm_pattern=comm_pattern,
            comm_pattern_only=comm_pattern_only,
            memcpy_as_comm=memcpy_as_comm,
            rank=rank,
            skip_bad=skip_bad,
        )
    except DominoProfError as e:
        _annotate_error(str(e))
        if junit is not None:
            try:
                write_reports(None, junit=junit, markdown=None, error=str(e))
            except ConfigError as w:  # still one line: the input error, then the write's
                raise ConfigError(f"{e}; and {w}") from None
        raise
    for note in outcome.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"domino-prof check {path}")
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
def baseline(
    path: PathArg,
    out: Annotated[
        Path, typer.Option("--out", "-o", metavar="FILE", help="Baseline JSON to write.")
    ],
    mode: ModeOpt = None,
    comm_pattern: CommPatternOpt = None,
    comm_pattern_only: CommPatternOnlyOpt = False,
    memcpy_as_comm: MemcpyAsCommOpt = False,
    rank: RankOpt = None,
    skip_bad: SkipBadOpt = False,
) -> None:
    """Write the overlap figures (per rank, phase, op) that `check --baseline` compares to."""
    from domino_prof.analysis.baseline import make_baseline
    from domino_prof.commands._common import write_outputs

    if out.is_dir():  # before a long load
        raise ConfigError(
            f"-o {out} is a directory; give a file name such as {out / 'baseline.json'}"
        )

    analysis, notes = load_analysis(
        path,
        mode=mode,
        comm_pattern=comm_pattern,
        comm_pattern_only=comm_pattern_only,
        memcpy_as_comm=memcpy_as_comm,
        rank=rank,
        skip_bad=skip_bad,
    )
    doc = make_baseline(analysis)
    if not any(v["comm_ns"] > 0 for v in doc["per_rank"].values()):
        raise ConfigError(
            f"{path}: no comm kernels in the trace: a baseline would gate nothing; "
            "check the trace (or the comm pattern)"
        )
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    write_outputs([(out, json.dumps(doc, indent=2, allow_nan=False) + "\n")],
                  example="baseline.json")  # fmt: skip
    pcts = ", ".join(
        f"rank {r}: " + ("n/a" if v["hidden_pct"] is None else f"{v['hidden_pct']:.2f}%")
        for r, v in doc["per_rank"].items()
    )
    print(f"wrote baseline {out} ({len(doc['per_rank'])} ranks; hidden {pcts})")


def register(app: typer.Typer) -> None:
    app.command("check")(check)
    app.command("baseline")(baseline)
