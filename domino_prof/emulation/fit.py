"""Fitting a comm profile from real multi-GPU traces (``domino-prof calibrate``).

Torch-free. The events come from the trace loader (``domino_prof.trace.load_trace``):
kernel name, duration, ``In msg nelems``, ``Group size`` and launch ``grid`` per
collective kernel. The kernel arg the loader does not keep (``dtype``) and the files'
NCCL version and device name are read by a second, typed decode of the same files
(:func:`_kernel_args`, keyed by (rank, correlation)).

The fit, per (collective, R, dtype):

1. ``size`` (bytes) of each kernel as nccl-tests defines it (``model.message_bytes``):
   all-reduce and reduce-scatter ``In msg nelems`` x element bytes, all-gather
   ``In msg nelems`` x R x element bytes;
2. per distinct size, the **10th percentile** (nearest rank: the ceil(0.1 n)-th smallest)
   of the durations of every rank's kernels of that size. Why low: a collective kernel
   starts when its own rank reaches it and spins until its peers arrive, so every rank
   but the last to arrive records transfer + wait; in a synchronous step each instance
   has one last arriver, so at least 1/R of the pooled samples (>= 12.5% for R <= 8) are
   close to the transfer alone. p10 lies inside that share while ignoring the single
   fastest sample (a timer artefact or an instance whose peers were exceptionally
   aligned would otherwise set the whole profile). Kernels slowed by compute they overlap
   (Domino) sit above it too;
3. an ordinary least-squares line ``t = alpha + size / algbw`` through those (size, p10)
   points, one point per size (so a size seen 200 times does not outweigh one seen 6
   times). Two distinct sizes at least; a group with one size is skipped (a note).
   A fit with a slope <= 0 (bandwidth <= 0) is skipped; a negative intercept is set to
   0 and the line refitted through the origin (a note says so).

CTAs: the most common ``grid`` (x*y*z) of the group's kernels; the algorithm from the
kernel name (``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` -> ``ring/LL``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from domino_prof.emulation.model import DTYPE_BYTES, message_bytes
from domino_prof.emulation.profile import Entry, Profile
from domino_prof.errors import ConfigError, TraceError
from domino_prof.rundir import resolve
from domino_prof.trace import load_trace
from domino_prof.trace.read import FileError, read_bytes

PERCENTILE = 10.0

# ncclDevKernel_AllReduce_Sum_bf16_RING_LL, ncclDevKernel_AllGather_RING_LL (NCCL >= 2.19),
# ncclKernel_AllReduce_RING_LL_Sum_bfloat16 (older NCCL)
_NEW = re.compile(
    r"nccl(?:Dev)?Kernel_(AllReduce|ReduceScatter|AllGather)_(?:([A-Za-z]+)_)??"
    r"(?:([a-z]+\d*)_)?(RING|TREE|NVLS|NVLSTREE|COLLNET_DIRECT|COLLNET_CHAIN|PAT)_(LL128|LL|SIMPLE)"
)
_OLD = re.compile(
    r"ncclKernel_(AllReduce|ReduceScatter|AllGather)_(RING|TREE|COLLNET|NVLS)_(LL128|LL|SIMPLE)"
    r"_(?:[A-Za-z]+_)?([a-z]+\d*)"
)
_COLL = {"AllReduce": "all_reduce", "ReduceScatter": "reduce_scatter", "AllGather": "all_gather"}
_PROTO = {"LL": "LL", "LL128": "LL128", "SIMPLE": "Simple"}
# dtype spellings: Kineto's args.dtype (c10 ScalarType names) and NCCL kernel-name types
_DTYPES = {
    "BFloat16": "bfloat16", "Half": "float16", "Float": "float32", "Double": "float64",
    "Int": "int32", "Long": "int64", "Byte": "uint8", "Char": "int8",
    "bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64",
    "i32": "int32", "i64": "int64", "u8": "uint8", "i8": "int8",
    "bfloat16": "bfloat16", "half": "float16", "float": "float32", "double": "float64",
}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Kernel:
    """What one collective kernel name says."""

    collective: str
    algorithm: str  # "ring/LL"
    dtype: str | None  # None: not in the name (all-gather kernels are byte-typed)


def parse_kernel_name(name: str) -> Kernel | None:
    m = _OLD.search(name)  # first: the new pattern also matches an old name's prefix
    if m:
        coll, algo, proto, ty = m.groups()
        return Kernel(
            collective=_COLL[coll], algorithm=f"{algo.lower()}/{_PROTO[proto]}",
            dtype=_DTYPES.get(ty),
        )  # fmt: skip
    m = _NEW.search(name)
    if m:
        coll, _op, ty, algo, proto = m.groups()
        return Kernel(
            collective=_COLL[coll], algorithm=f"{algo.lower()}/{_PROTO[proto]}",
            dtype=_DTYPES.get(ty) if ty else None,
        )  # fmt: skip
    return None


def low_percentile(values: np.ndarray, pct: float = PERCENTILE) -> int:
    """Nearest-rank percentile: the ceil(pct/100 * n)-th smallest value (an observed one)."""
    v = np.sort(np.asarray(values))
    k = max(1, math.ceil(pct / 100.0 * v.size))
    return int(v[k - 1])


def fit_line(sizes: np.ndarray, times_us: np.ndarray) -> tuple[float, float, bool]:
    """Least squares ``t = alpha + size * slope`` -> (alpha_us, slope_us_per_byte,
    through_origin). A negative intercept refits through the origin."""
    x = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(times_us, dtype=np.float64)
    xm, ym = x.mean(), y.mean()
    slope = float(((x - xm) * (y - ym)).sum() / ((x - xm) ** 2).sum())
    alpha = float(ym - slope * xm)
    if alpha < 0:
        return 0.0, float((x * y).sum() / (x * x).sum()), True
    return alpha, slope, False


# --------------------------------------------------------------------------- the samples
class _KArgs(msgspec.Struct, gc=False):
    correlation: Any = -1
    dtype: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")
    shared: Any = msgspec.field(default=None, name="shared memory")


class _KEv(msgspec.Struct, gc=False):
    cat: Any = ""
    args: _KArgs | None = None


class _KDoc(msgspec.Struct, gc=False):
    traceEvents: list[_KEv] | None = None
    distributedInfo: Any = None
    deviceProperties: Any = None


_KDECODE = msgspec.json.Decoder(_KDoc, strict=False)


def _launch_attrs(a: _KArgs) -> tuple[int, int, int]:
    """(threads per CTA, registers per thread, shared memory bytes) of a kernel's args,
    -1 where absent."""
    b = a.block
    threads = -1
    if isinstance(b, list) and b and all(isinstance(x, int) for x in b):
        threads = 1
        for x in b:
            threads *= x
    regs = a.registers if isinstance(a.registers, int) else -1
    smem = a.shared if isinstance(a.shared, int) else -1
    return threads, regs, smem


def _kernel_args(path: str) -> tuple[dict[int, tuple], dict]:
    """correlation -> (dtype, threads, registers, shared bytes) of one file's kernels,
    and its top-level facts."""
    try:
        doc = _KDECODE.decode(read_bytes(Path(path)))
    except FileError as e:
        raise TraceError(e.path, e.problem, e.fix) from None
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise TraceError(path, f"cannot read kernel args ({e})", "re-export the trace") from None
    out: dict[int, tuple] = {}
    for ev in doc.traceEvents or ():
        a = ev.args
        if ev.cat != "kernel" or a is None or not isinstance(a.correlation, int):
            continue
        dt = _DTYPES.get(a.dtype) if isinstance(a.dtype, str) else None
        out[a.correlation] = (dt, *_launch_attrs(a))
    facts: dict[str, Any] = {}
    di = doc.distributedInfo
    if isinstance(di, dict):
        facts["nccl"] = di.get("nccl_version")
        facts["world_size"] = di.get("world_size")
    dp = doc.deviceProperties
    if isinstance(dp, list) and dp and isinstance(dp[0], dict):
        facts["device"] = dp[0].get("name")
    return out, facts


@dataclass(frozen=True, kw_only=True)
class Samples:
    """Every collective kernel of the traces: one row each (numpy columns)."""

    collective: np.ndarray  # object (str)
    ranks: np.ndarray  # int64, R
    dtype: np.ndarray  # object (str)
    size: np.ndarray  # int64 bytes
    dur_ns: np.ndarray  # int64
    ctas: np.ndarray  # int64 (-1 unknown)
    algorithm: np.ndarray  # object
    threads: np.ndarray  # int64 threads per CTA (-1 unknown)
    registers: np.ndarray  # int64 registers per thread (-1 unknown)
    shared: np.ndarray  # int64 shared memory bytes per CTA (-1 unknown)
    n_files: int
    facts: tuple[str, ...]  # "NVIDIA H200", "NCCL 2.28.9" ...
    notes: tuple[str, ...]


def collect(paths: list[str]) -> Samples:
    """Load every trace PATH (a file, a directory of rank files, a run directory: each
    of its modes is loaded on its own) and extract the collective kernels."""
    cols: dict[str, list] = {k: [] for k in
                             ("collective", "ranks", "dtype", "size", "dur", "ctas", "algo",
                              "threads", "registers", "shared")}  # fmt: skip
    n_files = 0
    facts: Counter = Counter()
    notes: list[str] = []
    unknown: Counter = Counter()
    for p in paths:
        target = resolve(p)
        for trace_path in target.modes.values():
            trace = load_trace(trace_path, workers=1)
            ev = trace.events
            k = ev[ev["cat"] == "kernel"]
            for rank, meta in trace.ranks.items():
                n_files += 1
                mine = k[k["rank"] == rank]
                names = mine["name"].astype(str).to_numpy()
                parsed = {n: parse_kernel_name(n) for n in set(names)}
                if not any(v is not None for v in parsed.values()):
                    continue
                args, f = _kernel_args(meta.path)
                if f.get("device"):
                    facts[("0device", str(f["device"]))] += 1
                if f.get("nccl"):
                    facts[("1nccl", f"NCCL {f['nccl']}")] += 1
                world = meta.world_size or f.get("world_size")
                corr = mine["correlation"].to_numpy()
                nel = mine["msg_nelems"].to_numpy()
                gsz = mine["group_size"].to_numpy()
                dur = mine["dur"].to_numpy()
                grid = mine["grid"].to_numpy()  # the loader's x*y*z, -1 without
                for i, name in enumerate(names):
                    kn = parsed[name]
                    if kn is None:
                        continue
                    ctas = int(grid[i])
                    ka = args.get(int(corr[i])) or (None, -1, -1, -1)
                    dtype = ka[0] or kn.dtype
                    r = int(gsz[i]) if gsz[i] > 0 else (int(world) if world else -1)
                    if nel[i] < 0 or r < 2 or dtype is None:
                        unknown[name] += 1
                        continue
                    elt = DTYPE_BYTES[dtype]
                    n_in = int(nel[i])
                    size = message_bytes(
                        kn.collective, numel_in=n_in, numel_out=n_in * r, elem_bytes=elt
                    )
                    cols["collective"].append(kn.collective)
                    cols["ranks"].append(r)
                    cols["dtype"].append(dtype)
                    cols["size"].append(size)
                    cols["dur"].append(int(dur[i]))
                    cols["ctas"].append(ctas)
                    cols["algo"].append(kn.algorithm)
                    cols["threads"].append(ka[1])
                    cols["registers"].append(ka[2])
                    cols["shared"].append(ka[3])
    if unknown:
        name, n = unknown.most_common(1)[0]
        notes.append(
            f"{sum(unknown.values())} collective kernels without a message size, group size "
            f"or dtype were left out (e.g. {n} x {name[:60]})"
        )
    fact_list = tuple(v for (_k, v), _n in sorted(facts.items()))
    return Samples(
        collective=np.asarray(cols["collective"], dtype=object),
        ranks=np.asarray(cols["ranks"], dtype=np.int64),
        dtype=np.asarray(cols["dtype"], dtype=object),
        size=np.asarray(cols["size"], dtype=np.int64),
        dur_ns=np.asarray(cols["dur"], dtype=np.int64),
        ctas=np.asarray(cols["ctas"], dtype=np.int64),
        algorithm=np.asarray(cols["algo"], dtype=object),
        threads=np.asarray(cols["threads"], dtype=np.int64),
        registers=np.asarray(cols["registers"], dtype=np.int64),
        shared=np.asarray(cols["shared"], dtype=np.int64),
        n_files=n_files,
        facts=fact_list,
        notes=tuple(notes),
    )


# --------------------------------------------------------------------------- the fit
def _most_common(values: np.ndarray) -> Any:
    c = Counter(values.tolist())
    best = max(c.values())
    return max(v for v, n in c.items() if n == best)  # ties: the larger (deterministic)


def fit_profile(
    samples: Samples,
    *,
    name: str,
    traces: list[str],
    percentile: float = PERCENTILE,
    base: Profile | None = None,
) -> tuple[Profile, list[str]]:
    """The fitted entries (merged over ``base``'s, which they replace) and notes."""
    notes = list(samples.notes)
    if samples.size.size == 0:
        raise ConfigError(
            f"{', '.join(traces)}: no NCCL all-reduce / reduce-scatter / all-gather kernels "
            "with message sizes; calibrate needs real multi-GPU traces (record_shapes=True "
            "is not needed: Kineto writes 'In msg nelems' on collective kernels)"
        )
    keys = sorted({(c, int(r), d) for c, r, d in
                   zip(samples.collective, samples.ranks, samples.dtype)})  # fmt: skip
    fitted: list[Entry] = []
    where = ", ".join(traces)
    facts = ", ".join(samples.facts)
    for coll, r, dt in keys:
        g = (samples.collective == coll) & (samples.ranks == r) & (samples.dtype == dt)
        sizes = np.unique(samples.size[g])
        label = f"{coll} R={r} {dt}"
        if sizes.size < 2:
            notes.append(
                f"{label}: one message size ({int(sizes[0])} B) only; a line needs two, "
                "so it is not fitted (profile a run with another seq or mbs)"
            )
            continue
        low_ns = [low_percentile(samples.dur_ns[g & (samples.size == s)], percentile)
                  for s in sizes]  # fmt: skip
        counts = [int((g & (samples.size == s)).sum()) for s in sizes]
        low_us = np.asarray(low_ns, dtype=np.float64) / 1e3
        alpha, slope, origin = fit_line(sizes, low_us)
        if slope <= 0:
            notes.append(
                f"{label}: the low-percentile durations do not grow with size "
                f"({', '.join(f'{t:g}' for t in low_us)} us): no bandwidth can be fitted"
            )
            continue
        if origin:
            notes.append(f"{label}: the line's intercept was negative; fitted through 0")
        algbw = 1.0 / (slope * 1e3)
        ctas = samples.ctas[g]
        ctas = ctas[ctas > 0]
        if ctas.size == 0:
            notes.append(f"{label}: no kernel grid in the traces; ctas set to 1")
        algo = _most_common(samples.algorithm[g])
        launch = {}
        for key, col in (("threads", samples.threads), ("registers", samples.registers),
                         ("shared_bytes", samples.shared)):
            v = col[g]
            v = v[v >= 0]
            launch[key] = int(_most_common(v)) if v.size else None
        fitted.append(
            Entry(
                collective=coll,
                ranks=r,
                dtype=dt,
                alpha_us=round(alpha, 4),
                algbw_gbps=round(algbw, 4),
                ctas=int(_most_common(ctas)) if ctas.size else 1,
                algorithm=algo,
                source=(
                    f"domino-prof calibrate on {where}"
                    + (f" ({facts})" if facts else "")
                    + f": {int(g.sum())} kernels of {samples.n_files} rank files, "
                    f"p{percentile:g} (nearest rank) of the durations per message size, "
                    f"least-squares line over {sizes.size} sizes; ctas, threads, registers, "
                    "shared_bytes = the kernels' most common grid, block, registers per "
                    "thread, shared memory"
                ),
                **launch,
                fit={
                    "percentile": percentile,
                    "sizes_bytes": [int(s) for s in sizes],
                    "low_us": [round(float(t), 3) for t in low_us],
                    "n_kernels": counts,
                },
            )
        )
    if not fitted:
        raise ConfigError(
            f"{where}: no (collective, R, dtype) has kernels of two or more message sizes; "
            "calibrate needs traces of at least two sizes per collective"
        )
    got = {e.key for e in fitted}
    kept = [e for e in (base.entries if base else ()) if e.key not in got]
    entries = sorted([*kept, *fitted], key=lambda e: (e.ranks, e.collective, e.dtype))
    desc = base.description if base else f"fitted by domino-prof calibrate from {where}"
    return Profile(name=name, description=desc, entries=tuple(entries)), notes
