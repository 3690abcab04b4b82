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
- ``start-up``: one rank file of 2 events (a GEMM and an NCCL all-reduce kernel that
  overlap): ``domino-prof analyze`` end to end against ``python -c "import pandas"`` and
  ``python -c pass``, ``--startup-repeats`` alternating runs (the issue's target: 0.5 s);
- ``one-big-file``: the real trace tiled 500x into one rank, gzip (3.03M events, 644 MB
  of JSON): domino-prof against the decode floor (``decode_floor.py``: gunzip + msgspec
  typed decode of ph, cat, name, ts, dur, pid, tid, GC off) on 1 process and on as many
  processes as domino-prof uses (the cores), and its peak PSS against the JSON size.
  The floor inflates with the stdlib's zlib, as the issue defines it; when ISA-L is
  installed (the ``fast-gzip`` extra, which domino-prof then uses) the floor with
  ISA-L's inflater is measured too ("floor N procs isal"), so both ratios are given,
  and domino-prof with the stdlib's inflater ("domino-prof zlib": what ISA-L saves).

Against HTA, two lower bounds run beside ours (``imports``: the interpreter importing
what every analysis imports, pandas included; ``floor ranks at once``: ``decode_floor``
on every rank file at once, one process each). Their sum, per repeat, is what any tool
built as this one is (pandas analysis, msgspec decoding) spends before it has built a
column or analysed an event; with HTA's wall divided by the issue's target ratio it gives
"left for columns + analysis", the time such a tool would have for all the rest, and
"ours beyond imports + floor", what we spend on it now.

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
from _measure import compile_package, load_avg, measure  # noqa: E402

# the target ratios, HTA's wall over ours
TARGETS = {"tiled-real": 20.0, "kernel-heavy": 20.0, "kernel-flows": 10.0}
STARTUP_TARGET_S = 0.5
# what `domino-prof analyze` imports before it reads an event (pandas among them)
IMPORTS = ("import numpy, pandas, msgspec; import domino_prof.cli, domino_prof.engine, "
           "domino_prof.trace.parse, domino_prof.analysis.rankwise")

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


def write_two_events(path: Path) -> None:
    """The start-up set's file: a GEMM on stream 7 and an NCCL all-reduce on stream 13
    that overlaps it by half, rank 0 of 1."""
    kernel = {"ph": "X", "cat": "kernel", "pid": 0, "dur": 10.0}
    events = [
        {**kernel, "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "tid": 7,
         "ts": 1000.0, "args": {"device": 0, "stream": 7, "correlation": 1}},
        {**kernel, "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "tid": 13,
         "ts": 1005.0, "args": {"device": 0, "stream": 13, "correlation": 2}},
    ]  # fmt: skip
    doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0,
           "world_size": 1}, "traceEvents": events}  # fmt: skip
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc))
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
    elif name == "start-up":
        write_two_events(d / "rank0.pt.trace.json")
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
    if name == "start-up":
        return {"domino-prof": ours, "import pandas": [py, "-c", "import pandas"],
                "python": [py, "-c", "pass"]}  # fmt: skip
    floor_all = ["sh", "-c", f'for f in "$@"; do "$0" {HERE / "decode_floor.py"} "$f" & done; wait',
                 py, *map(str, sorted(d.glob("*.json*")))]  # fmt: skip
    return {"domino-prof": ours, "HTA": [py, "-c", HTA_CHILD, str(d)],
            "imports": [py, "-c", IMPORTS], "floor ranks at once": floor_all}


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


def budget(name: str, runs: dict[str, list[dict]], repeats: int) -> dict:
    """The set's target against its lower bounds, per repeat (module doc)."""
    ok = [i for i in range(repeats) if all("error" not in r[i] for r in runs.values())]
    if not ok:
        return {}
    wall = lambda t: [runs[t][i]["wall_s"] for i in ok]  # noqa: E731
    if name == "start-up":
        return {"target wall s": STARTUP_TARGET_S,
                "ours/import pandas wall": spread([o / p for o, p in zip(wall("domino-prof"),
                                                                         wall("import pandas"))]),
                "import pandas over target": spread([p / STARTUP_TARGET_S
                                                     for p in wall("import pandas")])}  # fmt: skip
    if name not in TARGETS:
        return {}
    fixed = [m + f for m, f in zip(wall("imports"), wall("floor ranks at once"))]
    goal = [h / TARGETS[name] for h in wall("HTA")]
    return {"target": TARGETS[name], "target wall s": spread(goal),
            "imports + floor s": spread(fixed),
            "left for columns + analysis s": spread([g - f for g, f in zip(goal, fixed)]),
            "ours beyond imports + floor s": spread([o - f for o, f in
                                                     zip(wall("domino-prof"), fixed)])}  # fmt: skip


def spread(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3),
            "max": round(max(xs), 3), "n": len(xs)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default="start-up,tiled-real,kernel-heavy,kernel-flows,one-big-file")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/domino-prof-bench")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--startup-repeats", type=int, default=10)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--generate-only", action="store_true")
    a = ap.parse_args()
    compile_package()  # measure an installed domino-prof (_measure.compile_package)
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
            repeats = a.startup_repeats if s == "start-up" else a.repeats
            for rep in range(repeats):
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
            idx = [i for i in range(repeats) if ok(other, i) and ok("domino-prof", i)]
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
        summary.update(budget(s, runs, repeats))
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
