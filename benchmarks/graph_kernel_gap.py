"""Measure the in-graph cost of one kernel on this GPU: the gap from a kernel's end to
the next kernel's start on one stream when a CUDA graph replays them (the constant
``analysis.replay.GRAPH_KERNEL_GAP_NS``, 1000 ns until measured), beside the same
kernels launched eagerly back to back (queued). Needs torch with CUDA.

    python benchmarks/graph_kernel_gap.py --out DIR   # writes DIR/graph_kernel_gap.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def gaps_ns(trace: Path) -> list[int]:
    d = json.loads(trace.read_text())
    ks = sorted((e for e in d["traceEvents"] if e.get("cat") == "kernel"),
                key=lambda e: e["ts"])  # fmt: skip
    out = []
    for a, b in zip(ks, ks[1:]):
        if a.get("tid") == b.get("tid"):
            out.append(round((b["ts"] - (a["ts"] + a["dur"])) * 1000))
    return out


def main() -> int:
    import statistics

    import torch
    from torch.profiler import ProfilerActivity, profile

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--kernels", type=int, default=200)
    ap.add_argument("--numel", type=int, default=1 << 16)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    x = torch.ones(a.numel, device="cuda")
    s = torch.cuda.Stream()

    def body():
        for _ in range(a.kernels):
            x.mul_(1.0000001)

    with torch.cuda.stream(s):  # warm up, then capture
        body()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        body()
    g.replay()
    torch.cuda.synchronize()
    res = {}
    for name, fn in (("graph", g.replay), ("eager_queued", body)):
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as p:
            torch.cuda.synchronize()
            fn()
            torch.cuda.synchronize()
        path = out / f"{name}.json"
        p.export_chrome_trace(str(path))
        gs = [v for v in gaps_ns(path) if v >= 0]
        res[name] = {"n_gaps": len(gs), "median_gap_ns": statistics.median(gs) if gs else None,
                     "p10_gap_ns": sorted(gs)[len(gs) // 10] if gs else None}  # fmt: skip
    res["device"] = torch.cuda.get_device_name()
    res["torch"] = torch.__version__
    (out / "graph_kernel_gap.json").write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
