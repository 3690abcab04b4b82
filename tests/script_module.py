"""Load a script of the repo (benchmarks/, scripts/) as a module, by path: they are no
package, and a test reads their functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load(relpath: str, name: str | None = None):
    """The module at ``ROOT / relpath`` (e.g. "benchmarks/kernel_classes.py"), executed."""
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(name or f"_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
