"""Who may import whom (STYLE.md, docs/ARCHITECTURE.md "Layers"): :data:`LAYERS`, bottom
up, is the one list; a module imports only modules of layers below its own (and its own
unit), never a peer of its layer nor anything above, and no import cycle anywhere, inside
a package included. Imports inside functions count (they hid the cycles before issue 24),
as do ``TYPE_CHECKING`` ones. The reference model never reaches into the trace engine,
the analysis or the report (the run directory is assembled by ``domino_prof.runs``);
nothing that analyses traces imports torch."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "domino_prof"

# Bottom up. Each layer holds units (a module or a package, by its dotted name; a module
# inside a package may be placed on its own, higher: the longest name that matches wins).
# A unit imports units of lower layers only. docs/ARCHITECTURE.md draws this list.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("domino_prof", "domino_prof.errors"),  # the package root (__version__), the errors
    ("domino_prof.io", "domino_prof.stats"),  # atomic writes; the statistics of timed steps
    # comm profiles, timing model, the traces' emulation mark: read by trace and the model
    ("domino_prof.emulation",),
    ("domino_prof.trace", "domino_prof.reference_model"),  # side by side
    # pure analysis; what a run.json says (rundata) and how a PATH names a run (rundir)
    ("domino_prof.analysis", "domino_prof.rundata", "domino_prof.rundir"),
    # per-rank map + reduce (every analysis goes through it); calibrate's fit reads traces
    ("domino_prof.engine", "domino_prof.emulation.fit"),
    ("domino_prof.report", "domino_prof.export"),  # HTML report; Perfetto export
    ("domino_prof.gate",),  # the overlap gate (check, baseline, assert_overlap)
    ("domino_prof.runs",),  # the orchestrator: writes and assembles run directories
    ("domino_prof.commands", "domino_prof.pytest_plugin"),  # the front doors
    ("domino_prof.cli",),
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The domino_prof module an imported name lives in (``a.b.Name`` -> ``a.b``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def module_imports(name: str) -> set[str]:
    """The domino_prof modules that module ``name`` imports, anywhere in its file."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            found = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out.update(m for m in map(_resolve, found) if m is not None and m != name)
    return out


def unit_of(module: str) -> tuple[int, str]:
    """(layer, unit) of a module: the longest unit name of :data:`LAYERS` that is the
    module or a package above it (the root package only for itself)."""
    best: tuple[int, str] | None = None
    for i, layer in enumerate(LAYERS):
        for unit in layer:
            inside = module == unit or (unit != "domino_prof" and module.startswith(unit + "."))
            if inside and (best is None or len(unit) > len(best[1])):
                best = (i, unit)
    assert best is not None, f"{module} is in no layer: place it in LAYERS (tests/test_layering.py)"
    return best


def test_every_module_has_a_layer():
    """(The model never reaching into trace, analysis or report, and the engine and the
    report never importing gate, runs, commands or cli, are cases of LAYERS now.)"""
    missing = [m for m in MODULES if m != "domino_prof" and unit_of(m)[1] == "domino_prof"]
    assert missing == []
    assert len({u for layer in LAYERS for u in layer}) == sum(map(len, LAYERS))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module):
    layer, unit = unit_of(module)
    bad = []
    for dep in sorted(module_imports(module)):
        dep_layer, dep_unit = unit_of(dep)
        if dep_unit != unit and dep_layer >= layer:
            where = "a peer" if dep_layer == layer else "above"
            bad.append(f"{dep} ({dep_unit}: {where})")
    assert bad == [], f"{module} ({unit}, layer {layer}) imports {bad}"


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_anywhere():
    """Inside a package too (analysis: classify -> overlap -> rankwise -> overheads ->
    rankwise was one, through imports inside functions)."""
    assert import_cycles({m: module_imports(m) for m in MODULES}) == []


def test_the_checks_find_a_cycle_an_upward_and_a_lazy_import(tmp_path, monkeypatch):
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from domino_prof.gate import run_check\n"
                 "    from . import page\n")  # fmt: skip
    monkeypatch.setitem(MODULES, "domino_prof.report.m", f)
    assert module_imports("domino_prof.report.m") == {"domino_prof.gate", "domino_prof.report.page"}
    with pytest.raises(AssertionError, match=r"domino_prof.gate \(domino_prof.gate: above\)"):
        test_imports_go_down_the_layers("domino_prof.report.m")
    assert unit_of("domino_prof.emulation.fit") == (5, "domino_prof.emulation.fit")
    assert unit_of("domino_prof.emulation.marker") == (2, "domino_prof.emulation")


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


def test_the_check_finds_a_lazy_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from domino_prof.analysis import AnalysisConfig\n    import torch\n")
    mods = imported_modules(f)
    assert _under(mods, ("domino_prof.analysis",)) == [
        "domino_prof.analysis", "domino_prof.analysis.AnalysisConfig"]  # fmt: skip
    assert _under(mods, ("torch",)) == ["torch"]


@pytest.mark.parametrize(
    "path",
    sorted(
        p
        for sub in ("trace", "analysis", "report", "commands", "export")
        for p in (PKG / sub).glob("*.py")
    )
    + [PKG / f"{m}.py" for m in ("runs", "rundata", "rundir", "engine", "gate", "stats")]
    + [PKG / "cli.py", PKG / "io.py", PKG / "errors.py", PKG / "pytest_plugin.py"]
    # the mode registry and the run configuration: read by report, check and the CLI
    + [PKG / "reference_model" / "modes.py", PKG / "reference_model" / "config.py"],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_analysing_traces_never_imports_torch(path):
    mods = imported_modules(path)
    if path.name == "run.py" and path.parent.name == "commands":
        return  # `domino-prof run` trains the model: torch, lazily, in its body
    assert _under(mods, ("torch",)) == []


def test_architecture_draws_the_same_layers():
    """docs/ARCHITECTURE.md section 0: one line per layer, top first, its units in the
    first 47 columns (the root package as ``domino_prof (root)``)."""
    text = (PKG.parent / "docs" / "ARCHITECTURE.md").read_text()
    block = text.split("## 0. Layers", 1)[1].split("```", 2)[1]
    drawn = {}
    for line in block.strip().splitlines():
        number, *units = line[:47].replace("(root)", "").split()
        drawn[int(number)] = tuple(
            "domino_prof" if u == "domino_prof" else f"domino_prof.{u}" for u in units
        )
    assert [drawn[i] for i in sorted(drawn)] == list(LAYERS)
