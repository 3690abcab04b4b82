"""Start the TP ranks, watch them, and assemble the run directory.

Without torchrun, ``domino-prof run`` starts ``tp`` processes itself (each in its
own session, so Ctrl-C reaches only the launcher, which then ends every rank).
A rank that exits non-zero ends the run at once (the others are terminated,
the rank is named with the last line it printed); ranks still running after
the timeout are killed and named. Under torchrun every process runs the worker
in place and rank 0 assembles the run directory.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from domino_prof.errors import ConfigError, RunError
from domino_prof.io import atomic_write_json
from domino_prof.reference_model.config import RunConfig

EXIT_MESSAGES = {3: "ran out of memory", 4: "rejected the configuration"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    # prefer our own one-line messages over traceback noise
    for ln in reversed(lines):
        if ln.startswith(("out of memory", "world size")):
            return ln
    return lines[-1] if lines else ""


def _kill(procs: list[subprocess.Popen], grace_s: float = 5.0) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    for p in procs:
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def spawn_ranks(cfg: RunConfig, out: Path) -> None:
    """Run ``cfg.tp`` worker processes to completion or raise RunError."""
    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    cfg_path = out / "config.json"
    atomic_write_json(cfg_path, cfg.to_dict())
    port = _free_port()
    procs: list[subprocess.Popen] = []
    log_paths: list[Path] = []
    try:
        for r in range(cfg.tp):
            env = dict(
                os.environ,
                RANK=str(r),
                LOCAL_RANK=str(r),
                WORLD_SIZE=str(cfg.tp),
                LOCAL_WORLD_SIZE=str(cfg.tp),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                DOMINO_PROF_LAUNCHER="1",
                PYTHONUNBUFFERED="1",
            )
            env.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast on shared hosts
            env.setdefault("OMP_NUM_THREADS", "1" if cfg.device == "cpu" else "4")
            log_path = logs / f"rank{r}.log"
            log_paths.append(log_path)
            log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the process
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "domino_prof.reference_model.train",
                        "--config",
                        str(cfg_path),
                        "--out",
                        str(out),
                    ],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            log.close()
        t0 = time.monotonic()
        shown = 0
        while True:
            shown = _echo_rank0(log_paths[0], shown)
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                time.sleep(0.5)  # let a crashing rank finish writing its log
                r, c = bad[0]
                _kill(procs)
                what = EXIT_MESSAGES.get(c, f"exited with code {c}")
                raise RunError(
                    f"rank {r} {what}: {_last_line(log_paths[r])} (full log: {log_paths[r]})"
                )
            if all(c == 0 for c in codes):
                _echo_rank0(log_paths[0], shown)
                return
            if time.monotonic() - t0 > cfg.timeout_s:
                hung = [r for r, c in enumerate(codes) if c is None]
                _kill(procs)
                raise RunError(
                    f"ranks {hung} did not finish within {cfg.timeout_s:.0f} s "
                    f"(hung?); logs in {logs}; raise --timeout if the run is "
                    f"just slow"
                )
            time.sleep(0.2)
    except BaseException:
        _kill(procs)
        raise


def _echo_rank0(path: Path, shown: int) -> int:
    """Print rank 0's new progress lines (ours only) as they appear."""
    try:
        data = path.read_bytes()
    except OSError:
        return shown
    new = data[shown:]
    cut = new.rfind(b"\n")
    if cut < 0:
        return shown
    for ln in new[:cut].decode(errors="replace").splitlines():
        if ln.startswith("[domino-prof]"):
            print(ln, file=sys.stderr, flush=True)
    return shown + cut + 1


def assemble(cfg: RunConfig, out: Path, *, analyze: bool = True) -> dict:
    """Write run.json (and per-mode analysis.json / report.html when the trace engine
    and plotly are importable) from what rank 0 left in ``ranks_result.json``."""
    res_path = out / "ranks_result.json"
    if not res_path.exists():
        raise RunError(f"{out}: the ranks finished without writing results; see {out}/logs")
    res = json.loads(res_path.read_text())
    run = {
        "schema": "domino-prof/run",
        "version": 1,
        "config": cfg.to_dict(),
        "versions": res["versions"],
        "devices": res["devices"],
        "backend": res["backend"],
        "modes": res["results"],
        "notes": [],
    }
    _analyse_and_write(out, run, analyze=analyze)
    res_path.unlink()
    return run


def refresh(out: Path) -> dict:
    """Re-analyse an existing run directory in place (e.g. one copied back from a GPU
    node without the analysis dependencies): analysis.json per mode, run.json's
    hidden % and comparison table, and report.html."""
    run_path = out / "run.json"
    if not run_path.is_file():
        raise ConfigError(
            f"{out}: no run.json here; point at a directory written by `domino-prof run`"
        )
    run = json.loads(run_path.read_text())
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
    analyses = _analyze_modes(out, run) if analyze else {}
    run["comparison"] = comparison_rows(run["modes"])
    _write_report(out, run, analyses)
    atomic_write_json(out / "run.json", run)


def _write_report(out: Path, run: dict, analyses: dict) -> None:
    """report.html for every analysed mode (plotly is a dependency of the analysis
    side only: a bare GPU node may lack it, and then a note says so)."""
    if not analyses:
        return
    try:
        from domino_prof.report import write_report
    except ImportError as e:
        run["notes"].append(f"no report: {e}")
        return
    write_report(analyses, out / "report.html", run=run)


def _analyze_modes(out: Path, run: dict) -> dict:
    try:
        from domino_prof.analysis import AnalysisConfig, analyze
        from domino_prof.trace import load_trace
    except ImportError as e:  # the trace engine is optional for a bare run
        run["notes"].append(f"traces not analysed: {e}")
        return {}
    from domino_prof.errors import DominoProfError

    analyses = {}
    for mode, r in run["modes"].items():
        try:
            a = analyze(load_trace(out / r["trace_dir"], progress=False), AnalysisConfig())
        except DominoProfError as e:  # e.g. a CPU nocomm trace: no comm, no device work
            run["notes"].append(f"{mode}: traces not analysed: {e}")
            r["hidden_pct"] = None
            continue
        atomic_write_json(out / r["trace_dir"] / "analysis.json", a.to_json())
        r["analysis"] = f"{r['trace_dir']}/analysis.json"
        r["hidden_pct"] = a.totals.get("hidden_pct")
        r["exposed_ms_per_step"] = a.totals.get("exposed_ms_per_step")
        analyses[mode] = a
    return analyses


def comparison_rows(modes: dict) -> list[dict]:
    """The side-by-side table: speedup vs tp and fraction of nocomm throughput."""
    tp = modes.get("tp")
    nc = modes.get("nocomm")
    rows = []
    for mode, r in modes.items():
        rows.append(
            {
                "mode": mode,
                "step_ms": r["step_ms"],
                "tokens_per_s": r["tokens_per_s"],
                "mfu": r.get("mfu"),
                "hidden_pct": r.get("hidden_pct"),
                "issue_ms": r.get("issue_ms"),
                "peak_mem_gb": (r.get("memory") or {}).get("peak_reserved_gb"),
                "speedup_vs_tp": (tp["step_ms"] / r["step_ms"]) if tp else None,
                "frac_of_nocomm": (r["tokens_per_s"] / nc["tokens_per_s"]) if nc else None,
            }
        )
    return rows
