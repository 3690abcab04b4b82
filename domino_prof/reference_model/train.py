"""One rank's training loop: build the shard, run warm-up, timed and profiled steps
for each requested mode on one process group, write traces and metrics.

Run as ``python -m domino_prof.reference_model.train --config FILE --out DIR`` by the
launcher (one process per rank) or under torchrun (``domino-prof run`` detects it).
Rank and world size come from torch.distributed after init; LOCAL_RANK is used only
to pick this process's GPU.

``--comm emulate`` (``cfg.emulated``): ONE process runs rank 0's shard of tp R on one
GPU and torch.distributed is never initialised. Decision: no 1-process group, because
nothing needs one — every collective of an emulated mode goes through its
``EmulatedComm`` (nocomm's through ``SkipComm(R, 0)``), the rank is 0 by construction,
and a barrier of one process is nothing; a group would only add an NCCL communicator
(start-up time, memory, a watchdog thread) to a run that must show no NCCL. Every
trace it writes carries the emulation mark (written at export: ``_export_trace``).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import itertools
import json
import math
import os
import platform
import re
import shutil
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from domino_prof import stats
from domino_prof.emulation import comm_marker
from domino_prof.errors import ConfigError
from domino_prof.io import atomic_write_json
from domino_prof.reference_model import units
from domino_prof.reference_model.comm import pg_options
from domino_prof.reference_model.config import RunConfig, comm_info
from domino_prof.reference_model.schedule import build_runner

EXIT_OOM = 3
EXIT_CONFIG = 4
EXIT_PEER = 5  # a peer rank went away mid-collective (stopped or crashed): not this rank's fault
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
        if self.device.type == "cuda":
            # pinned and non_blocking: a copy from pageable memory makes the host wait for
            # the stream to drain (torch synchronizes after it), so the next step's issue
            # could not start while the device still runs this one (--timing stream)
            t = t.pin_memory().to(self.device, non_blocking=True)
        return t[:, :-1], t[:, 1:]


def _export_trace(prof, path: Path, mark: dict | None = None) -> None:
    """Export the Chrome trace gzipped, atomically: a trace that looks complete is.
    ``mark`` (an emulated run's ``emulation.comm_marker``): written as the document's
    first top-level key while it is compressed (the same object
    ``emulation.mark_trace_file`` adds, without decoding and re-compressing the trace:
    a 28-layer step's trace is tens of MB of JSON)."""
    tmp_json = path.with_name(f".{path.name}.partial.json")
    tmp_gz = path.with_name(f".{path.name}.partial")
    prof.export_chrome_trace(str(tmp_json))
    with open(tmp_json, "rb") as f_in, gzip.open(tmp_gz, "wb", compresslevel=6) as f_out:
        if mark is not None:
            head = f_in.read(1 << 16)
            i = head.find(b"{")
            if i < 0 or head[:i].strip():  # not a JSON object: cannot carry a key
                raise RuntimeError(f"{path}: exported trace is not a JSON object")
            f_out.write(b'{"domino_prof": ' + json.dumps(mark).encode() + b", ")
            f_out.write(head[i + 1 :])
        shutil.copyfileobj(f_in, f_out)
    os.unlink(tmp_json)
    os.replace(tmp_gz, path)


def _rank() -> int:
    """This process's rank: torch.distributed's, or 0 (``--comm emulate``: no group)."""
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _build(cfg: RunConfig, mode: str, *, device, comm_group=None):
    """The mode's model and step runner (construction only, nothing timed)."""
    dtype = DTYPES[cfg.dtype]
    runner = build_runner(cfg, mode, device=device, dtype=dtype, group=comm_group)
    return runner.model, runner


# Interleave the modes' timed blocks when every mode's model and optimizer fit at once:
# always on CPU for states up to this size per rank (the tiny preset needs ~60 MB for
# all five modes); on CUDA never (each mode's peak memory is measured alone, and the
# GPU presets do not fit five times over), so there the modes run whole, one after
# the other, and block i of two modes is not the same moment.
INTERLEAVE_MAX_BYTES = 4 * 2**30


def interleaved(cfg: RunConfig) -> bool:
    """Whether the modes' timed blocks alternate (A B C A B C ...). Decided from the
    config alone, so every rank takes the same branch (gloo pairs collectives in order)."""
    if cfg.device != "cpu" or len(cfg.modes) < 2:
        return False
    # fp32 weights, grads and two AdamW moments: 16 bytes per parameter, split over tp
    per_mode = 16 * cfg.model.n_params() / cfg.tp
    return per_mode * len(cfg.modes) <= INTERLEAVE_MAX_BYTES


def _carveout_record(runner) -> dict | None:
    """run.json's word on --sm-carveout for a mode: the SMs, the scope and the share of
    the issued segments (eager, or captured) that took it (tp: 0 under scope overlap)."""
    c = getattr(getattr(runner, "executor", None), "carveout", None)
    if c is None:
        return None
    on, n = c.counts
    return {"sms": c.sms, "scope": c.scope, "segments_on": on, "segments": n,
            "blas": "cublaslt", "auto": c.auto}  # fmt: skip


def _overlap_gemm_record(runner) -> dict | None:
    """run.json's word on --overlap-gemm for a mode: the share of the issued segments
    (eager, or captured) that ran with the Triton tiles in force (tp: 0, nothing in
    flight); triton-covered also: of the GEMMs issued while covered, how many took a
    tile (the rest had no tile for their shape, or too little cover left)."""
    g = getattr(getattr(runner, "executor", None), "overlap_gemm", None)
    if g is None:
        return None
    on, n = g.counts
    if not g.covered:
        return {"kind": "triton", "segments_on": on, "segments": n}
    return {"kind": "triton-covered", "segments_on": on, "segments": n,
            "gemms_tiled": g.tiled, "gemms_covered": g.seen}  # fmt: skip


PROBE_N = 20_000  # additions in host_probe(): ~0.65 ms on a fast H200 host, ~1.2 on a slow


def host_probe(n: int = PROBE_N) -> float:
    """Milliseconds of a fixed pure-Python loop of ``n`` additions: the host's speed right
    now, which no schedule changes. Lent GPU hosts switch between speeds about 1.8-2x
    apart, for seconds at a time (reports/schedule-h200/compile-host-2026-12-02,
    reports/emulated-h100-2026-12-07d), and the issuing thread's CPU time moves with them
    (issue_cpu_ms = issue_ms there: the thread stays on its core, the core runs slower):
    an eager (host-bound) step's time follows the probe."""
    t = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    return (time.perf_counter() - t) * 1e3


class StepMarks:
    """Marks between a block's steps, timed on the device: CUDA events (recorded on the
    current stream, which the step's last kernels and the optimizer ran on, so a mark
    passes when the step is done), or on CPU the host's clock (a CPU step is done when
    its issue returns)."""

    def __init__(self, device) -> None:
        self.cuda = device.type == "cuda"
        self._marks: list = []

    def mark(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._marks.append(ev)
        else:
            self._marks.append(time.perf_counter())

    def intervals_ms(self) -> list[float]:
        """The ms between consecutive marks (CUDA: after a synchronize)."""
        m = self._marks
        if self.cuda:
            return [a.elapsed_time(b) for a, b in itertools.pairwise(m)]
        return [(b - a) * 1e3 for a, b in itertools.pairwise(m)]


class ModeRun:
    """One mode's model, optimizer and data, and what its steps measured: warm-up, then
    timed blocks (called by the worker in its order), then the profiled steps."""

    def __init__(self, cfg: RunConfig, mode: str, *, device, comm_group=None) -> None:
        self.cfg, self.mode, self.device = cfg, mode, device
        self.model, self.runner = _build(cfg, mode, device=device, comm_group=comm_group)
        # fused AdamW on CUDA: one kernel per parameter group, no full-size temporaries
        fused = {"fused": True} if device.type == "cuda" else {"foreach": True}
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, **fused)
        self.data = TokenSource(cfg, device)
        self.losses: list[float] = []
        self.blocks: list[list[float]] = []  # timed step ms, one list per block
        self.issue_blocks: list[list[float]] = []
        self.issue_cpu_blocks: list[list[float]] = []  # the main thread's CPU time of each
        self.probe_blocks: list[list[float]] = []  # host_probe() after each timed step
        self.memory = None
        self.step = 0

    def one_step(self) -> tuple[float, float]:
        """One training step (the runner overwrites .grad, so no zero_grad). Returns the
        host issue time in ms (until the host has queued the whole step) and the main
        thread's CPU time over the same span (``time.thread_time``). Where the second is
        well below the first, the issuing thread was off its core (descheduled, or blocked
        in a driver call) for the difference: an eager step's time then says more about
        the host than about the schedule."""
        issued, cpu, loss = self._issue_step()
        self.losses.append(float(loss))  # host sync: also makes step timing honest
        return issued, cpu

    def _issue_step(self):
        """Issue one training step (the loss not read: nothing waits for the device).
        Returns (host issue ms, issuing thread's CPU ms, the loss tensor)."""
        runner = self.runner
        inp, tgt = self.data.batch(self.step)
        held = runner.host_wait_s  # waits for the GPU under the graph in-flight cap
        c0, t0 = time.thread_time(), time.perf_counter()
        loss = runner.step(inp, tgt)
        with torch.profiler.record_function("optimizer"):
            self.opt.step()
        issued = (time.perf_counter() - t0 - (runner.host_wait_s - held)) * 1e3
        cpu = (time.thread_time() - c0) * 1e3
        self.step += 1
        return issued, cpu, loss

    def warm_up(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        for _ in range(self.cfg.warmup_steps):
            self.one_step()

    def timed_block(self, n: int) -> None:
        """Time ``n`` steps as one block (``cfg.timing``: :meth:`_stream_block`, or each
        step alone)."""
        if self.cfg.timing == "stream":
            self._stream_block(n)
            return
        times, issues, cpus, probes = [], [], [], []
        for _ in range(n):
            _sync(self.device)
            t0 = time.perf_counter()
            issued, cpu = self.one_step()
            _sync(self.device)
            times.append((time.perf_counter() - t0) * 1e3)
            issues.append(issued)
            cpus.append(cpu)
            probes.append(host_probe())  # outside the step's times
        self._keep_block(times, issues, cpus, probes)

    def _stream_block(self, n: int) -> None:
        """``--timing stream``: the block's steps issued back to back, no loss read between
        them (read after the block), so the host issues step i + 1 while the device still
        runs step i, as a training loop does. Step i's time is the device's, from the mark
        after step i − 1 (the block's start: the device drained) to the mark after step i
        (:class:`StepMarks`). The host probe runs once, after the block: between steps it
        would be host time in the next step's issue. The host issue kept is the block's
        first step's: it is issued into an empty queue, where a later step's issue also
        holds the host's waits for room in a full launch queue (a device-bound step's host
        runs ahead until the queue is full)."""
        marks = StepMarks(self.device)
        _sync(self.device)
        marks.mark()
        issues, cpus, losses = [], [], []
        for _ in range(n):
            issued, cpu, loss = self._issue_step()
            marks.mark()
            issues.append(issued)
            cpus.append(cpu)
            losses.append(loss)
        _sync(self.device)
        self.losses.extend(float(x) for x in losses)
        self._keep_block(marks.intervals_ms(), issues[:1], cpus[:1], [host_probe()])

    def _keep_block(self, times, issues, cpus, probes) -> None:
        self.blocks.append(times)
        self.issue_blocks.append(issues)
        self.issue_cpu_blocks.append(cpus)
        self.probe_blocks.append(probes)

    def note_memory(self) -> None:
        """The peak memory since warm-up began (CUDA; kept for run.json's ``memory``)."""
        if self.device.type == "cuda":
            self.memory = {
                "peak_allocated_gb": torch.cuda.max_memory_allocated(self.device) / 2**30,
                "peak_reserved_gb": torch.cuda.max_memory_reserved(self.device) / 2**30,
            }

    def profile(self, out: Path) -> None:
        cfg, device = self.cfg, self.device
        if self.memory is None:
            self.note_memory()
        mode_dir = out / self.mode
        mode_dir.mkdir(parents=True, exist_ok=True)
        trace_path = mode_dir / f"rank{_rank()}.pt.trace.json.gz"
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
        mark = None
        if cfg.emulated:  # every trace of an emulated run says so (nocomm's too)
            ci = comm_info(cfg)
            mark = comm_marker(ci["profile"], ranks=cfg.tp, rank=0, kernel=ci["kernel"],
                               ctas=ci["ctas"], engine=ci["engine"])  # fmt: skip
        with torch.profiler.profile(
            activities=acts,
            schedule=sched,
            on_trace_ready=lambda p: _export_trace(p, trace_path, mark),
            **kw,
        ) as prof:
            for _ in range(1 + cfg.profile_steps):
                self.one_step()
                prof.step()
        _barrier()

    def result(self, *, interleave: bool) -> dict:
        """The mode's entry of run.json: step_ms is the median of the block medians
        (stats.py), the blocks themselves are kept."""
        cfg = self.cfg
        medians = stats.block_medians(self.blocks)
        step_ms = stats.median(medians)
        issue_ms = stats.median(stats.block_medians(self.issue_blocks))
        tok_s = cfg.mbs * cfg.seq / (step_ms / 1e3)
        device = self.device
        peak = _peak_flops(
            torch.cuda.get_device_name(device) if device.type == "cuda" else "", cfg.dtype
        )
        mfu = (cfg.model.flops_per_token(cfg.seq) * tok_s / (cfg.tp * peak)) if peak else None
        est = stats.median_interval(medians)
        return {
            "trace_dir": self.mode,
            "step_ms": step_ms,
            "step_ms_interval": [est.low, est.high],
            "step_times_ms": [t for b in self.blocks for t in b],
            "blocks": {
                "steps": self.blocks,  # timed step ms, block by block
                "medians_ms": medians,
                "interleaved": interleave,  # True: block i of every mode ran back to back
                "method": stats.METHOD,
            },
            "issue_ms": issue_ms,
            "issue_times_ms": [t for b in self.issue_blocks for t in b],
            "issue_cpu_ms": stats.median(stats.block_medians(self.issue_cpu_blocks)),
            "issue_cpu_times_ms": [t for b in self.issue_cpu_blocks for t in b],
            "host_probe_ms": stats.median(stats.block_medians(self.probe_blocks)),
            "host_probe_times_ms": [t for b in self.probe_blocks for t in b],
            "memory": self.memory,
            "tokens_per_s": tok_s,
            "mfu": mfu,
            # null for a non-finite loss: run.json holds no NaN (io.atomic_write_json), and
            # an emulated all-gather leaves one peer slot as the buffer held it
            # (docs/EMULATION.md section 2), so an emulated SP step's loss may be NaN
            "losses": [x if math.isfinite(x) else None for x in self.losses],
            "numerics": _numerics(cfg, self.mode),
            "carveout": _carveout_record(self.runner),
            "overlap_gemm": _overlap_gemm_record(self.runner),
        }


def _numerics(cfg: RunConfig, mode: str) -> str:
    """run.json's word on the losses: nocomm skips the collectives and an emulated run's
    collectives write no reduced values, so neither computes the real step's numbers."""
    if cfg.emulated:
        return f"meaningless ({comm_info(cfg)['label']})"
    return "meaningless (collectives skipped)" if mode == "nocomm" else "exact"


def block_sizes(cfg: RunConfig) -> list[int]:
    """The timed steps per block: ``block_steps`` each, a shorter last one for the rest."""
    k = cfg.block_steps
    return [k] * (cfg.timed_steps // k) + ([cfg.timed_steps % k] if cfg.timed_steps % k else [])


def _splits_text(cfg: RunConfig, mode: str) -> str:
    """'2', '2 (3+1)' with --split-sizes, '2 x 4 col' with --col-splits."""
    text = str(cfg.splits_for(mode))
    sizes = cfg.split_sizes_for(mode)
    if sizes is not None:
        text += f" ({'+'.join(map(str, sizes))})"
    if cfg.col_splits_for(mode) > 1:
        text += f" x {cfg.col_splits_for(mode)} col"
    return text


def _header(cfg: RunConfig, mode: str) -> str:
    return (
        f"[domino-prof] mode {mode}: {cfg.model.name}, tp {cfg.tp}, seq {cfg.seq}, "
        f"mbs {cfg.mbs}, splits {_splits_text(cfg, mode)}, "
        f"{cfg.device}/{cfg.dtype}{', CUDA graphs' if cfg.cuda_graphs else ''}"
        f"{', compiled' if cfg.compile else ''}"
        f"{', timed back to back (--timing stream)' if cfg.timing == 'stream' else ''}"
        f"{', rank 0 of tp ' + str(cfg.tp) + ', emulated comm' if cfg.emulated else ''}"
    )


def _done(mode: str, r: dict) -> str:
    last = r["losses"][-1] if r["losses"] else None
    loss = f"loss {last:.4f}" if last is not None else "loss not finite"
    if r.get("numerics", "exact") != "exact":
        loss += " (meaningless)"
    return (
        f"[domino-prof] mode {mode}: step {r['step_ms']:.2f} ms, "
        f"{r['tokens_per_s']:.0f} tokens/s, {loss}"
    )


def _dur(s: float) -> str:
    """48 s, 3 min 05 s."""
    s = max(0, round(s))
    return f"{s} s" if s < 100 else f"{s // 60} min {s % 60:02d} s"


class _Progress:
    """Rank 0's progress through the timed blocks: ``tick(mode_steps)`` after each
    (mode, block), a line at most every ``every_s`` seconds and after the last block:
    steps done per mode, time so far, time left (from the pace so far)."""

    def __init__(self, say, *, units: int, steps: int, every_s: float = 5.0) -> None:
        self.say, self.units, self.steps, self.every_s = say, units, steps, every_s
        self.done, self.t0 = 0, time.monotonic()
        self.last = self.t0

    def tick(self, steps_done: int) -> None:
        self.done += 1
        now = time.monotonic()
        if now - self.last < self.every_s and self.done < self.units:
            return
        self.last = now
        spent = now - self.t0
        left = spent / self.done * (self.units - self.done)
        self.say(f"[domino-prof] timed: {steps_done}/{self.steps} steps per mode, "
                 f"{_dur(spent)} so far, about {_dur(left)} left")  # fmt: skip


def run_modes(cfg: RunConfig, *, device, out: Path, comm_group=None) -> dict:
    """Every mode of ``cfg``: {mode: run.json entry}. Interleaved (:func:`interleaved`):
    build every mode, warm each up, then the timed blocks in turn (block 1 of every
    mode, block 2 of every mode, ...), then each mode's profiled steps. Otherwise one
    whole mode after the other: build, warm-up, its blocks, free; then each mode but the
    last built, warmed up and profiled again (no timed step follows a profile: the
    comment below says why). Every rank runs the same sequence (gloo and NCCL pair
    collectives in issue order)."""
    rank = _rank()
    sizes = block_sizes(cfg)
    say = (lambda s: print(s, flush=True)) if rank == 0 else (lambda s: None)
    results: dict[str, dict] = {}
    if interleaved(cfg):
        runs = {}
        for mode in cfg.modes:
            say(_header(cfg, mode))
            runs[mode] = ModeRun(cfg, mode, device=device, comm_group=comm_group)
        t0 = last = time.monotonic()
        for k, r in enumerate(runs.values(), 1):
            r.warm_up()
            now = time.monotonic()
            if now - last >= 5.0 or k == len(runs):  # a line at least every 5 s
                last = now
                say(f"[domino-prof] warm-up ({cfg.warmup_steps} steps per mode): {k}/"
                    f"{len(runs)} modes done, {_dur(now - t0)}")  # fmt: skip
        say(
            f"[domino-prof] timed: {len(sizes)} blocks of {cfg.block_steps} steps per mode"
            f"{' (back to back: --timing stream)' if cfg.timing == 'stream' else ''}, modes "
            "interleaved block by block"
        )
        progress = _Progress(say, units=len(sizes) * len(runs), steps=cfg.timed_steps)
        for i, n in enumerate(sizes):
            for j, r in enumerate(runs.values(), 1):
                r.timed_block(n)
                progress.tick(sum(sizes[: i + (j == len(runs))]))  # what every mode has done
        say(f"[domino-prof] profiling: {cfg.profile_steps} steps per mode")
        for mode, r in runs.items():
            r.profile(out)
            results[mode] = r.result(interleave=True)
            say(_done(mode, results[mode]))
        return results
    # One whole mode after the other, every mode TIMED BEFORE ANY IS PROFILED: a profile
    # leaves the process slower on the host (Kineto keeps CUPTI attached after a trace
    # unless TEARDOWN_CUPTI=1, pytorch/pytorch#144455: every later CUDA call pays), and
    # eager modes are host-bound. Measured on one H100, emulated TP 8, headline shape:
    # the same eager domino-sp code issued a step in 83.5-84 ms as run's sixth mode
    # (five profiles before it) and in 66-67 ms in bench_rope_ab.py, which never
    # profiles, at the same host speed (reports/emulated-h100-2026-12-07e).
    # So each mode is built, warmed up, timed and freed; the modes then run again, each
    # built, warmed up and profiled (the last mode profiles at once: nothing is timed
    # after it). Its run.json entry is the timed pass's: losses of warm-up and timed
    # steps, peak memory at the end of its timed steps.
    later: list[str] = []
    for k, mode in enumerate(cfg.modes):
        say(_header(cfg, mode))
        r = ModeRun(cfg, mode, device=device, comm_group=comm_group)
        r.warm_up()
        progress = _Progress(say, units=len(sizes), steps=cfg.timed_steps)
        for i, n in enumerate(sizes):
            r.timed_block(n)
            progress.tick(sum(sizes[: i + 1]))
        r.note_memory()
        results[mode] = r.result(interleave=False)
        if k == len(cfg.modes) - 1:
            r.profile(out)
        else:
            later.append(mode)
        del r
        _free(device)
        say(_done(mode, results[mode]))
    if later:
        say(f"[domino-prof] profiling: {cfg.profile_steps} steps per mode, each built and "
            f"warmed up again ({', '.join(later)}; {cfg.modes[-1]} was profiled after its "
            f"timed steps)")  # fmt: skip
    for mode in later:
        r = ModeRun(cfg, mode, device=device, comm_group=comm_group)
        r.warm_up()
        r.profile(out)
        del r
        _free(device)
    return results


def _free(device) -> None:
    """Give a freed mode's memory back before the next mode is built (CUDA)."""
    if device.type == "cuda":  # the mode's model, optimizer and graphs are garbage now:
        gc.collect()  # free their reference cycles (autograd ctx, graph pools)
        torch.cuda.empty_cache()  # and give the memory back before the next mode


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
                print("the launcher is gone; this rank stops", file=sys.stderr, flush=True)
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
    backend = cfg.backend
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cfg.emulated:  # one process, no process group (module doc)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world != 1:
            print(
                f"world size {world}: --comm emulate runs ONE process (rank 0's shard of "
                f"--tp {cfg.tp}); launch one process (torchrun --nproc-per-node 1)",
                file=sys.stderr,
            )
            return EXIT_CONFIG
        if use_cuda:
            torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
        rank = 0
    elif use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        opts = pg_options(cfg)
        kw = {} if opts is None else {"pg_options": opts}
        dist.init_process_group(
            backend, timeout=timedelta(seconds=cfg.timeout_s), device_id=device, **kw
        )
    else:
        device = torch.device("cpu")
        dist.init_process_group(backend, timeout=timedelta(seconds=cfg.timeout_s))
    if not cfg.emulated:
        rank, world = dist.get_rank(), dist.get_world_size()
        if world != cfg.tp:
            print(
                f"world size {world} != --tp {cfg.tp}: this reference runs one TP group "
                f"(launch exactly tp processes, or one with --comm emulate)",
                file=sys.stderr,
            )
            return EXIT_CONFIG
    torch.manual_seed(cfg.seed)
    # --sm-carveout: each runner's carveout.Carveout (schedule.build_runner) sets it
    # the attention kernel decided here, eagerly: under --compile the first call would
    # otherwise be traced, and torch.backends.cudnn.is_available() breaks the graph
    units.attention_kernel(device, DTYPES.get(cfg.dtype))
    _inject_fault(rank)
    try:
        results = run_modes(cfg, device=device, out=out)
    except ConfigError as e:  # e.g. EmulatedComm refusing its device: one line, exit 4
        print(str(e), file=sys.stderr, flush=True)
        return EXIT_CONFIG
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
                "backend": "emulated" if cfg.emulated else backend,
                "attention": units.attention_kernel(device, DTYPES.get(cfg.dtype)),
                "rope": units.rope_kernel(device),  # units.set_rope: DOMINO_PROF_ROPE
                "norm": units.norm_kernel(device),  # units.set_norm: DOMINO_PROF_NORM
            },
        )
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return 0


# gloo's words for a peer that went away (its process ended, or it closed the pair)
_LOST_PEER = re.compile(r"Connection (?:reset|closed) by peer|Broken pipe")


def _stop_quietly(signum, frame) -> None:
    """SIGTERM (the launcher ending the run: Ctrl-C, a kill, a failed peer): one line in
    the rank's log, no traceback of the collective it was in."""
    print(f"stopped by the launcher ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
    os._exit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    cfg = RunConfig.from_dict(json.loads(Path(a.config).read_text()))
    if os.environ.get("DOMINO_PROF_LAUNCHER"):
        _watch_parent()
        signal.signal(signal.SIGTERM, _stop_quietly)
    try:
        return worker(cfg, Path(a.out))
    except RuntimeError as e:  # a peer that went away: one line (the launcher names the
        lost = _LOST_PEER.search(str(e))  # rank that failed first, from its own log)
        if lost is None:
            raise
        print(f"a peer rank went away mid-collective ({lost.group(0)}); this rank stops",
              file=sys.stderr, flush=True)  # fmt: skip
        return EXIT_PEER


if __name__ == "__main__":
    sys.exit(main())
