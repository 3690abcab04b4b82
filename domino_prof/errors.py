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


class NoActivityError(TraceError):
    """Traces that load but hold nothing to analyse: no device work, no gloo collective."""


class ConfigError(DominoProfError):
    """A bad option value or combination of options."""


_MARK = "\x00"


def opt(name: str) -> str:
    """An option's name inside an :class:`OptionError` message (its Python keyword name,
    e.g. ``min_hidden``): rendered as that name by ``str()`` and as the command-line
    flag (``--min-hidden``) by the CLI."""
    return f"{_MARK}{name}{_MARK}"


def cli_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def render_text(text: str, *, cli: bool = False) -> str:
    """``text`` with each :func:`opt` name rendered as a flag (``cli``) or as itself."""
    parts = str(text).split(_MARK)
    name_of = cli_flag if cli else str
    return "".join(name_of(p) if i % 2 else p for i, p in enumerate(parts))


class OptionError(ConfigError):
    """A bad option value, in the library's own words: the message names options with
    :func:`opt`, so a Python caller (``assert_overlap(min_hidden=120)``) reads
    ``min_hidden 120.0 is not a percentage`` and the CLI ``--min-hidden 120.0 ...``."""

    def __init__(self, message: str) -> None:
        self.template = message
        super().__init__(render_text(message))

    def render(self, *, cli: bool = False) -> str:
        return render_text(self.template, cli=cli)

    def __str__(self) -> str:
        return self.render()


def message(e: BaseException, *, cli: bool = False) -> str:
    """The one-line text of a user error; options as flags when ``cli``."""
    if isinstance(e, OptionError):
        return e.render(cli=cli)
    return str(e)


class RunError(DominoProfError):
    """A reference-model run failed (a rank crashed, hung, or ran out of memory)."""

    exit_code = 1


class CheckFailed(DominoProfError):
    """A `domino-prof check` rule did not hold (exit 1, not a usage error)."""

    exit_code = 1
