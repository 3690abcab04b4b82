"""``run --timing step`` against ``--timing stream``, A/B in one process: blocks of the
same runner's eager steps timed each way in turn (ABAB), so the host's speed, which on
the lent GPU hosts changes about 2x for seconds at a time (reports/emulated-h100-2026-12-07d,
-07h), is the same for the two halves of a pair. Two run invocations, one per timing,
cannot say what the timing changes: an eager step follows the host's speed of the moment
(reports/emulated-h100-2026-12-07h: eager domino-sp 81-145 ms a step within one run).

    python benchmarks/bench_timing_ab.py                          # headline, emulated TP 8
    python benchmarks/bench_timing_ab.py --modes domino-sp,nocomm --pairs 12 --json out.json
    python benchmarks/bench_timing_ab.py --device cpu --pairs 2   # a dry run (tiny, tp 1)

Per mode, per pair: each half's block of ``--block`` steps timed as run times them
(``ModeRun.timed_block``: ``step``, each step alone with a host probe after it; ``stream``,
back to back with one probe after the block), the block's median step ms, and the host
probe (its mean over the block). Printed: the medians over pairs, the per-pair ratios
stream / step (min / median / max), and the same over the pairs where both halves ran at
the host's fast level (both probes within 1.25x of the run's fastest probe) when there are
any. First, per mode on CUDA: where one issued step makes the host wait for the device
(torch's sync debug mode): a streamed block is only streamed where there is no such wait.
Every TP >= 2 figure is of emulated collectives: the header says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _headline import (
    abab,
    add_shape_args,
    device_name,
    headline_device,
    run_config,
    shape_json,
    shape_text,
)

TIMINGS = ("step", "stream")
FAST = 1.25  # a pair is at the fast level when both probes are within this of the fastest


def pairs_of(mr, cfg, pairs: int, block: int) -> dict:
    """``pairs`` pairs of blocks of ``mr``'s steps, one timed each way (``_headline.abab``:
    step stream, stream step, ...), the runner's own config back after them. Returns
    {timing: {"wall": [block median ms], "probe": [block mean probe], ...}}, one entry per
    pair."""
    sides = {t: (lambda t=t: setattr(mr, "cfg", dataclasses.replace(cfg, timing=t)))
             for t in TIMINGS}  # fmt: skip
    try:
        return abab(mr, sides, pairs, block)
    finally:
        mr.cfg = cfg


# the text of the warning torch's sync debug mode gives at each synchronizing call
# (c10/cuda: warn_or_error_on_sync); setting the mode also warns once a process that it
# "does not yet detect all synchronizing operations", which is not a sync: the first mode
# this benchmark checked showed it as one (torch/cuda/__init__.py, set_sync_debug_mode's
# line; reports/emulated-h100-2026-12-07i)
SYNC_WARNING = "called a synchronizing CUDA operation"


def sync_sites(caught) -> list[str]:
    """``file:line`` of each recorded warning that is a synchronizing call's
    (:data:`SYNC_WARNING`), in order; every other warning is left out."""
    return [f"{Path(w.filename).name}:{w.lineno}" for w in caught
            if SYNC_WARNING in str(w.message)]  # fmt: skip


def host_syncs(mr) -> list[str] | None:
    """Where one issued step (``ModeRun._issue_step``: no loss read) makes the host wait
    for the device: the ``file:line`` of each synchronizing CUDA call torch's sync debug
    mode warns of (:func:`sync_sites`). A streamed block is only streamed if this is
    empty. None on CPU."""
    import warnings

    import torch

    if mr.device.type != "cuda":
        return None
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            mr._issue_step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return sync_sites(caught)


def summary(res: dict) -> dict:
    """Medians of each timing's block ms and probes, the stream / step ratios over all
    pairs, and over the fast-level pairs (None when there are none)."""
    step, stream = res["step"], res["stream"]
    ratios = [b / a for a, b in zip(step["wall"], stream["wall"])]
    fastest = min(step["probe"] + stream["probe"])
    fast = [i for i, (p, q) in enumerate(zip(step["probe"], stream["probe"]))
            if max(p, q) <= FAST * fastest]  # fmt: skip

    def part(idx):
        if not idx:
            return None
        r = [ratios[i] for i in idx]
        return {"pairs": len(idx),
                "step_ms": statistics.median(step["wall"][i] for i in idx),
                "stream_ms": statistics.median(stream["wall"][i] for i in idx),
                "ratio_min": min(r), "ratio_median": statistics.median(r),
                "ratio_max": max(r)}  # fmt: skip

    return {"all": part(range(len(ratios))), "fast": part(fast), "fastest_probe_ms": fastest,
            "step_probe_ms": statistics.median(step["probe"]),
            "stream_probe_ms": statistics.median(stream["probe"])}  # fmt: skip


def _line(name: str, p: dict | None) -> str:
    if p is None:
        return f"  {name:5s} no pair"
    return (f"  {name:5s} {p['pairs']:3d} pairs  step {p['step_ms']:8.2f}  stream "
            f"{p['stream_ms']:8.2f}  stream/step {p['ratio_min']:.3f} / "
            f"{p['ratio_median']:.3f} / {p['ratio_max']:.3f}")  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_shape_args(ap)
    ap.add_argument("--modes", default="domino-sp", help="comma-separated run modes")
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--block", type=int, default=4, help="steps in each half's block")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default="", help="write the pairs and summaries here")
    a = ap.parse_args(argv)
    if a.pairs < 1 or a.block < 2:
        ap.error("--pairs must be >= 1 and --block >= 2")
    if a.json and not Path(a.json).resolve().parent.is_dir():
        ap.error(f"--json {a.json}: its folder does not exist; make it or name another")
    modes = tuple(m for m in a.modes.split(",") if m)

    from domino_prof.reference_model.train import ModeRun

    device = headline_device(a)
    cfg = run_config(a, modes)
    print(f"{shape_text(cfg)}, eager, {device_name(device)}: blocks of {a.block} steps, "
          f"--timing step against stream, {a.pairs} pairs (ABAB); block median ms, ratio "
          f"stream / step min / median / max")  # fmt: skip
    out = {"shape": shape_json(cfg), "device": device_name(device), "block": a.block,
           "modes": {}}  # fmt: skip
    for mode in modes:
        mr = ModeRun(cfg, mode, device=device)
        for _ in range(a.warmup):
            mr.one_step()
        syncs = host_syncs(mr)
        if syncs is not None:
            print(f"{mode}: host syncs in one issued step: {len(syncs)}"
                  f"{' (' + ', '.join(syncs[:6]) + ')' if syncs else ''}")
        res = pairs_of(mr, cfg, a.pairs, a.block)
        s = summary(res)
        out["modes"][mode] = {"pairs": res, "summary": s, "host_syncs": syncs}
        print(f"{mode}: host probe median step {s['step_probe_ms']:.2f} / stream "
              f"{s['stream_probe_ms']:.2f} ms (fastest {s['fastest_probe_ms']:.2f})")
        print(_line("all", s["all"]))
        print(_line("fast", s["fast"]))
        del mr
        if device.type == "cuda":
            import torch

            torch.cuda.empty_cache()
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(out, fh, separators=(",", ":"))
        os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
