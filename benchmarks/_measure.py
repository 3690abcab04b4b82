"""Whole-process measurements for the benchmarks: wall time, CPU time and the peak RSS
of the whole process tree (the command, its pool or Dask workers, their children).

``measure(cmd)`` starts ``cmd``, samples the summed RSS of its process tree every
``interval`` s with psutil (RSS counts pages shared by forked workers once per process,
so the sum is an upper bound), and takes CPU time from ``getrusage(RUSAGE_CHILDREN)``
(every descendant that was waited for). A run past ``timeout`` s or above ``rss_limit_mb``
is killed (tree included) and reported so.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import time


def _cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _tree_rss(proc) -> int:
    import psutil

    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def _pss_of(pid: int) -> int:
    """Proportional set size of one process (shared pages split among their users),
    from /proc/PID/smaps_rollup; 0 when unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tree_pss(proc) -> int:
    """Summed PSS of ``proc`` and its descendants: pages shared between them (a
    forked worker's inherited ones) count once."""
    import psutil

    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    return sum(_pss_of(p.pid) for p in procs)


def measure(
    cmd: list[str],
    *,
    timeout: float = 600.0,
    rss_limit_mb: float = 20_000.0,
    interval: float = 0.1,
    pss_interval: float = 0.5,
    env: dict | None = None,
    cwd: str | None = None,
) -> dict:
    """Run ``cmd``; {wall_s, cpu_s, peak_rss_mb, peak_pss_mb, rc, error?, stdout, stderr}
    (``peak_rss_mb``: the tree's summed RSS, sampled every ``interval`` s;
    ``peak_pss_mb``: its summed PSS).

    PSS comes from /proc/PID/smaps_rollup, whose read walks the process's page tables
    under its memory-map lock: read every 50 ms it slowed a page-faulting 3M-event
    analysis by 0.5-1.1 s of 7 s (and added 1-2 s of CPU). So PSS is read at most every
    ``pss_interval`` s, and only when the tree's RSS is above the highest PSS seen (PSS
    never exceeds RSS, so a lower RSS cannot hold a new PSS peak)."""
    import psutil

    cpu0 = _cpu_children()
    t0 = time.perf_counter()
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
        start_new_session=True,
    )  # fmt: skip
    proc = psutil.Process(p.pid)
    peak = peak_pss = 0
    last_pss = -pss_interval
    error = None
    while p.poll() is None:
        rss = _tree_rss(proc)
        peak = max(peak, rss)
        now = time.perf_counter()
        if rss > peak_pss and now - last_pss >= pss_interval:
            peak_pss = max(peak_pss, _tree_pss(proc))
            last_pss = now
        if time.perf_counter() - t0 > timeout:
            error = f"timed out after {timeout:.0f} s"
        elif peak / 1e6 > rss_limit_mb:
            error = f"killed above {rss_limit_mb / 1000:.0f} GB of RSS"
        if error:
            os.killpg(p.pid, signal.SIGKILL)
            break
        time.sleep(interval)
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    res = {
        "wall_s": wall,
        "cpu_s": _cpu_children() - cpu0,
        "peak_rss_mb": peak / 1e6,
        "peak_pss_mb": peak_pss / 1e6,
        "rc": p.returncode,
        "stdout": out.decode("utf-8", "replace"),
        "stderr": err.decode("utf-8", "replace"),
    }
    if error is None and p.returncode != 0:
        tail = (res["stderr"] or res["stdout"]).strip().splitlines()[-1:] or ["no output"]
        error = f"exit {p.returncode}: {tail[0][:160]}"
    if error:
        res["error"] = error
    return res


def load_avg() -> str:
    a = os.getloadavg()
    return f"{a[0]:.2f}/{a[1]:.2f}/{a[2]:.2f}"


def compile_package() -> None:
    """Byte-compile domino_prof where it is imported from, as ``pip install`` does (an
    editable install writes its bytecode on first use, unless PYTHONDONTWRITEBYTECODE
    is set, as on the project's machine: then every run compiled the sources it found
    without bytecode, ~0.18 s of a 2-event analysis's 0.78 s). The tools compared
    (HTA, pandas) come with their bytecode from pip; the benchmarks measure ours so too."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("domino_prof")
    if spec is not None and spec.submodule_search_locations:
        for d in spec.submodule_search_locations:
            compileall.compile_dir(d, quiet=1)


def kernel_events(prof) -> list[dict]:
    """The kernel events of a finished ``torch.profiler.profile`` (its Chrome trace, read
    back from a temporary file), in start order."""
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "trace.json"
        prof.export_chrome_trace(str(f))
        ev = [e for e in json.loads(f.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    return sorted(ev, key=lambda e: e["ts"])


def cuda_median_us(f, *, reps: int, per: int = 1, warmup: int = 3) -> float:
    """The median over ``reps`` repeats of ``f()``'s device time in µs, divided by ``per``
    (the calls one ``f()`` makes): CUDA events recorded around each ``f()`` on the current
    stream, synchronised after each, after ``warmup`` untimed calls."""
    import statistics

    import torch

    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(warmup):
        f()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        s.record()
        f()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) * 1e3 / per)
    return statistics.median(out)
