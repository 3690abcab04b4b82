"""The schedules' own cost, side by side on one device (tp 1: no collectives at all).

    python benchmarks/bench_schedule.py --model llama3-3b --seq 1024 --mbs 2 \\
        --out reports/schedule-h200/bench_schedule.json          # one GPU
    python benchmarks/bench_schedule.py                           # CPU, tiny preset

A step here is forward + backward of one batch (gradients into ``.grad``), no
optimizer. Rows: ``plain`` — the unsharded model, ``model.loss(...).backward()`` on
the whole batch; ``plain-mb`` — the same with N micro-batches (gradient
accumulation, N backward calls); then the schedules of ``schedule.StepRunner`` at
tp 1: ``tp`` (1 micro-batch), ``domino`` (N), ``sp`` and ``domino-sp`` (sequence
parallel variants), each eager, with CUDA graphs, compiled, and both (CUDA only for
graphs). At tp 1 every collective is a no-op (SP's gather/scatter are copies), so
the gaps between rows are the schedules' host and memory cost, not the network.

Columns: ``wall_ms`` median step time (synchronised); ``issue_ms`` median time until
the host has queued the step (``step()`` returned, before the sync), less the time the
runner held the host back to keep at most ``--graph-inflight`` graph launches queued
(that is waiting for the GPU, not host work); ``host_probe_ms`` (``probe ms``) the
median time of a fixed pure-Python loop run after each timed step: the host's speed,
which changes under a lent GPU's host (about 6.5 vs 12 ms on the H200 hosts) and which a
host-bound row's issue time follows (reports/schedule-h200/compile-host-2026-12-02);
``peak_mem_gb`` peak memory *reserved* by the caching allocator over the timed steps
(graph pools included: what the process holds), ``peak_alloc_gb`` the allocated
peak. On CUDA, attention is forced to the schedules' kernel (``--attention``: flash,
cudnn, or auto = cuDNN on Hopper) for ``plain`` too, so every row runs the same
attention kernels (the kernel, and SDPA's own default choice, are recorded in the JSON).
``--rows`` runs a chosen list of rows in a chosen order (plain rows among them), e.g.
``--rows domino-sp,sp,plain-mb`` (benchmarks/gpu_session.sh sp-check alternates the order per
repeat, so that no row is always the one run last in its process).

Writes ``{"config": {...}, "rows": [{"schedule", "graphs", "compile", "wall_ms",
"issue_ms", "host_probe_ms", "peak_mem_gb", "peak_alloc_gb", ...}], "ratios": {...}}``
and prints the table and the ratios the issue asks for.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from domino_prof.reference_model import train, units
from domino_prof.reference_model.comm import ProcessGroupComm
from domino_prof.reference_model.config import WGRAD_INS, preset
from domino_prof.reference_model.modes import SCHEDULES
from domino_prof.reference_model.parallel import build_reference, shard_model
from domino_prof.reference_model.schedule import StepRunner
from domino_prof.reference_model.verify import batch

GRAPH_INFLIGHT = 8  # --graph-inflight
GRAPH_SCOPE = "segment"  # --graph-scope (the graphs variants)
WGRAD_IN = "joint"  # --wgrad-in (the micro-batched all-reduce schedules)
MB_STREAMS = 1  # --mb-streams (domino with 2 micro-batches)


def _sync(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _free(dev) -> None:
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def _sdpa_ctx(dev, dtype):
    if dev.type == "cuda" and dtype in (torch.float16, torch.bfloat16):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        kernel = units.attention_kernel(dev, dtype)  # the schedules' (--attention)
        return sdpa_kernel(
            SDPBackend.CUDNN_ATTENTION if kernel == "cudnn" else SDPBackend.FLASH_ATTENTION
        )
    import contextlib

    return contextlib.nullcontext()


PROBE_N = 200_000  # additions in host_probe(): ~6.5 ms on a fast H200 host, ~12 on a slow


def host_probe() -> float:
    """train.host_probe of PROBE_N additions: a row is compared by ``issue_ms`` together
    with ``host_probe_ms``, not by ``issue_ms`` alone (a host-bound row's issue time
    follows the host's speed)."""
    return train.host_probe(PROBE_N)


def measure(step, dev, *, warmup: int, steps: int, held=lambda: 0.0) -> dict:
    """Run ``step()`` warmup + steps times; medians of issue and wall time, peak memory
    over the timed steps. ``held()``: seconds the host has so far been held back by the
    runner's in-flight cap on graph launches (waiting for the GPU is not host work: it
    is taken out of the issue time). After each timed step (synchronised, outside its
    times) :func:`host_probe` measures the host's speed: ``host_probe_ms`` (median)."""
    for _ in range(warmup):
        step()
    _sync(dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    wall, issue, probe = [], [], []
    for _ in range(steps):
        _sync(dev)
        h0 = held()
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter() - (held() - h0)
        _sync(dev)
        t2 = time.perf_counter()
        issue.append((t1 - t0) * 1e3)
        wall.append((t2 - t0) * 1e3)
        probe.append(host_probe())
    out = {
        "wall_ms": statistics.median(wall),
        "issue_ms": statistics.median(issue),
        "host_probe_ms": statistics.median(probe),
        "wall_ms_all": wall,
        "issue_ms_all": issue,
        "host_probe_ms_all": probe,
    }
    if dev.type == "cuda":
        out["peak_mem_gb"] = torch.cuda.max_memory_reserved(dev) / 2**30
        out["peak_alloc_gb"] = torch.cuda.max_memory_allocated(dev) / 2**30
    else:
        out["peak_mem_gb"] = out["peak_alloc_gb"] = None
    return out


def plain_step(cfg, inp, tgt, *, splits: int, dev, dtype):
    """The unsharded model's step (autograd, ``splits`` micro-batches accumulated)."""
    ref = build_reference(cfg, seed=1, device=dev, dtype=dtype)
    chunks = list(zip(inp.chunk(splits, 0), tgt.chunk(splits, 0)))

    def step():
        ref.zero_grad(set_to_none=True)
        with _sdpa_ctx(dev, dtype):
            if splits == 1:
                ref.loss(inp, tgt).backward()
            else:
                for i, t in chunks:
                    (ref.loss(i, t) / splits).backward()

    return step


def bench_plain(cfg, inp, tgt, *, splits: int, dev, dtype, warmup, steps) -> dict:
    step = plain_step(cfg, inp, tgt, splits=splits, dev=dev, dtype=dtype)
    r = measure(step, dev, warmup=warmup, steps=steps)
    step = None  # free the model (the closure holds it)
    _free(dev)
    return r


def profile_step(step, dev, path: Path) -> dict:
    """Profile one step; write the trace (gzipped) and return its device summary: kernel
    count, summed kernel time, the device span and the idle time inside it."""
    import gzip

    acts = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        step()
        _sync(dev)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.json")
    prof.export_chrome_trace(str(tmp))
    ev = json.loads(tmp.read_text())["traceEvents"]
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": ev}, f)
    tmp.unlink()
    ks = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "kernel")
    if not ks:
        return {"kernels": 0}
    busy, end = 0.0, ks[0][0]
    for s0, e0 in ks:
        if e0 > end:
            busy += e0 - max(s0, end)
            end = e0
    span = ks[-1][1] - ks[0][0]
    return {
        "kernels": len(ks),
        "kernel_sum_ms": sum(e - s for s, e in ks) / 1e3,
        "span_ms": span / 1e3,
        "busy_ms": busy / 1e3,
        "idle_ms": (span - busy) / 1e3,
    }


def schedule_runner(cfg, name, *, splits, graphs, compile, dev, dtype) -> StepRunner:
    """``name``'s StepRunner at tp 1 with this benchmark's settings (the module globals)."""
    comm = ProcessGroupComm()
    model = shard_model(cfg, comm, seed=1, device=dev, dtype=dtype)
    return StepRunner(
        model,
        comm,
        schedule=name,
        splits=splits,  # used by micro-batched schedules only
        graphs=graphs,
        compile=compile,
        graph_inflight=GRAPH_INFLIGHT,
        graph_scope=GRAPH_SCOPE,
        wgrad_in=WGRAD_IN,
        mb_streams=MB_STREAMS if name == "domino" and splits == 2 else 1,
    )


def bench_schedule(
    cfg, inp, tgt, name, *, splits, graphs, compile, dev, dtype, warmup, steps, profile_dir=None
):
    runner = schedule_runner(cfg, name, splits=splits, graphs=graphs, compile=compile,
                             dev=dev, dtype=dtype)  # fmt: skip
    t0 = time.perf_counter()
    runner.step(inp, tgt)  # capture / compile / warm up outside the timing
    first_s = time.perf_counter() - t0
    r = measure(
        lambda: runner.step(inp, tgt),
        dev,
        warmup=warmup,
        steps=steps,
        held=lambda: runner.host_wait_s,
    )
    r["first_step_s"] = first_s
    r["graphs_per_step"] = runner.graphs_per_step
    if profile_dir is not None:
        r["profile"] = profile_step(
            lambda: runner.step(inp, tgt),
            dev,
            profile_dir
            / (f"{name}{'_graphs' if graphs else ''}{'_compile' if compile else ''}.json.gz"),
        )
    runner = None  # free it (the closures hold the cell)
    _free(dev)
    return r


# the ratios issue 34 gates on at tp 1, each timed ABAB in one process: (name, A, B), a row
# being (schedule, graphs); "plain" is the unsharded model's autograd step
ABAB_PAIRS = (
    ("tp_eager/plain", ("plain", False), ("tp", False)),
    ("domino_graphs/tp_graphs", ("tp", True), ("domino", True)),
)


def abab(cfg, inp, tgt, *, pairs: int, block: int, splits, dev, dtype, warmup) -> dict:
    """Each of ABAB_PAIRS timed side by side: both steps built and warmed up, then
    ``pairs`` times a block of ``block`` synchronised steps of A and one of B, each after
    one untimed step (B first in odd pairs, so neither always runs second); a pair's
    ratio is B's median step over A's. The GPU's and the host's drifts over a call (one
    H100, 2026-12-07: tp graphs 77.4 and 83.2 ms in two runs of this benchmark a minute
    apart) then hit both sides of a pair, where rows run one after the other carry them
    into the ratio. Returns
    {name: {a_ms, b_ms (medians of the blocks' medians), ratio min / median / max,
    ratios}}."""
    out = {}
    cuda = dev.type == "cuda"  # CPU: a dry run, the graphs sides eager
    for name, (sa, ga), (sb, gb) in ABAB_PAIRS:
        steps = {}
        for key, (sched, graphs) in (("a", (sa, ga)), ("b", (sb, gb))):
            if sched == "plain":
                steps[key] = plain_step(cfg, inp, tgt, splits=1, dev=dev, dtype=dtype)
            else:
                r = schedule_runner(cfg, sched, splits=splits, graphs=graphs and cuda,
                                    compile=False, dev=dev, dtype=dtype)  # fmt: skip
                steps[key] = lambda r=r: r.step(inp, tgt)
            for _ in range(warmup + 1):  # + 1: the capture step
                steps[key]()
        blocks = {"a": [], "b": []}
        for i in range(pairs):
            for key in ("ab" if i % 2 == 0 else "ba"):
                m = measure(steps[key], dev, warmup=1, steps=block)
                blocks[key].append(m["wall_ms"])
        ratios_ = [b / a for a, b in zip(blocks["a"], blocks["b"])]
        out[name] = {
            "a": f"{sa} {'graphs' if ga and cuda else 'eager'}",
            "b": f"{sb} {'graphs' if gb and cuda else 'eager'}",
            "a_ms": statistics.median(blocks["a"]),
            "b_ms": statistics.median(blocks["b"]),
            "ratio_min": min(ratios_),
            "ratio_median": statistics.median(ratios_),
            "ratio_max": max(ratios_),
            "ratios": ratios_,
            "a_blocks_ms": blocks["a"],
            "b_blocks_ms": blocks["b"],
        }
        steps = None  # free both models before the next pair
        _free(dev)
        o = out[name]
        print(f"  {name:28s} {o['a_ms']:8.2f} -> {o['b_ms']:8.2f} ms   pair ratio "
              f"{o['ratio_min']:.3f} / {o['ratio_median']:.3f} / {o['ratio_max']:.3f}"
              f"  ({pairs} ABAB pairs of {block} steps)", flush=True)  # fmt: skip
    return out


def ratios(rows: list[dict]) -> dict:
    def get(s, g=False, c=False, key="wall_ms"):
        for r in rows:
            if r["schedule"] == s and r["graphs"] == g and r["compile"] == c and key in r:
                return r[key]
        return None

    def ratio(a, b):
        return None if a is None or b is None else a / b

    out = {
        "tp_eager/plain": ratio(get("tp"), get("plain")),
        "domino_eager/plain-mb": ratio(get("domino"), get("plain-mb")),
        "domino_graphs/tp_graphs": ratio(get("domino", True), get("tp", True)),
        "domino_compile/plain-mb": ratio(get("domino", c=True), get("plain-mb")),
        "domino_compile_graphs/tp_compile_graphs": ratio(
            get("domino", True, True), get("tp", True, True)
        ),
        "sp_eager/tp_eager": ratio(get("sp"), get("tp")),
        "domino-sp_eager/plain-mb": ratio(get("domino-sp"), get("plain-mb")),
    }
    for s in ("tp", "domino", "sp", "domino-sp"):
        out[f"{s}_graphs_mem/eager_mem"] = ratio(
            get(s, True, key="peak_mem_gb"), get(s, key="peak_mem_gb")
        )
    return out


def table(rows: list[dict], rat: dict) -> str:
    base = {r["schedule"]: r["wall_ms"] for r in rows if r["schedule"].startswith("plain")}
    header = (
        f"{'schedule':10s} {'graphs':>6s} {'compile':>7s} {'wall ms':>9s} {'issue ms':>9s} "
        f"{'peak GB':>8s} {'alloc GB':>8s} {'vs plain':>8s} {'probe ms':>8s}"
    )
    lines = [header]
    for r in rows:
        spec = SCHEDULES.get(r["schedule"])
        ref = base.get("plain-mb" if spec is not None and spec.micro_batched else "plain")
        if r.get("error"):
            lines.append(
                f"{r['schedule']:10s} {r['graphs']!s:>6s} {r['compile']!s:>7s} "
                f"  error: {r['error']}"
            )
            continue
        mem = "n/a" if r["peak_mem_gb"] is None else f"{r['peak_mem_gb']:.2f}"
        alloc = "n/a" if r["peak_alloc_gb"] is None else f"{r['peak_alloc_gb']:.2f}"
        rel = f"{r['wall_ms'] / ref:.3f}" if ref else "-"
        probe = r.get("host_probe_ms")
        probe = "n/a" if probe is None else f"{probe:.2f}"
        lines.append(
            f"{r['schedule']:10s} {r['graphs']!s:>6s} {r['compile']!s:>7s} "
            f"{r['wall_ms']:9.2f} {r['issue_ms']:9.2f} {mem:>8s} {alloc:>8s} {rel:>8s} "
            f"{probe:>8s}"
        )
    lines.append("(vs plain: tp/sp against plain, domino/domino-sp against plain-mb)")
    lines.append(
        "(probe ms: median of a fixed pure-Python loop after each timed step, the host's "
        "speed; a host-bound row slows with it)"
    )
    for k, v in rat.items():
        lines.append(f"  {k:42s} {'n/a' if v is None else format(v, '.3f')}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--model", default=None, help="preset (default: llama3-3b on CUDA, tiny on CPU)"
    )
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--seq", type=int, default=None, help="default 1024 (CUDA) / 128 (CPU)")
    ap.add_argument("--mbs", type=int, default=2)
    ap.add_argument("--splits", type=int, default=2)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--schedules", default="tp,domino,sp,domino-sp")
    ap.add_argument(
        "--variants",
        default="auto",
        help="comma list of eager,graphs,compile,compile+graphs (auto: all on CUDA, eager on CPU)",
    )
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default: print only)")
    ap.add_argument(
        "--profile",
        default="",
        help="comma list of schedule:variant rows to profile one step of "
        "(e.g. tp:graphs,domino:eager); traces go to --profile-dir",
    )
    ap.add_argument("--profile-dir", type=Path, default=Path("bench_traces"))
    ap.add_argument("--skip-plain", action="store_true", help="no plain autograd rows")
    ap.add_argument(
        "--rows",
        default=None,
        help="comma list of rows in the order to run them, plain and plain-mb among the "
        "schedules (e.g. domino-sp,plain-mb,sp); replaces --schedules and --skip-plain; "
        "plain rows run with the first variant only",
    )
    ap.add_argument(
        "--graph-inflight", type=int, default=8, help="StepRunner.graph_inflight (0: no throttle)"
    )
    ap.add_argument("--graph-scope", default="segment", choices=("segment", "step"),
                    help="what one CUDA graph holds in the graphs variants (executor.py)")
    ap.add_argument("--attention", default="auto", choices=units.ATTENTION_KERNELS,
                    help="fused attention kernel on CUDA (units.set_attention)")  # fmt: skip
    ap.add_argument("--wgrad-in", default="joint", choices=WGRAD_INS,
                    help="how domino's column-parallel weight gradients read their input "
                    "(StepRunner.wgrad_in; tp runs one micro-batch, either is the same)")
    ap.add_argument("--abab", type=int, default=0, metavar="PAIRS",
                    help="instead of the rows: time each ratio issue 34 gates on (tp eager / "
                    "plain, domino graphs / tp graphs) in PAIRS ABAB pairs (abab())")
    ap.add_argument("--abab-block", type=int, default=3, help="steps in one side of a pair")
    ap.add_argument("--mb-streams", type=int, default=1, choices=(1, 2),
                    help="domino's micro-batches on one stream (1) or a stream each (2; "
                    "StepRunner.mb_streams; eager and --graph-scope step)")
    a = ap.parse_args(argv)
    units.set_attention(a.attention)
    global GRAPH_INFLIGHT, GRAPH_SCOPE, WGRAD_IN, MB_STREAMS
    WGRAD_IN, MB_STREAMS = a.wgrad_in, a.mb_streams
    GRAPH_INFLIGHT = a.graph_inflight
    GRAPH_SCOPE = a.graph_scope
    dev = torch.device(
        "cuda"
        if a.device == "auto" and torch.cuda.is_available()
        else ("cpu" if a.device == "auto" else a.device)
    )
    cuda = dev.type == "cuda"
    dtype = {
        "auto": torch.bfloat16 if cuda else torch.float32,
        "bfloat16": torch.bfloat16,
        "float32": torch.float32,
    }[a.dtype]
    name = a.model or ("llama3-3b" if cuda else "tiny")
    cfg = preset(name, layers=a.layers)
    seq = a.seq or (1024 if cuda else 128)
    variants = (
        a.variants.split(",")
        if a.variants != "auto"
        else (["eager", "graphs", "compile", "compile+graphs"] if cuda else ["eager"])
    )
    if not cuda:
        torch.set_num_threads(max(1, (os.cpu_count() or 2)))
    inp, tgt = batch(cfg, mbs=a.mbs, seq=seq, seed=7, device=dev)
    config = {
        "model": asdict(cfg),
        "seq": seq,
        "mbs": a.mbs,
        "splits": a.splits,
        "device": torch.cuda.get_device_name(dev) if cuda else platform.processor() or "cpu",
        "dtype": str(dtype).removeprefix("torch."),
        "tp": 1,
        "warmup": a.warmup,
        "steps": a.steps,
        "torch": torch.__version__,
        "step": "forward + backward, no optimizer",
        "graph_inflight": a.graph_inflight,
        "graph_scope": a.graph_scope,
        "wgrad_in": a.wgrad_in,
        "mb_streams": a.mb_streams,
        "attention": units.attention_kernel(dev, dtype),
    }
    if cuda:
        q = torch.empty(1, cfg.n_heads, seq, cfg.head_dim, device=dev, dtype=dtype)
        k = torch.empty(1, cfg.n_kv_heads, seq, cfg.head_dim, device=dev, dtype=dtype)
        config["sdpa_default_backend"] = int(
            torch._fused_sdp_choice(q, k, k, is_causal=True, enable_gqa=True)
        )
    kw = {"dev": dev, "dtype": dtype, "warmup": a.warmup, "steps": a.steps}
    rows = []

    def add(row, fn):
        t0 = time.perf_counter()
        try:
            row.update(fn())
        except Exception as e:  # noqa: BLE001 - a benchmark: record the failure, go on
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            _free(dev)
        row["bench_s"] = time.perf_counter() - t0
        rows.append(row)
        print(table([row], {}).splitlines()[1], flush=True)
        save()  # after every row: a run cut short still leaves its rows

    def write(doc: dict) -> None:  # a.out, whole or not at all (temp name, then rename)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = a.out.with_name(f".{a.out.name}.partial")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, a.out)

    def save():
        if a.out:
            write({"config": config, "rows": rows, "ratios": ratios(rows)})

    if a.abab:
        print(f"{name}, tp 1, seq {seq}, mbs {a.mbs}, {config['device']}: ABAB, medians "
              f"A -> B, pair ratio B / A min / median / max"
              f"{'' if cuda else ' (CPU: a dry run, graphs rows eager)'}")  # fmt: skip
        res = abab(cfg, inp, tgt, pairs=a.abab, block=a.abab_block, splits=a.splits,
                   dev=dev, dtype=dtype, warmup=a.warmup)  # fmt: skip
        if a.out:
            write({"config": config, "abab": res})
            print(f"wrote {a.out}")
        return 0
    plain = {"plain": 1, "plain-mb": a.splits}
    order = (
        a.rows.split(",")
        if a.rows
        else [*(() if a.skip_plain else plain), *a.schedules.split(",")]
    )
    for name in order:
        if name not in plain and name not in SCHEDULES:
            ap.error(f"unknown row {name!r}; rows: {', '.join([*plain, *SCHEDULES])}")
    passes = [v for v in variants if cuda or "graphs" not in v]  # graphs: CUDA only
    for i, v in enumerate(passes or [None]):
        for s in order:
            if s in plain:
                if i == 0:  # the autograd baselines: once, eager, in the first pass
                    add(
                        {"schedule": s, "graphs": False, "compile": False, "splits": plain[s]},
                        lambda n=plain[s]: bench_plain(cfg, inp, tgt, splits=n, **kw),
                    )
                continue
            if v is None:
                continue
            graphs, comp = "graphs" in v, "compile" in v
            prof = a.profile_dir if f"{s}:{v}" in a.profile.split(",") else None
            add(
                {"schedule": s, "graphs": graphs, "compile": comp},
                lambda s=s, g=graphs, c=comp, p=prof: bench_schedule(
                    cfg, inp, tgt, s, splits=a.splits, graphs=g, compile=c, profile_dir=p, **kw
                ),
            )
    rat = ratios(rows)
    print(table(rows, rat))
    if a.out:
        save()
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
