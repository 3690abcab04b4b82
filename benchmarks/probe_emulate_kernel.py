"""Self-contained probe of the emulated all-reduce kernel's aligned path on one GPU (no
domino_prof import: the device machine runs /work/main's tree, which predates the
emulator). What it showed on one H200 (torch 2.11.0+cu130, Triton 3.6.0), 25.2M-element
bf16 all-reduce at R = 2 (100.7 MB moved: 50.3 MB read + 50.3 MB written), 24 CTAs, 16
warps, p10 / median of 20 kernels (torch.profiler device time):

    BLOCK  4096: traffic only 131.7 / 132.5 us (764 GB/s)   spin to 177.106 us: 177.8 / 177.8
    BLOCK 16384: traffic only  53.3 /  54.4 us (1.89 TB/s)  spin to 177.106 us: 177.8 / 177.8
    R = 8's 1.75x bytes, traffic only: 203.0 us (BLOCK 4096), 86.6 us (BLOCK 16384)
    t unchanged after the calls: True

So %globaltimer spinning holds the modelled time to +0.7 us, and 16384-element blocks
keep the traffic well inside it (4096 would not at R = 8: 203 us > 177 us).

    python3 benchmarks/probe_emulate_kernel.py
"""

import json

import torch
import triton
import triton.language as tl
from torch.profiler import ProfilerActivity, profile


@triton.jit
def _now():
    return tl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
    )


@triton.jit
def emulated_allreduce_kernel(p, n, count, dur, B: tl.constexpr, SPIN: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    q = tl.num_programs(0).to(tl.int64)
    if SPIN:
        t0 = _now()
    lane = tl.arange(0, B).to(tl.int64)
    for b in range(pid, count // B, q):
        s = tl.multiple_of((b * B) % n, B)
        v = tl.load(p + s + lane)
        tl.store(p + s + lane, v)
    if SPIN:
        t = _now()
        while t - t0 < dur:
            t = _now()


N = 25165824
x = torch.randn(N, device="cuda", dtype=torch.bfloat16)
c = x.clone()


def go(spin, dur, blk, ctas, cnt=N):
    def k():
        emulated_allreduce_kernel[(ctas,)](x, N, cnt, dur, B=blk, SPIN=spin, num_warps=16)

    for _ in range(3):
        k()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as pr:
        for _ in range(20):
            k()
        torch.cuda.synchronize()
    pr.export_chrome_trace("/tmp/t.json")
    with open("/tmp/t.json") as f:
        ev = json.load(f)["traceEvents"]
    d = sorted(
        e["dur"] for e in ev if e.get("cat") == "kernel" and e["name"].startswith("emulated")
    )
    return round(d[1], 1), round(d[10], 1), len(d)


for blk in (4096, 16384):
    print(blk, "traffic", go(False, 0, blk, 24), "spin177106", go(True, 177106, blk, 24),
          "tp8-count", go(False, 0, blk, 24, N * 7 // 4 // blk * blk))  # fmt: skip
print("unchanged", torch.equal(x, c))
