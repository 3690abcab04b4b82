"""Attention kernels at the reference model's shapes: is the batch-1 micro-batch
penalty the kernel's (grid too small for the GPU) and does another backend avoid it?

    python benchmarks/bench_attention.py [--heads 24 --kv-heads 8 --seq 1024]

For b = 1 and b = 2 (bf16, causal, GQA, q/k/v strided as in ``units.attn_fwd``) it
times forward + backward of each backend inside one CUDA graph (10 calls per replay,
median of 20 replays, so host cost is out) and prints per call µs and
``2·t(b=1) / t(b=2)``: the cost of splitting a 2-sequence batch into two micro-batches.
Backends: ``flash`` and ``cudnn`` are ``units.sdpa_fwd``/``sdpa_bwd`` with that
``--attention`` kernel (exactly what the schedules call); ``cudnn-expand`` (k/v
repeated to the query heads) and ``efficient`` are probes of kernels units.py does not use.
Also the largest difference of each backend's outputs and gradients from flash's.
"""

from __future__ import annotations

import argparse
import json

import torch

from domino_prof.reference_model import units

A = torch.ops.aten


def make(b, H, K, S, D, dev, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    qkv = torch.randn(b, S, H + 2 * K, D, device=dev, dtype=torch.bfloat16, generator=g)
    q = qkv[:, :, :H].transpose(1, 2)
    k = qkv[:, :, H : H + K].transpose(1, 2)
    v = qkv[:, :, H + K :].transpose(1, 2)
    do = torch.randn(b, S, H, D, device=dev, dtype=torch.bfloat16, generator=g).transpose(1, 2)
    return q, k, v, do


def _units(kind):
    """The schedules' own kernel calls (``units.sdpa_fwd`` / ``sdpa_bwd``) with
    ``kind`` set: what the model runs, not a copy of it."""

    def fn(q, k, v, do):
        units.set_attention(kind)
        o, ctx = units.sdpa_fwd(q, k, v)
        return (o, *units.sdpa_bwd(do, q, k, v, o, ctx))

    return fn


flash, cudnn = _units("flash"), _units("cudnn")


def _rep(t, groups):
    return t if groups == 1 else t.repeat_interleave(groups, dim=1)


def cudnn_expand(q, k, v, do):
    """cuDNN with k/v repeated to the query heads (a probe: units.py uses native GQA)."""
    groups = q.shape[1] // k.shape[1]
    ke, ve = _rep(k, groups), _rep(v, groups)
    o, lse, cq, ck, mq, mk, seed, off, _ = A._scaled_dot_product_cudnn_attention(
        q, ke, ve, None, True, 0.0, True, False
    )
    # attn_bias is a Tensor in the schema: None passes an undefined one ("no bias")
    dq, dk, dv = A._scaled_dot_product_cudnn_attention_backward(
        do, q, ke, ve, o, lse, seed, off, None, cq, ck, mq, mk, 0.0, True
    )  # fmt: skip
    dk = dk.unflatten(1, (-1, groups)).sum(2)
    dv = dv.unflatten(1, (-1, groups)).sum(2)
    return o, dq, dk, dv


def efficient(q, k, v, do):
    groups = q.shape[1] // k.shape[1]
    ke, ve = _rep(k, groups), _rep(v, groups)
    o, lse, seed, off = A._scaled_dot_product_efficient_attention(q, ke, ve, None, True, 0.0, True)
    dq, dk, dv, _ = A._scaled_dot_product_efficient_attention_backward(
        do, q, ke, ve, None, o, lse, seed, off, 0.0, (True, True, True, False), True
    )
    if groups > 1:
        dk = dk.unflatten(1, (-1, groups)).sum(2)
        dv = dv.unflatten(1, (-1, groups)).sum(2)
    return o, dq, dk, dv


def time_graph(fn, args, calls=10, reps=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn(*args)
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000 / calls)
    return sorted(ts)[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=24)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), torch.__version__, "SMs",
          torch.cuda.get_device_properties(dev).multi_processor_count)  # fmt: skip
    backends = {"flash": flash, "cudnn": cudnn, "cudnn-expand": cudnn_expand,
                "efficient": efficient}  # fmt: skip
    res = {}
    for name, fn in backends.items():
        row = {}
        for b in (1, 2):
            args = make(b, a.heads, a.kv_heads, a.seq, a.head_dim, dev)
            try:
                ref = flash(*args)
                got = fn(*args)
                err = max(float((x.float() - y.float()).abs().max()) for x, y in zip(got, ref))
                row[f"b{b}_us"] = time_graph(fn, args)
                row[f"b{b}_maxdiff_vs_flash"] = err
            except Exception as e:  # noqa: BLE001 - a probe: record and go on
                row[f"b{b}_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        if "b1_us" in row and "b2_us" in row:
            row["split_cost"] = 2 * row["b1_us"] / row["b2_us"]
        res[name] = row
        print(name, json.dumps(row), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"shape": vars(a), "results": res}, f, indent=2)


if __name__ == "__main__":
    main()
