"""The overlap gate: the library behind ``domino-prof check`` / ``domino-prof baseline``
and ``domino_prof.pytest_plugin.assert_overlap``. Prints nothing, writes nothing.

:func:`run_check` resolves PATH (a trace file or directory, a run directory, or
``RUN_DIR/<mode>``; see ``domino_prof.runs``), analyses what it names, applies the
rules of ``analysis.baseline`` and returns a :class:`CheckOutcome` (rows, exit code,
notes); :func:`baseline_document` builds what ``check --baseline`` compares against.
The formatters turn an outcome into a plain table, markdown, JUnit XML or GitHub
Actions workflow commands (docs/ci.md).

Exit codes: 0 every rule holds, 1 a regression (a rule failed), 2 bad input (raised
as ``DominoProfError`` before any row, or a figure that is n/a).

Which modes of a run directory are gated: ``mode`` picks one; without it every mode
that overlaps comm by design (``domino``, ``domino-sp``: run.json's ``overlap``), since
tp and sp wait for each collective (0 % hidden is right for them) and nocomm and
domino-nocomm have no comm. A baseline holds one mode's figures, so ``baseline`` gates one mode: ``mode``,
else the mode the baseline was made from (``run_mode``), else ``domino``.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from domino_prof.engine import Reading, skipped_notes
from domino_prof.errors import ConfigError, OptionError, opt, render_text
from domino_prof.rundata import BASE_MODE, comm_label, mode_ratio
from domino_prof.rundir import PRIMARY_MODE, Run, Target, resolve

if TYPE_CHECKING:  # pandas-heavy; imported inside the functions at run time
    from domino_prof.analysis.baseline import RuleResult


# --------------------------------------------------------------------------- loading
def read_baseline(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a baseline JSON file (ConfigError, exit 2, when unusable)."""
    from domino_prof.analysis.baseline import validate_baseline

    p = Path(path)
    make = f"`domino-prof baseline {p} -o baseline.json`, then give {opt('baseline')} baseline.json"
    if p.is_dir():
        raise OptionError(
            f"{opt('baseline')} {p} is a directory, not a baseline; make one with {make}"
        )
    if _looks_like_trace(p):
        raise OptionError(
            f"{opt('baseline')} {p} is a trace, not a baseline; make a baseline from it with {make}"
        )
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


def _looks_like_trace(p: Path) -> bool:
    """A gzip file (baselines are plain JSON) or JSON whose first KB names traceEvents."""
    try:
        with open(p, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head[:2] == b"\x1f\x8b" or b'"traceEvents"' in head or b'"schemaVersion"' in head


def _gated_modes(
    target: Target, mode: str | None, base_doc: dict | None
) -> tuple[list[str], list[str]]:
    """The modes to gate and notes (module doc)."""
    if base_doc is None or mode is not None or target.run is None or len(target.modes) == 1:
        return target.select(mode, default="overlap", verb="checking")
    wanted = base_doc.get("run_mode")
    if isinstance(wanted, str) and wanted in target.modes:
        return [wanted], [f"checking mode '{wanted}' of {target.path}: the baseline's mode"]
    if PRIMARY_MODE in target.modes:
        note = (
            f"checking mode '{PRIMARY_MODE}' of {target.path} against the baseline "
            f"(a baseline holds one mode; {opt('mode')} NAME picks another)"
        )
        return [PRIMARY_MODE], [note]
    raise OptionError(
        f"{target.path} has modes {', '.join(target.modes)} and a baseline holds one "
        f"mode's figures: pick one with {opt('mode')} NAME"
    )


# --------------------------------------------------------------------------- checking
@dataclass
class CheckOutcome:
    """What a gate run found: the rows, the exit code and notes for the reader.
    Rows of a run directory carry their mode (``RuleResult.mode``). ``raw_notes`` may
    name options (``errors.opt``): ``notes`` says them as Python keywords,
    ``notes_for(cli=True)`` as flags."""

    path: str
    results: list[RuleResult]
    exit_code: int
    raw_notes: list[str] = field(default_factory=list)
    # "emulated comm (profile NAME)" when the gated traces / run were emulated (the traces'
    # mark, run.json's comm): the summary, the markdown and the JUnit suite say so
    emulation: str | None = None

    @property
    def notes(self) -> list[str]:
        return self.notes_for(cli=False)

    def notes_for(self, *, cli: bool) -> list[str]:
        return [render_text(n, cli=cli) for n in self.raw_notes]

    @property
    def n_failed(self) -> int:
        return sum(1 for r in self.results if r.verdict == "fail")

    @property
    def n_na(self) -> int:
        return sum(1 for r in self.results if r.verdict == "n/a")

    @property
    def modes(self) -> list[str]:
        return list(dict.fromkeys(r.mode for r in self.results if r.mode))

    @property
    def summary(self) -> str:
        n = len(self.results)
        tail = f" — {self.emulation}" if self.emulation else ""
        if self.exit_code == 0:
            return f"PASS: all {n} checks hold{tail}"
        if self.exit_code == 2:
            first = next(r for r in self.results if r.verdict == "n/a")
            return (f"ERROR: {self.n_na} of {n} checks cannot be measured ({first.message})"
                    f"{tail}")  # fmt: skip
        return f"FAIL: {self.n_failed} of {n} checks failed{tail}"


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
    reading: Reading | None = None,
    max_critical_comm_ms: float | None = None,
    min_speedup: float | None = None,
) -> CheckOutcome:
    """Evaluate the gate on PATH, its traces read as ``reading`` says (default: every
    option off); raises DominoProfError (exit 2) on bad input.

    ``min_speedup`` (:func:`speedup_result`) gates the run's timed steps, not the
    traces: with it alone nothing is analysed."""
    from domino_prof.analysis.baseline import (
        CheckRules,
        config_mismatch,
        evaluate,
        exit_code,
        parse_phase,
    )
    from domino_prof.analysis.rankwise import NEGATIVE_DURATION_TOPIC
    from domino_prof.analysis.results import notes_about

    # Validate the options before the (possibly slow) load.
    trace_rules = (min_hidden, max_exposed_ms, max_critical_comm_ms, baseline, max_drop)
    if min_speedup is None and all(x is None for x in trace_rules):
        raise OptionError(
            f"no rule given: pass at least one of {opt('min_hidden')} PCT, "
            f"{opt('max_exposed_ms')} MS, {opt('max_critical_comm')} MS, "
            f"{opt('baseline')} FILE {opt('max_drop')} PP, {opt('min_speedup')} X"
        )
    if min_speedup is not None:
        if not min_speedup > 0:
            raise OptionError(
                f"{opt('min_speedup')} {min_speedup} must be > 0 (a ratio of step times, "
                f"e.g. {opt('min_speedup')} 1.0: at least as fast as the synchronous mode)"
            )
        if all(x is None for x in trace_rules):  # nothing to analyse
            return _speedup_check(path, mode=mode, min_speedup=min_speedup)
    base_doc = read_baseline(baseline) if baseline is not None else None
    rules = CheckRules(
        min_hidden=min_hidden,
        max_exposed_ms=max_exposed_ms,
        baseline=base_doc,
        max_drop=max_drop,
        phase=parse_phase(phase),
        op_pattern=op_pattern,
        max_critical_comm_ms=max_critical_comm_ms,
    )
    reading = Reading() if reading is None else reading
    reading.config()  # a bad regex: one line, before the load
    target = resolve(path)
    if min_speedup is not None:
        _needs_run(target)
    modes, notes = _gated_modes(target, mode, base_doc)
    results: list[RuleResult] = []
    emulation = _run_emulation(target)
    for m in modes:
        analysis = reading.analyse(target.modes[m])
        emulation = emulation or getattr(analysis, "emulation", None)
        tag = f"{m}: " if len(modes) > 1 else ""
        notes += [tag + n for n in skipped_notes(analysis)]
        if base_doc is not None and (note := config_mismatch(base_doc, analysis)):
            notes.append(tag + note)
        # damaged input that changes the gated figures is said here too, not only in analyze
        notes += [tag + n for n in notes_about(analysis.notes, NEGATIVE_DURATION_TOPIC)]
        rows = evaluate(analysis, rules)
        results += [replace(r, mode=m) for r in rows] if m else rows
        if min_speedup is not None:
            results.append(speedup_result(target.run, m, min_speedup))
    return CheckOutcome(
        path=str(path), results=results, exit_code=exit_code(results), raw_notes=notes,
        emulation=emulation,
    )  # fmt: skip


def _run_emulation(target: Target) -> str | None:
    """run.json's emulation label (``rundata.comm_label``), None outside a run directory."""
    return comm_label(target.run.doc) if target.run is not None else None


SPEEDUP_UNIT = "×"
ALL_RANKS = -1  # a row about the whole run (the timed steps), not one rank


def _needs_run(target: Target) -> None:
    if target.run is None:
        raise OptionError(
            f"{target.path}: {opt('min_speedup')} gates the timed steps of a run directory "
            "(run.json), and a trace has none; point at a directory written by "
            f"`domino-prof run` or drop {opt('min_speedup')}"
        )


def _speedup_check(path: str | os.PathLike, *, mode: str | None, min_speedup: float):
    from domino_prof.analysis.baseline import exit_code

    target = resolve(path)
    _needs_run(target)
    modes, notes = target.select(mode, default="overlap", verb="checking")
    results = [speedup_result(target.run, m, min_speedup) for m in modes]
    return CheckOutcome(
        path=str(path), results=results, exit_code=exit_code(results), raw_notes=notes,
        emulation=_run_emulation(target),
    )


def speedup_result(run: Run, mode: str, limit: float) -> RuleResult:
    """``check --min-speedup X`` for one mode: its speedup over its synchronous
    counterpart (``rundata.BASE_MODE``: domino vs tp, domino-sp vs sp; sp and nocomm vs tp;
    domino-nocomm vs nocomm),
    the median of the paired block ratios (``rundata.mode_ratio``). It passes only when
    the 95% interval's lower bound is >= X, so a speedup within noise does not pass; a
    run without the counterpart or without an interval (fewer than 6 blocks, a
    run.json from before blocks) is n/a (exit 2)."""
    from domino_prof.analysis.baseline import FAIL, NA, PASS, RuleResult

    base = BASE_MODE.get(mode)
    row = {"rule": "min-speedup", "rank": ALL_RANKS, "limit": limit, "mode": mode,
           "unit": SPEEDUP_UNIT, "scope": f"vs {base}, 95% low" if base else "all"}  # fmt: skip
    where = run.path / "run.json"
    if base is None:
        return RuleResult(measured=None, verdict=NA, **row,
                          message=f"{mode} is the reference of every speedup in {where}: "
                          "pick an overlapped mode (domino, domino-sp)")  # fmt: skip
    r = mode_ratio(run.doc["modes"], mode, base)
    if r is None:
        return RuleResult(measured=None, verdict=NA, **row,
                          message=f"{base} did not run in {where}: no speedup of {mode} to "
                          "gate (`domino-prof run --mode all`)")  # fmt: skip
    if not r.has_interval:
        why = (f"{r.n} timed blocks per mode, 6 needed" if r.n
               else "written before timed blocks: no block times")  # fmt: skip
        return RuleResult(measured=None, verdict=NA, **row,
                          message=f"{mode} {r.value:.3f}× {base} has no 95% interval in "
                          f"{where} ({why}): re-run `domino-prof run` (default "
                          "--steps)")  # fmt: skip
    ok = r.low >= limit
    msg = (
        f"{mode} {r.value:.3f}× {base}, 95% interval [{r.low:.3f}, {r.high:.3f}] over "
        f"{r.n} blocks: lower bound {'>=' if ok else '<'} {limit:.3f}"
    )
    return RuleResult(measured=r.low, verdict=PASS if ok else FAIL, message=msg, **row)


def baseline_document(
    path: str | os.PathLike,
    *,
    mode: str | None = None,
    reading: Reading | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The baseline of PATH (one mode of a run directory: ``mode``, else ``domino``),
    its traces read as ``reading`` says, and notes; ConfigError when it has no comm (a
    baseline that gates nothing)."""
    from domino_prof.analysis.baseline import make_baseline

    reading = Reading() if reading is None else reading
    reading.config()  # a bad regex: one line, before the load
    target = resolve(path)
    (m,), notes = target.select(mode, default="one", verb="recording")
    analysis = reading.analyse(target.modes[m])
    doc = make_baseline(analysis)
    if m:
        doc["run_mode"] = m
    if not any(v["comm_ns"] > 0 for v in doc["per_rank"].values()):
        raise ConfigError(
            f"{path}: no comm kernels in the trace: a baseline would gate nothing; "
            "check the trace (or the comm pattern)"
        )
    return doc, notes + skipped_notes(analysis)


# --------------------------------------------------------------------------- formatting
def _value(x: float, unit: str) -> str:
    if unit == "%":
        return f"{x:.2f}%"
    if unit == SPEEDUP_UNIT:
        return f"{x:.3f}×"
    return f"{x:.3f} ms"


def _measured(r: RuleResult) -> str:
    if r.unit == "":
        return "present" if r.verdict == "pass" else "missing"
    if r.measured is None:
        return "n/a"
    return _value(r.measured, r.unit)


def _limit(r: RuleResult) -> str:
    if r.unit == "":
        return "present"
    if r.limit is None:
        return "n/a"
    return f"{r.op} {_value(r.limit, r.unit)}"


def _rank(r: RuleResult) -> str:
    return "all" if r.rank == ALL_RANKS else str(r.rank)


def _with_mode(results: list[RuleResult]) -> bool:
    """A mode column only when the rows come from more than one mode."""
    return len({r.mode for r in results}) > 1


def _rows(results: list[RuleResult]) -> list[tuple[str, ...]]:
    mode = _with_mode(results)
    return [
        (
            *((r.mode,) if mode else ()),
            r.label,
            _rank(r),
            _measured(r),
            _limit(r),
            r.verdict.upper() if not r.ok else r.verdict,
        )
        for r in results
    ]


HEADER = ("rule", "rank", "measured", "limit", "verdict")


def format_table(results: list[RuleResult]) -> str:
    """A plain-text table: [mode,] rule, rank, measured, limit, verdict (FAIL / N/A
    upper-case)."""
    mode = _with_mode(results)
    header = (("mode",) if mode else ()) + HEADER
    rows = [header, *_rows(results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    right = {i + mode for i in (1, 2, 3)}
    lines = []
    for row in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def format_markdown(outcome: CheckOutcome, *, cli: bool = True) -> str:
    """A GitHub-flavoured markdown section (for $GITHUB_STEP_SUMMARY or a PR comment)."""
    icon = {0: "✅", 1: "❌", 2: "⚠️"}[outcome.exit_code]
    mode = _with_mode(outcome.results)
    lines = [
        f"### {icon} domino-prof check: {outcome.summary}",
        "",
        f"Trace: `{outcome.path}`",
        "",
        ("| Mode " if mode else "") + "| Rule | Rank | Measured | Limit | Verdict |",
        ("| --- " if mode else "") + "| --- | ---: | ---: | ---: | --- |",
    ]
    for row in _rows(outcome.results):
        *lead, label, rank, measured, limit, verdict = row
        v = verdict if verdict in ("pass", "skip") else f"**{verdict}**"
        label = label.replace("|", "\\|")
        lines.append("".join(f"| {x} " for x in lead) + f"| {label} | {rank} | {measured} | "
                     f"{limit} | {v} |")  # fmt: skip
    for note in outcome.notes_for(cli=cli):
        lines += ["", f"> {note}"]
    return "\n".join(lines) + "\n"


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def error_annotation(message: str) -> str:
    """The ``::error`` workflow command for bad input."""
    return f"::error title=domino-prof check::{_escape_data(message)}"


def _title(r: RuleResult, with_mode: bool) -> str:
    return f"domino-prof check: {r.mode + ' ' if with_mode else ''}{r.label}"


def github_annotations(outcome: CheckOutcome, *, cli: bool = True) -> list[str]:
    """GitHub Actions workflow commands: ``::error`` per failed/n/a check,
    ``::warning`` per skipped check and note."""
    f = _escape_prop(outcome.path)
    mode = _with_mode(outcome.results)
    lines = []
    for r in outcome.results:
        kind = {"fail": "error", "n/a": "error", "skip": "warning"}.get(r.verdict)
        if kind:
            title = _escape_prop(_title(r, mode))
            lines.append(f"::{kind} file={f},title={title}::{_escape_data(r.message)}")
    for note in outcome.notes_for(cli=cli):
        lines.append(f"::warning title=domino-prof check::{_escape_data(note)}")
    return lines


def junit_xml(outcome: CheckOutcome | None, *, error: str | None = None) -> str:
    """JUnit XML: one testcase per rule, rank (and mode); fail -> <failure>, n/a ->
    <error>, skip -> <skipped>. With ``error`` (bad input), one errored testcase."""
    suites = ET.Element("testsuites", name="domino-prof")
    emulated = outcome.emulation if outcome is not None else None
    suite = ET.SubElement(suites, "testsuite", name="domino-prof check"
                          + (f" ({emulated})" if emulated else ""))  # fmt: skip
    if emulated:  # the gated figures come from emulated collectives
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="comm", value=emulated)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    if error is not None or outcome is None:
        case = ET.SubElement(suite, "testcase", classname="domino-prof.check", name="input")
        ET.SubElement(case, "error", message=error or "no result").text = error or ""
        counts.update(tests=1, errors=1)
    else:
        mode = _with_mode(outcome.results)
        for r in outcome.results:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"domino-prof.check.{r.rule.replace(' ', '-')}",
                name=f"{r.mode + ': ' if mode else ''}{r.label} rank {_rank(r)}",
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
