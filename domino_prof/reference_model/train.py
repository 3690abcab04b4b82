"""One rank's training loop: build the shard, run warm-up, timed and profiled steps
for each requested mode on one process group, write traces and metrics.

Run as ``python -m domino_prof.reference_model.train --config FILE --out DIR`` by the
launcher (one process per rank) or under torchrun (``domino-prof run`` detects it).
Rank and world size come from torch.distributed after init; LOCAL_RANK is used only
to pick this process's GPU.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import platform
import shutil
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from domino_prof.io import atomic_write_json
from domino_prof.reference_model import units
from domino_prof.reference_model.config import RunConfig
from domino_prof.reference_model.schedule import build_runner

EXIT_OOM = 3
EXIT_CONFIG = 4
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# dense bf16 peak by device name (vendor datasheets), for MFU; unknown devices -> no MFU
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12}


def _peak_flops(name: str, dtype: str) -> float | None:
    if dtype == "float32":
        return None
    for key, v in PEAK_BF16.items():
        if key in name:
            return v
    return None


class TokenSource:
    """Deterministic batches, identical on every rank: synthetic (seeded per step) or
    windows of a token file (``.npy`` 1-D ints, or ``.bin`` raw uint16)."""

    def __init__(self, cfg: RunConfig, device) -> None:
        self.cfg, self.device = cfg, device
        self.tokens = None
        if cfg.data:
            import numpy as np

            p = Path(cfg.data)
            arr = np.load(p) if p.suffix == ".npy" else np.fromfile(p, dtype=np.uint16)
            self.tokens = torch.from_numpy(arr.astype("int64") % cfg.model.vocab_size)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.cfg
        n = c.mbs * (c.seq + 1)
        if self.tokens is None:
            g = torch.Generator().manual_seed(c.seed * 7919 + step)
            t = torch.randint(0, c.model.vocab_size, (c.mbs, c.seq + 1), generator=g)
        else:
            start = (step * n) % max(1, len(self.tokens) - n)
            t = self.tokens[start : start + n].view(c.mbs, c.seq + 1)
        t = t.to(self.device)
        return t[:, :-1], t[:, 1:]


def _export_trace(prof, path: Path) -> None:
    """Export the Chrome trace gzipped, atomically: a trace that looks complete is."""
    tmp_json = path.with_name(f".{path.name}.partial.json")
    tmp_gz = path.with_name(f".{path.name}.partial")
    prof.export_chrome_trace(str(tmp_json))
    with open(tmp_json, "rb") as f_in, gzip.open(tmp_gz, "wb", compresslevel=6) as f_out:
        shutil.copyfileobj(f_in, f_out)
    os.unlink(tmp_json)
    os.replace(tmp_gz, path)


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_mode(cfg: RunConfig, mode: str, *, device, out: Path, comm_group=None) -> dict:
    rank = dist.get_rank()
    dtype = DTYPES[cfg.dtype]
    runner = build_runner(cfg, mode, device=device, dtype=dtype, group=comm_group)
    model = runner.model
    # fused AdamW on CUDA: one kernel per parameter group, no full-size temporaries
    fused = {"fused": True} if device.type == "cuda" else {"foreach": True}
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, **fused)
    data = TokenSource(cfg, device)
    losses: list[float] = []
    step_times: list[float] = []
    issue_times: list[float] = []
    step = 0

    def one_step() -> float:
        """One training step (the runner overwrites .grad, so no zero_grad). Returns the
        host issue time in ms: until the host has queued the whole step."""
        nonlocal step
        inp, tgt = data.batch(step)
        held = runner.host_wait_s  # waits for the GPU under the graph in-flight cap
        t0 = time.perf_counter()
        loss = runner.step(inp, tgt)
        with torch.profiler.record_function("optimizer"):
            opt.step()
        issued = (time.perf_counter() - t0 - (runner.host_wait_s - held)) * 1e3
        losses.append(float(loss))  # host sync: also makes step timing honest
        step += 1
        return issued

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(cfg.warmup_steps):
        one_step()
    for _ in range(cfg.timed_steps):
        _sync(device)
        t0 = time.perf_counter()
        issue_times.append(one_step())
        _sync(device)
        step_times.append((time.perf_counter() - t0) * 1e3)
    memory = None
    if device.type == "cuda":
        memory = {
            "peak_allocated_gb": torch.cuda.max_memory_allocated(device) / 2**30,
            "peak_reserved_gb": torch.cuda.max_memory_reserved(device) / 2**30,
        }

    mode_dir = out / mode
    mode_dir.mkdir(parents=True, exist_ok=True)
    trace_path = mode_dir / f"rank{rank}.pt.trace.json.gz"
    acts = [torch.profiler.ProfilerActivity.CPU]
    kw = {}
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
        try:  # Stream Wait Event edges for the stream-switch analysis
            kw["experimental_config"] = torch._C._profiler._ExperimentalConfig(
                enable_cuda_sync_events=True
            )
        except (AttributeError, TypeError):
            pass
    sched = torch.profiler.schedule(wait=0, warmup=1, active=cfg.profile_steps, repeat=1)
    with torch.profiler.profile(
        activities=acts, schedule=sched, on_trace_ready=lambda p: _export_trace(p, trace_path), **kw
    ) as prof:
        for _ in range(1 + cfg.profile_steps):
            one_step()
            prof.step()
    dist.barrier()
    tokens = cfg.mbs * cfg.seq
    step_ms = sorted(step_times)[len(step_times) // 2]
    issue_ms = sorted(issue_times)[len(issue_times) // 2]
    tok_s = tokens / (step_ms / 1e3)
    peak = _peak_flops(
        torch.cuda.get_device_name(device) if device.type == "cuda" else "", cfg.dtype
    )
    mfu = (cfg.model.flops_per_token(cfg.seq) * tok_s / (cfg.tp * peak)) if peak else None
    return {
        "trace_dir": mode,
        "step_ms": step_ms,
        "step_times_ms": step_times,
        "issue_ms": issue_ms,
        "issue_times_ms": issue_times,
        "memory": memory,
        "tokens_per_s": tok_s,
        "mfu": mfu,
        "losses": losses,
        "numerics": "meaningless (collectives skipped)" if mode == "nocomm" else "exact",
    }


def _versions(device) -> dict:
    v = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    if device.type == "cuda":
        v["cuda"] = torch.version.cuda
        try:
            v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - version probing only
            v["nccl"] = None
    return v


def _watch_parent() -> None:
    """Exit if the launcher died (orphaned ranks must not hang on a collective)."""
    ppid = os.getppid()

    def loop() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != ppid:
                os._exit(1)

    threading.Thread(target=loop, daemon=True).start()


def _inject_fault(rank: int) -> None:
    """Test hook: DOMINO_PROF_FAULT=crash@R or hang@R makes rank R crash or hang
    (used by the fault-handling tests; never set in normal use)."""
    spec = os.environ.get("DOMINO_PROF_FAULT", "")
    if not spec:
        return
    what, _, r = spec.partition("@")
    if r and int(r) != rank:
        return
    if what == "crash":
        print(f"injected crash on rank {rank}", file=sys.stderr, flush=True)
        os._exit(7)
    if what == "hang":
        time.sleep(10**6)


def worker(cfg: RunConfig, out: Path) -> int:
    """The body every rank runs. Returns a process exit code."""
    # torch.profiler imports torch.distributed.nn lazily; imported after init, that
    # module keeps the live process group in default arguments, so
    # destroy_process_group cannot join gloo's threads (aborts at exit): import it first
    import torch.distributed.nn

    units.set_attention(cfg.attention)
    use_cuda = cfg.device == "cuda"
    backend = "nccl" if use_cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        kw = {}
        if cfg.high_priority_comm:  # collectives on a high-priority stream (see README)
            opts = dist.ProcessGroupNCCL.Options()
            opts.is_high_priority_stream = True
            kw["pg_options"] = opts
        dist.init_process_group(
            backend, timeout=timedelta(seconds=cfg.timeout_s), device_id=device, **kw
        )
    else:
        device = torch.device("cpu")
        dist.init_process_group(backend, timeout=timedelta(seconds=cfg.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != cfg.tp:
        print(
            f"world size {world} != --tp {cfg.tp}: this reference runs one TP group "
            f"(launch exactly tp processes)",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    torch.manual_seed(cfg.seed)
    _inject_fault(rank)
    results = {}
    try:
        for mode in cfg.modes:
            if rank == 0:
                print(
                    f"[domino-prof] mode {mode}: {cfg.model.name}, tp {cfg.tp}, seq {cfg.seq}, "
                    f"mbs {cfg.mbs}, splits {cfg.splits_for(mode)}, "
                    f"{cfg.device}/{cfg.dtype}{', CUDA graphs' if cfg.cuda_graphs else ''}"
                    f"{', compiled' if cfg.compile else ''}",
                    flush=True,
                )
            results[mode] = run_mode(cfg, mode, device=device, out=out)
            if use_cuda:  # the mode's model, optimizer and graphs are garbage now:
                gc.collect()  # free their reference cycles (autograd ctx, graph pools)
                torch.cuda.empty_cache()  # and give the memory back before the next mode
            if rank == 0:
                r = results[mode]
                print(
                    f"[domino-prof] mode {mode}: step {r['step_ms']:.2f} ms, "
                    f"{r['tokens_per_s']:.0f} tokens/s, loss {r['losses'][-1]:.4f}",
                    flush=True,
                )
    except torch.OutOfMemoryError:
        print(
            f"out of memory on rank {rank} ({device}) with {cfg.model.name}, seq {cfg.seq}, "
            f"mbs {cfg.mbs}, tp {cfg.tp}, layers {cfg.model.n_layers}: reduce --mbs, --seq "
            f"or --layers",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_OOM
    if rank == 0:
        devices = []
        if use_cuda:
            p = torch.cuda.get_device_properties(device)
            devices = [
                {
                    "name": p.name,
                    "memory_gb": round(p.total_memory / 2**30, 1),
                    "count_visible": torch.cuda.device_count(),
                }
            ]
        atomic_write_json(
            out / "ranks_result.json",
            {
                "results": results,
                "versions": _versions(device),
                "devices": devices,
                "world_size": world,
                "backend": backend,
                "attention": units.attention_kernel(device, DTYPES.get(cfg.dtype)),
            },
        )
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    cfg = RunConfig.from_dict(json.loads(Path(a.config).read_text()))
    if os.environ.get("DOMINO_PROF_LAUNCHER"):
        _watch_parent()
    return worker(cfg, Path(a.out))


if __name__ == "__main__":
    sys.exit(main())
