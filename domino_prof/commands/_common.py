"""What every command shares: known errors as one stderr line + exit code, notes on
stderr, outputs written all or nothing."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer

from domino_prof.errors import ConfigError, DominoProfError, message, render_text
from domino_prof.io import atomic_write_all

F = TypeVar("F", bound=Callable)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print one clear line to stderr and return the Exit to raise."""
    print(f"domino-prof: error: {message}", file=sys.stderr)
    return typer.Exit(code)


def user_errors(fn: F) -> F:
    """Decorator for command bodies: DominoProfError -> one line + its exit code;
    Ctrl-C -> exit 130. Anything else is a bug and keeps its traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except DominoProfError as e:
            raise fail(message(e, cli=True), e.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None

    return wrapper  # type: ignore[return-value]


def print_notes(notes: list[str], *, prefix: str = "") -> None:
    """Notes for the reader, one ``note:`` line each on stderr (options as flags)."""
    for n in notes:
        print(f"{prefix}note: {render_text(n, cli=True)}", file=sys.stderr)


def write_outputs(
    files: list[tuple[Path, bytes | str]],
    *,
    append: list[tuple[Path, bytes | str]] | None = None,
    example: str = "out.html",
) -> None:
    """Write a command's output files all or nothing (``io.atomic_write_all``); a path
    that cannot be written is one ConfigError (exit 2) naming it and the fix."""
    def data(x: bytes | str) -> bytes:
        return x.encode("utf-8") if isinstance(x, str) else x

    for p, _ in [*files, *(append or [])]:
        if Path(p).is_dir():
            raise ConfigError(f"{p} is a directory; give a file name such as {Path(p) / example}")
    try:
        atomic_write_all([(p, data(x)) for p, x in files],
                         append=[(p, data(x)) for p, x in append or []])  # fmt: skip
    except OSError as e:
        where = e.filename or (files[0][0] if files else "output")
        written = "" if len(files) + len(append or []) < 2 else " (no output was written)"
        raise ConfigError(
            f"cannot write {where} ({e.strerror or e}){written}; choose a writable file path"
        ) from None


def one_output(given: Path | None, new: Path, what: str) -> Path:
    """One output file of a kind (``-o`` given twice for it: one ConfigError line)."""
    if given is not None and given != new:
        raise ConfigError(f"two {what} outputs ({given}, {new}); give one")
    return new


def same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False
