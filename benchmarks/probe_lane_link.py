"""The shared link of two emulated comm streams (``EmulatedComm.lane_sibling``,
``DOMINO_PROF_LANE_COMM=own``), checked on the GPU: two copy-engine all-reduces issued at
once, one on each stream, must take as long as the two one after the other (they share
one link), where two comms that share no link take as long as one.

    python3 benchmarks/probe_lane_link.py [--numel N] [--reps 20] [--engines ce,sm] [--out FILE.json]

Times (CUDA events on the issuing stream, median of ``--reps``, after 3 warm-ups), each
in µs: ``one`` (a call alone), ``pair_link`` (a call on each of comm and its lane
sibling, both ready at once), ``pair_free`` (the same on two comms with no shared link),
``staggered`` (the sibling's call ready half a call after the first's: a sleep kernel
before it on its stream). Prints PASS when pair_link and staggered each lie between
one + model and 2 one, 5 % either side (``link_holds``): the link gives each call a slot of
its modelled time (``EmulatedComm.expected_ns``), so the second call starts at least a
model after the first; a call that runs over its model (issued eagerly, the host's
issue time: on an H100 the sm stand-in took 1.12 and the copies 1.33 of the model here,
and 1.02 and 1.01 inside a CUDA graph, benchmarks/probe_call_graph.py) ends later, up to
fully one after the other. pair_free / one shows what the link changes: near
1 for sm; near 2 for ce, whose copies share the device's copy engines with or without it. Per engine: ``ce`` (copies; the link taken in the call's
start) and ``sm`` (the paced stand-in kernel; the link taken by a gate kernel before it).
Needs CUDA (the stand-in's kernels); the default size is
the headline's micro-batch all-reduce (seq 4096 x dim 3072, bf16), profile
h200-nvlink-tp8.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--numel", type=int, default=4096 * 3072)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--profile", default="h200-nvlink-tp8")
    ap.add_argument("--engines", default="ce,sm")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    allres = {e: probe(a, e) for e in a.engines.split(",")}
    ok = all(r["pass"] for r in allres.values())
    print("PASS" if ok else "FAIL")
    if a.out is not None:
        a.out.write_text(json.dumps(allres, indent=1) + "\n")
    return 0 if ok else 1


def probe(a, engine: str) -> dict:
    import torch

    from _measure import cuda_median_us  # benchmarks/: the script's own folder

    from domino_prof.reference_model.emulate import EmulatedComm

    dev = torch.device("cuda")

    def comm():
        return EmulatedComm(a.profile, size=8, rank=0, device=dev, engine=engine)

    base = comm()
    sib = base.lane_sibling()
    free_a, free_b = comm(), comm()
    x, y = (torch.randn(a.numel, device=dev, dtype=torch.bfloat16) for _ in range(2))
    side = torch.cuda.Stream(dev)
    model_ns = base.expected_ns("all_reduce", x)

    def one():
        base.all_reduce(x, async_op=True).wait()

    def pair(c1, c2, delay_ns: int = 0):
        def f():
            w1 = c1.all_reduce(x, async_op=True)
            if delay_ns:  # the second call ready later: issued from a stream that sleeps
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    torch.cuda._sleep(int(delay_ns * cycles_per_ns))
                    w2 = c2.all_reduce(y, async_op=True)
            else:
                w2 = c2.all_reduce(y, async_op=True)
            w1.wait()
            w2.wait()
        return f

    # torch.cuda._sleep counts clock cycles: calibrate against events
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    torch.cuda._sleep(10_000_000)
    e.record()
    torch.cuda.synchronize()
    cycles_per_ns = 10_000_000 / (s.elapsed_time(e) * 1e6)

    def timed(f) -> float:
        return cuda_median_us(f, reps=a.reps)

    res = {"engine": engine, "numel": a.numel, "profile": a.profile, "model_us": model_ns / 1e3,
           "device": torch.cuda.get_device_name(dev),
           "one": timed(one), "pair_link": timed(pair(base, sib)),
           "pair_free": timed(pair(free_a, free_b)),
           "staggered": timed(pair(base, sib, delay_ns=model_ns // 2))}  # fmt: skip
    res["pair_link/2one"] = res["pair_link"] / (2 * res["one"])
    res["staggered/2one"] = res["staggered"] / (2 * res["one"])
    res["pair_free/one"] = res["pair_free"] / res["one"]
    res["pass"] = link_holds(res["one"], res["model_us"], res["pair_link"], res["staggered"])
    for k, v in res.items():
        print(f"{k:16s} {v:.3f}" if isinstance(v, float) else f"{k:16s} {v}")
    return res


def link_holds(one: float, model: float, *pairs: float, tol: float = 0.05) -> bool:
    """Each of ``pairs`` (two calls through one link, µs) within [one + model, 2 one],
    ``tol`` either side: serialised by the link's model-length slots, at most by the calls'
    own durations."""
    return all((one + model) * (1 - tol) <= p <= 2 * one * (1 + tol) for p in pairs)


if __name__ == "__main__":
    sys.exit(main())
