"""cuBLAS against the Triton GEMM of ``--overlap-gemm`` (reference_model/triton_mm.py), per
GEMM shape of the headline step, alone and beside the emulated all-reduce (issue 34).
Needs torch with CUDA and Triton.

Shapes: rank 0's shard of llama3-3b at TP 8 (dim 3072, 3 + 2 x 1 heads of 128, ffn 1024,
vocab 16032 rows): forward ``x @ Wᵀ`` and input gradients ``dy @ W`` of one micro-batch
(``--tokens``, 4096: seq 4096, mbs 2 in 2 micro-batches), weight gradients ``dyᵀ @ x``
over the whole batch (2 x tokens: the schedules' W(u) runs once on every micro-batch's
rows). Settings: ``cublas`` (torch.mm) and every tile of ``triton_mm.SWEEP``.

Times are kernel durations from a profiler trace (median over ``--reps``), as
bench_carveout.py's ``--timing kernel``: ``alone`` (the GPU idle between repetitions) and
``beside`` (each repetition launched right after the emulated all-reduce of [4096, 3072]
bf16 started on its own stream, as Domino issues them), with the comm kernel's own time
and the share of the GEMM inside its span. Each Triton result is checked against an fp32
reference (``max_err``: max abs error / max abs reference).

Writes ``bench_overlap_gemm.json`` (after every shape: a cut-off run keeps what it did)
and prints, per shape, cuBLAS's times, the best tile beside the collective and the
``CONFIGS`` line for triton_mm.py. Every comm figure is of the emulated collective.

    python3 benchmarks/bench_overlap_gemm.py --out DIR [--reps 20] [--shapes qkv,w13]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import kernel_events
from bench_carveout import _is_comm, _per_rep

# a tile must beat cuBLAS beside the collective by this much to be chosen (noise margin)
MARGIN = 0.03


def shapes(tokens: int) -> dict[str, tuple[tuple[int, int], tuple[int, int], str]]:
    """name -> (a's storage shape, b's storage shape, form): form ``nt`` = a @ bᵀ (forward,
    b a weight [out, in]), ``nn`` = a @ b (input gradient), ``tn`` = aᵀ @ b (weight
    gradient, a the output gradient [T, out])."""
    d, f, qkv, o, v = 3072, 1024, 5 * 128, 3 * 128, 128256 // 8
    t2 = 2 * tokens
    return {
        "qkv": ((tokens, d), (qkv, d), "nt"),
        "wo": ((tokens, o), (d, o), "nt"),
        "w13": ((tokens, d), (2 * f, d), "nt"),
        "w2": ((tokens, f), (d, f), "nt"),
        "head": ((tokens, d), (v, d), "nt"),
        "qkv.dgrad": ((tokens, qkv), (qkv, d), "nn"),
        "wo.dgrad": ((tokens, d), (d, o), "nn"),
        "w13.dgrad": ((tokens, 2 * f), (2 * f, d), "nn"),
        "w2.dgrad": ((tokens, d), (d, f), "nn"),
        "head.dgrad": ((tokens, v), (v, d), "nn"),
        "qkv.wgrad": ((t2, qkv), (t2, d), "tn"),
        "wo.wgrad": ((t2, d), (t2, o), "tn"),
        "w13.wgrad": ((t2, 2 * f), (t2, d), "tn"),
        "w2.wgrad": ((t2, d), (t2, f), "tn"),
        "head.wgrad": ((t2, v), (t2, d), "tn"),
    }


def operands(a, b, form: str):
    """The GEMM's (A, B) views for ``A @ B`` of a form (no copies)."""
    if form == "nt":
        return a, b.t()
    if form == "tn":
        return a.t(), b
    return a, b


def main() -> int:
    import torch

    from domino_prof.reference_model import triton_mm as T
    from domino_prof.reference_model.emulate import EmulatedComm

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--shapes", default="", help="comma list of shape names (default all)")
    ap.add_argument("--profile", default="h200-nvlink-tp8")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    comm = EmulatedComm(a.profile, size=8, device=dev)
    buf = torch.randn(4096, 3072, device=dev, dtype=torch.bfloat16)
    comm_names = {k["name"] for k in comm.kernel_facts()} | {"emulated_allreduce_paced"}
    res: dict = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
                 "profile": a.profile, "emulated": True, "kernel": comm.kernel_facts(),
                 "reps": a.reps, "tokens": a.tokens, "margin": MARGIN, "rows": [],
                 "choice": {}}  # fmt: skip

    def timed(fn, beside: bool):
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(a.reps):
                torch.cuda.synchronize()
                work = comm.all_reduce(buf, async_op=True) if beside else None
                fn()
                if work is not None:
                    work.wait()
                torch.cuda.synchronize()
        ev = kernel_events(p)
        comms = [e for e in ev if _is_comm(e["name"], comm_names)]
        gemms = [e for e in ev if not _is_comm(e["name"], comm_names)]
        inside = []
        for g in gemms:
            lo, hi = g["ts"], g["ts"] + g["dur"]
            cov = sum(max(0.0, min(hi, c["ts"] + c["dur"]) - max(lo, c["ts"])) for c in comms)
            inside.append(cov / g["dur"] if g["dur"] else 0.0)
        return (
            statistics.median(_per_rep(gemms, a.reps)),
            statistics.median(c["dur"] for c in comms) if comms else None,
            statistics.median(inside) if beside and inside else None,
        )

    names = [s for s in a.shapes.split(",") if s] or list(shapes(a.tokens))
    for name in names:
        sa, sb, form = shapes(a.tokens)[name]
        x = torch.randn(*sa, device=dev, dtype=torch.bfloat16)
        y = torch.randn(*sb, device=dev, dtype=torch.bfloat16)
        A, B = operands(x, y, form)
        m, k = A.shape
        n = B.shape[1]
        c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        ref = A.float() @ B.float()
        scale = ref.abs().max().item()
        rows = []
        settings = [("cublas", None)] + [(t.label(), t) for t in T.SWEEP]
        for label, tile in settings:
            if tile is None:

                def fn(A=A, B=B, c=c):
                    return torch.mm(A, B, out=c)
            else:

                def fn(A=A, B=B, c=c, tile=tile):
                    return T.mm(A, B, out=c, tile=tile)

            try:
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - a probe: record and go on
                rows.append({"shape": name, "setting": label, "error": f"{type(e).__name__}: "
                             f"{str(e)[:200]}"})  # fmt: skip
                print(f"{name:11s} {label:18s} failed: {str(e)[:120]}", flush=True)
                continue
            err = (c.float() - ref).abs().max().item() / scale
            alone, _, _ = timed(fn, False)
            beside, comm_us, share = timed(fn, True)
            rows.append({"shape": name, "mnk": [m, n, k], "form": form, "setting": label,
                         "tile": list(tile) if tile else None, "alone_us": alone,
                         "beside_us": beside, "comm_us": comm_us, "share_inside": share,
                         "max_err": err})  # fmt: skip
            print(f"{name:11s} {label:18s} alone {alone:7.1f} beside {beside:7.1f} us "
                  f"comm {comm_us:6.1f} inside {share:4.2f} err {err:.1e}", flush=True)  # fmt: skip
        res["rows"] += rows
        ok = [r for r in rows if "error" not in r and r["tile"] and r["max_err"] < 2e-2]
        cub = next((r for r in rows if r["setting"] == "cublas" and "error" not in r), None)
        if ok and cub:
            best = min(ok, key=lambda r: r["beside_us"])
            wins = best["beside_us"] < (1 - MARGIN) * cub["beside_us"]
            res["choice"][name] = {
                "mnk": [m, n, k],
                "tile": best["tile"] if wins else None,
                "cublas_alone_us": cub["alone_us"], "cublas_beside_us": cub["beside_us"],
                "triton_alone_us": best["alone_us"], "triton_beside_us": best["beside_us"],
                "best_tile": best["setting"],
            }  # fmt: skip
            print(f"== {name}: cublas {cub['alone_us']:.1f}/{cub['beside_us']:.1f}, best "
                  f"{best['setting']} {best['alone_us']:.1f}/{best['beside_us']:.1f} -> "
                  f"{'triton' if wins else 'cublas'}", flush=True)  # fmt: skip
        tmp = out / "bench_overlap_gemm.json.tmp"
        tmp.write_text(json.dumps(res, indent=1))
        os.replace(tmp, out / "bench_overlap_gemm.json")
    print("CONFIGS = {")
    for name, ch in res["choice"].items():
        t = f"Tile{tuple(ch['tile'])}" if ch["tile"] else "None"
        print(f"    {tuple(ch['mnk'])}: {t},  # {name}")
    print("}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
