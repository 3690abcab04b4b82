"""Attention under two ways of splitting a batch of sequences into 2 micro-batches.

    python benchmarks/bench_seq_split.py [--heads 3 --kv-heads 1 --seq 4096] [--out F]

Domino splits the batch by sequences: at mbs 2 each micro-batch is one sequence, and
at TP 8 a rank's 3 heads give causal attention a grid of 3 x 32 query blocks on 132
SMs, one wave whose length is that of the longest (last) query block. A *sequence*
split keeps every sequence in both micro-batches: micro-batch 0 is the first S/2
tokens of each, micro-batch 1 the last S/2, whose queries attend to all S keys
(micro-batch 0's keys are computed first, in forward; in backward micro-batch 1 runs
first and hands micro-batch 0 its keys' gradients). The GEMMs see the same rows
either way (b·S/2·2 = S); only attention differs. This probe times forward + backward
per micro-batch pair (one CUDA graph, 10 calls per replay, median of 20 replays):

* ``batch``: 2 x causal attention of 1 sequence of S (today's split);
* ``joint``: causal attention of both sequences at once (no split: the bound);
* ``seq-native``: micro-batch 0 causal S/2 x S/2, micro-batch 1 the kernel's own
  non-square causal mask (bottom-right aligned), queries S/2 x keys S;
* ``seq-merge``: micro-batch 1 as two calls, its queries x micro-batch 0's keys (no
  mask) and x its own keys (causal), merged by their log-sum-exp; backward: each
  part's backward with the merged output and log-sum-exp (exact: the parts' P are the
  merged softmax's columns).

Each variant's outputs and gradients are checked against an fp32 reference of the
whole causal attention (max abs difference printed); a variant that is wrong or fails
is reported, not timed.
"""

from __future__ import annotations

import argparse
import json
import math

import torch

A = torch.ops.aten


def fwd(kind, q, k, v, causal):
    if kind == "flash":
        o, lse, cq, ck, mq, mk, rng, unused, _ = A._scaled_dot_product_flash_attention(
            q, k, v, 0.0, causal, False
        )
        return o, lse.view(*q.shape[:3]), (lse, cq, ck, mq, mk, rng, unused)
    o, lse, cq, ck, mq, mk, seed, off, _ = A._scaled_dot_product_cudnn_attention(
        q, k, v, None, True, 0.0, causal, False
    )
    return o, lse.reshape(*q.shape[:3]), (lse, cq, ck, mq, mk, seed, off)


def bwd(kind, do, q, k, v, o, lse3, ctx, causal):
    """Backward with ``o`` / ``lse3`` [b, h, Sq] possibly not the call's own (merge)."""
    lse = lse3.reshape(ctx[0].shape).contiguous()
    if kind == "flash":
        _, cq, ck, mq, mk, rng, unused = ctx
        return A._scaled_dot_product_flash_attention_backward(
            do, q, k, v, o, lse, cq, ck, mq, mk, 0.0, causal, rng, unused
        )
    _, cq, ck, mq, mk, seed, off = ctx
    return A._scaled_dot_product_cudnn_attention_backward(
        do, q, k, v, o, lse, seed, off, None, cq, ck, mq, mk, 0.0, causal
    )


def make(b, H, K, S, D, dev, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    qkv = torch.randn(b, S, H + 2 * K, D, device=dev, dtype=torch.bfloat16, generator=g)
    q = qkv[:, :, :H].transpose(1, 2)
    k = qkv[:, :, H : H + K].transpose(1, 2)
    v = qkv[:, :, H + K :].transpose(1, 2)
    do = torch.randn(b, S, H, D, device=dev, dtype=torch.bfloat16, generator=g).transpose(1, 2)
    return q, k, v, do


def reference(q, k, v, do):
    """fp32 causal attention of the whole sequences and its gradients (autograd)."""
    qf, kf, vf = (t.detach().float().requires_grad_(True) for t in (q, k, v))
    G = q.shape[1] // k.shape[1]
    ke, ve = kf.repeat_interleave(G, 1), vf.repeat_interleave(G, 1)
    S = q.shape[2]
    s = qf @ ke.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), -math.inf)
    o = s.softmax(-1) @ ve
    o.backward(do.float())
    return o.detach(), qf.grad, kf.grad, vf.grad


def v_batch(kind):
    def fn(q, k, v, do):  # one sequence at a time (the batch split)
        outs = []
        for i in range(q.shape[0]):
            qi, ki, vi, doi = (t[i : i + 1] for t in (q, k, v, do))
            o, lse, ctx = fwd(kind, qi, ki, vi, True)
            outs.append((o, *bwd(kind, doi, qi, ki, vi, o, lse, ctx, True)))
        return tuple(torch.cat(p, 0) for p in zip(*outs))

    return fn


def v_joint(kind):
    def fn(q, k, v, do):
        o, lse, ctx = fwd(kind, q, k, v, True)
        return (o, *bwd(kind, do, q, k, v, o, lse, ctx, True))

    return fn


def _halves(t):
    h = t.shape[2] // 2
    return t[:, :, :h], t[:, :, h:]


def v_seq_native(kind):
    def fn(q, k, v, do):
        (q0, q1), (k0, _), (v0, _), (do0, do1) = map(_halves, (q, k, v, do))
        o0, l0, c0 = fwd(kind, q0, k0, v0, True)
        o1, l1, c1 = fwd(kind, q1, k, v, True)  # queries S/2 x keys S, the kernel's mask
        dq1, dk1, dv1 = bwd(kind, do1, q1, k, v, o1, l1, c1, True)  # micro-batch 1 first
        dq0, dk0, dv0 = bwd(kind, do0, q0, k0, v0, o0, l0, c0, True)
        h = k0.shape[2]
        dk = torch.cat([dk0 + dk1[:, :, :h], dk1[:, :, h:]], 2)
        dv = torch.cat([dv0 + dv1[:, :, :h], dv1[:, :, h:]], 2)
        return torch.cat([o0, o1], 2), torch.cat([dq0, dq1], 2), dk, dv

    return fn


def v_seq_merge(kind):
    def fn(q, k, v, do):
        (q0, q1), (k0, k1), (v0, v1), (do0, do1) = map(_halves, (q, k, v, do))
        o0, l0, c0 = fwd(kind, q0, k0, v0, True)
        oa, la, ca = fwd(kind, q1, k0, v0, False)  # micro-batch 1's queries x 0's keys
        ob, lb, cb = fwd(kind, q1, k1, v1, True)  # x its own keys
        lse = torch.logaddexp(la, lb)
        o1 = (oa * (la - lse).exp().unsqueeze(-1) + ob * (lb - lse).exp().unsqueeze(-1)).to(
            q.dtype
        )
        dqa, dka, dva = bwd(kind, do1, q1, k0, v0, o1, lse, ca, False)
        dqb, dkb, dvb = bwd(kind, do1, q1, k1, v1, o1, lse, cb, True)
        dq0, dk0, dv0 = bwd(kind, do0, q0, k0, v0, o0, l0, c0, True)
        return (torch.cat([o0, o1], 2), torch.cat([dq0, dqa + dqb], 2),
                torch.cat([dk0 + dka, dkb], 2), torch.cat([dv0 + dva, dvb], 2))  # fmt: skip

    return fn


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
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    dev = torch.device("cuda")
    args = make(a.batch, a.heads, a.kv_heads, a.seq, a.head_dim, dev)
    ref = reference(*args)
    res = {}
    for kind in ("cudnn", "flash"):
        for name, mk in (("batch", v_batch), ("joint", v_joint), ("seq-native", v_seq_native),
                         ("seq-merge", v_seq_merge)):  # fmt: skip
            fn = mk(kind)
            row = {}
            try:
                got = fn(*args)
                errs = [float((x.float() - y).abs().max()) for x, y in zip(got, ref)]
                row["maxdiff"] = max(errs)
                row["maxdiff_o_dq_dk_dv"] = errs
                if row["maxdiff"] < 0.25:
                    row["us"] = time_graph(fn, args)
                else:
                    row["error"] = "wrong: differs from the fp32 reference"
            except Exception as e:  # noqa: BLE001 - a probe: record and go on
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            res[f"{kind}/{name}"] = row
            print(kind, name, json.dumps(row), flush=True)
    for kind in ("cudnn", "flash"):
        b = res[f"{kind}/batch"].get("us")
        for name in ("joint", "seq-native", "seq-merge"):
            t = res[f"{kind}/{name}"].get("us")
            if b and t:
                print(f"{kind} {name} / batch = {t / b:.3f}  ({t:.1f} vs {b:.1f} us)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"shape": vars(a), "device": torch.cuda.get_device_name(),
                       "torch": torch.__version__, "results": res}, f, indent=2)  # fmt: skip


if __name__ == "__main__":
    main()
