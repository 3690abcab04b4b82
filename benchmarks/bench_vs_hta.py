"""Issue 23's measurements: domino-prof against HTA (traceinsight) and against the
decode floor, whole processes, repeats alternating, each ratio with its spread.

    python benchmarks/bench_vs_hta.py --repeats 3 --out reports/bench-analyzer/issue23.json

Sets (generated once under ``--workdir``, never committed; hundreds of MB):

- ``tiled-real``: the real H200 trace tiled 100x, 2 ranks, 1.22M events (bench_analyze);
- ``kernel-heavy``: bench_analyze's ``gen_trace --comms-per-layer 10``, 2 ranks x 600k;
- ``kernel-flows``: 2 ranks x 600k events with HTA-friendly flows: per launch a
  ``cudaLaunchKernel``, its kernel and an ``ac2g`` flow pair (300k flow events, 150k
  runtime calls, 150k kernels a rank; one in 10 kernels an NCCL all-reduce on a second
  stream), 10 ProfilerStep#N windows;
- ``one-big-file``: the real trace tiled 500x into one rank, gzip (3.03M events, 644 MB
  of JSON): domino-prof against the decode floor (``decode_floor.py``: gunzip + msgspec
  typed decode of ph, cat, name, ts, dur, pid, tid, GC off) on 1 process and on as many
  processes as domino-prof uses (the cores), and its peak PSS against the JSON size.
  The floor inflates with the stdlib's zlib, as the issue defines it; when ISA-L is
  installed (the ``fast-gzip`` extra, which domino-prof then uses) the floor with
  ISA-L's inflater is measured too ("floor N procs isal"), so both ratios are given,
  and domino-prof with the stdlib's inflater ("domino-prof zlib": what ISA-L saves).

Before and after the sets, the machine's parallelism is probed (``parallel_speedup``:
two copies of a fixed pure-Python loop at once against one alone): on a shared VM the
cores may give far less than their number, and every multi-process figure moves with it.

Each repeat runs every tool of a set once, in turn (A B A B ...), and a ratio is taken
within a repeat; the report gives each ratio's median and [min, max] over the repeats,
with the load average beside each run (the machine may be shared: a ratio measured
under load is said so).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _measure import load_avg, measure  # noqa: E402

HTA_CHILD = """
import logging, os, sys
os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
df = TraceAnalysis(trace_dir=sys.argv[1]).get_comm_comp_overlap(visualize=False)
print("hidden " + ", ".join(f"{v:.2f}" for v in df["comp_comm_overlap_pctg"]))
"""


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def write_kernel_flows(path: Path, *, rank: int, launches: int = 150_000) -> None:
    """The kernel-flows set's rank file (module doc), written as it is generated."""
    base_ns = 1_790_857_026_000_000_000
    t = 5_136_598_139_223.635
    pid, tid = 4000 + rank, 4000 + rank
    steps = 10
    per_step = launches // steps
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps({"schemaVersion": 1, "distributedInfo": {
            "backend": "nccl", "rank": rank, "world_size": 2,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2,
                           "ranks": [0, 1]}]}, "baseTimeNanoseconds": base_ns})[:-1])
        f.write(', "traceEvents": [\n')
        f.write(json.dumps({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                            "args": {"name": "python"}}))  # fmt: skip
        corr = 1
        gpu_t = t
        for s in range(steps):
            t0 = t
            for i in range(per_step):
                comm = i % 10 == 9
                rt_dur = 4.25
                f.write(",\n" + json.dumps({
                    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid,
                    "tid": tid, "ts": round(t, 3), "dur": rt_dur,
                    "args": {"correlation": corr, "External id": corr}}))
                gpu_t = max(gpu_t, t + 6.0)
                kdur = 30.0 if comm else 9.5
                stream = 13 if comm else 7
                name = ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
                        if comm else "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64")
                args = {"device": 0, "stream": stream, "correlation": corr, "External id": corr}
                if comm:
                    args.update({"Collective name": "allreduce", "In msg nelems": 1 << 20,
                                 "Group size": 2, "Process Group Name": "0", "Seq": corr})
                f.write(",\n" + json.dumps({
                    "ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream,
                    "ts": round(gpu_t, 3), "dur": kdur, "args": args}))
                f.write(",\n" + json.dumps({"ph": "s", "id": corr, "pid": pid, "tid": tid,
                                            "ts": round(t, 3), "cat": "ac2g", "name": "ac2g"}))
                f.write(",\n" + json.dumps({"ph": "f", "id": corr, "pid": 0, "tid": stream,
                                            "ts": round(gpu_t, 3), "cat": "ac2g", "name": "ac2g",
                                            "bp": "e"}))  # fmt: skip
                if not comm:
                    gpu_t += kdur
                t += 5.0
                corr += 1
            f.write(",\n" + json.dumps({
                "ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": pid,
                "tid": tid, "ts": round(t0, 3), "dur": round(max(t, gpu_t) - t0, 3)}))
            t = max(t, gpu_t) + 50.0
        f.write("\n]}\n")
    os.replace(tmp, path)


def ensure(workdir: Path, name: str) -> Path:
    d = workdir / f"set-{name}"
    stamp = d / ".complete"
    if stamp.exists():
        return d
    t0 = time.perf_counter()
    d.mkdir(parents=True, exist_ok=True)
    if name == "tiled-real":
        from tile_trace import write_ranks

        write_ranks(d, tiles=100, ranks=2, gz=False)
    elif name == "kernel-heavy":
        from gen_trace import write_trace

        for r in (0, 1):
            write_trace(d / f"rank{r}.pt.trace.json", events=600_000, rank=r, world_size=2,
                        comms_per_layer=10)  # fmt: skip
    elif name == "kernel-flows":
        for r in (0, 1):
            write_kernel_flows(d / f"rank{r}.pt.trace.json", rank=r)
    elif name == "one-big-file":
        from tile_trace import write_ranks

        write_ranks(d, tiles=500, ranks=1, gz=True)
    else:
        raise SystemExit(f"unknown set {name!r}")
    stamp.write_text("ok")
    print(f"# generated {d} in {time.perf_counter() - t0:.0f} s", flush=True)
    return d


def json_bytes(d: Path) -> list[int]:
    out = []
    for f in sorted(d.glob("*.json*")):
        if f.suffix == ".gz":
            with gzip.open(f, "rb") as g:
                n = 0
                while b := g.read(1 << 24):
                    n += len(b)
            out.append(n)
        else:
            out.append(f.stat().st_size)
    return out


def tools_of(name: str, d: Path, out: Path) -> dict[str, list[str]]:
    py = sys.executable
    ours = [py, "-m", "domino_prof.cli", "analyze", str(d), "-o", str(out)]
    if name == "one-big-file":
        f = str(next(d.glob("*.json*")))
        floor = [py, str(HERE / "decode_floor.py"), f]
        tools = {
            "domino-prof": ours,
            "floor 1 proc": floor,
            f"floor {_cores()} procs": [*floor, "--procs", str(_cores())],
        }
        if _has_isal():  # the floor with the inflater domino-prof itself uses then, and
            # domino-prof with the stdlib's (what ISA-L saves it: "ours/domino-prof zlib")
            tools[f"floor {_cores()} procs isal"] = [*floor, "--procs", str(_cores()),
                                                     "--inflater", "isal"]  # fmt: skip
            tools["domino-prof zlib"] = ["env", "DOMINO_PROF_INFLATER=zlib", *ours]
        return tools
    return {"domino-prof": ours, "HTA": [py, "-c", HTA_CHILD, str(d)]}


def _has_isal() -> bool:
    """Whether domino-prof inflates with ISA-L here (its own choice, trace.read)."""
    from domino_prof.trace.read import _inflater

    return _inflater()[1] == "isal"


def _burn(n: int = 4_000_000) -> int:
    s = 0
    for i in range(n):
        s += i
    return s


def _burn_child() -> None:  # pragma: no cover - forked child
    _burn()
    os._exit(0)


def parallel_speedup(procs: int = 2, repeats: int = 3) -> dict:
    """How much of ``procs`` cores this machine gives now: a fixed pure-Python loop run
    once alone, then ``procs`` copies at once; speedup = procs x alone / together (1.0:
    the cores give one core's throughput, as a shared VM's vCPUs may; ``procs``: every
    core is free). Median and spread over ``repeats`` tries: every figure of a
    multi-process command depends on it."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    got = []
    for _ in range(repeats):
        t = time.perf_counter()
        _burn()
        alone = time.perf_counter() - t
        t = time.perf_counter()
        kids = [ctx.Process(target=_burn_child) for _ in range(procs - 1)]
        for k in kids:
            k.start()
        _burn()
        for k in kids:
            k.join()
        together = time.perf_counter() - t
        got.append(procs * alone / together)
    return spread(got)


def spread(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3),
            "max": round(max(xs), 3), "n": len(xs)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default="tiled-real,kernel-heavy,kernel-flows,one-big-file")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/domino-prof-bench")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--generate-only", action="store_true")
    a = ap.parse_args()
    sets = [s for s in a.sets.split(",") if s]
    dirs = {s: ensure(Path(a.workdir), s) for s in sets}
    if a.generate_only:
        return
    head = {"cores": _cores(), "python": sys.version.split()[0], "load_start": load_avg(),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "parallel_speedup_start": parallel_speedup(_cores())}  # fmt: skip
    print(f"# {json.dumps(head)}", flush=True)
    results: dict = {"head": head, "sets": {}}
    for s in sets:
        d = dirs[s]
        sizes = json_bytes(d)
        runs: dict[str, list[dict]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            tools = tools_of(s, d, Path(tmp) / "out.json")
            for rep in range(a.repeats):
                for tool, cmd in tools.items():
                    r = measure(cmd, timeout=a.timeout, interval=0.05)
                    r = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()
                         if k not in ("stderr",)}  # fmt: skip
                    theirs = not tool.startswith("domino-prof")
                    r["stdout"] = r["stdout"].strip().splitlines()[-1:] if theirs else []
                    r["load"] = load_avg()
                    runs.setdefault(tool, []).append(r)
                    print(f"{s:<13} rep {rep} {tool:<16} wall {r['wall_s']:>7.2f} cpu "
                          f"{r['cpu_s']:>7.2f} pss {r['peak_pss_mb']:>7.0f} MB  load {r['load']} "
                          f"{r.get('error', '')} {' '.join(r['stdout'])[:80]}", flush=True)  # fmt: skip
        ok = lambda t, i: "error" not in runs[t][i]  # noqa: E731
        summary: dict = {"json_bytes": sizes, "runs": runs}
        ours = runs["domino-prof"]
        summary["ours_wall_s"] = spread([r["wall_s"] for r in ours])
        summary["ours_peak_pss_over_json"] = spread(
            [r["peak_pss_mb"] * 1e6 / max(sizes) for r in ours])
        for other in [t for t in tools if t != "domino-prof"]:
            idx = [i for i in range(a.repeats) if ok(other, i) and ok("domino-prof", i)]
            if not idx:
                continue
            if other == "HTA":
                summary["HTA/ours wall"] = spread([runs[other][i]["wall_s"] / ours[i]["wall_s"]
                                                   for i in idx])  # fmt: skip
                summary["HTA/ours cpu"] = spread([runs[other][i]["cpu_s"] / ours[i]["cpu_s"]
                                                  for i in idx])  # fmt: skip
            else:
                summary[f"ours/{other} wall"] = spread(
                    [ours[i]["wall_s"] / runs[other][i]["wall_s"] for i in idx])
        results["sets"][s] = summary
        print(f"{s}: " + json.dumps({k: v for k, v in summary.items() if k != "runs"}), flush=True)
    results["head"]["load_end"] = load_avg()
    results["head"]["parallel_speedup_end"] = parallel_speedup(_cores())
    print(f"# parallel speedup of {_cores()} processes at the end: "
          f"{results['head']['parallel_speedup_end']}", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
