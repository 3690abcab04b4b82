"""The copy-engine stand-in's two copiers on the GPU (``DOMINO_PROF_CE_COPY``,
emulation/ce.py): ``driver`` (cuMemcpyDtoDAsync on precomputed addresses) must write what
``torch`` (a tensor ``copy_`` a copy) writes, and cost the host less.

    python3 benchmarks/probe_ce_copier.py [--calls 200] [--out FILE.json]

Per collective (all_reduce of [4096, 3072] bf16, reduce_scatter and all_gather of the
same bytes, TP 8, profile h200-nvlink-tp8): the outputs of both copiers on the same input
compared bit for bit; then, for the all-reduce, the host's time to issue ``--calls`` calls
back to back (each ``async_op`` and waited, eager: no graph) and the device's time for
them, per call in µs, for each copier. Prints PASS when every output is equal.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    import torch

    from domino_prof.emulation import ce
    from domino_prof.reference_model.emulate import EmulatedComm

    dev = torch.device("cuda")
    n, R = 4096 * 3072, 8
    comms = {}
    for copier in ce.COPIERS:
        c = EmulatedComm("h200-nvlink-tp8", size=R, rank=0, device=dev, engine="ce")
        c.ce_params = ce.CeParams(copier=copier)
        comms[copier] = c
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(n, device=dev, dtype=torch.bfloat16, generator=g)
    res: dict = {"device": torch.cuda.get_device_name(dev), "calls": a.calls}
    ok = True
    for coll in ("all_reduce", "reduce_scatter", "all_gather"):
        outs = {}
        for copier, c in comms.items():
            t = x.clone()
            if coll == "all_reduce":
                c.all_reduce(t, async_op=False)
                outs[copier] = t
            elif coll == "reduce_scatter":
                o = torch.empty(n // R, device=dev, dtype=t.dtype)
                c.reduce_scatter(o, t, async_op=False)
                outs[copier] = o
            else:
                src = t[: n // R].clone()
                o = torch.empty(n, device=dev, dtype=t.dtype)
                c.all_gather(o, src, async_op=False)
                outs[copier] = o
        torch.cuda.synchronize()
        same = torch.equal(outs["torch"], outs["driver"])
        ok &= same
        row = {"equal": same}
        for copier, c in comms.items() if coll == "all_reduce" else ():
            t = x.clone()
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            h0 = time.perf_counter()
            for _ in range(a.calls):
                c.all_reduce(t, async_op=True).wait()
            h1 = time.perf_counter()
            e.record()
            torch.cuda.synchronize()
            row[copier] = {"host_us_per_call": (h1 - h0) / a.calls * 1e6,
                           "device_us_per_call": s.elapsed_time(e) * 1e3 / a.calls}  # fmt: skip
        res[coll] = row
        print(coll, json.dumps(row))
    res["pass"] = ok
    print("PASS" if ok else "FAIL")
    if a.out is not None:
        a.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
