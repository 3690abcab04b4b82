"""Where an eager step's GPU waits for the host: how far the host's issue runs ahead of the
GPU at each segment of a step, without the profiler (whose overhead makes an eager step
~1.6x slower: reports/emulated-h100-2026-12-07g).

    python benchmarks/host_lead.py --mode domino-sp            # emulated TP 8, CUDA
    python benchmarks/host_lead.py --mode domino-sp --all      # every segment, not the cores
    python benchmarks/host_lead.py --mode domino-sp --stream   # steps back to back
    python benchmarks/host_lead.py --device cpu                # a dry run (tiny, tp 1)

Builds run's runner (``ModeRun``), warms it up, then runs ``--steps`` steps as run times
them (sync, step, optimizer, loss read, sync), with a mark at the issue of each core
segment (``C`` / ``F`` forward, ``D`` backward; ``--all``: every segment): the host's time since
the step began and a CUDA event recorded on the stream the segment runs on. The **lead**
of a mark is the event's GPU time less its host time: how long the queue in front of
that segment was when the host issued it. Where the lead is near zero (below
``--starved-ms``), the GPU had caught up with the host there and waited for it: the step
is host-bound in that stretch, and host time cut there comes off the wall; where the
lead is large, host time cut there only lengthens the queue.

``--stream``: the steps issued back to back with no loss read between them, as ``run
--timing stream`` times them: one clock from the first step's start, so a lead carries
over from one step into the next (where the host is ahead at a step's end, the next
step's forward need not wait for it); a step's wall runs from the previous step's end
mark to its own.

Prints, per step: wall ms, host issue ms, the host probe (train.host_probe, after the
step: the host's speed), and per phase (forward marks, backward marks)
the lead's min / median / max and the GPU time between the phase's first and last
starved marks; then the lead at each unit's (attention, MLP) first forward and backward core,
median over the steps. Every TP >= 2 figure is of emulated collectives (``--comm emulate``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _headline import add_shape_args, headline_device, run_config, shape_text

CORES = ("C", "F", "D")  # the core segments: forward (sp_step "C", tp_step "F"), backward
# keys of the forward's segments; the rest are backward's
FWD = ("emb", "N", "C", "F", "H1", "H2", "H3")


def phase(key) -> str:
    return "fwd" if key[0] in FWD else "bwd"


class Marks:
    """A mark at a segment's issue: (key, host ms since the step began, CUDA event)."""

    def __init__(self, cuda: bool, every: bool) -> None:
        import torch

        self.torch, self.cuda, self.every = torch, cuda, every
        self.rows: list = []
        self.pool: list = []
        self.t0 = 0.0
        self.ev0 = None

    def start(self) -> None:
        self.rows.clear()
        self.t0 = time.perf_counter()
        if self.cuda:
            self.ev0 = self._event(0)
            self.ev0.record()

    def _event(self, i: int):
        while len(self.pool) <= i:
            self.pool.append(self.torch.cuda.Event(enable_timing=True))
        return self.pool[i]

    def mark(self, key, force: bool = False) -> None:
        if not (force or self.every or key[0] in CORES):
            return
        ev = None
        if self.cuda:
            ev = self._event(len(self.rows) + 1)
            ev.record()  # the current stream: the one the segment is issued on
        self.rows.append((key, (time.perf_counter() - self.t0) * 1e3, ev))

    def leads(self) -> list[tuple]:
        """(key, host ms, gpu ms, lead ms) of the step's marks, after a sync."""
        out = []
        for key, host, ev in self.rows:
            gpu = self.ev0.elapsed_time(ev) if ev is not None else None
            out.append((key, host, gpu, None if gpu is None else gpu - host))
        return out


def summarize(leads: list[tuple], starved_ms: float) -> dict:
    """Per phase: the leads' min / median / max, the marks starved (lead below
    ``starved_ms``), and the GPU ms from the phase's first to its last starved mark."""
    out = {}
    for ph in ("fwd", "bwd"):
        rows = [r for r in leads if phase(r[0]) == ph and r[3] is not None]
        if not rows:
            continue
        ld = [r[3] for r in rows]
        starved = [r for r in rows if r[3] < starved_ms]
        span = (starved[-1][2] - starved[0][2]) if len(starved) > 1 else 0.0
        out[ph] = {"marks": len(rows), "lead_min": min(ld), "lead_median": statistics.median(ld),
                   "lead_max": max(ld), "starved": len(starved),
                   "gpu_first_ms": rows[0][2], "gpu_last_ms": rows[-1][2],
                   "starved_span_ms": span}  # fmt: skip
    return out


def _sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def _rows(leads: list[tuple]) -> list[list]:
    """The marks as the JSON keeps them: [key, host ms, gpu ms, lead ms]."""
    return [[list(k), h, g, d] for k, h, g, d in leads]


def synced_steps(mr, marks: Marks, a) -> list[dict]:
    """``a.steps`` steps as run's ``--timing step`` times them: each alone, the device
    drained before it and after it (its loss read); a step's wall and marks from its own
    start, a host probe after each."""
    from domino_prof.reference_model.train import host_probe

    out = []
    for _ in range(a.steps):
        _sync(marks.cuda)
        marks.start()
        issued, _cpu = mr.one_step()  # its loss read syncs the host with the step's end
        _sync(marks.cuda)
        wall = (time.perf_counter() - marks.t0) * 1e3
        leads = marks.leads()
        out.append({"wall_ms": wall, "issue_ms": issued, "probe_ms": host_probe(),
                    "phases": summarize(leads, a.starved_ms), "marks": _rows(leads)})
    return out


def stream_steps(mr, marks: Marks, a) -> list[dict]:
    """``--stream``: ``a.steps`` steps issued back to back (no loss read between them, as
    ``run --timing stream``), one clock for all: a mark after each step's issue ends it.
    A step's wall is the device time from the previous step's end mark (the first: the
    drained start) to its own (CPU: the host's); its host probe is the one after the
    block, as run's."""
    from domino_prof.reference_model.train import host_probe

    _sync(marks.cuda)
    marks.start()
    bounds, issues = [0], []
    for i in range(a.steps):
        issued, _cpu, _loss = mr._issue_step()
        marks.mark(("end", i, 0), force=True)
        bounds.append(len(marks.rows))
        issues.append(issued)
    _sync(marks.cuda)
    probe = host_probe()
    leads = marks.leads()
    col = 2 if marks.cuda else 1  # the end marks' device (CUDA) or host clock
    out, prev = [], 0.0
    for i in range(a.steps):
        part = leads[bounds[i] : bounds[i + 1]]
        end = part[-1][col]
        out.append({"wall_ms": end - prev, "issue_ms": issues[i], "probe_ms": probe,
                    "phases": summarize(part[:-1], a.starved_ms),
                    "marks": _rows(part[:-1])})  # fmt: skip
        prev = end
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_shape_args(ap)
    ap.add_argument("--mode", default="domino-sp")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--all", action="store_true", help="a mark at every segment")
    ap.add_argument("--starved-ms", type=float, default=0.05)
    ap.add_argument("--out", default="", help="write the marks and summaries as JSON (a "
                    "folder: host_lead.json in it)")
    ap.add_argument("--stream", action="store_true",
                    help="the steps back to back, as run --timing stream times them (leads "
                    "from the first step's start; a step's wall from the previous one's end)")
    a = ap.parse_args(argv)
    if a.out and Path(a.out).is_dir():
        a.out = str(Path(a.out) / "host_lead.json")
    if a.out and not Path(a.out).resolve().parent.is_dir():
        ap.error(f"--out {a.out}: its folder does not exist; make it or name another")

    from domino_prof.reference_model.executor import SegmentExecutor
    from domino_prof.reference_model.train import ModeRun

    device = headline_device(a)
    cuda = device.type == "cuda"
    cfg = run_config(a, (a.mode,))
    marks = Marks(cuda, a.all)
    run = SegmentExecutor.run

    def marked_run(self, key, fn, *args, **kw):
        marks.mark(key)
        return run(self, key, fn, *args, **kw)

    SegmentExecutor.run = marked_run
    mr = ModeRun(cfg, a.mode, device=device)
    for _ in range(3):
        mr.one_step()
    steps = (stream_steps if a.stream else synced_steps)(mr, marks, a)
    print(f"{shape_text(cfg)}, {a.mode} eager{', steps back to back' if a.stream else ''}, "
          f"marks at "
          f"{'every segment' if a.all else 'the core segments'} (lead = GPU time - host time "
          f"of a mark; starved: lead < {a.starved_ms} ms)")  # fmt: skip
    for i, s in enumerate(steps):
        line = (
            f"step {i}: wall {s['wall_ms']:.2f} ms, issue {s['issue_ms']:.2f} ms, host probe "
            f"{s['probe_ms']:.3f} ms"
        )
        for ph, p in s["phases"].items():
            line += (f" | {ph}: lead {p['lead_min']:.2f}/{p['lead_median']:.2f}/"
                     f"{p['lead_max']:.2f} ms, starved {p['starved']}/{p['marks']}, "
                     f"starved span {p['starved_span_ms']:.2f} ms")  # fmt: skip
        print(line)
    if cuda:
        by_key: dict = {}
        for s in steps:
            for k, _h, _g, d in s["marks"]:
                by_key.setdefault(tuple(k), []).append(d)
        print("median lead (ms) at each unit's first micro-batch core, forward / backward:")
        units_ = sorted({k[1] for k in by_key if k[0] in CORES and isinstance(k[1], int)})
        for u in units_:
            f = by_key.get(("C", u, 0)) or by_key.get(("F", u, 0))
            b = by_key.get(("D", u, 0))
            fs = f"{statistics.median(f):7.2f}" if f else "      -"
            bs = f"{statistics.median(b):7.2f}" if b else "      -"
            print(f"  unit {u:3d}: {fs} / {bs}")
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"mode": a.mode, "shape": shape_text(cfg), "starved_ms": a.starved_ms,
                       "steps": steps}, fh, separators=(",", ":"))  # fmt: skip
        os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
