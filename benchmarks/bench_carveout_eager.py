"""Does ``--carveout-auto`` cost an eager domino-sp step host time?

The auto carveout (carveout.auto_carveout: domino-sp's backward GEMMs beside an emulated
collective target 24 fewer SMs) was chosen with CUDA graphs, where the host issues a
step in ~2 ms. It routes those GEMMs through cuBLASLt (the carveout is read there only)
and toggles torch's BLAS library and carveout at segment edges. Eager, every such GEMM's
host path runs each step, and eager domino-sp is host-bound at the headline (its issue
time follows the host's speed: reports/emulated-h100-2026-12-07e). This times the same
runner's eager steps with its carveout and without (``executor.carveout`` None),
alternating step by step in one process (ABAB, ``_headline.abab``):

    python benchmarks/bench_carveout_eager.py                  # headline, emulated TP 8
    python benchmarks/bench_carveout_eager.py --pairs 20 --json out.json

Printed per mode: medians of wall time, host issue time, the main thread's CPU time and
the host probe with the carveout (``auto``) and without (``none``), and the pair ratios
none / auto. Every TP >= 2 figure is of emulated collectives (``--comm emulate``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _headline import (  # noqa: E402
    abab,
    add_shape_args,
    device_name,
    headline_device,
    ratio_rows,
    run_config,
    shape_json,
    shape_text,
)


class _NoBlas:
    """--device cpu: the carveout's torch knobs are CUDA's; a dry run sets nothing."""

    def set(self, sms) -> None:
        pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_shape_args(ap)
    ap.add_argument("--modes", default="domino-sp")
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)

    import torch

    from domino_prof.reference_model.train import ModeRun

    device = headline_device(a)
    cuda = device.type == "cuda"
    cfg = run_config(a, tuple(a.modes.split(",")))
    print(f"{shape_text(cfg)}, eager; {device_name(device)}")
    report = {"config": shape_json(cfg), "device": device_name(device), "modes": {}}
    for mode in cfg.modes:
        mr = ModeRun(cfg, mode, device=device)
        ex = mr.runner.executor
        auto = ex.carveout
        if auto is None and not cuda:  # a dry run of the loop: a carveout that sets nothing
            from domino_prof.reference_model.carveout import AUTO_SCOPE, Carveout

            auto = ex.carveout = Carveout(24, AUTO_SCOPE, blas=_NoBlas())
        if auto is None:
            print(f"\n{mode}: no carveout here (not CUDA, or not a mode it applies to)")
            continue
        sides = {"auto": lambda ex=ex, auto=auto: setattr(ex, "carveout", auto),
                 "none": lambda ex=ex: setattr(ex, "carveout", None)}  # fmt: skip
        for side in sides.values():  # warm-up: cuBLASLt's and cuBLAS's plans, the allocator
            side()
            for _ in range(2):
                mr.one_step()
        res = abab(mr, sides, a.pairs)
        print(f"\n{mode}: carveout {auto.sms} SMs, scope {auto.scope}")
        row = {"carveout": {"sms": auto.sms, "scope": auto.scope}}
        row.update(ratio_rows(res, "auto", "none"))
        report["modes"][mode] = row
        mr = ex = auto = sides = None  # free the runner before the next mode
        if cuda:
            torch.cuda.empty_cache()
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
