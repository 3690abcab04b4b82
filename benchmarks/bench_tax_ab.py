"""The emulator-fidelity A/B on one GPU (issue 33): each kernel shape of a TP step alone,
beside the burst stand-in and beside the paced one (docs/EMULATION.md §3 / §3b), at
several start offsets and both launch orders; and the paced kernels checked first
(outputs against ``emulation.ring.simulate``, duration alone against the model,
registers as the driver reports them).

Shapes (``--configs``): ``fixture`` = the committed real 2xH200 fixture's config
(llama3-3b, tp 2, micro-batch of 1024 tokens: tests/data/h200_llama3_3b_2layers_tp2), so
its real NCCL samples (benchmarks/tax_ab_real.py) can be set beside these; ``headline`` =
the headline step's shard (llama3-3b, tp 8, micro-batch of 4096 tokens). Per config: the
GEMMs of qkv / wo / w13 / w2, forward (x @ W^T), input gradient (dy @ W) and weight
gradient (dy^T @ x, over one micro-batch and over two), written as units.py writes them;
cuDNN attention forward and backward; the RMS norm forward and backward; a residual add;
SiLU on the strided gate half. Beside each: the all-reduce of the step ([T, d] bf16) of
the config's profile (tp2 / tp8), as

* ``burst`` / ``paced``: the stand-ins as a run uses them;
* ``burst_spin`` / ``paced_spin``: the same launch with no traffic at all (the burst
  kernel with no copies; the paced kernel with no steps), held 1 ms: only the SMs held,
  as by a real NCCL kernel polling for a late peer, the one real condition the fixture
  has plenty of samples of (its waits lasted 0.8-2.7 ms).

Orders: ``comm_first`` (the comm kernel starts, the compute kernel after an offset) and
``compute_first`` (the other way round); offsets 2 us and 0.3 x the kernel's alone time.
Both streams are released by one event after a gate sleep, so the host's launch times do
not set the offsets; the second stream sleeps the offset first (torch.cuda._sleep, its
cycles calibrated against events). Every kernel's start and duration come from the
profiler (Kineto), each repetition in its own record_function range, and its overlap
fraction with the comm kernel of its repetition is computed from those.

Output (``--out DIR``): ``tax_ab_raw.json``: kernel checks, and per (config, shape,
variant, order, offset) the samples ``[class, dur_ns, f, comm_dur_ns, start_minus_comm_ns]``.
``benchmarks/tax_ab_report.py`` turns it, with the real fixture's samples, into
``reports/emulator-fidelity/tax_ab.json`` and its README table (torch-free).

Usage (on the GPU): ``python3 benchmarks/bench_tax_ab.py --out $OUT [--reps 10]``
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIGS = {
    # name: (profile, R, T tokens per micro-batch) — llama3-3b: d 3072, 24 heads, 8 kv
    "fixture": ("h200-nvlink-tp2", 2, 1024),
    "headline": ("h200-nvlink-tp8", 8, 4096),
}
D_MODEL, HEADS, KV_HEADS, HEAD_DIM, FFN = 3072, 24, 8, 128, 8192
VARIANTS = ("burst", "paced", "burst_spin", "paced_spin")
SPIN_NS = 1_000_000


def _gemm(a, b):
    import torch

    return lambda: torch.mm(a, b)


def shapes(R: int, T: int, dev):
    """(label, unit, phase, fn) of one config's kernels: fn launches them on the current
    stream."""
    import torch

    from domino_prof.reference_model import units as U

    bf = torch.bfloat16
    Hl, Kl, Fl, d = HEADS // R, KV_HEADS // R, FFN // R, D_MODEL
    NQ = (Hl + 2 * Kl) * HEAD_DIM

    def r(*s):
        return torch.randn(*s, device=dev, dtype=bf) * 0.1

    wqkv, wo, w13, w2 = r(NQ, d), r(d, Hl * HEAD_DIM), r(2 * Fl, d), r(d, Fl)
    out = []
    for M, tag in ((T, ""), (2 * T, " 2mb")):
        x, o2, p = r(M, d), r(M, Hl * HEAD_DIM), r(M, Fl)
        dqkv, da, dgu = r(M, NQ), r(M, d), r(M, 2 * Fl)
        if not tag:
            out += [
                ("qkv fwd", "attn", "fwd", _gemm(x, wqkv.t())),
                ("wo fwd", "attn", "fwd", _gemm(o2, wo.t())),
                ("w13 fwd", "mlp", "fwd", _gemm(x, w13.t())),
                ("w2 fwd", "mlp", "fwd", _gemm(p, w2.t())),
                ("wo dgrad", "attn", "bwd", _gemm(da, wo)),
                ("qkv dgrad", "attn", "bwd", _gemm(dqkv, wqkv)),
                ("w2 dgrad", "mlp", "bwd", _gemm(da, w2)),
                ("w13 dgrad", "mlp", "bwd", _gemm(dgu, w13)),
            ]  # fmt: skip
        out += [
            ("wo wgrad" + tag, "attn", "bwd", _gemm(da.t(), o2)),
            ("qkv wgrad" + tag, "attn", "bwd", _gemm(dqkv.t(), x)),
            ("w2 wgrad" + tag, "mlp", "bwd", _gemm(da.t(), p)),
            ("w13 wgrad" + tag, "mlp", "bwd", _gemm(dgu.t(), x)),
        ]  # fmt: skip
    qkv4 = r(T, NQ).view(1, T, Hl + 2 * Kl, HEAD_DIM)
    q = qkv4[:, :, :Hl].transpose(1, 2)
    k = qkv4[:, :, Hl:Hl + Kl].transpose(1, 2)
    v = qkv4[:, :, Hl + Kl:].transpose(1, 2)
    o, ctx = U.sdpa_fwd(q, k, v)
    do = torch.randn_like(o)
    out.append(("attention fwd", "attn", "fwd", lambda: U.sdpa_fwd(q, k, v)))
    out.append(("attention bwd", "attn", "bwd", lambda: U.sdpa_bwd(do, q, k, v, o, ctx)))
    h, y, wn = r(T, d), r(T, d), r(d) + 1.0
    n, rstd = U.norm_fwd(h, wn, 1e-5)
    wg = torch.empty_like(wn)
    gu = r(T, 2 * Fl)
    out += [
        ("residual add", "any", "fwd", lambda: h + y),
        ("rms norm fwd", "any", "fwd", lambda: U.norm_fwd(h, wn, 1e-5)),
        ("rms norm bwd", "any", "bwd", lambda: U.norm_bwd(y, h, rstd, wn, wg, True)),
        ("silu gate", "mlp", "fwd", lambda: torch.nn.functional.silu(gu[:, :Fl])),
    ]  # fmt: skip
    return out


class Comms:
    """The four comm variants of one config, each launched straight on its own stream."""

    def __init__(self, profile: str, R: int, T: int, dev, ctas: int | None = None) -> None:
        import torch

        from domino_prof.reference_model import _paced_kernel as pk
        from domino_prof.reference_model.emulate import EmulatedComm, launch_kernel

        self._launch_kernel = launch_kernel
        self.t = torch.randn(T, D_MODEL, device=dev, dtype=torch.bfloat16)
        self.paced = EmulatedComm(profile, size=R, device=dev, kernel="paced", ctas=ctas)
        self.burst = EmulatedComm(profile, size=R, device=dev, kernel="burst", ctas=ctas)
        self.pp = self.paced._prepare("all_reduce", self.t, self.t)
        self.bp = self.burst._prepare("all_reduce", self.t, self.t)
        assert self.pp.paced is not None, "the paced kernel does not serve the step's shape"
        # no traffic: the burst kernel with no copies; the paced kernel with no steps; both
        # held SPIN_NS at least, as long as the fixture's NCCL kernels waited for their
        # late peer (0.8-2.7 ms), so every compute kernel lies under them
        spin_ns = max(SPIN_NS, self.bp.launch.dur_ns)
        self.burst_spin = dataclasses.replace(self.bp.launch, copies=(), dur_ns=spin_ns)
        kern = next(iter(self.paced._paced_kernels.values()))
        a = self.pp.paced._args
        self.paced_spin = pk.Launcher(kern, ctas=self.pp.launch.entry.ctas,
                                      fifo_ptr=a[2].value, steps_ptr=a[3].value, n_steps=0,
                                      chunk=a[5].value, slot=a[6].value, ff=a[7].value,
                                      dur_ns=spin_ns)  # fmt: skip
        self.dur_ns = self.pp.launch.dur_ns

    def launch(self, variant: str) -> object:
        """Launch ``variant`` on its comm's stream; returns that stream."""
        import torch

        t = self.t
        if variant in ("paced", "paced_spin"):
            s = self.paced.stream
            (self.pp.paced if variant == "paced" else self.paced_spin).launch(
                t.data_ptr(), t.data_ptr(), s.cuda_stream)
            return s
        s = self.burst.stream
        with torch.cuda.stream(s):
            self._launch_kernel(self.bp.launch if variant == "burst" else self.burst_spin, t, t)
        return s


def sleep_cycles_per_ns() -> float:
    import torch

    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    a.record()
    torch.cuda._sleep(2_000_000)
    b.record()
    torch.cuda.synchronize()
    return 2_000_000 / (a.elapsed_time(b) * 1e6)


def _trace_kernels(path: str) -> list[dict]:
    """Kernels of an exported trace with the record_function range of their launch."""
    from tax_ab_real import _ops_of_launches  # same directory

    doc = json.loads(Path(path).read_bytes())
    ops = _ops_of_launches(doc["traceEvents"], raw=True)
    out = []
    for e in doc["traceEvents"]:
        if e.get("cat") != "kernel":
            continue
        a = e.get("args", {})
        out.append({"name": e["name"], "start": float(e["ts"]) * 1e3, "dur": float(e["dur"]) * 1e3,
                    "grid": "x".join(map(str, a.get("grid") or ())),
                    "block": "x".join(map(str, a.get("block") or ())),
                    "range": ops.get(a.get("correlation"))})  # fmt: skip
    return out


def run_shape(label, fn, comms: Comms, *, reps: int, cpn: float, alone_us: float,
              cfgs: list | None = None) -> dict:  # fmt: skip
    """Every (variant, order, offset) of one shape under one profiler session."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    gate_ns = 1_000_000  # the host queues a repetition's launches well inside it
    comp = torch.cuda.Stream()
    gate = torch.cuda.Stream()
    if cfgs is None:
        cfgs = [("alone", "-", 0)]
        for v in VARIANTS:
            for order in ("comm_first", "compute_first"):
                for off in (2_000, int(0.3 * alone_us * 1e3)):
                    cfgs.append((v, order, off))
    ev = torch.cuda.Event()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for ci, (v, order, off) in enumerate(cfgs):
            for rep in range(reps):
                with record_function(f"cfg{ci}|{rep}"):
                    with torch.cuda.stream(gate):
                        torch.cuda._sleep(int(gate_ns * cpn))
                        ev.record(gate)
                    comp.wait_event(ev)
                    if v == "alone":
                        with torch.cuda.stream(comp):
                            fn()
                    else:
                        cs = comms.paced.stream if v.startswith("paced") else comms.burst.stream
                        cs.wait_event(ev)
                        if order == "comm_first":
                            comms.launch(v)
                            with torch.cuda.stream(comp):
                                torch.cuda._sleep(max(1, int(off * cpn)))
                                fn()
                        else:
                            with torch.cuda.stream(comp):
                                fn()
                            with torch.cuda.stream(cs):
                                torch.cuda._sleep(max(1, int(off * cpn)))
                            comms.launch(v)
                torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    prof.export_chrome_trace(path)
    ks = _trace_kernels(path)
    os.unlink(path)
    by_range: dict[str, list[dict]] = {}
    for k in ks:
        if k["range"] and "sleep" not in k["name"].lower() and "spin" not in k["name"].lower():
            by_range.setdefault(k["range"], []).append(k)
    # a comm kernel whose launch the trace did not tie to its range: the one nearest in
    # start to the repetition's compute kernels (repetitions are >= 1 ms apart)
    loose = sorted((k for k in ks if k["name"].startswith("emulated_") and not k["range"]),
                   key=lambda k: k["start"])  # fmt: skip
    res = {}
    for ci, (v, order, off) in enumerate(cfgs):
        samples = []
        for rep in range(reps):
            kk = by_range.get(f"cfg{ci}|{rep}", [])
            cm = [k for k in kk if k["name"].startswith("emulated_")]
            cp = [k for k in kk if not k["name"].startswith("emulated_")]
            c = cm[0] if cm else None
            if c is None and v != "alone" and cp and loose:
                c = min(loose, key=lambda k: abs(k["start"] - cp[0]["start"]))
            for k in cp:
                cls = f"{k['name']} [grid {k['grid']}] [block {k['block']}]"
                if c is None:
                    samples.append([cls, k["dur"], 0.0, None, None])
                    continue
                ov = max(0.0, min(k["start"] + k["dur"], c["start"] + c["dur"])
                         - max(k["start"], c["start"]))  # fmt: skip
                samples.append([cls, k["dur"], ov / k["dur"] if k["dur"] else 0.0, c["dur"],
                                k["start"] - c["start"]])  # fmt: skip
        res[f"{v}|{order}|{off}"] = samples
    return res


def carveout_probe(dev, args, cpn: float) -> dict:
    """The headline's GEMMs alone and beside the paced stand-in (comm first, 2 us) with
    torch's SM carveout (cuBLAS targets SMs - CARVEOUT) and CTAS comm CTAs."""
    import torch

    prof_name, R, T = CONFIGS["headline"]
    out: dict = {}
    for pair in args.carveouts.split(","):
        cv, ctas = (int(x) for x in pair.split(":"))
        torch._C._set_sm_carveout_experimental(cv if cv else None)
        comms = Comms(prof_name, R, T, dev, ctas=ctas)
        res = out[pair] = {"carveout": cv, "ctas": ctas, "comm_model_us": comms.dur_ns / 1e3,
                           "shapes": {}}  # fmt: skip
        for label, unit, phase, fn in shapes(R, T, dev):
            if "attention" in label or unit == "any" or label == "silu gate":
                continue
            try:
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                res["shapes"][label] = {"samples": run_shape(
                    label, fn, comms, reps=args.reps, cpn=cpn, alone_us=0.0,
                    cfgs=[("alone", "-", 0), ("paced", "comm_first", 2_000)])}  # fmt: skip
            except Exception:
                res["shapes"][label] = {"error": traceback.format_exc()}
        print(f"carveout {pair}: done", flush=True)
    torch._C._set_sm_carveout_experimental(None)
    return out


def kernel_checks(dev) -> dict:
    """The paced kernels against ring.simulate (bit-exact), and their durations alone."""
    import numpy as np
    import torch

    from domino_prof.emulation.ring import simulate
    from domino_prof.reference_model.emulate import EmulatedComm

    out = {"outputs": [], "durations": [], "kernels": []}
    for prof_name, R in (("h200-nvlink-tp2", 2), ("h200-nvlink-tp8", 8)):
        comm = EmulatedComm(prof_name, size=R, device=dev, kernel="paced")
        for coll, n_in, n_out in (("all_reduce", 1 << 20, 1 << 20),
                                  ("reduce_scatter", R << 18, 1 << 18),
                                  ("all_gather", 1 << 18, R << 18)):  # fmt: skip
            g = torch.Generator(device=dev).manual_seed(R)
            t = torch.randint(-2**31, 2**31 - 1, (n_in // 2,), device=dev, dtype=torch.int32,
                              generator=g).view(torch.bfloat16)  # fmt: skip
            o = t if coll == "all_reduce" else torch.zeros(n_out, device=dev, dtype=torch.bfloat16)
            src = t.view(torch.int32).cpu().numpy().view(np.uint32).reshape(-1, 4).copy()
            dst = src if coll == "all_reduce" else o.view(torch.int32).cpu().numpy().view(
                np.uint32).reshape(-1, 4).copy()  # fmt: skip
            prep = comm._prepare(coll, t, o)
            want = None
            if prep.paced is not None:
                plan = comm.paced_plan(coll, t, o)
                want = simulate(plan, src, dst)
            getattr(comm, coll)(*((t,) if coll == "all_reduce" else (o, t)), async_op=False)
            torch.cuda.synchronize()
            got = o.view(torch.int32).cpu().numpy().view(np.uint32).reshape(-1, 4)
            out["outputs"].append({"profile": prof_name, "collective": coll, "paced": prep.paced
                                   is not None, "equal": bool(want is not None and
                                   np.array_equal(got, want))})  # fmt: skip
        out["kernels"] += comm.kernel_facts()
        for n_el in (3 << 20, 12 << 20, 24 << 20):  # 6.3, 25.2, 50.3 MB of bf16
            n_el = n_el - n_el % (8 * R)
            t = torch.randn(n_el, device=dev, dtype=torch.bfloat16)
            for kind in ("paced", "burst"):
                c = EmulatedComm(prof_name, size=R, device=dev, kernel=kind)
                for _ in range(3):
                    c.all_reduce(t, async_op=False)
                # 20 back to back after a sleep on the comm stream, so the host has queued
                # them before the first starts: the mean is the kernel plus its launch gap
                with torch.cuda.stream(c.stream):
                    torch.cuda._sleep(1_000_000)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(c.stream)
                for _ in range(20):
                    c.all_reduce(t, async_op=True)
                b.record(c.stream)
                torch.cuda.synchronize()
                ts = [a.elapsed_time(b) * 1e3 / 20]
                prep = c._prepare("all_reduce", t, t)
                out["durations"].append({"profile": prof_name, "kernel": kind,
                                         "bytes": n_el * 2, "model_us": prep.launch.dur_ns / 1e3,
                                         "median_us": statistics.median(ts),
                                         "min_us": min(ts)})  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--configs", default="fixture,headline")
    ap.add_argument("--shapes", default="", help="comma-separated labels (default: all)")
    ap.add_argument("--carveouts", default="", help="CARVEOUT:CTAS pairs, e.g. 0:24,24:24,8:8")
    args = ap.parse_args()
    import torch

    from domino_prof.reference_model import units as U

    dev = torch.device("cuda")
    U.set_attention("auto")
    t0 = time.time()
    doc: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                 "reps": args.reps, "configs": {}}  # fmt: skip
    try:
        doc["checks"] = kernel_checks(dev)
        print("kernel checks:", json.dumps(doc["checks"])[:2000], flush=True)
    except Exception:  # keep going: the A/B is worth having without the checks
        doc["checks_error"] = traceback.format_exc()
        print(doc["checks_error"], flush=True)
    cpn = sleep_cycles_per_ns()
    doc["sleep_cycles_per_ns"] = cpn
    want = {s for s in args.shapes.split(",") if s}
    for cname in [c for c in args.configs.split(",") if c]:
        prof_name, R, T = CONFIGS[cname]
        comms = Comms(prof_name, R, T, dev)
        cdoc = doc["configs"][cname] = {"profile": prof_name, "R": R, "T": T,
                                        "comm_model_us": comms.dur_ns / 1e3, "shapes": {}}  # fmt: skip
        for label, unit, phase, fn in shapes(R, T, dev):
            if want and label not in want:
                continue
            try:
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(10):
                    fn()
                b.record()
                torch.cuda.synchronize()
                alone_us = a.elapsed_time(b) * 1e3 / 10
                res = run_shape(label, fn, comms, reps=args.reps, cpn=cpn, alone_us=alone_us)
                cdoc["shapes"][label] = {"unit": unit, "phase": phase, "alone_us_events": alone_us,
                                         "samples": res}  # fmt: skip
                print(f"{cname} {label}: {alone_us:.1f} us alone, {time.time() - t0:.0f} s",
                      flush=True)
            except Exception:
                cdoc["shapes"][label] = {"error": traceback.format_exc()}
                print(cdoc["shapes"][label]["error"], flush=True)
    if args.carveouts:  # issue 34's knobs on the headline GEMMs: SM carveout x comm CTAs
        try:
            doc["carveout"] = carveout_probe(dev, args, cpn)
        except Exception:
            doc["carveout_error"] = traceback.format_exc()
            print(doc["carveout_error"], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    data = json.dumps(doc).encode()
    (args.out / "tax_ab_raw.json.gz").write_bytes(gzip.compress(data))
    print(f"done in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
