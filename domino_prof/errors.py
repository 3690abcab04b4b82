"""One base error for everything a user can get wrong.

The CLI turns any :class:`DominoProfError` into one stderr line and a non-zero
exit (2 for bad input). Messages say what was wrong (with the value or file)
and what to do about it. ``assert`` is for internal invariants only.
"""

from __future__ import annotations


class DominoProfError(Exception):
    """Base class: a user-facing problem with a one-line message."""

    exit_code = 2


class TraceError(DominoProfError):
    """A trace file or directory cannot be used (unreadable, malformed, ambiguous)."""

    def __init__(self, path: object, problem: str, fix: str = "") -> None:
        self.path = str(path)
        self.problem = problem
        self.fix = fix
        msg = f"{self.path}: {problem}"
        if fix:
            msg += f"; {fix}"
        super().__init__(msg)


class ConfigError(DominoProfError):
    """A bad option value or combination of options."""


class RunError(DominoProfError):
    """A reference-model run failed (a rank crashed, hung, or ran out of memory)."""

    exit_code = 1


class CheckFailed(DominoProfError):
    """A `domino-prof check` rule did not hold (exit 1, not a usage error)."""

    exit_code = 1
