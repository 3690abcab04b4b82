"""Many ranks: time and peak RSS of the whole process tree, side by side.

    python benchmarks/bench_scale.py                         # W = 4, 16, 64, 256
    python benchmarks/bench_scale.py --ranks 4,16 --tools domino-prof,HTA

For each W, W rank files are made from the committed real H200 trace
(``tile_trace.py``: each rank the fixture's rank ``r % 2`` tiled ``--tiles`` times into
consecutive steps, ~61 k events and 12.7 MB of JSON a rank at 10 tiles, gzipped; ranks
``2p, 2p+1`` form TP group ``p``), cached under ``--workdir``. Each tool then runs as a
fresh process (``_measure.py``: wall, CPU of the process tree, peak of the tree's summed
RSS):

- ``domino-prof``: ``domino-prof analyze DIR -o out.json`` (the local process pool);
- ``domino-prof dask``: the same with ``--scheduler local`` (a Dask LocalCluster of one
  worker process per core, started by the command: its start-up is included);
- ``HTA``: ``TraceAnalysis(trace_dir=DIR)`` + ``get_comm_comp_overlap()`` (PyPI
  ``traceinsight``), until the first W where it passes ``--hta-timeout`` (then larger W
  are not tried).

Targets (2 cores): time linear in events (ns per event flat over W); peak RSS at 256
ranks <= 2x the peak at 4 ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _measure import compile_package, load_avg, measure
from tile_trace import write_ranks

EVENTS_PER_TILE = 6120  # events of one fixture rank (one step)

HTA = textwrap.dedent(
    """
    import logging, os, sys
    os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")
    logging.disable(logging.CRITICAL)
    from hta.trace_analysis import TraceAnalysis
    df = TraceAnalysis(trace_dir=sys.argv[1]).get_comm_comp_overlap(visualize=False)
    print("@@HIDDEN", float(df["comp_comm_overlap_pctg"].mean()))
    """
)


def ensure_ranks(workdir: Path, ranks: int, tiles: int) -> Path:
    d = workdir / f"scale-{ranks}x{tiles}"
    stamp = d / ".complete"
    if not stamp.exists():
        write_ranks(d / "traces", tiles=tiles, ranks=ranks, gz=True)
        stamp.write_text("ok")
    return d / "traces"


def command(tool: str, traces: Path, out: Path) -> list[str]:
    exe = [sys.executable, "-m", "domino_prof.cli", "analyze", str(traces), "-o", str(out)]
    if tool == "domino-prof":
        return exe
    if tool == "domino-prof dask":
        return [*exe, "--scheduler", "local"]
    if tool == "HTA":
        return [sys.executable, "-c", HTA, str(traces)]
    raise SystemExit(f"unknown tool {tool!r}")


def hidden_of(tool: str, res: dict, out: Path) -> float | None:
    if "error" in res:
        return None
    if tool == "HTA":
        for line in res["stdout"].splitlines():
            if line.startswith("@@HIDDEN"):
                return float(line.split()[1])
        return None
    doc = json.loads(out.read_text())
    pcts = [p for p in doc["by_rank"]["hidden_pct"] if p is not None]
    return sum(pcts) / len(pcts) if pcts else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", default="4,16,64,256", help="comma-separated rank counts")
    ap.add_argument("--tiles", type=int, default=10, help="steps per rank (6,120 events each)")
    ap.add_argument("--tools", default="domino-prof,domino-prof dask,HTA")
    ap.add_argument("--workdir", default="/tmp/domino-prof-bench")
    ap.add_argument("--timeout", type=float, default=600.0, help="per run, seconds")
    ap.add_argument("--hta-timeout", type=float, default=600.0)
    ap.add_argument("--rss-limit-mb", type=float, default=20_000.0)
    a = ap.parse_args()
    compile_package()  # measure an installed domino-prof (_measure.compile_package)
    sizes = [int(x) for x in a.ranks.split(",") if x]
    tools = [t.strip() for t in a.tools.split(",") if t.strip()]
    workdir = Path(a.workdir)
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"# {platform.python_implementation()} {platform.python_version()}, {ncpu} cores, "
          f"load avg {load_avg()} at start")  # fmt: skip
    print(f"# command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    hdr = (f"{'ranks':>5} {'events':>10}  {'tool':<17} {'wall_s':>8} {'cpu_s':>8} "
           f"{'peak_MB':>8} {'ns/event':>8} {'hidden%':>8}  note")  # fmt: skip
    print(hdr)
    print("-" * len(hdr))
    results: dict[tuple[int, str], dict] = {}
    hta_stopped = False
    for w in sizes:
        traces = ensure_ranks(workdir, w, a.tiles)
        n_events = w * a.tiles * EVENTS_PER_TILE
        for tool in tools:
            if tool == "HTA" and hta_stopped:
                print(f"{w:>5} {n_events:>10}  {tool:<17} {'-':>8} {'-':>8} {'-':>8} {'-':>8} "
                      f"{'-':>8}  not run: past {a.hta_timeout:.0f} s at a smaller W")  # fmt: skip
                continue
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "out.json"
                limit = a.hta_timeout if tool == "HTA" else a.timeout
                r = measure(command(tool, traces, out), timeout=limit,
                            rss_limit_mb=a.rss_limit_mb)  # fmt: skip
                r["hidden"] = hidden_of(tool, r, out)
            results[(w, tool)] = r
            note = r.get("error", f"load avg {load_avg()}")
            if "error" in r and tool == "HTA":
                hta_stopped = True
            hidden = "-" if r["hidden"] is None else f"{r['hidden']:.2f}"
            print(f"{w:>5} {n_events:>10}  {tool:<17} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} "
                  f"{r['peak_rss_mb']:>8.0f} {r['wall_s'] / n_events * 1e9:>8.0f} {hidden:>8}  "
                  f"{note}", flush=True)  # fmt: skip
    print()
    first = sizes[0]
    print(f"{'ranks':>5}  {'tool':<17} {'HTA/ours wall':>13} {'RSS vs W=' + str(first):>12} "
          f"{'ns/event vs W=' + str(first):>18}")  # fmt: skip
    for w in sizes:
        for tool in (t for t in tools if t != "HTA"):
            r, r0 = results.get((w, tool), {}), results.get((first, tool), {})
            h = results.get((w, "HTA"), {})
            if "error" in r or not r:
                continue
            vs = f"{h['wall_s'] / r['wall_s']:.1f}x" if h and "error" not in h else "-"
            rss = f"{r['peak_rss_mb'] / r0['peak_rss_mb']:.2f}" if r0 and "error" not in r0 else "-"
            per = (r["wall_s"] / w) / (r0["wall_s"] / first) if r0 and "error" not in r0 else None
            print(f"{w:>5}  {tool:<17} {vs:>13} {rss:>12} "
                  f"{('-' if per is None else f'{per:.2f}'):>18}")  # fmt: skip
    print(f"# load avg at end {load_avg()}")


if __name__ == "__main__":
    main()
