"""GPU correctness check (NCCL, bf16): domino (2, 3, 4 splits) and tp vs the unsharded
model, plus proof from a trace that NCCL and compute kernels really run concurrently.

    python benchmarks/gpu_verify.py --tp 2 --out DIR
    python benchmarks/gpu_verify.py --tp 2 --backend gloo --out DIR   # one GPU
    python benchmarks/gpu_verify.py --tp 1 --mb-streams --out DIR     # --mb-streams 2's rows
    python benchmarks/gpu_verify.py --tp 2 --backend gloo --sp-keep --out DIR  # SP_VARIANTS' rows

Writes DIR/gpu_verify.json. Uses a llama3-3b-shaped model cut to 2 layers (the
unsharded reference must fit one GPU next to the shard) and seq 1024.

``--backend gloo`` runs every rank on ``cuda:0`` (NCCL refuses two ranks on one
device) with gloo collectives on the CUDA tensors: on a one-GPU machine it checks the
tp >= 2 schedules' multi-rank paths on the GPU (streams, events, CUDA graphs with
collectives between captured segments, gradients against the unsharded model); it says
nothing about NCCL's overlap or speed, so the concurrency check is skipped.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from domino_prof.reference_model.config import ATTENTION_KERNELS, llama3_3b
from domino_prof.reference_model.comm import ProcessGroupComm
from domino_prof.reference_model.parallel import shard_model
from domino_prof.reference_model.schedule import StepRunner
from domino_prof.reference_model.verify import batch, compare, reference_grads


def concurrency_from_trace(path: Path) -> dict:
    """Independent of domino_prof.trace: nccl kernels vs other kernels on other streams."""
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ks = [e for e in ev if e.get("cat") == "kernel"]
    comm = [(e["ts"], e["ts"] + e["dur"], e["tid"]) for e in ks if "nccl" in e["name"].lower()]
    comp = sorted(
        (e["ts"], e["ts"] + e["dur"], e["tid"]) for e in ks if "nccl" not in e["name"].lower()
    )
    overlapped = 0
    total = 0.0
    import bisect

    starts = [c[0] for c in comp]
    for s, e, tid in comm:
        total += e - s
        i = bisect.bisect_left(starts, e)
        if any(c[1] > s and c[2] != tid for c in comp[max(0, i - 200) : i]):
            overlapped += 1
    return {
        "comm_kernels": len(comm),
        "comm_kernels_concurrent_with_compute": overlapped,
        "comm_streams": sorted({c[2] for c in comm}),
        "compute_streams": sorted({c[2] for c in comp})[:8],
    }


# --mb-streams: the micro-batch lanes' variants (schedule, splits, graphs, compile, extra
# StepRunner kwargs); a whole-step graph captures the collectives, so with gloo (not
# capturable) the graph rows are left out
LANES = [
    ("domino", 2, False, False, {"mb_streams": 2}),
    ("domino", 2, False, False, {"mb_streams": 2, "wgrad_in": "accumulate"}),
    ("domino", 2, False, False, {"mb_streams": 2, "col_splits": 2}),
    ("domino", 2, True, False, {"mb_streams": 2, "graph_scope": "step"}),
    ("domino", 2, True, False, {"mb_streams": 2, "graph_scope": "step", "wgrad_in": "accumulate"}),
    ("domino", 2, True, False, {"graph_scope": "step"}),
]
# --sp-wgrad-input keep: the forward's gathered norm outputs read by the backward's weight
# gradients (sp_step.py), eager and under a CUDA graph per segment, beside regather; and
# --sp-residual fold
SP_VARIANTS = [
    ("sp", 1, False, False, {"sp_wgrad_input": "keep"}),
    ("domino-sp", 2, False, False, {}),
    ("domino-sp", 2, False, False, {"sp_wgrad_input": "keep"}),
    ("domino-sp", 2, False, False, {"sp_wgrad_input": "keep", "wgrad_in": "accumulate"}),
    ("domino-sp", 2, True, False, {"sp_wgrad_input": "keep"}),
    # --sp-residual fold: the cores add the residual shard before the reduce-scatter
    ("sp", 1, False, False, {"sp_residual": "fold"}),
    ("domino-sp", 2, False, False, {"sp_residual": "fold"}),
    ("domino-sp", 2, True, False, {"sp_residual": "fold"}),
]


def run(
    rank: int, world: int, port: int, out: str, backend: str = "nccl", attention: str = "auto",
    lanes: bool = False, sp_keep: bool = False,
) -> None:
    from domino_prof.reference_model import units

    units.set_attention(attention)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0")
    dev = torch.device("cuda", rank if backend == "nccl" else 0)
    torch.cuda.set_device(dev)
    if backend == "nccl":
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    else:
        dist.init_process_group(backend, rank=rank, world_size=world)
    cfg = replace(llama3_3b(), n_layers=2)
    seed, mbs, seq = 11, 4, 1024
    inp, tgt = batch(cfg, mbs=mbs, seq=seq, seed=seed, device=dev)
    res = {}
    # reference in fp32 (the truth), schedules in bf16 and in fp32
    ref_loss, ref = reference_grads(cfg, inp, tgt, seed=seed, device=dev, dtype=torch.float32)
    res["reference_loss_fp32"] = ref_loss
    res["attention_bf16"] = units.attention_kernel(dev, torch.bfloat16)
    variants = [  # (schedule, splits, graphs, compile)
        ("tp", 1, False, False),
        ("domino", 2, False, False),
        ("domino", 4, False, False),
        ("sp", 1, False, False),
        ("domino-sp", 2, False, False),
        ("tp", 1, True, False),
        ("domino", 2, True, False),
        ("domino-sp", 2, True, False),
        ("domino", 2, False, True),
        ("domino", 2, True, True),
    ]
    variants = [(*v, {}) for v in variants]
    if lanes:
        variants = [v for v in LANES if not (v[2] and backend == "gloo")]
    if sp_keep:
        variants = SP_VARIANTS
    for dtype in (torch.float32, torch.bfloat16):
        for name, splits, graphs, comp, extra in variants:
            key = (
                f"{name}_splits{splits}_{str(dtype)[6:]}"
                f"{'_cudagraphs' if graphs else ''}{'_compile' if comp else ''}"
                + "".join(f"_{k}={v}" for k, v in extra.items())
            )
            try:
                loss, errs = compare(
                    cfg,
                    ProcessGroupComm(),
                    ref,
                    inp,
                    tgt,
                    schedule=name,
                    splits=splits,
                    seed=seed,
                    device=dev,
                    dtype=dtype,
                    graphs=graphs,
                    compile=comp,
                    **extra,
                )
                res[key] = {
                    "loss": loss,
                    "max_rel_err": max(errs.values()),
                    "worst_param": max(errs, key=errs.get),
                }
            except Exception as e:  # noqa: BLE001 - a check script: record, go on
                res[key] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            if rank == 0:
                print(key, res[key], flush=True)
            torch.cuda.empty_cache()
    del ref
    torch.cuda.empty_cache()
    if lanes or sp_keep:  # those variants' gradients only: no concurrency trace
        if rank == 0:
            name = "gpu_verify_lanes.json" if lanes else "gpu_verify_sp_keep.json"
            Path(out, name).write_text(json.dumps(res, indent=2))
        dist.destroy_process_group()
        return
    # one profiled domino step to prove concurrency
    comm = ProcessGroupComm()
    model = shard_model(cfg, comm, seed=seed, device=dev, dtype=torch.bfloat16)
    runner = StepRunner(model, comm, schedule="domino", splits=2)
    for _ in range(2):
        runner.step(inp, tgt)
    torch.cuda.synchronize()
    path = Path(out) / f"verify_rank{rank}.json.gz"
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as p:
        runner.step(inp, tgt)
        torch.cuda.synchronize()
    p.export_chrome_trace(str(path))
    if world > 1 and backend == "nccl":
        res["concurrency"] = concurrency_from_trace(path)
    path.unlink()
    if rank == 0:
        Path(out, "gpu_verify.json").write_text(json.dumps(res, indent=2))
        print(json.dumps(res, indent=2))
    dist.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--out", default=".")
    ap.add_argument("--attention", default="auto", choices=ATTENTION_KERNELS,
                    help="the schedules' attention kernel (units.set_attention)")  # fmt: skip
    ap.add_argument("--backend", choices=("nccl", "gloo"), default="nccl",
                    help="gloo: every rank on cuda:0 (see the module doc)")  # fmt: skip
    ap.add_argument("--mb-streams", action="store_true",
                    help="check the micro-batch lanes' variants (LANES) instead; writes "
                    "gpu_verify_lanes.json")  # fmt: skip
    ap.add_argument("--sp-keep", action="store_true",
                    help="check the SP variants (SP_VARIANTS: --sp-wgrad-input keep, "
                    "--sp-residual fold) instead; writes "
                    "gpu_verify_sp_keep.json")  # fmt: skip
    a = ap.parse_args()
    if a.mb_streams and a.sp_keep:
        sys.exit("gpu_verify: --mb-streams and --sp-keep each pick the variants: give one")
    Path(a.out).mkdir(parents=True, exist_ok=True)
    mp.spawn(run, args=(a.tp, 29555, a.out, a.backend, a.attention, a.mb_streams, a.sp_keep),
             nprocs=a.tp)  # fmt: skip
    sys.exit(0)
