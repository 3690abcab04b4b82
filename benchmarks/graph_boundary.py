"""The device-side gap between two CUDA graphs replayed back to back on one stream, by the
number of distinct graphs a step cycles through. Needs torch with CUDA.

Why: in the headline run's traces (emulated TP 8, llama3-3b, 28 layers, CUDA graphs,
one H200, 2026-12-03) the gap at a graph boundary is ~3 µs in nocomm (118 graphs per
step) but ~10-11 µs in domino and domino-nocomm (236 graphs per step) with the same
kernels on both sides of it and the host milliseconds ahead, while at 8 layers (62 and
124 graphs) domino's is ~4 µs. This isolates the count: N graphs of K small kernels
each (the same kernels in every graph), replayed in order, the host held to
``--inflight`` graphs ahead as the runner does (executor._throttle), one round profiled;
per N the median boundary gap and the median within-graph gap.

    python3 benchmarks/graph_boundary.py --out DIR [--counts 32,64,118,128,160,236]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import kernel_events


def main() -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--counts", default="32,64,100,118,128,140,160,200,236")
    ap.add_argument("--kernels", type=int, default=24)
    ap.add_argument("--numel", type=int, default=1 << 22)
    ap.add_argument("--inflight", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    s = torch.cuda.Stream()
    pool = torch.cuda.graph_pool_handle()
    rows = []
    for n in [int(x) for x in a.counts.split(",")]:
        xs = [torch.ones(a.numel, device="cuda") for _ in range(2)]
        graphs = []
        with torch.cuda.stream(s):
            for x in xs:  # warm up
                x.mul_(1.0)
        torch.cuda.synchronize()
        for i in range(n):
            g = torch.cuda.CUDAGraph()
            x = xs[i % 2]
            with torch.cuda.stream(s):
                g.capture_begin(pool=pool)
                for _ in range(a.kernels):
                    x.mul_(1.0000001)
                g.capture_end()
            graphs.append(g)
        torch.cuda.synchronize()

        def cycle(graphs=graphs):
            evs = []
            for i, g in enumerate(graphs):
                g.replay()
                if i % max(1, a.inflight // 4) == 0:
                    e = torch.cuda.Event()
                    e.record()
                    evs.append(e)
                    if len(evs) > 4:
                        evs.pop(0).synchronize()

        for _ in range(a.rounds):
            cycle()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as p:
            cycle()
            torch.cuda.synchronize()
        ev = kernel_events(p)
        bound, within = [], []
        for x, y in itertools.pairwise(ev):
            gap = y["ts"] - (x["ts"] + x["dur"])
            same = x["args"].get("correlation") == y["args"].get("correlation")
            (within if same else bound).append(gap)
        row = {"graphs": n, "kernels": a.kernels, "boundary_gap_us": statistics.median(bound),
               "boundary_p90_us": sorted(bound)[int(0.9 * len(bound))],
               "within_gap_us": statistics.median(within), "n_boundaries": len(bound)}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
        del graphs
        torch.cuda.synchronize()
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    tmp = out / "graph_boundary.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out / "graph_boundary.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
