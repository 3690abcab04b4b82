"""Who may import whom (STYLE.md): the reference model never reaches into the trace
engine, the analysis or the report (the run directory is assembled by
``domino_prof.runs``); nothing that analyses traces imports torch."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "domino_prof"


def imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` / ``from ... import`` names, at any depth (lazy
    imports inside functions included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _under(mods: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in mods if any(m == p or m.startswith(p + ".") for p in prefixes))


@pytest.mark.parametrize(
    "path", sorted((PKG / "reference_model").glob("*.py")), ids=lambda p: p.name
)
def test_reference_model_imports_no_analysis_trace_or_report(path):
    bad = ("domino_prof.analysis", "domino_prof.trace", "domino_prof.report")
    assert _under(imported_modules(path), bad) == []


def test_the_check_finds_a_lazy_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from domino_prof.analysis import analyze\n    import torch\n")
    mods = imported_modules(f)
    assert _under(mods, ("domino_prof.analysis",)) == [
        "domino_prof.analysis", "domino_prof.analysis.analyze"]  # fmt: skip
    assert _under(mods, ("torch",)) == ["torch"]


@pytest.mark.parametrize(
    "path",
    sorted(
        p for sub in ("trace", "analysis", "report", "commands") for p in (PKG / sub).glob("*.py")
    )
    + [PKG / "runs.py", PKG / "rundata.py", PKG / "cli.py", PKG / "io.py", PKG / "errors.py"]
    # the mode registry and the run configuration: read by report, check and the CLI
    + [PKG / "reference_model" / "modes.py", PKG / "reference_model" / "config.py"],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_analysing_traces_never_imports_torch(path):
    mods = imported_modules(path)
    if path.name == "run.py" and path.parent.name == "commands":
        return  # `domino-prof run` trains the model: torch, lazily, in its body
    assert _under(mods, ("torch",)) == []


@pytest.mark.parametrize(
    "path",
    sorted(p for sub in ("trace", "analysis", "report") for p in (PKG / sub).glob("*.py"))
    + [PKG / "engine.py", PKG / "rundata.py", PKG / "stats.py"],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_the_engine_and_report_never_import_the_layers_above(path):
    """trace -> analysis -> engine -> report sit below gate, runs (the orchestrator,
    which writes run directories and imports the report), commands and cli: what the
    report needs of a run.json is in rundata.py (issue 24, item 3; lazy imports count)."""
    above = ("domino_prof.runs", "domino_prof.gate", "domino_prof.commands", "domino_prof.cli")
    assert _under(imported_modules(path), above) == []
