"""The `domino-prof` command line: a thin index of commands.

Each command family lives in ``domino_prof/commands/<name>.py`` and registers
itself here; heavy libraries are imported inside the command bodies.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="domino-prof",
    help="Exact TP comm/compute overlap from PyTorch profiler traces, "
    "and a reference Domino tensor-parallel Llama.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Modules are registered if present, so the CLI grows as features land.
for _name in ("run", "analyze", "report", "check"):
    try:
        _mod = importlib.import_module(f"domino_prof.commands.{_name}")
    except ModuleNotFoundError as _e:  # pragma: no cover - only while developing
        if _e.name != f"domino_prof.commands.{_name}":
            raise
        continue
    _mod.register(app)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
