"""What every command shares: turning known errors into one stderr line + exit code."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TypeVar

import typer

from domino_prof.errors import DominoProfError

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
            raise fail(str(e), e.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None

    return wrapper  # type: ignore[return-value]
