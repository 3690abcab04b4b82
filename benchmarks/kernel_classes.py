"""Kernel time per step by coarse class (GEMM, attention, norm, comm, other), per mode of
run directories: where domino's overlap tax sits (issue 34).

    python3 benchmarks/kernel_classes.py reports/emulated-h200-2026-12-04b/graphs-cublas-2 ...

Reads each mode's ``rank0.pt.trace.json.gz`` (or ``.json``) straight from the Kineto
JSON (no analysis): the sum of ``kernel`` events' durations by class over the profiled
steps, divided by their count (the run's ``config.profile_steps`` in run.json, or
``--steps``; the trace's ``ProfilerStep#`` ranges are no count: a whole-step CUDA graph
gives several per step). The classes go
by kernel name: ``emulated`` comm stand-ins and ``nccl`` kernels are comm; cuBLAS
(``nvjet``, ``gemm``, ``cutlass``) and the Triton tile (``mm_kernel``) are GEMMs; cuDNN /
flash SDPA kernels are attention; names with ``norm`` are norms; the rest is other.

``--split``: the split's own cost (domino-nocomm's step − nocomm's, issue 34) by class,
for run directories that hold both modes' traces. Here the device's memory ops count
too (``gpu_memcpy`` → copy, ``gpu_memset`` → set: the micro-batch buffers' copies are
split cost), each class with its events per step, and **gaps**: per stream, the idle
time between one device event's end and the next one's start, where it is under
:data:`GAP_MAX_US` (kernel-to-kernel launch latency inside a graph; longer idles are the
host's waits between steps). Printed: each class's ms per step in nocomm, in
domino-nocomm and the difference, and the sum of the differences beside run.json's
measured ``limits.split_ms`` (per profiled step).

``--timeline TRACE``: one trace file's kernels over time, in bins of ``--bin-ms`` from
its first kernel: the share of each bin under compute (any non-comm kernel) and under
comm (the union of each), which tells a comm-bound stretch (comm near 100 %, the forward
of domino-sp at the emulated headline) from a compute-bound one; then the gaps between
consecutive comm kernels (the collectives run one at a time, on one comm stream; a CUDA
graph's replay may report them on several stream ids) inside ``--window LO:HI`` ms: their
count, sum and a histogram in 5 µs buckets.

``--by-name A B``: two trace files (``.json`` or ``.json.gz``, e.g. bench_schedule.py
``--profile`` traces of tp and domino at tp 1), device time per step by kernel name
(templates and arguments cut off; memory ops as ``gpu_memcpy`` / ``gpu_memset``), each
name's events, and B − A, the largest differences first; above them each trace's device
span, busy time (the union of its kernels) and summed kernel time per step.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
from pathlib import Path

CLASSES = ("gemm", "attn", "norm", "comm", "other")
SPLIT_CLASSES = ("gemm", "attn", "norm", "comm", "copy", "set", "other")
SPLIT_MODES = ("nocomm", "domino-nocomm")
GAP_MAX_US = 100.0  # --split: a longer idle on a stream is no launch gap
_MEMORY = {"gpu_memcpy": "copy", "gpu_memset": "set"}


def kernel_class(name: str) -> str:
    n = name.lower()
    if "emulated" in n or "nccl" in n:
        return "comm"
    if any(k in n for k in ("nvjet", "gemm", "cutlass", "mm_kernel")):
        return "gemm"
    if any(k in n for k in ("cudnn", "flash", "fmha", "attn")):
        return "attn"
    if "norm" in n:
        return "norm"
    return "other"


def _trace(d: Path) -> dict | None:
    for name in ("rank0.pt.trace.json.gz", "rank0.pt.trace.json"):
        p = d / name
        if p.exists():
            opener = gzip.open if p.suffix == ".gz" else open
            with opener(p, "rt", encoding="utf-8") as f:
                return json.load(f)
    return None


def classes(trace: dict, steps: int) -> dict[str, float]:
    """ms per profiled step by class (``steps`` profiled steps in the trace)."""
    ev = trace.get("traceEvents", [])
    n = steps
    c: collections.Counter = collections.Counter()
    for e in ev:
        if e.get("cat") == "kernel":
            c[kernel_class(str(e.get("name", "")))] += float(e.get("dur", 0.0))
    return {k: c[k] / 1e3 / n for k in CLASSES}


def _device_ops(trace: dict):
    """The trace's device events: complete (``X``) kernels and memory ops, with their
    category."""
    for e in trace.get("traceEvents", []):
        cat = e.get("cat")
        if e.get("ph") == "X" and (cat == "kernel" or cat in _MEMORY):
            yield e, cat


def _union_us(ivs: list[tuple[float, float]]) -> float:
    """The length of the union of sorted intervals (start, end)."""
    union, lo, hi = 0.0, None, None
    for s0, s1 in ivs:
        if hi is None or s0 > hi:
            union += 0.0 if hi is None else hi - lo
            lo, hi = s0, s1
        else:
            hi = max(hi, s1)
    return union + (0.0 if hi is None else hi - lo)


def device_classes(trace: dict, steps: int) -> dict[str, tuple[float, float]]:
    """--split's classes: ``{class: (ms per step, events per step)}`` over kernels and
    memory ops (:data:`SPLIT_CLASSES`), and ``"gaps"``: (ms per step of idle under
    :data:`GAP_MAX_US` between consecutive device events of a stream, its count)."""
    t: collections.Counter = collections.Counter()
    n: collections.Counter = collections.Counter()
    by_stream: dict = collections.defaultdict(list)
    for e, cat in _device_ops(trace):
        c = _MEMORY.get(cat) or kernel_class(str(e.get("name", "")))
        ts, dur = float(e.get("ts", 0.0)), float(e.get("dur", 0.0))
        t[c] += dur
        n[c] += 1
        args = e.get("args") or {}
        by_stream[(e.get("pid"), args.get("device"), args.get("stream", e.get("tid")))].append(
            (ts, ts + dur))
    for ivs in by_stream.values():
        ivs.sort()
        end = None
        for s0, s1 in ivs:
            if end is not None and 0.0 < s0 - end < GAP_MAX_US:
                t["gaps"] += s0 - end
                n["gaps"] += 1
            end = s1 if end is None else max(end, s1)
    return {k: (t[k] / 1e3 / steps, n[k] / steps) for k in (*SPLIT_CLASSES, "gaps")}


def concurrent_ms(trace: dict, steps: int) -> float:
    """ms per step by which the device events' durations exceed their union on each
    device: the time kernels of several streams ran at once (``--mb-streams 2``, a side
    stream), which the classes' sums count once per kernel."""
    by_dev: dict = collections.defaultdict(list)
    for e, _cat in _device_ops(trace):
        ts = float(e.get("ts", 0.0))
        by_dev[(e.get("pid"), (e.get("args") or {}).get("device"))].append(
            (ts, ts + float(e.get("dur", 0.0))))
    over = 0.0
    for ivs in by_dev.values():
        ivs.sort()
        over += sum(b - a for a, b in ivs) - _union_us(ivs)
    return over / 1e3 / steps


def split_rows(base: dict, split: dict) -> list[tuple[str, float, float, float, float, float]]:
    """(class, base ms, split ms, difference ms, base events, split events) per class of
    two :func:`device_classes`, then ``"total"``: the times' sums (gaps included) and the
    device events' (the gaps' counts are no events)."""
    rows = [(k, base[k][0], split[k][0], split[k][0] - base[k][0], base[k][1], split[k][1])
            for k in (*SPLIT_CLASSES, "gaps")]  # fmt: skip
    ms = tuple(sum(r[i] for r in rows) for i in (1, 2, 3))
    events = tuple(sum(r[i] for r in rows[:-1]) for i in (4, 5))
    return rows + [("total", *ms, *events)]


def short_name(name: str) -> str:
    """A kernel's name without template arguments or a signature, at most 70 characters
    (``void at::native::elementwise_kernel<128, 4, ...>(int, ...)`` ->
    ``void at::native::elementwise_kernel``)."""
    return re.sub(r"[<(].*", "", name, flags=re.DOTALL)[:70]


def by_name(trace: dict, steps: int) -> dict[str, tuple[float, float]]:
    """``{name: (ms per step, events per step)}`` of a trace's kernels (by
    :func:`short_name`) and memory ops (``gpu_memcpy``, ``gpu_memset``)."""
    t: collections.Counter = collections.Counter()
    n: collections.Counter = collections.Counter()
    for e, cat in _device_ops(trace):
        k = short_name(str(e.get("name", ""))) if cat == "kernel" else cat
        t[k] += float(e.get("dur", 0.0))
        n[k] += 1
    return {k: (t[k] / 1e3 / steps, n[k] / steps) for k in t}


def span_busy(trace: dict, steps: int) -> tuple[float, float, float]:
    """(span, busy, summed) kernel ms per step: the first kernel's start to the end of the
    last kernel to start, the union of the kernels' intervals, and their durations' sum."""
    ks = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)))
                for e, cat in _device_ops(trace) if cat == "kernel")  # fmt: skip
    if not ks:
        return 0.0, 0.0, 0.0
    span = ks[-1][1] - ks[0][0]
    total = sum(s1 - s0 for s0, s1 in ks)
    return tuple(x / 1e3 / steps for x in (span, _union_us(ks), total))


def name_rows(a: dict, b: dict, top: int = 40) -> list[tuple]:
    """(name, A ms, A events, B ms, B events, B − A ms) of two :func:`by_name` tables,
    the largest |B − A| first (names alike by their order of first sight), ``top`` rows."""
    names = list(dict.fromkeys([*a, *b]))
    rows = [(k, *a.get(k, (0.0, 0.0)), *b.get(k, (0.0, 0.0))) for k in names]
    rows = [(k, am, an, bm, bn, bm - am) for k, am, an, bm, bn in rows]
    return sorted(rows, key=lambda r: -abs(r[5]))[:top]


def kernel_ivs(trace: dict) -> tuple[list, list]:
    """(compute, comm) kernels as sorted (start, end) µs lists (memory ops left out): what
    :func:`timeline` and :func:`comm_gaps` read."""
    comp, comm = [], []
    for e, cat in _device_ops(trace):
        if cat != "kernel":
            continue
        ts = float(e.get("ts", 0.0))
        iv = (ts, ts + float(e.get("dur", 0.0)))
        (comm if kernel_class(str(e.get("name", ""))) == "comm" else comp).append(iv)
    return sorted(comp), sorted(comm)


def _busy_in(ivs: list[tuple[float, float]], lo: float, hi: float) -> float:
    """The length of the union of sorted ``ivs`` clipped to [lo, hi)."""
    return _union_us([(max(a, lo), min(b, hi)) for a, b in ivs if a < hi and b > lo])


def _first_start(comp: list, comm: list) -> float:
    return min(iv[0] for iv in (comp[:1] + comm[:1]))  # the lists are sorted


def timeline(ivs: tuple[list, list], bin_us: float) -> list[tuple[float, float, float]]:
    """(bin start ms from the first kernel, compute share, comm share) per bin of
    ``bin_us`` of :func:`kernel_ivs`' lists: each kind's union of kernels inside the bin
    over the bin's length (the last bin's length is what the kernels reach)."""
    comp, comm = ivs
    if not (comp or comm):
        return []
    t0, t1 = _first_start(comp, comm), max(b for _, b in comp + comm)
    rows, lo = [], t0
    while lo < t1:
        hi = min(lo + bin_us, t1)
        rows.append(((lo - t0) / 1e3, _busy_in(comp, lo, hi) / (hi - lo),
                     _busy_in(comm, lo, hi) / (hi - lo)))  # fmt: skip
        lo += bin_us
    return rows


def comm_gaps(ivs: tuple[list, list], lo_ms: float, hi_ms: float) -> list[float]:
    """The gaps (µs) between consecutive comm kernels of :func:`kernel_ivs`' lists that
    start inside [lo_ms, hi_ms) from the first kernel: each one's start minus the latest
    end before it, where positive."""
    comp, comm = ivs
    if not comm:
        return []
    t0 = _first_start(comp, comm)
    w = [(a, b) for a, b in comm if lo_ms * 1e3 <= a - t0 < hi_ms * 1e3]
    gaps, end = [], None
    for a, b in w:
        if end is not None and a > end:
            gaps.append(a - end)
        end = b if end is None else max(end, b)
    return gaps


def _print_timeline(p: Path, bin_ms: float, window: tuple[float, float]) -> None:
    ivs = kernel_ivs(_load_file(p))
    rows = timeline(ivs, bin_ms * 1e3)
    print(f"{p}: compute % / comm % per {bin_ms:g} ms bin, from the first kernel")
    for i in range(0, len(rows), 10):
        print(f"  {rows[i][0]:8.1f} ms: " + " ".join(f"{c * 100:3.0f}/{m * 100:3.0f}"
                                                   for _, c, m in rows[i:i + 10]))  # fmt: skip
    g = comm_gaps(ivs, *window)
    hist = collections.Counter(min(int(x // 5) * 5, 100) for x in g)
    where = ("the whole trace" if window == (0.0, float("inf"))
             else f"{window[0]:g}-{window[1]:g} ms")
    print(f"  comm gaps in {where}: {len(g)}, {sum(g) / 1e3:.2f} ms; "
          "by 5 us (100: 100 and more): "
          + ", ".join(f"{k}: {v}" for k, v in sorted(hist.items())))  # fmt: skip


def _window(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(":"))
    except ValueError:
        raise SystemExit(f"--window {text!r}: give LO:HI in ms from the first kernel, e.g. 0:22")
    return lo, hi


def _load_file(p: Path) -> dict:
    try:
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rt", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError, EOFError) as e:
        raise SystemExit(f"{p}: not a readable JSON trace ({e}); pass a Kineto trace file")


def _print_by_name(pa: Path, pb: Path, steps: int, top: int) -> None:
    ta, tb = _load_file(pa), _load_file(pb)
    for tag, p, t in (("A", pa, ta), ("B", pb, tb)):
        sp, bu, su = span_busy(t, steps)
        print(f"{tag} {p}: span {sp:.2f} ms, busy {bu:.2f}, kernels' sum {su:.2f} (per step)")
    print(f"  {'kernel':70} {'A ms':>8} {'n':>6} {'B ms':>8} {'n':>6} {'B-A ms':>8}")
    for k, am, an, bm, bn, d in name_rows(by_name(ta, steps), by_name(tb, steps), top):
        print(f"  {k:70} {am:8.3f} {an:6.0f} {bm:8.3f} {bn:6.0f} {d:+8.3f}")


def _steps_of(run: Path, steps: int | None) -> int:
    if steps is not None:
        return steps
    try:
        cfg = json.loads((run / "run.json").read_text(encoding="utf-8"))["config"]
        return int(cfg["profile_steps"])
    except (OSError, KeyError, ValueError, TypeError):
        raise SystemExit(f"{run}: no run.json with config.profile_steps; pass --steps N")


def _measured_split(run: Path) -> float | None:
    try:
        v = json.loads((run / "run.json").read_text(encoding="utf-8"))["limits"]["split_ms"]
        return None if v is None else float(v)
    except (OSError, KeyError, ValueError, TypeError):
        return None


def _print_split(run: Path, steps: int) -> None:
    traces = {m: _trace(run / m) for m in SPLIT_MODES}
    missing = [m for m, t in traces.items() if t is None]
    if missing:
        raise SystemExit(f"{run}: no {' or '.join(missing)} trace (rank0.pt.trace.json[.gz]); "
                         "--split needs a run of --mode all")  # fmt: skip
    rows = split_rows(*(device_classes(traces[m], steps) for m in SPLIT_MODES))
    print(f"{run.name}: the split's own cost by class, per profiled step "
          f"(nocomm -> domino-nocomm)")  # fmt: skip
    print(f"  {'class':8} {'nocomm ms':>10} {'split ms':>10} {'diff ms':>9} "
          f"{'events':>8} {'events':>8}")  # fmt: skip
    for k, b, s, d, nb, ns in rows:
        print(f"  {k:8} {b:10.2f} {s:10.2f} {d:+9.2f} {nb:8.0f} {ns:8.0f}")
    m = _measured_split(run)
    if m is not None:
        print(f"  measured split (run.json limits.split_ms): {m:.2f} ms; "
              f"the classes' difference: {rows[-1][3]:.2f} ms")  # fmt: skip
    both = {md: concurrent_ms(traces[md], steps) for md in SPLIT_MODES}
    if max(both.values()) > 0.01 * rows[-1][1]:
        print("  not a breakdown: device events ran at once on several streams for "
              + ", ".join(f"{v:.2f} ms ({md})" for md, v in both.items())
              + " per step; each class sums its events' durations, so concurrent time "
              "counts in every class that ran it")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path,
                    help="run directories (one per mode inside); --by-name: two trace files")
    ap.add_argument("--steps", type=int, default=None,
                    help="profiled steps per trace (default: run.json's config.profile_steps)")
    ap.add_argument("--split", action="store_true",
                    help="the split's own cost by class (nocomm against domino-nocomm)")
    ap.add_argument("--by-name", action="store_true",
                    help="two trace files: device time per kernel name, and B - A")
    ap.add_argument("--top", type=int, default=40, help="--by-name: rows shown")
    ap.add_argument("--timeline", action="store_true",
                    help="one trace file: compute and comm busy per bin, comm gaps")
    ap.add_argument("--bin-ms", type=float, default=2.0, help="--timeline: bin width")
    ap.add_argument("--window", default="0:inf",
                    help="--timeline: LO:HI ms from the first kernel for the comm gaps "
                         "(default: the whole trace)")
    a = ap.parse_args()
    if a.timeline:
        if len(a.runs) != 1:
            raise SystemExit("--timeline takes one trace file")
        _print_timeline(a.runs[0], a.bin_ms, _window(a.window))
        return
    if a.by_name:
        if len(a.runs) != 2:
            raise SystemExit("--by-name takes two trace files, A and B")
        _print_by_name(a.runs[0], a.runs[1], a.steps or 1, a.top)
        return
    if a.split:
        for run in a.runs:
            _print_split(run, _steps_of(run, a.steps))
        return
    print(f"{'run':28} {'mode':14} " + " ".join(f"{k:>7}" for k in CLASSES) + "   (ms / step)")
    for run in a.runs:
        steps = _steps_of(run, a.steps)
        for d in sorted(p for p in run.iterdir() if p.is_dir()):
            t = _trace(d)
            if t is None:
                continue
            c = classes(t, steps)
            print(f"{run.name:28} {d.name:14} " + " ".join(f"{c[k]:7.2f}" for k in CLASSES))


if __name__ == "__main__":
    main()
