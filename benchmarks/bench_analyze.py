"""domino-prof vs HTA vs a bare JSON decode: whole processes on multi-rank sets, and
load + analysis on one generated trace.

    python benchmarks/bench_analyze.py                        # the two 1.2M-event sets
    python benchmarks/bench_analyze.py --sets tiled-real --tools "bare orjson,domino-prof"
    python benchmarks/bench_analyze.py --sets "" --events 500000,1000000,2000000

**Sets** (``--sets``; each tool a whole process, measured by ``_measure.py``: wall, CPU of
the process tree, peak of the tree's summed RSS):

- ``tiled-real``: the committed real H200 trace (``tests/data/h200_llama3_3b_2layers_tp2/
  domino``) tiled 100x into consecutive steps (``tile_trace.py``): 2 ranks, 1.22M
  events, 256 MB of JSON, cpu_op-heavy like real traces;
- ``kernel-heavy``: ``gen_trace.py --comms-per-layer 10``, 2 ranks of 600k events
  (43k comm kernels a rank), 344 MB.

Tools on a set: ``bare orjson`` (one process reads and ``orjson.loads`` every file,
GC off: the floor), ``domino-prof`` (``domino-prof analyze DIR -o out.json``: parse,
analyse, write the JSON document), ``HTA`` (``TraceAnalysis`` + ``get_comm_comp_overlap``).
Targets: >= 20x faster than HTA on tiled-real, >= 10x on kernel-heavy; total <= 1.5x a
bare decode of the same files.
Repeats alternating with each ratio's spread, the kernel-flows set (300k flow events a
rank) and the one-big-file set against its decode floor (with peak PSS): see
``bench_vs_hta.py`` (issue 23).

**One trace** (``--events``; the series the previous README table came from):
For each size a realistic one-rank Kineto trace is generated once (by
``gen_trace.py``, cached under ``--workdir``). Every tool then runs in a fresh
subprocess, so its peak RSS is its own (its own peak + its largest child's);
the child times its work after its imports, as wall time (``time_s``) and as
CPU time of it and its children (``cpu_s``, the fair figure on a shared,
oversubscribed machine); the parent times the whole process (``wall_s``). Tools:

- ``bare orjson``: read the bytes + ``orjson.loads`` with the GC off (the floor
  for any loader that must look at every event; with the GC on it is ~4x slower);
- ``bare json``: the same with the stdlib ``json.loads``;
- ``alt orjson->cols``: the loader's job done with orjson dicts instead of
  msgspec structs (why the loader uses msgspec);
- ``domino-prof``: ``load_trace`` + ``domino_prof.engine.analyze`` (load only,
  said so, when the analysis package is not there yet);
- ``HTA``: ``hta.trace_analysis.TraceAnalysis(trace_dir=...)`` +
  ``get_comm_comp_overlap(visualize=False)`` (PyPI ``traceinsight``), if installed.

Targets (2 cores): domino-prof >= 10x faster than HTA at 2M events, peak RSS
<= half of HTA's, total within 2x of the bare orjson decode; time linear in N.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _measure import compile_package, load_avg, measure

SET_TOOLS = ("bare orjson", "domino-prof", "HTA")
SET_CHILDREN = {
    "bare orjson": textwrap.dedent(
        """
        import gc, glob, os, sys, orjson
        gc.disable()
        n = 0
        for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
            with open(f, "rb") as fh:
                n += len(orjson.loads(fh.read())["traceEvents"])
        print("@@NOTE", f"{n} events")
        """
    ),
    "HTA": textwrap.dedent(
        """
        import logging, os, sys
        os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")
        logging.disable(logging.CRITICAL)
        from hta.trace_analysis import TraceAnalysis
        df = TraceAnalysis(trace_dir=sys.argv[1]).get_comm_comp_overlap(visualize=False)
        print("@@NOTE", "hidden " + ", ".join(f"{v:.2f}" for v in df["comp_comm_overlap_pctg"]))
        """
    ),
}

# Each child prints one JSON line: {"time_s": ..., "rss_mb": ..., "note": ...}
_PRELUDE = textwrap.dedent(
    """
    import json, resource, sys, time
    path = sys.argv[1]
    def _cpu():
        s = resource.getrusage(resource.RUSAGE_SELF)
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
    _cpu0 = _cpu()
    def done(t0, note=""):
        ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        ch = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print("@@RESULT " + json.dumps({"time_s": time.perf_counter() - t0,
              "cpu_s": _cpu() - _cpu0, "rss_mb": (ru + ch) / 1024, "note": note}))
    """
)

CHILDREN = {
    "bare orjson": """
import gc, orjson
gc.disable()  # the fastest way to call it: with GC on, 2M dicts cost ~4x more
t0 = time.perf_counter()
with open(path, "rb") as f:
    doc = orjson.loads(f.read())
n = len(doc["traceEvents"])
done(t0, f"{n} events")
""",
    "bare json": """
import gc, json as _json
gc.disable()
t0 = time.perf_counter()
with open(path, "rb") as f:
    doc = _json.loads(f.read())
done(t0)
""",
    "alt orjson->cols": """
import gc, numpy as np, orjson
t0 = time.perf_counter()
gc.disable()
with open(path, "rb") as f:
    doc = orjson.loads(f.read())
xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
n = len(xs)
base = doc.get("baseTimeNanoseconds") or 0
cols = {}
for k in ("ts", "dur"):
    v = np.fromiter((e.get(k, 0.0) for e in xs), np.float64, n)
    hi = np.floor(v)
    cols[k] = (hi * 1000).astype(np.int64) + np.rint((v - hi) * 1000).astype(np.int64)
for k in ("pid", "tid"):
    cols[k] = np.fromiter((e.get(k, 0) for e in xs), np.int64, n)
args = [e.get("args") or {} for e in xs]
for key in ("correlation", "External id", "stream", "device", "wait_on_stream",
            "wait_on_cuda_event_record_corr_id", "In msg nelems", "Group size", "Seq"):
    cols[key] = np.fromiter((a.get(key, -1) for a in args), np.int64, n)
import pandas as pd
for key, src in (("cat", xs), ("name", xs), ("Collective name", args),
                 ("Process Group Name", args)):
    cols[key] = pd.factorize(np.array([d.get(key, "") for d in src], dtype=object))[0]
done(t0, f"{n} rows")
""",
    "domino-prof": """
from domino_prof.trace import load_trace
try:
    from domino_prof.analysis import AnalysisConfig
    from domino_prof.engine import analyze
except ImportError:
    analyze = None
t0 = time.perf_counter()
trace = load_trace(path, progress=False)
t1 = time.perf_counter()
note = f"load {t1 - t0:.2f}s, {len(trace.events)} rows"
if analyze is not None:
    a = analyze(trace, AnalysisConfig())
    t2 = time.perf_counter()
    h = a.totals.get("hidden_pct")
    note += f"; analyze {t2 - t1:.2f}s, hidden {h if h is None else round(h, 2)}%"
else:
    note += "; analysis not available: load only"
done(t0, note)
""",
    "HTA": """
import logging, os
os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")
from hta.trace_analysis import TraceAnalysis
logging.disable(logging.WARNING)
t0 = time.perf_counter()
ta = TraceAnalysis(trace_dir=os.path.dirname(path))
t1 = time.perf_counter()
ov = ta.get_comm_comp_overlap(visualize=False)
pct = float(ov["comp_comm_overlap_pctg"].iloc[0])
done(t0, f"load {t1 - t0:.2f}s, overlap {time.perf_counter() - t1:.2f}s, hidden {pct}%")
""",
}


def run_child(tool: str, path: Path, timeout: float) -> dict:
    code = _PRELUDE + CHILDREN[tool]
    env = {**os.environ, "PYTHONPATH": str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}  # fmt: skip
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            [sys.executable, "-c", code, str(path)],
            check=False, capture_output=True, text=True, timeout=timeout, env=env,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    wall = time.perf_counter() - t0
    for line in p.stdout.splitlines():
        if line.startswith("@@RESULT "):
            out = json.loads(line[len("@@RESULT ") :])
            out["wall_s"] = wall
            return out
    tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"error": f"exit {p.returncode}: {tail[0][:120]}"}


def have(module: str) -> str | None:
    try:
        from importlib.metadata import version

        __import__(module)
        return version({"hta": "traceinsight"}.get(module, module))
    except ImportError:  # also a broken install (HTA without psutil)
        return None


def ensure_trace(workdir: Path, n: int) -> Path:
    sys.path.insert(0, str(HERE))
    from gen_trace import write_trace

    d = workdir / f"events_{n}"
    path = d / "rank0.pt.trace.json"
    stamp = d / ".complete"
    if not stamp.exists():
        d.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        write_trace(path, events=n)
        stamp.write_text("ok")
        print(f"# generated {path} in {time.perf_counter() - t0:.1f}s", flush=True)
    return path


def ensure_set(workdir: Path, name: str) -> Path:
    """The directory of a named multi-rank set (generated once, cached)."""
    d = workdir / f"set-{name}"
    stamp = d / ".complete"
    if not stamp.exists():
        t0 = time.perf_counter()
        if name == "tiled-real":
            from tile_trace import write_ranks

            write_ranks(d, tiles=100, ranks=2, gz=False)
        elif name == "kernel-heavy":
            from gen_trace import write_trace

            for r in (0, 1):
                write_trace(d / f"rank{r}.pt.trace.json", events=600_000, rank=r,
                            world_size=2, comms_per_layer=10)  # fmt: skip
        else:
            raise SystemExit(f"unknown set {name!r} (tiled-real, kernel-heavy)")
        stamp.write_text("ok")
        print(f"# generated {d} in {time.perf_counter() - t0:.1f}s", flush=True)
    return d


def run_set_tool(tool: str, d: Path, timeout: float) -> dict:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        if tool == "domino-prof":
            cmd = [sys.executable, "-m", "domino_prof.cli", "analyze", str(d), "-o", str(out)]
        else:
            cmd = [sys.executable, "-c", SET_CHILDREN[tool], str(d)]
        r = measure(cmd, timeout=timeout)
        if "error" not in r and tool == "domino-prof":
            doc = json.loads(out.read_text())
            pct = ", ".join(f"{p:.2f}" for p in doc["by_rank"]["hidden_pct"] if p is not None)
            r["note"] = f"hidden {pct}; JSON {out.stat().st_size / 1e6:.1f} MB"
    for line in r.get("stdout", "").splitlines():
        if line.startswith("@@NOTE "):
            r["note"] = line[len("@@NOTE ") :]
    return r


def run_sets(names: list[str], tools: list[str], workdir: Path, timeout: float) -> None:
    hdr = (f"{'set':<13} {'events':>9} {'MB':>5}  {'tool':<12} {'wall_s':>7} {'cpu_s':>7} "
           f"{'peak_MB':>8}  note")  # fmt: skip
    print(hdr)
    print("-" * len(hdr))
    res: dict[tuple[str, str], dict] = {}
    for name in names:
        d = ensure_set(workdir, name)
        files = sorted(d.glob("*.json"))
        mb = sum(f.stat().st_size for f in files) / 1e6
        n = None
        for tool in tools:
            r = run_set_tool(tool, d, timeout)
            res[(name, tool)] = r
            if tool == "bare orjson" and "error" not in r:
                n = int(r["note"].split()[0])
            note = r.get("error") or f"{r.get('note', '')}; load avg {load_avg()}"
            print(f"{name:<13} {n or '-':>9} {mb:>5.0f}  {tool:<12} {r['wall_s']:>7.2f} "
                  f"{r['cpu_s']:>7.2f} {r['peak_rss_mb']:>8.0f}  {note}", flush=True)  # fmt: skip
    print()
    print(f"{'set':<13} {'HTA/ours wall':>13} {'HTA/ours cpu':>12} {'ours/bare wall':>14} "
          f"{'ours/bare cpu':>13} {'ours/HTA RSS':>12}")  # fmt: skip

    def ratio(x: dict, y: dict, k: str) -> str:
        ok = x and y and "error" not in x and "error" not in y and y[k]
        return f"{x[k] / y[k]:.2f}" if ok else "-"

    for name in names:
        ours, bare, hta = (res.get((name, t), {}) for t in ("domino-prof", "bare orjson", "HTA"))
        print(f"{name:<13} {ratio(hta, ours, 'wall_s'):>13} {ratio(hta, ours, 'cpu_s'):>12} "
              f"{ratio(ours, bare, 'wall_s'):>14} {ratio(ours, bare, 'cpu_s'):>13} "
              f"{ratio(ours, hta, 'peak_rss_mb'):>12}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default="tiled-real,kernel-heavy",
                    help="multi-rank sets, whole processes ('' for none)")  # fmt: skip
    ap.add_argument("--events", default="", help="comma-separated event counts (one trace)")
    ap.add_argument("--workdir", default="/tmp/domino-prof-bench", help="where traces go")
    ap.add_argument("--tools", default=None,
                    help="default: bare orjson,domino-prof,HTA for --sets; with --events also "
                         "bare json,alt orjson->cols")  # fmt: skip
    ap.add_argument("--hta-max-events", type=int, default=2_000_000,
                    help="skip HTA above this size (it is slow)")  # fmt: skip
    ap.add_argument("--timeout", type=float, default=600.0, help="per tool run, seconds")
    a = ap.parse_args()
    compile_package()  # measure an installed domino-prof (_measure.compile_package)
    sizes = [int(x) for x in a.events.split(",") if x]
    sets = [x.strip() for x in a.sets.split(",") if x.strip()]
    default = "bare orjson,bare json,alt orjson->cols,domino-prof,HTA"
    tools = [t.strip() for t in (a.tools or default).split(",") if t.strip()]
    hta_version = have("hta")
    if "HTA" in tools and hta_version is None:
        print("# HTA not installed (pip install traceinsight): skipped")
        tools.remove("HTA")
    load = os.getloadavg()
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"# {platform.python_implementation()} {platform.python_version()}, {ncpu} cores, "
        f"load avg {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f} at start; msgspec {have('msgspec')}, "
        f"orjson {have('orjson')}, traceinsight {hta_version or '-'}"
    )
    print(f"# command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    if sets:
        run_sets(sets, [t for t in tools if t in SET_TOOLS], Path(a.workdir), a.timeout)
    if not sizes:
        print(f"# load avg at end {os.getloadavg()[0]:.2f}")
        return
    print()
    results: dict[tuple[int, str], dict] = {}
    mb: dict[int, float] = {}
    hdr = (
        f"{'events':>9} {'MB':>6}  {'tool':<18} {'cpu_s':>7} {'time_s':>7} {'wall_s':>7} "
        f"{'peak_MB':>8}  note"
    )
    print(hdr)
    print("-" * len(hdr))
    for n in sizes:
        path = ensure_trace(Path(a.workdir), n)
        mb[n] = path.stat().st_size / 1e6
        for tool in tools:
            if tool == "HTA" and n > a.hta_max_events:
                continue
            r = run_child(tool, path, a.timeout)
            results[(n, tool)] = r
            if "error" in r:
                print(f"{n:>9} {mb[n]:>6.0f}  {tool:<18} {'-':>7} {'-':>7} {'-':>7} {'-':>8}  "
                      f"{r['error']}", flush=True)  # fmt: skip
            else:
                print(
                    f"{n:>9} {mb[n]:>6.0f}  {tool:<18} {r['cpu_s']:>7.2f} {r['time_s']:>7.2f} "
                    f"{r['wall_s']:>7.2f} {r['rss_mb']:>8.0f}  {r['note']}",
                    flush=True,
                )
    print()
    print(f"{'events':>9}  {'metric':<6} {'ours/bare orjson':>16} {'HTA/ours':>9} "
          f"{'ours/HTA RSS':>12} {'ours ns/event':>14}")  # fmt: skip
    for n in sizes:
        ours = results.get((n, "domino-prof"), {})
        bare = results.get((n, "bare orjson"), {})
        hta = results.get((n, "HTA"), {})

        def ratio(x: dict, y: dict, k: str) -> str:
            return f"{x[k] / y[k]:.2f}" if k in x and k in y and y[k] else "-"

        for k in ("cpu_s", "time_s"):
            per = f"{ours[k] / n * 1e9:.0f}" if k in ours else "-"
            print(f"{n:>9}  {k[:-2]:<6} {ratio(ours, bare, k):>16} {ratio(hta, ours, k):>9} "
                  f"{ratio(ours, hta, 'rss_mb'):>12} {per:>14}")  # fmt: skip
    print(f"# load avg at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
