"""A PATH argument and the run directory it may name, read side: :func:`resolve` says
which of the forms PATH is (a trace file or a directory of rank traces, a run directory
or its run.json, ``RUN_DIR/<mode>``), :meth:`Target.select` picks the modes a command
works on, :func:`read_run` reads and validates run.json (refusing a run in progress:
:func:`lock_holder`). Low in the layers (below the engine, the report and the gate),
so every reader resolves PATH without importing ``domino_prof.runs``, the orchestrator
that writes run directories (docs/ARCHITECTURE.md "Layers"). No torch, no pandas.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from domino_prof.errors import OptionError, TraceError, opt

RUN_SCHEMA = "domino-prof/run"
RUN_VERSION = 1
RUN_JSON = "run.json"
LOCK_FILE = ".domino-prof-run.lock"  # held (flock) by the `run` writing the directory
# run.json "status": written "incomplete" before any rank starts, "complete" by assemble,
# "partial" by --reanalyze of an interrupted run (some modes, or no timed steps); a
# run.json without one (written before issue #22) is complete
STATUS_INCOMPLETE, STATUS_COMPLETE, STATUS_PARTIAL = "incomplete", "complete", "partial"
PRIMARY_MODE = "domino"  # the schedule the reference model exists to show


# --------------------------------------------------------------------------- model
@dataclass(frozen=True)
class Run:
    """A run directory and its run.json."""

    path: Path
    doc: dict

    @property
    def modes(self) -> list[str]:
        return list(self.doc["modes"])

    def entry(self, mode: str) -> dict:
        e = self.doc["modes"].get(mode)
        return e if isinstance(e, dict) else {}

    def trace_dir(self, mode: str) -> Path:
        return self.path / str(self.entry(mode).get("trace_dir", mode))

    def overlaps(self, mode: str) -> bool:
        """Whether the mode overlaps comm with compute by design (micro-batched, async
        collectives: domino, domino-sp). tp and sp wait for every collective at once
        (0 % hidden is right for them) and nocomm, domino-nocomm and domino-sp-nocomm have
        no comm."""
        flag = self.entry(mode).get("overlap")
        if isinstance(flag, bool):
            return flag
        from domino_prof.reference_model import modes  # (imported here: start-up)

        return bool(getattr(modes.MODES.get(mode), "overlaps", False))

    @property
    def timing(self) -> str:
        """How the run's timed steps were timed (run.json ``config.timing``, absent before
        the option: ``step``, each alone; ``stream``, back to back)."""
        return str((self.doc.get("config") or {}).get("timing") or "step")

    def comparison(self, mode: str) -> dict | None:
        """The mode's row of the comparison table (timed step, speedups)."""
        rows = self.doc.get("comparison") or []
        return next((r for r in rows if isinstance(r, dict) and r.get("mode") == mode), None)


def read_run(directory: str | os.PathLike) -> Run:
    """The run directory's run.json, validated (TraceError, exit 2, when unusable)."""
    d = Path(directory)
    f = d / RUN_JSON
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(f, f"cannot read run.json ({e})", "re-run `domino-prof run`") from None
    if (
        not isinstance(doc, dict)
        or doc.get("schema") != RUN_SCHEMA
        or not isinstance(doc.get("modes"), dict)
    ):
        raise TraceError(
            f,
            f"not a domino-prof run.json (expected schema {RUN_SCHEMA!r} with a 'modes' table)",
            "point at a trace file or directory instead",
        )
    if doc.get("status") == STATUS_INCOMPLETE:
        holder = lock_holder(d)
        if holder is not None:
            raise TraceError(f, f"a run is in progress here ({who(holder)})",
                             "wait for it to finish")  # fmt: skip
        stop = doc.get("interrupted") if isinstance(doc.get("interrupted"), dict) else None
        why = (f"interrupted by {stop.get('by')} at {stop.get('at')}" if stop
               else "interrupted or a rank failed")  # fmt: skip
        raise TraceError(
            f,
            f"the run did not finish (status incomplete: {why})",
            f"`domino-prof run --reanalyze {d}` analyses the modes whose traces are complete",
        )
    if not doc["modes"]:
        raise TraceError(f, "lists no modes", "re-run `domino-prof run`")
    return Run(d, doc)


@dataclass(frozen=True)
class Target:
    """What a PATH argument names.

    ``modes``: mode -> trace path, in the run's order: every mode of a run directory,
    the one mode of ``RUN_DIR/<mode>``, or ``{"": PATH}`` for traces outside a run."""

    path: Path
    run: Run | None
    modes: dict[str, Path]

    @property
    def is_run_dir(self) -> bool:
        return self.run is not None and self.run.path == self.path

    def label(self, mode: str) -> str:
        """A short name for one selected analysis: the mode, else the file or dir name."""
        if mode:
            return mode
        return self.path.name.removesuffix(".gz").removesuffix(".json") or str(self.path)

    def select(
        self, mode: str | None = None, *, default: str = "one", verb: str = "using"
    ) -> tuple[list[str], list[str]]:
        """The modes to work on and notes for the reader (``verb`` starts them).

        ``mode``: the user's ``--mode`` (one of the run's modes; it applies only to a
        run directory or ``RUN_DIR/<mode>``). Without it, ``default`` decides: ``"all"``
        every mode PATH covers; ``"overlap"`` the modes that overlap comm by design
        (:meth:`Run.overlaps`); ``"one"`` the only mode, else ``domino`` (a note names
        the others), else an error asking for ``--mode``. Plain traces are the one
        unnamed mode ``""``."""
        names = list(self.modes)
        if self.run is None:
            if mode is not None:
                raise OptionError(
                    f"{opt('mode')} {mode!r} applies to a run directory (one with run.json), "
                    f"and {self.path} is not one; drop {opt('mode')} or point at the run "
                    "directory"
                )
            return names, []
        where = self.run.path / RUN_JSON
        if mode is not None:
            if mode not in self.run.modes:
                raise OptionError(
                    f"{opt('mode')} {mode!r} is not in {where} (modes: {', '.join(self.run.modes)})"
                )
            if mode not in self.modes:  # PATH is another mode's directory
                raise OptionError(
                    f"{opt('mode')} {mode!r} applies to a run directory, and {self.path} "
                    f"holds the traces of mode {names[0]!r}; point at {self.run.path} or "
                    f"drop {opt('mode')}"
                )
            return [mode], []
        if len(names) == 1 or default == "all":
            return names, []
        if default == "overlap":
            chosen = [m for m in names if self.run.overlaps(m)]
            if not chosen:
                raise OptionError(
                    f"{where} has modes {', '.join(names)}, none of which overlaps comm by "
                    f"design: pick one with {opt('mode')} NAME"
                )
            rest = [m for m in names if m not in chosen]
            s = "s" if len(chosen) > 1 else ""
            which = ", ".join(f"'{m}'" for m in chosen)
            from domino_prof.reference_model import modes  # (imported here: start-up)

            why = []  # of the modes left out, those of the registry, in two kinds
            kinds = {m: modes.MODES.get(m) for m in rest}
            sync = [m for m, k in kinds.items() if k and not k.micro_batched and not k.skips_comm]
            none = [m for m, k in kinds.items() if k and k.skips_comm]
            if sync:
                why.append(f"{_and(sync)} wait{'s' if len(sync) == 1 else ''} for every "
                           "collective")  # fmt: skip
            if none:
                why.append(f"{_and(none)} {'has' if len(none) == 1 else 'have'} none")
            note = (
                f"{verb} mode{s} {which} of {where}: the mode{s} that overlap comm by "
                f"design (not {', '.join(rest)}"
                + (": " + ", ".join(why) if why else "")
                + f"; {opt('mode')} NAME picks one)"
            )
            return chosen, [note]
        if PRIMARY_MODE in names:
            others = ", ".join(m for m in names if m != PRIMARY_MODE)
            note = (
                f"{verb} mode '{PRIMARY_MODE}' of {where} (also has: {others}; use {opt('mode')})"
            )
            return [PRIMARY_MODE], [note]
        raise OptionError(f"{where} has modes {', '.join(names)}: pick one with {opt('mode')} NAME")


def resolve(path: str | os.PathLike) -> Target:
    """PATH -> :class:`Target`. TraceError when it does not exist or its run.json is bad."""
    p = Path(path)
    if not p.exists():
        raise TraceError(p, "no such file or directory", "check the path")
    if p.is_file() and p.name == RUN_JSON:
        p = p.parent
    if p.is_dir() and (p / RUN_JSON).is_file():
        run = read_run(p)
        return Target(p, run, {m: run.trace_dir(m) for m in run.modes})
    parent = p.parent if p.is_dir() else None
    if parent is not None and (parent / RUN_JSON).is_file() and not incomplete(parent):
        run = read_run(parent)
        for m in run.modes:
            if same_path(run.trace_dir(m), p):
                return Target(p, run, {m: p})
    return Target(p, None, {"": p})


def incomplete(d: Path) -> bool:
    """Whether d/run.json says the run did not finish (its mode directories then read
    as plain traces: what of them is there is complete, each trace written atomically)."""
    try:
        return json.loads((d / RUN_JSON).read_text(encoding="utf-8")).get("status") == (
            STATUS_INCOMPLETE
        )
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return False


def same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def trace_missing(trace_path: Path) -> TraceError:
    return TraceError(
        trace_path,
        "trace directory named in run.json is missing",
        "re-run `domino-prof run` or point at the traces",
    )


def who(holder: dict) -> str:
    parts = [f"pid {holder.get('pid')}"]
    if holder.get("started"):
        parts.append(f"started {holder['started']}")
    if holder.get("command"):
        parts.append(f"`{holder['command']}`")
    return ", ".join(parts)


def read_holder(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8") or "{}")
        return doc if isinstance(doc, dict) else {}
    except (OSError, UnicodeDecodeError, ValueError):
        return {}


def lock_holder(out: str | os.PathLike) -> dict | None:
    """Who holds the run directory's lock (pid, started, command), None when nobody."""
    import fcntl

    path = Path(out) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return read_holder(path) or {"pid": "?"}
    except OSError:
        return None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _and(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
