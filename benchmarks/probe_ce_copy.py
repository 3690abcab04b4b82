"""Probe (issue 34): does a same-device D2D copy (cudaMemcpyAsync, the copy engine) slow
the headline's GEMMs the way the SM-driven comm stand-in does? GEMM loops timed with CUDA
events on the compute stream, the side stream idle / streaming copies / running the paced
emulated all-reduce. One line of JSON per case. Needs CUDA.

    python3 benchmarks/probe_ce_copy.py [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=200)
    a = ap.parse_args()
    dev = torch.device("cuda")
    bf = torch.bfloat16
    gemms = {
        "w13": (torch.randn(4096, 3072, device=dev, dtype=bf), torch.randn(2048, 3072, device=dev, dtype=bf)),
        "head": (torch.randn(4096, 3072, device=dev, dtype=bf), torch.randn(16032, 3072, device=dev, dtype=bf)),
        "w2": (torch.randn(4096, 1024, device=dev, dtype=bf), torch.randn(3072, 1024, device=dev, dtype=bf)),
    }
    side = torch.cuda.Stream(dev)
    n_ar = 4096 * 3072
    chunk = n_ar // 8
    src = torch.randn(chunk * 8, device=dev, dtype=bf)
    dst = torch.empty_like(src)
    rows = []

    def copies(k):
        for i in range(k):
            j = i % 7
            dst[j * chunk:(j + 1) * chunk].copy_(src[(j + 1) * chunk:(j + 2) * chunk])

    # copy rate alone
    for nb in (chunk, 8 * chunk):
        s_, d_ = src[:nb], dst[:nb]
        for _ in range(5):
            d_.copy_(s_)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(50):
            d_.copy_(s_)
        e1.record(); torch.cuda.synchronize()
        us = e0.elapsed_time(e1) * 1e3 / 50
        rows.append({"case": "copy_alone", "bytes": nb * 2, "us": round(us, 2),
                     "GBps_each_way": round(nb * 2 / us / 1e3, 1)})

    from domino_prof.reference_model.emulate import EmulatedComm
    comm = EmulatedComm("h200-nvlink-tp8", size=8, rank=0, device=dev, stream=side)
    art = torch.randn(n_ar, device=dev, dtype=bf)

    def ars(k):
        for _ in range(k):
            comm.all_reduce(art, async_op=True)

    def graph_of(fn):
        g = torch.cuda.CUDAGraph()
        fn()  # warm (compiles the stand-in)
        torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=side):
            fn()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(side)
        with torch.cuda.stream(side):
            g.replay()
        e1.record(side)
        torch.cuda.synchronize()
        return g, e0.elapsed_time(e1) * 1e3

    def in_side(fn):
        def run():
            with torch.cuda.stream(side):
                fn()
        return run

    from domino_prof.emulation import ce as ce_model
    cec = EmulatedComm("h200-nvlink-tp8", size=8, rank=0, device=dev, stream=side, engine="ce")
    tok = 4096 * 3072
    ag_in = torch.randn(tok // 8, device=dev, dtype=bf)
    ag_out = torch.empty(tok, device=dev, dtype=bf)
    rs_out = torch.empty(tok // 8, device=dev, dtype=bf)

    def ce_once(coll):
        if coll == "all_reduce":
            cec.all_reduce(art, async_op=True)
        elif coll == "all_gather":
            cec.all_gather(ag_out, ag_in, async_op=True)
        else:
            cec.reduce_scatter(rs_out, art, async_op=True)

    # the stand-in's reduction kernels (_ce_kernel.reduce) against torch's mean of the chunks:
    # bf16 16-byte vectors, bf16 at an odd offset (scalar), float32
    for name, dtype, off in (("bf16x8", bf, 0), ("bf16", bf, 1), ("f32", torch.float32, 0)):
        n = 8 * 4096
        base = torch.randn(8 * n + off, device=dev, dtype=dtype)
        t_in = base[off:]
        o_base = torch.empty(n + off, device=dev, dtype=dtype)
        o = o_base[off:]
        cec.reduce_scatter(o, t_in, async_op=False)
        torch.cuda.synchronize()
        want = t_in.view(8, n).float().mean(0)
        err = (o.float() - want).abs().max().item()
        tol = 1e-2 if dtype == bf else 1e-5
        rows.append({"case": "ce_reduce_check", "kernel": name, "max_abs_err": err,
                     "ok": bool(err <= tol)})

    # each copy-engine collective: eager duration (events on the comm stream) vs the model
    for coll in ("all_reduce", "all_gather", "reduce_scatter"):
        for _ in range(3):
            ce_once(coll)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(side)
        for _ in range(20):
            ce_once(coll)
        e1.record(side)
        torch.cuda.synchronize()
        args = {"all_reduce": (art,), "all_gather": (ag_out, ag_in),
                "reduce_scatter": (rs_out, art)}[coll]
        rows.append({"case": "ce_eager", "collective": coll,
                     "us": round(e0.elapsed_time(e1) * 1e3 / 20, 2),
                     "model_us": round(cec.expected_ns(coll, *args) / 1e3, 2)})
    sm_ar_model = comm.expected_ns("all_reduce", art) / 1e3

    def spins(k):
        from domino_prof.reference_model import _ce_kernel as ck
        clock = torch.zeros(1, dtype=torch.int64, device=dev)
        st = ck.start("all_reduce", clock.data_ptr())
        w = ck.wait("all_reduce", clock.data_ptr(), 200_000)
        for _ in range(k):
            st(side.cuda_stream)
            w(side.cuda_stream)
        spins.keep = clock

    g_copy, copy_graph_us = graph_of(in_side(lambda: copies(400)))
    g_ar, ar_graph_us = graph_of(lambda: ars(20))
    g_ce, ce_graph_us = graph_of(lambda: [ce_once("all_reduce") for _ in range(20)])
    g_spin, spin_graph_us = graph_of(lambda: spins(20))
    rows.append({"case": "side_graphs", "copies400_us": round(copy_graph_us, 1),
                 "allreduce20_us": round(ar_graph_us, 1), "sm_allreduce_model_us": round(sm_ar_model, 1),
                 "ce_allreduce20_us": round(ce_graph_us, 1), "spin20x200us_us": round(spin_graph_us, 1)})
    for name, (x, w) in gemms.items():
        alone = None
        for case in ("alone", "beside_copies", "beside_sm_allreduce", "beside_ce_allreduce",
                     "beside_spin", "alone"):
            for _ in range(10):
                torch.mm(x, w.t())
            torch.cuda.synchronize()
            if case != "alone":
                g, gus = {"beside_copies": (g_copy, copy_graph_us),
                          "beside_sm_allreduce": (g_ar, ar_graph_us),
                          "beside_ce_allreduce": (g_ce, ce_graph_us),
                          "beside_spin": (g_spin, spin_graph_us)}[case]
                n = int(alone * a.reps * 1.5 / gus) + 2
                with torch.cuda.stream(side):
                    for _ in range(n):
                        g.replay()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            cur = torch.cuda.current_stream()
            e0.record(cur)
            for _ in range(a.reps):
                torch.mm(x, w.t())
            e1.record(cur)
            e1.synchronize()
            s_end = torch.cuda.Event(); s_end.record(side)
            still = not s_end.query()
            torch.cuda.synchronize()
            us = e0.elapsed_time(e1) * 1e3 / a.reps
            if alone is None:
                alone = us
            rows.append({"case": case, "gemm": name, "us": round(us, 2),
                         "ratio": round(us / alone, 3), "side_busy_to_end": still})
    torch.cuda.synchronize()
    for r in rows:
        print(json.dumps(r))
    if a.out:
        Path(a.out).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
