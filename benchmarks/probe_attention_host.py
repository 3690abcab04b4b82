"""Host and device cost per call of the two fused attention kernels the schedules use
(cuDNN's and flash's SDPA, forward and backward) at one micro-batch of the headline's
TP-8 shard, and whether cuDNN's backward takes flash's forward (its output and LSE).

    python benchmarks/probe_attention_host.py [--heads 3 --kv-heads 1 --seq 4096]

Why: an eager domino-sp step's forward is host-bound at the headline
(benchmarks/host_lead.py: the GPU waits for the host at nearly every forward core), so
a kernel's host cost there costs wall time and its device time, up to the idle it fills,
does not. Host µs: the median over ``--calls`` calls of each call's own host time,
issued while the GPU is held busy (``torch.cuda._sleep``) so no call waits for a queue
slot; the median leaves out a call that waits once (an allocation, a cache fill).
Device µs: CUDA events around 50 calls queued behind a sleep. q/k/v are strided views of
one [S, (Hq + 2 Kv) · D] tensor, as ``units.attn_fwd`` makes them; bf16, causal.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from bench_attention import make  # benchmarks/: the script's own folder

A = torch.ops.aten


def host_and_device_us(fn, calls: int) -> tuple[float, float]:
    """(median host µs of one call, device µs per call) of ``fn()``."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(int(5e8))  # ~0.25 s of one thread spinning: every call below queues
    per = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        per.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(1e8))
    e0.record()
    for _ in range(50):
        fn()
    e1.record()
    torch.cuda.synchronize()
    return statistics.median(per), e0.elapsed_time(e1) / 50 * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--calls", type=int, default=100)
    a = ap.parse_args(argv)
    dev = torch.device("cuda", 0)
    q, k, v, do = make(a.batch, a.heads, a.kv_heads, a.seq, a.head_dim, dev)
    rc = A._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True, False)
    rf = A._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False)

    def cudnn_bwd(o=rc[0], lse=rc[1]):
        _, _, cq, ck, mq, mk, seed, off, _ = rc
        return A._scaled_dot_product_cudnn_attention_backward(
            do, q, k, v, o, lse, seed, off, None, cq, ck, mq, mk, 0.0, True)  # fmt: skip

    def flash_bwd():
        o, lse, cq, ck, mq, mk, rng, unused, _ = rf
        return A._scaled_dot_product_flash_attention_backward(
            do, q, k, v, o, lse, cq, ck, mq, mk, 0.0, True, rng, unused)  # fmt: skip

    print(f"{torch.cuda.get_device_name(dev)}: b {a.batch}, {a.heads} q heads, {a.kv_heads} kv "
          f"heads, S {a.seq}, D {a.head_dim}, bf16, causal")  # fmt: skip
    rows = [("cudnn forward", lambda: A._scaled_dot_product_cudnn_attention(
                 q, k, v, None, True, 0.0, True, False)),
            ("flash forward", lambda: A._scaled_dot_product_flash_attention(
                 q, k, v, 0.0, True, False)),
            ("cudnn backward", cudnn_bwd), ("flash backward", flash_bwd)]  # fmt: skip
    for name, fn in rows:
        h, d = host_and_device_us(fn, a.calls)
        print(f"  {name:15s} host {h:7.1f} us/call   device {d:7.1f} us/call")
    ref = cudnn_bwd()
    mixed = cudnn_bwd(rf[0], rf[1].view(rc[1].shape))  # flash's o and LSE into cuDNN's bwd
    flash = flash_bwd()

    def err(got):
        return ", ".join(f"{(g.float() - r.float()).abs().max().item():.3g}"
                         for g, r in zip(got, ref))  # fmt: skip

    print(f"  max |diff| from cuDNN's dq, dk, dv (max |dq| {ref[0].abs().max().item():.3g}): "
          f"flash forward + cuDNN backward {err(mixed)}; flash both {err(flash)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
