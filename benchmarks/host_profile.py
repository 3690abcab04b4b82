"""Where an eager step's host time goes: cProfile of a mode's steps at the headline shape,
and the aten ops each line of the package dispatches.

    python benchmarks/host_profile.py --mode domino-sp            # emulated TP 8, CUDA
    python benchmarks/host_profile.py --mode domino-sp --ops      # + aten ops by site
    python benchmarks/host_profile.py --device cpu                # a dry run (tiny, tp 1)

Builds run's runner (``ModeRun``), warms it up, times 3 steps (run's own timed block:
wall, host issue, host probe), then profiles ``--steps`` steps with cProfile and prints
the top functions by own time and by cumulative time (cProfile slows each Python call,
so read shares and call counts, not milliseconds). ``--ops``: one more step under a
TorchDispatchMode that attributes each aten op to the innermost line of domino_prof
that issued it, per layer (what a fused kernel or a cached object could remove). Every
TP >= 2 figure is of emulated collectives (``--comm emulate``).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import pstats
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _headline import add_shape_args, headline_device, run_config, shape_text  # noqa: E402


def op_sites(step, n_layers: int, top: int = 45) -> str:
    """The aten ops of one ``step()`` by the innermost domino_prof line that issued them."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Sites(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.c: collections.Counter = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            fr = [x for x in traceback.extract_stack() if "domino_prof" in x.filename][-1:]
            site = (f"{Path(fr[0].filename).name}:{fr[0].lineno}:{fr[0].name}" if fr
                    else "?")  # fmt: skip
            self.c[(str(func).removeprefix("aten."), site)] += 1
            return func(*args, **(kwargs or {}))

    with Sites() as s:
        step()
    by_site: collections.Counter = collections.Counter()
    for (_, site), v in s.c.items():
        by_site[site] += v
    lines = [f"aten ops in one step: {sum(s.c.values())} ({n_layers} layers); per layer:"]
    lines += [f"{v / n_layers:7.1f}  {site}" for site, v in by_site.most_common(top)]
    lines.append("by op and site, per layer:")
    lines += [f"{v / n_layers:7.1f}  {op} {site}" for (op, site), v in s.c.most_common(top)]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_shape_args(ap)
    ap.add_argument("--mode", default="domino-sp")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=45)
    ap.add_argument("--ops", action="store_true", help="also the aten ops by site")
    a = ap.parse_args(argv)

    from domino_prof.reference_model.train import ModeRun

    device = headline_device(a)
    cfg = run_config(a, (a.mode,))
    mr = ModeRun(cfg, a.mode, device=device)
    for _ in range(3):
        mr.one_step()
    mr.timed_block(3)
    print(f"{shape_text(cfg)}, {a.mode} eager: steps {[round(x, 2) for x in mr.blocks[-1]]} ms, "
          f"issue {[round(x, 2) for x in mr.issue_blocks[-1]]}, "
          f"probe {[round(x, 3) for x in mr.probe_blocks[-1]]}")  # fmt: skip
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(a.steps):
        mr.one_step()
    pr.disable()
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats(key).print_stats(a.top)
        print(s.getvalue())
    if a.ops:
        print(op_sites(mr.one_step, cfg.model.n_layers, a.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
