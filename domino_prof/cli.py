"""The `domino-prof` command line: a thin index of commands.

Each command family lives in ``domino_prof/commands/<name>.py`` and registers
itself here; heavy libraries are imported inside the command bodies. Start-up: when
the process was started as ``domino-prof <command> ...`` only that command's module is
imported and registered (the others cost ~0.1 s of imports a run: ``check`` pulls in the
gate, ``report`` and ``run`` theirs); any other argv (``--help``, ``--version``, a typo,
``CliRunner`` in the tests) registers every command. Exit: see :func:`_exit`.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

from domino_prof import __version__

COMMANDS = ("run", "analyze", "report", "check", "calibrate", "tune")  # domino_prof.commands.*

# typer >= 0.2x vendors click as typer._click (and need not install click at all): it
# raises typer._click's exception classes, and click itself is not imported (7 ms of a
# start-up). Older typer raises click's own.
try:
    from typer._click import exceptions as _tx
except ImportError:  # pragma: no cover - older typer
    _tx = None
if _tx is None:  # pragma: no cover - older typer
    from click import exceptions as _cx
else:
    _cx = None


def _light_coercion() -> None:
    """Start-up: typer >= 0.2x coerces every parameter, defaults included, through a
    pydantic TypeAdapter, and importing pydantic and building the adapters of one
    command costs about 0.13 s of CPU (a third of what a 2-event ``analyze`` spends
    outside pandas). The plain cases (a missing value; a str; an int written as
    digits; a Path with none of typer's path checks; lists of those) are coerced here
    to exactly what typer's adapters return (tests/test_cli_errors.py compares them);
    everything else (a bad value, a bound, an Enum, a parser) goes to typer's own
    coercion, so its errors read as before. A typer without these internals is left
    as it is."""
    try:
        from typer._param_types import coerce_cli_path
        from typer.core import _TyperParameter
    except ImportError:  # pragma: no cover - older typer (no pydantic)
        return
    typers = _TyperParameter.__dict__.get("get_runtime_param")
    if typers is None or getattr(typers, "_light", False):
        return

    class _Light:
        __slots__ = ("desc", "param")

        def __init__(self, param) -> None:
            self.param, self.desc = param, param.type_descriptor

        def coerce(self, value, param, ctx):
            multi = param.multiple or param.nargs == -1
            if value is None:
                return () if multi else None
            if multi and isinstance(value, (list, tuple)):
                elem = _elem(self.desc.annotation)
                if elem is not None:
                    out = [_plain(elem, v, self.desc.parameter_info, param, ctx) for v in value]
                    if all(o is not _NO for o in out):
                        return out
            elif not multi:
                got = _plain(self.desc.annotation, value, self.desc.parameter_info, param, ctx)
                if got is not _NO:
                    return got
            return typers(self.param).coerce(value, param=param, ctx=ctx)

    def _elem(annotation):
        from typing import get_args, get_origin

        if get_origin(annotation) is list and len(get_args(annotation)) == 1:
            return get_args(annotation)[0]
        return None

    def _plain(annotation, value, info, param, ctx):
        import re
        from pathlib import Path

        if info.parser is not None:
            return _NO
        if annotation is str and isinstance(value, str):
            return value
        if annotation is int and info.min is None and info.max is None and not info.clamp:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,18}", value):
                return int(value)
            return _NO
        if (annotation is Path and info.path_type is None and isinstance(value, str) and value
                and not (info.exists or info.resolve_path or info.allow_dash)):  # fmt: skip
            return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
        return _NO

    def get_runtime_param(self):
        if self._runtime_param is None and _simple(self.type_descriptor):
            return _Light(self)
        return typers(self)

    def _simple(desc) -> bool:
        from pathlib import Path

        ann = _elem(desc.annotation) or desc.annotation
        return desc.file_annotation is None and ann in (str, int, bool, Path)

    get_runtime_param._light = True  # type: ignore[attr-defined]
    get_runtime_param._typers = typers  # type: ignore[attr-defined]
    _TyperParameter.get_runtime_param = get_runtime_param


_NO = object()  # "not a plain case": typer's own coercion decides
_light_coercion()


def _both(name: str) -> tuple[type, ...]:
    return tuple({getattr(m, name) for m in (_tx, _cx) if m is not None and hasattr(m, name)})


_NO_ARGS_HELP = _both("NoArgsIsHelpError")
_CLICK_ERROR = _both("ClickException")
_USAGE_ERROR = _both("UsageError")
_ABORT = (typer.Abort, *_both("Abort"))


def _usage_line(e: Exception) -> str:
    """One stderr line for a usage error: the message plus where to look."""
    msg = " ".join(e.format_message().split()) or "bad usage"
    ctx = getattr(e, "ctx", None)
    where = ctx.command_path if ctx is not None else "domino-prof"
    return f"domino-prof: error: {msg} (see {where} --help)"


class _OneLineErrors(TyperGroup):
    """Usage errors (bad option value, unknown option, missing argument) print one line
    on stderr and exit 2, for every command; ``--help`` and normal exits are untouched.

    Routed through ``main`` so that the console script (``domino_prof.cli:app``) and
    ``typer.testing.CliRunner().invoke(app, ...)`` behave the same.
    """

    def invoke(self, ctx) -> Any:
        super().invoke(ctx)  # a command's return value is not an exit code
        return None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):  # fmt: skip
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except _NO_ARGS_HELP as e:  # bare `domino-prof`: the help, as before
            print(e.format_message())
            _exit(2)
        except _CLICK_ERROR as e:  # UsageError, BadParameter, NoSuchOption, ...
            print(_usage_line(e), file=sys.stderr)
            _exit(2 if isinstance(e, _USAGE_ERROR) else e.exit_code)
        except _ABORT:
            print("domino-prof: error: aborted", file=sys.stderr)
            _exit(1)
        _exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)


def _exit(code: int) -> NoReturn:
    """``sys.exit(code)``; but when this process is the CLI (not a test's ``CliRunner``),
    only its main thread is left and torch was never imported: the ``atexit`` handlers
    (multiprocessing's, logging's, ``weakref.finalize``'s, Dask's), stdout and stderr
    flushed, then ``os._exit(code)``. That skips the interpreter's teardown of every
    module and object, which with pandas loaded took ~0.13 s on the project's 2-core
    box: a quarter of a 2-event ``analyze`` (issue 23's 0.5 s start-up). Every file the
    commands write is closed (and renamed into place) before they return."""
    import threading

    if not (_running_the_cli(sys.argv[0]) and threading.active_count() == 1
            and "torch" not in sys.modules):  # fmt: skip
        sys.exit(code)
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a closed pipe (`| head`), no stream
            pass
    os._exit(code)


app = typer.Typer(
    cls=_OneLineErrors,
    name="domino-prof",
    help="Exact TP comm/compute overlap from PyTorch profiler traces, "
    "and a reference Domino tensor-parallel Llama.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain click help: option names are never cut ("--comm-pattern-on…") at 80 columns
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        print(f"domino-prof {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print the version."
    ),
) -> None:
    """Exact TP comm/compute overlap from PyTorch profiler traces, and a reference Domino
    tensor-parallel Llama. Every number is defined in docs/METRICS.md."""


def _commands_to_register(argv: list[str]) -> tuple[str, ...]:
    """The command modules to import: the one named first on the command line (when
    this process runs the CLI), else all."""
    if len(argv) > 1 and argv[1] in COMMANDS and _running_the_cli(argv[0]):
        return (argv[1],)
    return COMMANDS


def _running_the_cli(prog: str) -> bool:
    from pathlib import Path

    name = Path(prog).name
    return name in ("domino-prof", "domino-prof.exe") or prog == __file__ or (
        name == "cli.py" and Path(prog).resolve() == Path(__file__).resolve()
    )


for _name in _commands_to_register(sys.argv):
    importlib.import_module(f"domino_prof.commands.{_name}").register(app)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
