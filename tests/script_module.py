"""Load a script of the repo (benchmarks/, scripts/) as a module, by path: they are no
package, and a test reads their functions. Find a console script pip installed."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load(relpath: str, name: str | None = None):
    """The module at ``ROOT / relpath`` (e.g. "benchmarks/kernel_classes.py"), executed."""
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(name or f"_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def installed(name: str) -> str | None:
    """The console script ``name`` (e.g. "domino-prof") installed for the Python running
    the tests: beside its interpreter first (a venv's bin/ is not on PATH when its python
    is run by path, as `PYTHON=venv/bin/python bash scripts/test.sh` does), else on PATH,
    else None."""
    beside = Path(sys.executable).with_name(name)
    if beside.is_file():
        return str(beside)
    return shutil.which(name)
