"""Overlap tax: how much slower compute runs while comm runs beside it, and how much
longer comm runs while compute runs beside it (docs/METRICS.md "Extension: overlap tax").

Per compute interval of a step (``iteration >= 0``, duration > 0) its **overlap
fraction** ``f = |interval ∩ ∪ comm of its (rank, device)| / dur`` (comm on another
stream of the GPU; on a CPU trace a gloo thread of the same process). Intervals are
grouped into **classes** per rank: the kernel's shape as far as the trace loader keeps
it — kernel name + launch grid (x·y·z of ``args.grid``) + the launching op with its
digits dropped (``fwd.layer_attn_N_batch_N``: the same shapes in every layer and
micro-batch); on a CPU trace the leaf op's name + its op (leaf ops per thread, so nested
ops are not counted twice). Not in the key, by decision: ``args.block`` and the launching
aten op's ``Input Dims``. The loader keeps neither (its msgspec decoder skips them
without building Python objects; decoding them would cost every trace's load for this
one figure), and the reference model's traces record no input shapes (``record_shapes``
off). The grid and the op keep apart the shapes the reference model runs.

A class's **baseline** is the median duration of its ``f == 0`` ("alone") intervals,
given when it has at least :data:`ALONE_MIN` of them; without one the class's overlapped
time is *unmeasured* (reported, never taxed as 0). The **tax** of an interval with
``f > 0`` is ``dur − baseline``; a class's tax is their sum, its **slowdown** per
overlapped time ``1 + Σ(dur − base) / Σ(f · base)`` (a kernel 30 % under comm weighs
0.3); per step: the sum over classes / rank-steps.

**Comm stretch**, the same over comm intervals: per comm interval ``g`` = its share
covered by the compute reference (the hidden share of "Overlap"); classes = name +
grid + ``In msg nelems``; baseline = median of the ``g == 0`` intervals; stretch = Σ
``dur − base`` over the ``g > 0`` ones. Not a part of any step decomposition: the
exposed part of a stretch is already exposed comm.

Each rank's part (:func:`tax_part`, in the rank's job) is a :class:`TaxPart` of per
(rank, class) sums and alone medians, so ranks combine by concatenation
(:func:`overlap_tax`); the JSON keeps those class rows (compact columns), so two
documents give the tax of one against the other's classes (:func:`against`: a mode's
compute against ``domino-nocomm``'s, where every class is alone; the mean of the
reference's alone intervals is that baseline, so the classes' taxes sum to the compute
time difference). Vectorised; no torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from domino_prof.analysis import intervals as ivm
from domino_prof.analysis.attribution import tuple_ids
from domino_prof.analysis.classify import leaf_ops
from domino_prof.analysis.reference import ComputeReference

ALONE_MIN = 3  # alone (f == 0) intervals a class needs for a baseline
OVERLAP_FRACTION = 0.5  # overlapped_mask: the comm emulator's "overlapped" (> half)
CLASS_COLUMNS = ("rank", "key", "n", "sum_ns", "n_alone", "alone_ns", "alone_median_ns",
                 "f_sum")  # fmt: skip


@dataclass(frozen=True)
class TaxPart:
    """One rank's classes (:data:`CLASS_COLUMNS` each): its compute and its comm; and
    ``concurrent_ns``, the time its compute intervals of steps ran at once with another
    compute interval of the same (rank, device): their durations' sum less their union's
    length (two micro-batch lanes, a graph's branches; 0 on one stream)."""

    compute: pd.DataFrame
    comm: pd.DataFrame
    concurrent_ns: int = 0


def _empty() -> pd.DataFrame:
    return pd.DataFrame({
        "rank": np.empty(0, np.int64), "key": np.empty(0, object), "n": np.empty(0, np.int64),
        "sum_ns": np.empty(0, np.int64), "n_alone": np.empty(0, np.int64),
        "alone_ns": np.empty(0, np.int64), "alone_median_ns": np.empty(0, float),
        "f_sum": np.empty(0, float)})  # fmt: skip


def _kinds(intervals: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    kind = intervals["kind"]
    return (kind == "compute").to_numpy(bool), (kind == "comm").to_numpy(bool)


def _compute_cover(intervals: pd.DataFrame, comp: np.ndarray, comm: np.ndarray) -> np.ndarray:
    """Per compute row: its length inside the union of its (rank, device)'s comm (ns)."""
    key = tuple_ids(intervals["rank"].to_numpy(np.int64), intervals["device"].to_numpy(np.int64))
    s = intervals["start"].to_numpy(np.int64)
    e = intervals["end"].to_numpy(np.int64)
    mk, ms, me = ivm.grouped_merge(key[comm], s[comm], e[comm])
    return ivm.grouped_intersection(key[comp], s[comp], e[comp], mk, ms, me)


def overlapped_mask(intervals: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(compute row mask, overlapped) over ``intervals``: a compute interval more than
    :data:`OVERLAP_FRACTION` of whose time lies under its (rank, device)'s comm. The
    comm emulator's checks (benchmarks/emulate_checks.py) use this cut; the tax does not
    (it weighs every interval by its overlap fraction)."""
    comp, comm = _kinds(intervals)
    inter = _compute_cover(intervals, comp, comm)
    dur = np.maximum(intervals["end"].to_numpy(np.int64)[comp]
                     - intervals["start"].to_numpy(np.int64)[comp], 0)  # fmt: skip
    return comp, (dur > 0) & (inter > OVERLAP_FRACTION * dur)


def _fraction(cover: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """cover / dur (0 where dur is 0), clipped to [0, 1]."""
    out = np.zeros(len(dur), float)
    pos = dur > 0
    out[pos] = np.minimum(cover[pos], dur[pos]) / dur[pos]
    return out


_DIGITS = re.compile(r"\d+")


def _codes(col) -> tuple[np.ndarray, list]:
    """(row code, distinct values) of one column: a categorical's own codes (no string
    per row), else a factorization. A missing categorical value reads as ``"nan"`` (what
    ``astype(str)`` gives)."""
    if isinstance(col, pd.Series) and isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy(np.int64)
        values = [str(x) for x in col.cat.categories]
        if (codes < 0).any():
            codes = np.where(codes < 0, len(values), codes)
            values.append("nan")
        return codes, values
    codes, uniq = pd.factorize(np.asarray(col), use_na_sentinel=False)
    return codes.astype(np.int64), list(uniq)


def class_keys(cols: Sequence, parts: Sequence[Callable[[object], str]]
               ) -> tuple[np.ndarray, list[str]]:  # fmt: skip
    """Each row's class code and the sorted key strings. A key is the concatenation of
    ``parts[i](value of cols[i])``; each part is computed once per distinct value of its
    column (categoricals by their codes) and the pieces joined once per distinct tuple,
    never per row; a key's code is its place among the sorted keys."""
    n = len(cols[0]) if len(cols) else 0
    if n == 0:
        return np.empty(0, np.int64), []
    coded = [_codes(c) for c in cols]
    combo = np.zeros(n, np.int64)
    for codes, values in coded:
        combo = combo * np.int64(len(values)) + codes
    tc, tu = pd.factorize(combo)
    tu = np.asarray(tu, np.int64)
    columns = []
    for (_, values), part in zip(reversed(coded), reversed(parts)):  # the last radix first
        pieces = np.array([part(v) for v in values], dtype=object)
        columns.append(pieces[tu % len(values)].tolist())
        tu = tu // len(values)
    keys = ["".join(p) for p in zip(*reversed(columns))]
    order = sorted(set(keys))
    code_of = {k: i for i, k in enumerate(order)}
    return np.fromiter((code_of[k] for k in keys), np.int64, len(keys))[tc], order


def _grid_part(grid) -> str:
    g = int(grid)
    return f" [grid {g}]" if g != -1 else ""


def _size_part(nelems) -> str:
    m = int(nelems)
    return f" [n {m}]" if m != -1 else ""


def _op_part(op) -> str:
    return f" @ {_DIGITS.sub('N', str(op))}"


COMPUTE_PARTS = (str, _grid_part, _op_part)  # NAME [grid G] @ OP
COMM_PARTS = (str, _grid_part, _size_part, _op_part)  # NAME [grid G] [n M] @ OP


def compute_key(name, grid, op) -> str:
    """A compute class: ``NAME [grid G] @ OP`` (the op's digits as N; no grid part when
    the kernel has none, ``grid`` -1)."""
    return "".join(f(v) for f, v in zip(COMPUTE_PARTS, (name, grid, op)))


def comm_key(name, grid, nelems, op) -> str:
    """A comm class: ``NAME [grid G] [n NELEMS] @ OP`` (grid and size only when the trace
    has them; the op's digits as N). The op keeps apart collectives of one kernel and
    different sizes where the trace records no size (an emulated trace: the head's small
    all-reduce and the layers' large ones share name and grid)."""
    return "".join(f(v) for f, v in zip(COMM_PARTS, (name, grid, nelems, op)))


def _int_col(df: pd.DataFrame, name: str) -> np.ndarray:
    return df[name].to_numpy(np.int64) if name in df else np.full(len(df), -1, np.int64)


def _grouped_median(gid: np.ndarray, x: np.ndarray, n: int) -> np.ndarray:
    """The median of ``x`` per group id (NaN for a group without rows), vectorised: one
    sort by (group, value), then the middle one or two values of each group's run."""
    out = np.full(n, np.nan)
    if len(x) == 0:
        return out
    order = np.lexsort((x, gid))
    xs = x[order].astype(float)
    cnt = np.bincount(gid, minlength=n)
    first = np.cumsum(cnt) - cnt
    has = cnt > 0
    lo = first[has] + (cnt[has] - 1) // 2
    hi = first[has] + cnt[has] // 2
    out[has] = (xs[lo] + xs[hi]) / 2
    return out


def _isum(gid: np.ndarray, x: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.int64)  # exact int64 sums (bincount would go through float)
    np.add.at(out, gid, x)
    return out


def class_table(rank: np.ndarray, codes: np.ndarray, keys: list[str], dur: np.ndarray,
                frac: np.ndarray) -> pd.DataFrame:  # fmt: skip
    """:data:`CLASS_COLUMNS` per (rank, class) in (rank, key) order, from each row's rank,
    class code (into the sorted ``keys``), duration (ns) and overlap fraction."""
    if len(dur) == 0:
        return _empty()
    group = rank * len(keys) + codes
    gid, groups = pd.factorize(group, sort=True)
    gid = gid.astype(np.int64)
    n = len(groups)
    alone = frac == 0
    return pd.DataFrame({
        "rank": groups // len(keys),
        "key": np.array(keys, dtype=object)[groups % len(keys)],
        "n": np.bincount(gid, minlength=n).astype(np.int64),
        "sum_ns": _isum(gid, dur, n),
        "n_alone": np.bincount(gid[alone], minlength=n).astype(np.int64),
        "alone_ns": _isum(gid[alone], dur[alone], n),
        "alone_median_ns": _grouped_median(gid[alone], dur[alone], n),
        "f_sum": np.bincount(gid, weights=frac, minlength=n),
    })  # fmt: skip


def tax_part(intervals: pd.DataFrame, *, mode: str,
             reference: ComputeReference | None = None) -> TaxPart:  # fmt: skip
    """One rank's compute and comm classes (see the module doc). ``reference``: the
    rank's compute reference (what hides comm; built from the compute rows when not
    given, the GPU definition)."""
    if intervals is None or len(intervals) == 0:
        return TaxPart(_empty(), _empty())
    iv = intervals
    comp, comm = _kinds(iv)
    start = iv["start"].to_numpy(np.int64)
    dur = np.maximum(iv["end"].to_numpy(np.int64) - start, 0)
    in_step = (iv["iteration"].to_numpy(np.int64) >= 0 if "iteration" in iv
               else np.ones(len(iv), bool))  # fmt: skip
    # compute: f under comm, the intervals of steps with a duration
    c = iv.loc[comp]
    f = _fraction(_compute_cover(iv, comp, comm), dur[comp])
    keep = in_step[comp] & (dur[comp] > 0)
    if mode == "cpu":  # leaf ops per thread (an op's nested ops are its time)
        thr = tuple_ids(*(c[k].to_numpy(np.int64) for k in ("rank", "device", "stream")))
        keep &= leaf_ops(thr, start[comp], dur[comp])
    rank, cs, cd = c["rank"].to_numpy(np.int64)[keep], start[comp][keep], dur[comp][keep]
    ck, ckeys = class_keys([c["name"], _int_col(c, "grid"), c["op"]], COMPUTE_PARTS)
    compute = class_table(rank, ck[keep], ckeys, cd, f[keep])
    # compute that ran beside other compute: Σ dur − |∪| per (rank, device)
    dev = tuple_ids(rank, c["device"].to_numpy(np.int64)[keep])
    _, us, ue = ivm.grouped_merge(dev, cs, cs + cd)
    concurrent = int(cd.sum() - (ue - us).sum())
    # comm: g = its share under the compute reference
    m = iv.loc[comm]
    ref = reference if reference is not None else ComputeReference.of_intervals(iv)
    cover = ref.hidden(m["rank"].to_numpy(np.int64), m["device"].to_numpy(np.int64),
                       start[comm], start[comm] + dur[comm])  # fmt: skip
    g = _fraction(np.asarray(cover, np.int64), dur[comm])
    mkeep = in_step[comm] & (dur[comm] > 0)
    mk, mkeys = class_keys([m["name"], _int_col(m, "grid"), _int_col(m, "msg_nelems"),
                            m["op"]], COMM_PARTS)  # fmt: skip
    comms = class_table(m["rank"].to_numpy(np.int64)[mkeep], mk[mkeep], mkeys,
                        dur[comm][mkeep], g[mkeep])  # fmt: skip
    return TaxPart(compute, comms, concurrent)


# ----------------------------------------------------------------------------- reduce
def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if f is not None and len(f)]
    return pd.concat(frames, ignore_index=True) if frames else _empty()


def _self_tax(df: pd.DataFrame) -> pd.DataFrame:
    """Each class's baseline (its alone median, >= ALONE_MIN alone) and tax."""
    df = df.copy()
    df["n_overlapped"] = df["n"] - df["n_alone"]
    df["overlapped_ns"] = df["sum_ns"] - df["alone_ns"]
    base = df["alone_median_ns"].where(df["n_alone"] >= ALONE_MIN)
    df["baseline_ns"] = base
    ov = df["n_overlapped"] > 0
    df["tax_ns"] = (df["overlapped_ns"] - df["n_overlapped"] * base).where(ov)
    weight = base * df["f_sum"]
    df["slowdown"] = (1 + df["tax_ns"] / weight).where(ov & (weight > 0))
    df["mean_f"] = (df["f_sum"] / df["n_overlapped"]).where(ov)
    return df


def _num(x) -> float | None:
    return None if x is None or pd.isna(x) else float(x)


def _rows(df: pd.DataFrame, per_step: Callable[[float], float | None]) -> list[dict]:
    return [
        {"rank": int(r.rank), "key": str(r.key), "n": int(r.n), "n_alone": int(r.n_alone),
         "n_overlapped": int(r.n_overlapped), "baseline_ns": _num(r.baseline_ns),
         "mean_f": _num(r.mean_f), "slowdown": _num(r.slowdown), "tax_ns": _num(r.tax_ns),
         "tax_ms_per_step": per_step(r.tax_ns) if not pd.isna(r.tax_ns) else None,
         "overlapped_ms_per_step": per_step(r.overlapped_ns)}
        for r in df.itertuples()
    ]  # fmt: skip


def _summary(df: pd.DataFrame, k: int, *, top_n: int) -> dict:
    """The self-baseline figures of one population (compute or comm classes)."""
    t = _self_tax(df)
    ov = t.loc[t["n_overlapped"] > 0]
    measured = ov.loc[ov["baseline_ns"].notna()]
    unmeasured = ov.loc[ov["baseline_ns"].isna()]

    def per_step(ns: float) -> float | None:
        return float(ns) / k / 1e6 if k else None

    weight = float((measured["baseline_ns"] * measured["f_sum"]).sum())
    tax = float(measured["tax_ns"].sum())
    # nothing overlapped: a measured 0; overlapped but no class measured: not measured
    tax_ps = per_step(tax) if (len(measured) or not len(ov)) else None
    return {
        "n_classes": len(ov),
        "n_measured": len(measured),
        "n_overlapped": int(ov["n_overlapped"].sum()),
        "overlapped_ms_per_step": per_step(float(ov["overlapped_ns"].sum())),
        "tax_ms_per_step": tax_ps,
        "unmeasured_ms_per_step": per_step(float(unmeasured["overlapped_ns"].sum())),
        "slowdown": (1 + tax / weight) if weight > 0 else None,
        "top": _rows(measured.sort_values(["tax_ns", "rank", "key"],
                                          ascending=[False, True, True]).head(top_n), per_step),
        "top_unmeasured": _rows(unmeasured.sort_values(
            ["overlapped_ns", "rank", "key"], ascending=[False, True, True]).head(top_n),
            per_step),
    }  # fmt: skip


def classes_json(df: pd.DataFrame) -> dict:
    """The class rows as compact columns: ``keys`` (sorted, once each) and per row its
    index into them (``key``), ``rank`` and the :data:`CLASS_COLUMNS` sums (null median
    for a class without an alone interval)."""
    keys = sorted(set(df["key"].tolist()))
    code = {k: i for i, k in enumerate(keys)}
    return {
        "keys": keys,
        "rank": [int(x) for x in df["rank"]],
        "key": [code[k] for k in df["key"]],
        **{c: [int(x) for x in df[c]] for c in ("n", "sum_ns", "n_alone", "alone_ns")},
        "alone_median_ns": [_num(x) for x in df["alone_median_ns"]],
        "f_sum": [float(x) for x in df["f_sum"]],
    }  # fmt: skip


def classes_frame(doc: Mapping | None) -> pd.DataFrame | None:
    """:func:`classes_json`'s columns back as a frame (None when absent: a document
    written before the class rows)."""
    if not doc or "keys" not in doc:
        return None
    keys = np.array(doc["keys"], dtype=object)
    return pd.DataFrame({
        "rank": np.asarray(doc["rank"], np.int64),
        "key": keys[np.asarray(doc["key"], np.int64)] if len(doc["key"]) else np.empty(0, object),
        **{c: np.asarray(doc[c], np.int64) for c in ("n", "sum_ns", "n_alone", "alone_ns")},
        "alone_median_ns": np.array([np.nan if x is None else x for x in doc["alone_median_ns"]],
                                    float),
        "f_sum": np.asarray(doc["f_sum"], float),
    })  # fmt: skip


def _parts(parts) -> tuple[pd.DataFrame, pd.DataFrame]:
    ps = [p for p in parts if isinstance(p, TaxPart)]
    compute = _concat([p.compute for p in ps]).sort_values(["rank", "key"], kind="stable")
    comm = _concat([p.comm for p in ps]).sort_values(["rank", "key"], kind="stable")
    return compute.reset_index(drop=True), comm.reset_index(drop=True)


def overlap_tax(parts: list, *, n_rank_steps: int, hidden_ns: int | None,
                top_n: int = 5) -> dict:  # fmt: skip
    """The overlap tax and comm stretch of every rank's :func:`tax_part` (JSON form;
    docs/METRICS.md "Extension: overlap tax" names every key)."""
    compute, comm = _parts(parts)
    k = int(n_rank_steps)
    concurrent = sum(p.concurrent_ns for p in parts if isinstance(p, TaxPart))
    c = _summary(compute, k, top_n=top_n)
    m = _summary(comm, k, top_n=top_n)
    hidden = hidden_ns / k / 1e6 if (k and hidden_ns is not None) else None
    tax = c["tax_ms_per_step"]
    return {
        "definition": ("compute interval weighed by its share under comm (f); baseline: "
                       f"median of its class's f = 0 intervals (>= {ALONE_MIN})"),
        "alone_min": ALONE_MIN,
        "n_rank_steps": k,
        **{key: c[key] for key in ("n_classes", "n_measured", "n_overlapped",
                                   "overlapped_ms_per_step", "tax_ms_per_step",
                                   "unmeasured_ms_per_step", "slowdown")},
        "hidden_ms_per_step": hidden,
        # compute beside other compute (lanes, a graph's branches): a class-by-class sum
        # of kernel times counts that time in each kernel (limits.py withholds the tax)
        "compute_concurrent_ms_per_step": concurrent / k / 1e6 if k else None,
        "net_hidden_ms_per_step": (hidden - tax) if (hidden is not None and tax
                                                     is not None) else None,
        "comm_stretch_ms_per_step": m["tax_ms_per_step"],
        "comm": {
            "n_classes": m["n_classes"], "n_measured": m["n_measured"],
            "n_stretched": m["n_overlapped"],
            "stretched_ms_per_step": m["overlapped_ms_per_step"],
            "stretch_ms_per_step": m["tax_ms_per_step"],
            "unmeasured_ms_per_step": m["unmeasured_ms_per_step"],
            "slowdown": m["slowdown"], "top": m["top"], "top_unmeasured": m["top_unmeasured"],
        },
        "top": c["top"],
        "top_unmeasured": c["top_unmeasured"],
        "classes": classes_json(compute),
        "comm_classes": classes_json(comm),
    }  # fmt: skip


# ------------------------------------------------------------- against a reference
def against(doc: Mapping | None, ref: Mapping | None, *, which: str = "classes",
            sized_only: bool = False, top_n: int = 5) -> dict | None:  # fmt: skip
    """``doc``'s classes (an ``overlap_tax`` JSON) taxed against ``ref``'s (another
    trace's ``overlap_tax``): per class in both, (same rank and key, at least
    :data:`ALONE_MIN` alone intervals in ``ref``) ``b`` = the mean of ``ref``'s alone
    intervals; ``tax`` = Σ over **all** of ``doc``'s intervals of the class of ``dur − b``
    (so, with the same class counts per step, the classes' taxes sum to ``doc``'s compute
    time per step minus ``ref``'s), split into its ``f > 0`` (``overlapped``) and ``f ==
    0`` (``alone``) parts. ``which``: ``"classes"`` (compute) or ``"comm_classes"``;
    ``sized_only``: only ``doc``'s classes whose key carries the message size (``[n
    M]``; comm against another mode, whose collectives of one op may move another size).
    None when either document has no class rows or no step."""
    a = classes_frame((doc or {}).get(which))
    if a is not None and sized_only:
        a = a.loc[a["key"].str.contains(" [n ", regex=False)]
    b = classes_frame((ref or {}).get(which))
    ka, kb = int((doc or {}).get("n_rank_steps") or 0), int((ref or {}).get("n_rank_steps") or 0)
    if a is None or b is None or not ka or not kb:
        return None
    b = b.loc[b["n_alone"] >= ALONE_MIN, ["rank", "key", "n", "sum_ns", "n_alone",
                                          "alone_ns"]]  # fmt: skip
    b = b.assign(ref_mean_ns=b["alone_ns"] / b["n_alone"])
    j = a.merge(b.rename(columns={"n": "ref_n", "sum_ns": "ref_sum_ns", "n_alone": "ref_n_alone",
                                  "alone_ns": "ref_alone_ns"}),
                on=["rank", "key"], how="left", indicator=True)  # fmt: skip
    both = j["_merge"] == "both"
    mt = j.loc[both].copy()
    base = mt["ref_mean_ns"]
    n_ov = mt["n"] - mt["n_alone"]
    mt["tax_ns"] = mt["sum_ns"] - mt["n"] * base
    mt["tax_overlapped_ns"] = (mt["sum_ns"] - mt["alone_ns"]) - n_ov * base
    mt["tax_alone_ns"] = mt["alone_ns"] - mt["n_alone"] * base
    weight = base * mt["f_sum"]
    mt["slowdown"] = (1 + mt["tax_overlapped_ns"] / weight).where(weight > 0)
    mt["mean_f"] = (mt["f_sum"] / n_ov).where(n_ov > 0)
    matched = set(zip(mt["rank"].tolist(), mt["key"].tolist()))
    ref_all = classes_frame(ref.get(which))
    ref_un = ref_all.loc[[(r, kk) not in matched for r, kk in
                          zip(ref_all["rank"].tolist(), ref_all["key"].tolist())]]  # fmt: skip
    wsum = float(weight.sum())

    def pa(ns: float) -> float:
        return float(ns) / ka / 1e6

    top = mt.sort_values(["tax_ns", "rank", "key"], ascending=[False, True, True]).head(top_n)
    out = {
        "baseline": f"mean of the reference's alone intervals of the class (>= {ALONE_MIN})",
        "n_classes": len(mt),
        "tax_ms_per_step": pa(mt["tax_ns"].sum()),
        "tax_overlapped_ms_per_step": pa(mt["tax_overlapped_ns"].sum()),
        "tax_alone_ms_per_step": pa(mt["tax_alone_ns"].sum()),
        "slowdown": (1 + float(mt["tax_overlapped_ns"].sum()) / wsum) if wsum > 0 else None,
        "time_ms_per_step": {"mode": pa(a["sum_ns"].sum()),
                             "reference": float(ref_all["sum_ns"].sum()) / kb / 1e6},
        "unmatched_ms_per_step": {"mode": pa(j.loc[~both, "sum_ns"].sum()),
                                  "reference": float(ref_un["sum_ns"].sum()) / kb / 1e6},
        "top": [{"rank": int(r.rank), "key": str(r.key), "n": int(r.n), "ref_n": int(r.ref_n),
                 "ref_mean_ns": float(r.ref_mean_ns), "mean_ns": float(r.sum_ns) / int(r.n),
                 "mean_f": _num(r.mean_f), "slowdown": _num(r.slowdown),
                 "tax_ms_per_step": pa(r.tax_ns)} for r in top.itertuples()],
    }  # fmt: skip
    t = out["time_ms_per_step"]
    u = out["unmatched_ms_per_step"]
    # what the class taxes do not explain of the time difference: class counts per step
    # that differ between the two traces (0 when every class runs as often in both)
    out["count_ms_per_step"] = (t["mode"] - t["reference"] - out["tax_ms_per_step"]
                                - u["mode"] + u["reference"])  # fmt: skip
    return out
