"""Does a mode's eager step get slower once the profiler has run in the process?

`run` times each mode's steps, then profiles it, then the next mode (on CUDA the modes
run whole, one after the other): every mode after the first is timed in a process where
torch.profiler has already run. Kineto leaves CUPTI attached after a profile unless
TEARDOWN_CUPTI=1 (pytorch/pytorch#144455), and an attached CUPTI adds to every CUDA call
on the host. This times one mode's eager steps before and after one profile of it (the
run's own ``ModeRun.profile``, a trace into a temporary directory), then again:

    python benchmarks/bench_after_profile.py --mode domino-sp            # headline shape
    TEARDOWN_CUPTI=1 python benchmarks/bench_after_profile.py --mode domino-sp

Printed: the medians of wall time, host issue time and the host probe, before and after,
and after / before. TP >= 2 is emulated (``--comm emulate``): the header says so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _headline import (  # noqa: E402
    add_shape_args,
    device_name,
    headline_device,
    run_config,
    shape_text,
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_shape_args(ap)
    ap.add_argument("--mode", default="domino-sp")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)

    import torch

    from domino_prof.reference_model.train import ModeRun

    device = headline_device(a)
    cfg = run_config(a, (a.mode,), profile_steps=2)
    mr = ModeRun(cfg, a.mode, device=device)
    for _ in range(3):
        mr.one_step()

    def timed(n: int) -> dict:  # run's own timed block: synchronised steps, a probe after each
        mr.timed_block(n)
        return {"wall": mr.blocks[-1], "issue": mr.issue_blocks[-1], "probe": mr.probe_blocks[-1]}

    phases = {"before": timed(a.steps)}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        mr.profile(Path(tmp))
        prof_s = time.perf_counter() - t0
    phases["after"] = timed(a.steps)
    phases["after-2"] = timed(a.steps)
    name = device_name(device)
    print(f"{shape_text(cfg)}, {a.mode} eager; {name}, torch {torch.__version__} (CUDA "
          f"{torch.version.cuda}); TEARDOWN_CUPTI={os.environ.get('TEARDOWN_CUPTI', 'unset')}; "
          f"the profile took {prof_s:.1f} s")  # fmt: skip
    print(f"{'':7s} {'before':>8s} {'after':>8s} {'after-2':>8s}  after / before")
    out = {"env_TEARDOWN_CUPTI": os.environ.get("TEARDOWN_CUPTI"), "device": name,
           "torch": torch.__version__, "cuda": torch.version.cuda, "mode": a.mode,
           "phases": phases}  # fmt: skip
    for what in ("wall", "issue", "probe"):
        med = {p: statistics.median(v[what]) for p, v in phases.items()}
        print(f"{what:7s} {med['before']:8.2f} {med['after']:8.2f} {med['after-2']:8.2f}  "
              f"{med['after'] / med['before']:.3f}")  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
