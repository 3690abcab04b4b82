"""The run directory, one model for every command (``analyze``, ``report``, ``compare``,
``check``, ``baseline``, ``run``).

``domino-prof run --out DIR`` writes (docs/ARCHITECTURE.md section 4)::

    DIR/run.json                          # config, versions, devices, per-mode results
    DIR/<mode>/rank{r}.pt.trace.json.gz   # one per rank
    DIR/<mode>/analysis.json              # that mode's Analysis.to_json()
    DIR/report.html

A PATH argument is one of: a trace file or a directory of rank traces (no run around
it), a run directory (or its run.json), or ``RUN_DIR/<mode>`` (one mode, with the run's
context). ``rundir.resolve`` says which (re-exported here); ``Target.select`` picks the
modes a command works on (``--mode``, or the command's default: every mode for
``report``, the modes that overlap comm by design for ``check``, one mode for the
others). That read side lives in ``domino_prof.rundir``, low in the layers, so the gate
and the commands resolve PATH without importing this module (the orchestrator).

The directory's life (section "lifecycle" below): ``run`` holds it with a lock file
(``.domino-prof-run.lock``, flock'd; pid, start and command inside), writes run.json
with ``"status": "incomplete"`` before any rank starts, ``"complete"`` when assembled;
temp files of interrupted writes are removed however it ends; ``run --reanalyze`` of
an incomplete run finishes it from what is complete (``"partial"`` when modes or the
timed steps are missing). Readers refuse an incomplete run directory (naming the run
in progress, or the way on); its mode directories read as plain traces.

This module writes run.json and assembles a run directory from what the
ranks left (:func:`assemble`, :func:`refresh`); the trace engine, the analysis and
the report are imported only there, so the launcher in ``reference_model/`` (which
only starts and watches processes) never needs them. No torch import.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from domino_prof import engine
from domino_prof.errors import ConfigError, DominoProfError, RunError, TraceError
from domino_prof.io import atomic_write_bytes, atomic_write_json
from domino_prof.reference_model import modes as mode_registry
from domino_prof.reference_model.config import (
    RunConfig,
    comm_info,
    config_notes,
    lanes_info,
    side_stream_info,
)

# run.json's data (rundata.py), re-exported: runs' own readers and older callers
from domino_prof.rundata import (  # noqa: F401
    BASE_MODE,
    COMPARISON_COLUMNS,
    VERDICT_PAIRS,
    block_medians,
    comm_label,
    comparison_rows,
    comparison_table,
    mode_ratio,
    step_estimate,
    verdict_text,
    verdicts,
)

# the read side of a run directory (rundir.py), re-exported: runs' own users and older callers
from domino_prof.rundir import (  # noqa: F401
    LOCK_FILE,
    PRIMARY_MODE,
    RUN_JSON,
    RUN_SCHEMA,
    RUN_VERSION,
    STATUS_COMPLETE,
    STATUS_INCOMPLETE,
    STATUS_PARTIAL,
    Run,
    Target,
    incomplete,
    lock_holder,
    read_holder,
    read_run,
    resolve,
    same_path,
    trace_missing,
    who,
)


def write_run(directory: str | os.PathLike, doc: dict) -> Path:
    """run.json, atomically (written last: a directory with run.json is complete)."""
    return atomic_write_json(Path(directory) / RUN_JSON, doc)


def _overlaps(mode: str) -> bool:
    """run.json's ``overlap``: the mode overlaps comm with compute by design (micro-batched
    and communicating: domino, domino-sp; not domino-nocomm, which skips its comm)."""
    m = mode_registry.MODES.get(mode)
    return bool(m is not None and m.overlaps)


def _numerics(mode: str, r: dict) -> None:
    """A mode that skips every collective computes meaningless losses: run.json says so
    for each such mode (the ranks' word, ``train._numerics``, names nocomm only)."""
    m = mode_registry.MODES.get(mode)
    if m is not None and m.skips_comm and r.get("numerics", "exact") == "exact":
        r["numerics"] = "meaningless (collectives skipped)"


# --------------------------------------------------------------------------- assembly
def assemble(cfg: RunConfig, out: Path, *, analyze: bool = True) -> dict:
    """Write run.json (and per-mode analysis.json / report.html when the trace engine
    and plotly are importable) from what rank 0 left in ``ranks_result.json``."""
    res_path = out / "ranks_result.json"
    if not res_path.exists():
        raise RunError(f"{out}: the ranks finished without writing results; see {out}/logs")
    res = json.loads(res_path.read_text())
    modes = res["results"]
    for mode, r in modes.items():
        r["overlap"] = _overlaps(mode)
        _numerics(mode, r)
    run = {
        "schema": RUN_SCHEMA,
        "version": RUN_VERSION,
        "config": cfg.to_dict(),
        "versions": res["versions"],
        "devices": res["devices"],
        "backend": res["backend"],
        "comm": _comm_block(cfg),  # kind, profile, label: what every number here stands on
        "attention": res.get("attention"),  # the kernel the schedules used (run --attention)
        "rope": res.get("rope"),  # the rotation's kernel: triton (CUDA) or aten (units.set_rope)
        "norm": res.get("norm"),  # the residual add and norm's: aten or triton (units.set_norm)
        "cpu_count": _cores(),  # the cores the ranks shared (the report's CPU-threads section)
        "modes": modes,
        "notes": config_notes(cfg),
        "status": STATUS_COMPLETE,
    }
    if (lanes := lanes_info(cfg)) is not None:  # --mb-streams 2: its environment knobs
        run["lanes"] = lanes
    if (side := side_stream_info(cfg)) is not None:  # DOMINO_PROF_SIDE_PRIORITY=high
        run["side_stream"] = side
    _analyse_and_write(out, run, analyze=analyze)
    res_path.unlink()
    return run


def _comm_block(cfg: RunConfig) -> dict:
    """run.json's ``comm``: {kind: nccl | gloo | emulated, profile, profile_file, label}
    (``config.comm_info``); an emulated run's ``label`` is the one wording every number
    of it carries, ``emulated comm (profile NAME)``."""
    return comm_info(cfg)


def refresh(out: Path) -> dict:
    """Re-analyse an existing run directory in place (e.g. one copied back from a GPU
    node without the analysis dependencies): analysis.json per mode, run.json's
    hidden % and comparison table, and report.html."""
    if not (out / RUN_JSON).is_file():
        raise ConfigError(
            f"{out}: no run.json here; point at a directory written by `domino-prof run`"
        )
    with claim(out, what="--reanalyze"):
        if incomplete(out):
            return _finish(out)
        return _refresh(out)


def _refresh(out: Path) -> dict:
    run = read_run(out).doc
    # drop the previous analysis's notes (also the per-mode "<mode>: traces not analysed")
    run["notes"] = [
        n for n in run.get("notes", [])
        if "traces not analysed" not in n and not n.startswith("no report")
    ]  # fmt: skip
    _analyse_and_write(out, run, analyze=True)
    return run


def _analyse_and_write(out: Path, run: dict, *, analyze: bool) -> None:
    """analysis.json per mode (if ``analyze``), the comparison table, report.html and
    run.json — run.json last, so a run directory with run.json is complete."""
    analyses: dict[str, Any] = {}
    failed: dict[str, str] = {}
    if analyze:
        analyses, failed = _analyze_modes(out, run)
    # modes without timed steps (an interrupted run finished by --reanalyze) have no row
    timed = {m: r for m, r in run["modes"].items() if r.get("step_ms") is not None}
    run["comparison"] = comparison_rows(timed)
    run["verdict"] = verdicts(timed)
    if analyses:  # what keeps domino (limits) and domino-sp (limits_sp) from nocomm
        from domino_prof.analysis.limits import limits_by_mode

        lims = limits_by_mode(run, analyses)  # a key absent without the mode and nocomm
        for key in mode_registry.RUN_KEYS.values():
            if key in lims:
                run[key] = lims[key]
            else:
                run.pop(key, None)
    _write_report(out, run, analyses, failed)
    _write_pftraces(out, run, analyses)
    write_run(out, run)


def _cores() -> int | None:
    """The cores this process may run on (its affinity, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def _skips_comm(mode: str) -> bool:
    """Whether ``mode`` skips every collective by design (nocomm; its comm is "skip")."""
    from domino_prof.reference_model import modes

    m = modes.MODES.get(mode)
    return m is not None and m.comm == "skip"


def _write_pftraces(out: Path, run: dict, analyses: dict) -> None:
    """RUN_DIR/<mode>/trace.pftrace per analysed mode, when the perfetto extra is
    installed (``pip install 'domino-prof[perfetto]'``); else one note says how."""
    if not analyses:
        return
    from domino_prof.export import perfetto

    if not perfetto.available():
        run["notes"].append(
            "no Perfetto traces: pip install 'perfetto>=0.59' (the perfetto extra), then "
            f"`domino-prof run --reanalyze {out}` writes <mode>/trace.pftrace"
        )
        return
    dirs = {m: out / run["modes"][m]["trace_dir"] for m in analyses}
    try:
        perfetto.write_run_exports(out, analyses, dirs)
    except DominoProfError as e:
        run["notes"].append(f"no Perfetto traces: {e}")


def _write_report(out: Path, run: dict, analyses: dict, failed: dict[str, str]) -> None:
    """report.html of every mode, in the run's order; a mode that could not be analysed
    is a note in its place, as `domino-prof report` shows it (plotly is a dependency of
    the analysis side only: a bare GPU node may lack it, and then a note says so)."""
    if not analyses:
        return
    try:
        from domino_prof.report import write_report
        from domino_prof.report.figures import not_analysed
    except ImportError as e:
        run["notes"].append(f"no report: {e}")
        return
    pages = {
        m: analyses[m] if m in analyses else not_analysed(m, failed[m])
        for m in run["modes"]
        if m in analyses or m in failed
    }
    write_report(pages, out / "report.html", run=run)


def _analyze_modes(out: Path, run: dict) -> tuple[dict[str, Any], dict[str, str]]:
    """{mode: Analysis} and {mode: why not} for the modes that could not be analysed."""
    try:
        from domino_prof.analysis import AnalysisConfig
        from domino_prof.analysis.document import encode
        from domino_prof.trace import decode  # noqa: F401 - the decoder: msgspec
    except ImportError as e:  # the trace engine is optional where the model trains
        # a GPU machine's image may lack msgspec: without this import here the first
        # mode's analysis raised it, a traceback after every mode had trained, and
        # run.json stayed "incomplete" (one H100, 2026-12-07: `run` without --no-analyze)
        run["notes"].append(
            f"traces not analysed: {e} (the trace engine's dependency); install domino-prof "
            f"here, or copy {out} to a machine that has it and run `domino-prof run "
            f"--reanalyze {out}`"
        )
        return {}, {}

    analyses, failed = {}, {}
    for mode, r in run["modes"].items():
        try:
            # the engine, as analyze/report/check: each rank parsed and analysed by one
            # job (in-process for a small run, a process pool for big rank files), so a
            # run's own analysis has the engine's memory bound (the same document bytes)
            a = engine.analyse_path(out / r["trace_dir"], AnalysisConfig(), progress=False)
        except DominoProfError as e:  # e.g. a CPU nocomm trace: no comm, no device work
            why = str(e)
            if _skips_comm(mode) and run.get("backend") == "gloo":
                # by design, not a fault: a CPU mode without collectives has nothing to
                # overlap (on a GPU its kernels are analysed)
                why = f"{mode} runs no collectives by design, so it has no overlap figures"
                what = ("the comm-free bound" if mode == "nocomm" else "its schedule without "
                        "comm (the split's own cost, against nocomm's)")  # fmt: skip
                run["notes"].append(f"{why}; its timed steps are {what}")
            else:
                run["notes"].append(f"{mode}: traces not analysed: {why}")
            r["hidden_pct"] = None
            failed[mode] = why
            continue
        atomic_write_bytes(out / r["trace_dir"] / "analysis.json", encode(a.to_json()))
        r["analysis"] = f"{r['trace_dir']}/analysis.json"
        r["hidden_pct"] = a.totals.get("hidden_pct")
        r["exposed_ms_per_step"] = a.totals.get("exposed_ms_per_step")
        analyses[mode] = a
    return analyses, failed


# --------------------------------------------------------------------------- lifecycle
# A run directory's life: `run` claims it (LOCK_FILE, flock: a second `run` or
# `--reanalyze` of it refuses at once, naming the holder; the kernel drops the lock of
# a process that died, so a stale lock file is simply taken over), writes run.json with
# status "incomplete" before any rank starts, and on any exit (success, a failed rank,
# Ctrl-C) removes the temp files of interrupted writes (".NAME.*.tmp", a trace export's
# ".NAME.partial*") once the ranks are gone. `run --reanalyze` of an incomplete run
# finishes it from what is complete (:func:`_finish`).
class Interrupted(RunError):
    """Ctrl-C (SIGINT) or a kill (SIGTERM, SIGHUP) during `run`: exit 128 + the signal
    (130 for Ctrl-C), one line saying what is left and the way on."""

    exit_code = 130

    def __init__(self, out: Path, *, signum: int | None = None) -> None:
        import signal

        by = "" if signum in (None, signal.SIGINT) else f" by {signal.Signals(signum).name}"
        if signum is not None:
            self.exit_code = 128 + int(signum)
        super().__init__(
            f"interrupted{by}; {out / RUN_JSON} marks the run incomplete; `domino-prof run "
            f"--reanalyze {out}` analyses the modes whose traces are complete"
        )


def mark_interrupted(out: str | os.PathLike, *, how: str, after_s: float) -> None:
    """Record in an incomplete run.json how the run ended (``interrupted``: by what,
    when, after how long, and a note), so a reader says why it is incomplete. Best
    effort: a run.json that is not ours or not incomplete is left as it is."""
    import time

    path = Path(out) / RUN_JSON
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(doc, dict) or doc.get("status") != STATUS_INCOMPLETE:
        return
    at = time.strftime("%Y-%m-%d %H:%M:%S")
    doc["interrupted"] = {"by": how, "at": at, "after_s": round(after_s, 1)}
    doc.setdefault("notes", []).append(f"interrupted by {how} at {at}, {after_s:.0f} s in")
    try:
        write_run(out, doc)
    except OSError:
        pass


class claim:  # noqa: N801 - used as a context manager, like open()
    """``with claim(out, what="--out"):`` hold the run directory ``out`` (created if
    missing): ConfigError (one line, exit 2) when it cannot be created or another run
    holds it; on exit the temp files of interrupted writes are removed, then the lock
    file. ``run_json``: a run.json to write at once (status incomplete)."""

    def __init__(self, out: str | os.PathLike, *, what: str = "--out",
                 run_json: dict | None = None) -> None:  # fmt: skip
        self.out, self.what, self.run_json = Path(out), what, run_json
        self.fd: int | None = None

    def __enter__(self) -> claim:
        import fcntl
        import sys
        import time

        out = self.out
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(
                f"{self.what} {out}: cannot create the run directory ({e.strerror or e}); "
                "choose a writable directory"
            ) from None
        path = out / LOCK_FILE
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise ConfigError(
                    f"{self.what} {out}: cannot write in the run directory "
                    f"({e.strerror or e}); choose a writable directory"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                holder = read_holder(path)
                raise ConfigError(
                    f"{self.what} {out}: a run is in progress there ({who(holder)}); "
                    "wait for it to finish or give another --out"
                ) from None
            except OSError:  # no flock on this file system: the pid decides
                holder = read_holder(path)
                if _alive(holder.get("pid")) and holder.get("pid") != os.getpid():
                    os.close(fd)
                    raise ConfigError(
                        f"{self.what} {out}: a run is in progress there ({who(holder)}); "
                        "wait for it to finish or give another --out"
                    ) from None
            try:  # the file we locked is still the lock file (not one just released)
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self.fd = fd
        me = {
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(["domino-prof", *sys.argv[1:]])[:300],
        }
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(me) + "\n").encode())
        try:
            if self.run_json is not None:
                write_run(out, self.run_json)
        except OSError as e:
            self._release()
            raise ConfigError(f"{self.what} {out}: cannot write run.json ({e.strerror or e}); "
                              "choose a writable directory") from None  # fmt: skip
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            remove_temp_files(self.out)
        finally:
            self._release()

    def _release(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(self.out / LOCK_FILE)
        except OSError:
            pass
        os.close(self.fd)  # closing drops the flock
        self.fd = None


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_TEMP_ENDINGS = (".tmp", ".partial", ".partial.json")


def remove_temp_files(out: str | os.PathLike) -> list[Path]:
    """Remove the temp files of interrupted atomic writes in ``out`` and its mode
    directories: hidden names (".NAME...") ending .tmp, .partial or .partial.json (our
    ``io.atomic_write_*``, train's trace export and the profiler's own temp). Only after
    the ranks are gone: a live writer's temp is not garbage. Returns what was removed."""
    out = Path(out)
    gone: list[Path] = []
    try:
        dirs = [out, *(d for d in out.iterdir() if d.is_dir() and not d.is_symlink())]
    except OSError:
        return gone
    for d in dirs:
        try:
            names = list(d.iterdir())
        except OSError:
            continue
        for f in names:
            if f.name.startswith(".") and f.name.endswith(_TEMP_ENDINGS) and f.is_file():
                try:
                    f.unlink()
                    gone.append(f)
                except OSError:
                    pass
    return gone


def incomplete_run(cfg: RunConfig) -> dict:
    """The run.json written before any rank starts: what was asked, status incomplete."""
    return {
        "schema": RUN_SCHEMA,
        "version": RUN_VERSION,
        "status": STATUS_INCOMPLETE,
        "config": cfg.to_dict(),
        "comm": _comm_block(cfg),
        "modes": {},
        "notes": [],
    }


def _finish(out: Path) -> dict:
    """`run --reanalyze` of an incomplete run: with ranks_result.json (the run was
    stopped while it was being analysed) the whole run, as `run` would have written it;
    else the modes whose traces are complete (a trace per rank), without timed steps
    (the ranks write those when every mode is done): status "partial", and notes say
    what is missing."""
    doc = json.loads((out / RUN_JSON).read_text(encoding="utf-8"))
    try:
        cfg = RunConfig.from_dict(doc["config"])
    except (KeyError, TypeError, ValueError) as e:
        raise TraceError(out / RUN_JSON, f"incomplete run.json without a usable config ({e})",
                         "re-run `domino-prof run`") from None  # fmt: skip
    if (out / "ranks_result.json").is_file():
        return assemble(cfg, out)
    ranks = range(cfg.world_size)  # --comm emulate: rank 0 alone
    done = [m for m in cfg.modes
            if all((out / m / f"rank{r}.pt.trace.json.gz").is_file() for r in ranks)]  # fmt: skip
    if not done:
        raise ConfigError(
            f"{out}: the run was interrupted before any mode's traces were complete "
            f"(a trace per rank of {', '.join(cfg.modes)}); nothing to analyse: re-run "
            "`domino-prof run`"
        )
    missing = [m for m in cfg.modes if m not in done]
    notes = [
        "the run was interrupted: no timed steps (the ranks write them when every mode "
        "is done), so no step times or speedups; hidden % from the complete traces"
    ]
    if missing:
        notes.append(f"modes without complete traces (not analysed): {', '.join(missing)}")
    run = {
        "schema": RUN_SCHEMA,
        "version": RUN_VERSION,
        "status": STATUS_PARTIAL,
        "config": doc["config"],
        "versions": {},
        "devices": [],
        "backend": "emulated" if cfg.emulated else cfg.backend,
        "comm": _comm_block(cfg),
        "attention": None,
        "rope": None,
        "norm": None,
        "modes": {
            m: {"trace_dir": m, "overlap": _overlaps(m), "step_ms": None,
                "step_times_ms": [], "tokens_per_s": None, "losses": []}
            for m in done
        },  # fmt: skip
        "notes": notes,
    }
    _analyse_and_write(out, run, analyze=True)
    return run
