"""How long one emulated all-reduce takes on this GPU against its model, issued eagerly and
inside a CUDA graph (issue 34; docs/EMULATION.md §3c). Needs CUDA.

    python3 benchmarks/probe_call_graph.py [--numel N] [--calls 20] [--reps 20]
        [--engines ce,sm] [--profile h200-nvlink-tp8] [--out FILE.json]

Per engine, each in µs a call (CUDA events around the work, median of ``--reps`` after 3
warm-ups): ``eager`` (``--calls`` calls issued back to back from Python, each waited
for, as ``probe_lane_link``'s ``one`` times one call), ``graph`` (the same calls captured
once in one CUDA graph and replayed: no host in the way, as in a ``--cuda-graphs`` run),
and ``model`` (``EmulatedComm.expected_ns``). Where ``eager`` exceeds ``graph`` the host
issued the call more slowly than the device ran it: an eager figure over the model then
says nothing of the stand-in. The default size is the headline's micro-batch all-reduce
(seq 4096 x dim 3072, bf16).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def probe(a, engine: str) -> dict:
    import torch

    from _measure import cuda_median_us  # benchmarks/: the script's own folder

    from domino_prof.reference_model.emulate import EmulatedComm

    dev = torch.device("cuda")
    comm = EmulatedComm(a.profile, size=8, rank=0, device=dev, engine=engine)
    x = torch.randn(a.numel, device=dev, dtype=torch.bfloat16)

    def calls():
        for _ in range(a.calls):
            comm.all_reduce(x, async_op=True).wait()

    def timed(f) -> float:
        return cuda_median_us(f, reps=a.reps, per=a.calls)

    eager = timed(calls)
    cap = torch.cuda.Stream(dev)
    cap.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(cap):  # warm-up on the capture stream (the comm's plans)
        calls()
    torch.cuda.current_stream().wait_stream(cap)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=cap):
        calls()
    graph = timed(g.replay)
    res = {"engine": engine, "numel": a.numel, "profile": a.profile,
           "device": torch.cuda.get_device_name(dev), "calls": a.calls,
           "model_us": comm.expected_ns("all_reduce", x) / 1e3, "eager_us": eager,
           "graph_us": graph}  # fmt: skip
    res["graph/model"] = res["graph_us"] / res["model_us"]
    res["eager/model"] = res["eager_us"] / res["model_us"]
    for k, v in res.items():
        print(f"{k:14s} {v:.3f}" if isinstance(v, float) else f"{k:14s} {v}")
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--numel", type=int, default=4096 * 3072)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--profile", default="h200-nvlink-tp8")
    ap.add_argument("--engines", default="ce,sm")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    res = {e: probe(a, e) for e in a.engines.split(",")}
    if a.out is not None:
        a.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
