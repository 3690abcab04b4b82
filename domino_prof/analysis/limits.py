"""What keeps an overlapped mode from its comm-free bound, in one run (docs/METRICS.md,
"Extension: what limits domino").

A run of ``--mode all`` holds ``domino``, ``nocomm`` (the tp schedule with every
collective skipped: the step with no comm at all) and ``domino-nocomm`` (domino's
micro-batch split with every collective skipped: the split's own cost) on the same
machine and config. The profiled step of domino exceeds nocomm's by ``gap``. With
domino-nocomm in the run every part of that gap is **measured**:

* **split** — domino-nocomm's profiled step − nocomm's: smaller, more numerous kernels;
* **exposed comm** — domino's comm not under compute, per rank and step
  (``totals.exposed_ms_per_step``), with the (layer, sub-layer, micro-batch) ranges that
  expose the most (``by_op`` rows named ``fwd|bwd.layer_{attn|mlp}_{L}_batch_{b}``); the
  part is its **step cost** (``totals.exposed_cost_ms_per_step``, ``analysis.exposed_cost``:
  the exposed comm beyond the kernel-to-kernel bubbles, host waits and memory ops (copies
  and sets on the compute streams) of the gaps it lies in, which a step without comm has
  too) when the analysis measured it, else the exposed comm itself (said in the text);
* **overlap tax** — domino's compute against domino-nocomm's, class by class
  (``overlap_tax.against``: Σ over every compute interval of ``dur`` − the mean of the
  class in domino-nocomm, where no comm runs), so it is domino's compute time per step
  minus domino-nocomm's over the classes both have;
* **host** — the device idle waiting for the host's launches, beyond domino-nocomm's
  (``launches.host_bound_device_idle_ms_per_step``), when both analyses measured it (CUDA
  traces; a CPU trace has no launches);

and the **residual** = gap − (split + exposed + tax + host) is printed beside them;
the tax is withheld (null, the text says why; the residual holds it) where domino's or
domino-nocomm's compute ran beside other compute of its device for more than
:data:`ADDS_UP_SHARE` of the gap a step (``overlap_tax.compute_concurrent_ms_per_step``:
the micro-batch lanes of ``--mb-streams 2``): a sum of kernel times counts such time in
each kernel, so the classes' difference is no part of the step;
``adds_up`` when |residual| <= :data:`ADDS_UP_SHARE` of the gap. A cross-check of the
exposed part, from the step identity: domino's device idle beyond domino-nocomm's, less
the host's, is what comm added to the idle; the exposed comm beyond it lies where
domino-nocomm idles too (``exposed_in_split_gaps_ms``), to compare with the exposed comm
the step cost leaves in bubbles and beside memory ops. Comm stretched by compute
(``overlap_tax.comm_stretch_ms_per_step``) is shown, never added: its exposed share is
already exposed comm, its hidden share costs no step time by itself.

**By occupancy** (:func:`occupancy`: ``compute_occupancy_ms``, ``occupancy_added_ms`` =
``kernel_time_added_ms`` + ``concurrency_lost_ms``, ``no_compute_added_ms``), the measured
gap counted a second way that holds where compute runs beside compute: a mode's compute
occupancy U is the union of its compute kernels per step (the class rows' time less
``compute_concurrent_ms_per_step``); split + (U(mode) − U(split mode)) + the time without
compute added = gap, by construction (no check of the parts, never added to them). U's
growth is the kernels' time growth (the tax, with the unmatched classes and counts) plus
the compute that ran hidden beside other compute in the split mode and alone here; where
the class tax is withheld these are the figures that stand.

domino-sp has the same decomposition against nocomm (run.json ``limits_sp``;
:func:`limits_by_mode`), its split measured by ``domino-sp-nocomm``: domino-sp's
micro-batch split with every collective skipped, so its split is also sequence
parallelism's own cost against all-reduce TP (the norm on the shard; on CPU the skipped
gathers' copies, ``comm.SkipComm``).

Without domino-nocomm (a run from before it, or ``--mode`` without it) the gap splits as
before: exposed comm (its step cost, as above), domino's own overlap tax (against its own
alone intervals; classes without alone ones are unmeasured), host beyond nocomm's, and
**the rest** = gap − exposed − tax − host, labelled as a remainder: it carries the split's
cost and the error of both profiled steps.

When host is the largest part, the text leads with it and points to ``--cuda-graphs``.
It gives no predicted graphs step: the what-if replay's ``cuda_graphs`` scenario of a
host-bound *domino* trace was measured wrong (emulated tp 8, llama3-3b, 28 layers, one
H200, 2026-12-02: 100.1 ms predicted for domino from the eager trace, 83.8 ms timed with
``--cuda-graphs``; tp's 94.9 against 97.4), so domino / tp came out 0.95 instead of 1.16.
The replay keeps the eager trace's cross-stream order, which the slow host had set.

Every part is per profiled step (the same profiler overhead on every side); the timed
steps' ratio is shown beside them, since that is what the verdict compares. Torch-free;
reads ``Analysis`` objects or their JSON documents alike (the tax against domino-nocomm
comes from the class rows both documents keep: ``overlap_tax.classes``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pandas as pd

from domino_prof.analysis.document import table
from domino_prof.analysis.overlap_tax import against
from domino_prof.reference_model.modes import RUN_KEYS, SPLIT_MODES  # torch-free registry

LAYER_OP = re.compile(r"^(fwd|bwd)\.layer_(attn|mlp)_(\d+)_batch_(\d+)$")
ADDS_UP_SHARE = 0.05  # the parts add up when |residual| <= this share of the gap
# profiled step / timed step of the mode or the bound further than this from 1: the text
# says the parts split the profiled step's gap, not the timed one's (an eager, host-bound
# step takes the profiler's host cost: eager domino-sp at the emulated headline, 122.8 ms
# profiled against 77.6 timed, reports/emulated-h100-2026-12-07g/call1/eager-new2)
PROFILE_DRIFT = 0.15
SPLIT_MODE = SPLIT_MODES["domino"]  # domino-nocomm
# the measured method's gap by occupancy (module doc, :func:`occupancy`): run.json's keys
OCCUPANCY_KEYS = ("compute_occupancy_ms", "occupancy_added_ms", "kernel_time_added_ms",
                  "concurrency_lost_ms", "no_compute_added_ms")


def _get(a: Any, key: str) -> Any:
    return a.get(key) if isinstance(a, Mapping) else getattr(a, key, None)


def _by_op(a: Any) -> pd.DataFrame | None:
    """``a``'s by_op table as a frame: the Analysis's own, or the document's
    (``document.table``: version 2's columns or version 1's rows)."""
    if isinstance(a, Mapping):
        return table(a, "by_op") if a.get("by_op") is not None else None
    return getattr(a, "by_op", None)


def _whatif(a: Any) -> Mapping:
    ov = _get(a, "overheads")
    w = _get(ov, "whatif") if ov is not None else None
    return w or {}


def top_exposed(a: Any, *, top_n: int = 3) -> list[dict]:
    """The layer ranges of ``a`` that expose the most comm, ms per rank and step."""
    totals = _get(a, "totals") or {}
    ranks = len(_get(a, "ranks") or ()) or int(totals.get("n_ranks") or 1)
    steps = max(1, int(totals.get("n_iterations") or 1))
    df = _by_op(a)
    if df is None or df.empty or "op" not in df or "exposed_ns" not in df:
        return []
    op = df["op"].astype(str)
    ex = df["exposed_ns"].astype(float).fillna(0.0)
    keep = op.str.match(LAYER_OP.pattern) & (ex != 0)
    per = ex[keep].groupby(op[keep]).sum().to_dict()
    best = sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))[:top_n]
    return [{"op": op, "exposed_ms_per_step": ns / ranks / steps / 1e6} for op, ns in best]


def _host_idle_ms(a: Any) -> float | None:
    """The device's idle time waiting for launches, ms per step (None: not measured)."""
    ov = _get(a, "overheads")
    la = _get(ov, "launches") if ov is not None else None
    if not la or not _get(la, "computed"):
        return None
    v = _get(la, "host_bound_device_idle_ms_per_step")
    return None if v is None else float(v)


def _step(a: Any) -> float | None:
    v = (_get(a, "totals") or {}).get("step_ms") if a is not None else None
    return None if v is None else float(v)


def _unmatched_delta(ref: Mapping | None) -> float | None:
    u = (ref or {}).get("unmatched_ms_per_step") or {}
    if u.get("mode") is None or u.get("reference") is None:
        return None
    return u["mode"] - u["reference"]


def _tax_doc(a: Any) -> Mapping:
    return _whatif(a).get("overlap_tax") or {}


def _f(x: Any) -> float | None:
    return None if x is None else float(x)


def _exposed_cost(a: Any) -> tuple[float | None, float | None, str]:
    """``a``'s exposed comm's step cost (ms per step), its bubble (µs) and, when the cost
    is not measured, why (an analysis from before it has neither)."""
    totals = _get(a, "totals") or {}
    block = totals.get("exposed_cost")
    if not isinstance(block, Mapping):
        return None, None, "an analysis from before it: domino-prof run --reanalyze"
    cost = _f(totals.get("exposed_cost_ms_per_step"))
    return cost, _f(block.get("bubble_us")), str(block.get("reason") or "")


def limits(run: Mapping, analyses: Mapping[str, Any], *, mode: str = "domino",
           bound: str = "nocomm", split_mode: str | None = None) -> dict | None:  # fmt: skip
    """The split of ``mode``'s profiled step gap to ``bound`` (see the module doc), or None
    when the run lacks either analysis or a profiled step. Measured when ``split_mode``
    (default: ``SPLIT_MODES[mode]``, domino-nocomm for domino) has a profiled step, else
    with the rest as a remainder."""
    if split_mode is None:
        split_mode = SPLIT_MODES.get(mode, SPLIT_MODE)
    a, b = analyses.get(mode), analyses.get(bound)
    sa, sb = _step(a), _step(b)
    if sa is None or sb is None:
        return None
    s = analyses.get(split_mode)
    ss = _step(s)
    measured = ss is not None
    gap = sa - sb
    exposed = float((_get(a, "totals") or {}).get("exposed_ms_per_step") or 0.0)
    cost, bubble, no_cost = _exposed_cost(a)
    part = exposed if cost is None else cost  # the exposed part of the gap
    own = _tax_doc(a)
    ha, hb = _host_idle_ms(a), _host_idle_ms(b)
    tp_tax = _tax_doc(analyses.get("tp")) if analyses.get("tp") is not None else None
    vs_tp = against(own, tp_tax, which="comm_classes", sized_only=True) if tp_tax else None
    modes = run.get("modes") or {}
    ma, mb = (modes.get(mode) or {}).get("step_ms"), (modes.get(bound) or {}).get("step_ms")
    out: dict[str, Any] = {
        "mode": mode,
        "bound": bound,
        "split_mode": split_mode if measured else None,
        "method": "measured" if measured else "remainder",
        "profiled_step_ms": {mode: sa, bound: sb, **({split_mode: ss} if measured else {})},
        "gap_ms": gap,
        "exposed_comm_ms": exposed,
        "exposed_cost_ms": cost,
        "exposed_bubble_us": bubble,
        "exposed_cost_reason": None if cost is not None else (no_cost or None),
    }
    if measured:
        ref = against(own, _tax_doc(s))
        tax = None if ref is None else ref["tax_ms_per_step"]
        # compute beside compute (the lanes): no class-by-class tax is a part of the step
        conc = {m: _f((_tax_doc(x) or {}).get("compute_concurrent_ms_per_step"))
                for m, x in ((mode, a), (split_mode, s))}  # fmt: skip
        withheld = (tax is not None and any(
            v is not None and v > ADDS_UP_SHARE * abs(gap) for v in conc.values()))
        if withheld:
            tax = None
        hs = _host_idle_ms(s)
        host = None if ha is None or hs is None else ha - hs
        split = ss - sb
        residual = gap - (split + part + (tax or 0.0) + (host or 0.0))
        # the exposed comm that fell where the device is idle in domino-nocomm too: domino's
        # idle (step - compute time) beyond domino-nocomm's, less the host's, is what the
        # exposed comm cost; the rest of it lies in the split's own gaps. Derived from the
        # identity, so a check of the step cost (whose exposed - cost lies in bubbles)
        tm = (ref or {}).get("time_ms_per_step") or {}
        in_gaps = None
        if tm.get("mode") is not None and tm.get("reference") is not None:
            idle_added = (sa - tm["mode"]) - (ss - tm["reference"])
            in_gaps = exposed - (idle_added - (host or 0.0))
        out.update({
            "overlap_tax_ms": tax,
            "compute_concurrent_ms": conc,
            "tax_withheld": withheld,
            "overlap_tax": None if ref is None else {
                k: ref[k] for k in ("baseline", "n_classes", "tax_overlapped_ms_per_step",
                                    "tax_alone_ms_per_step", "slowdown", "time_ms_per_step",
                                    "unmatched_ms_per_step", "count_ms_per_step")},
            "host_ms": host,
            "host_idle_ms": {mode: ha, split_mode: hs},
            "split_ms": split,
            "residual_ms": residual,
            # compute in classes one of the two runs and the other does not (another
            # kernel choice, e.g. --overlap-gemm triton-covered's tiles run only beside
            # comm): U(mode) - U(ref), which the class-by-class tax cannot cover
            "tax_unmatched_ms": _unmatched_delta(ref),
            "exposed_in_split_gaps_ms": in_gaps,
            # unknown while the tax is not measured (the residual holds it)
            "adds_up": None if tax is None else bool(abs(residual) <= ADDS_UP_SHARE * abs(gap)),
            "rest_ms": None,
        })  # fmt: skip
        others = [part, tax or 0.0, split]
    else:
        tax = _f(own.get("tax_ms_per_step"))
        host = None if ha is None or hb is None else ha - hb
        rest = gap - part - (tax or 0.0) - (host or 0.0)
        out.update({
            "overlap_tax_ms": tax,
            "overlap_tax": {"unmeasured_ms_per_step": _f(own.get("unmeasured_ms_per_step"))},
            "host_ms": host,
            "host_idle_ms": {mode: ha, bound: hb},
            **dict.fromkeys(OCCUPANCY_KEYS),
            "split_ms": None,
            "residual_ms": None,
            "exposed_in_split_gaps_ms": None,
            "adds_up": None,
            "rest_ms": rest,
        })  # fmt: skip
        others = [part, tax or 0.0, rest]
    out.update({
        "host_is_the_limit": host is not None and host > max(others),
        "comm_stretch_ms": _f(own.get("comm_stretch_ms_per_step")),
        "comm_stretch_unmeasured_ms": _f((own.get("comm") or {}).get("unmeasured_ms_per_step")),
        "comm_stretch_vs_tp_ms": (vs_tp["tax_overlapped_ms_per_step"]
                                  if vs_tp and vs_tp["n_classes"] else None),
        "top_exposed": top_exposed(a),
        "timed_step_ms": {mode: ma, bound: mb},
        "timed_of_bound": (mb / ma) if ma and mb else None,
        "profiled_over_timed": {mode: (sa / ma) if ma else None,
                                bound: (sb / mb) if mb else None},
    })  # fmt: skip
    if measured:  # by occupancy (module doc), from the figures above
        out.update(occupancy(out))
    out["text"] = limits_text(out)
    return out


def occupancy(d: Mapping) -> dict:
    """The occupancy keys of a measured :func:`limits` result, from its own figures (so a
    run.json written before them gets the same numbers: scripts/gen_results.py).
    ``compute_occupancy_ms`` = {mode: U, split mode: U}, each mode's union of compute
    kernels per step (an instant counted once however many kernels ran): the class rows'
    time (``overlap_tax.time_ms_per_step``, Σ of the kernels' durations) less the time
    compute ran beside other compute (``compute_concurrent_ms``, Σ − |∪| over the same
    kernels); ``occupancy_added_ms`` = U(mode) − U(split mode), the sum of
    ``kernel_time_added_ms`` (Σ of the kernels' durations, mode − split mode: kernels
    slower beside comm, other kernels, other counts) and ``concurrency_lost_ms`` (compute
    beside compute, split mode − mode: work that ran hidden beside other compute there and
    takes device time of its own here); ``no_compute_added_ms`` = (mode's profiled step −
    U(mode)) − (split mode's − U(split mode)). All None where a figure is missing (an
    analysis from before it)."""
    mode, split_mode = d.get("mode"), d.get("split_mode")
    tm = (d.get("overlap_tax") or {}).get("time_ms_per_step") or {}
    conc = d.get("compute_concurrent_ms") or {}
    step = d.get("profiled_step_ms") or {}
    t = {mode: tm.get("mode"), split_mode: tm.get("reference")}
    if split_mode is None or any(t[m] is None or conc.get(m) is None or step.get(m) is None
                                 for m in t):  # fmt: skip
        return dict.fromkeys(OCCUPANCY_KEYS)
    u = {m: float(t[m]) - float(conc[m]) for m in t}
    return {"compute_occupancy_ms": u, "occupancy_added_ms": u[mode] - u[split_mode],
            "kernel_time_added_ms": float(t[mode]) - float(t[split_mode]),
            "concurrency_lost_ms": float(conc[split_mode]) - float(conc[mode]),
            "no_compute_added_ms": (step[mode] - u[mode]) - (step[split_mode] - u[split_mode])}


def occupancy_text(d: Mapping) -> str:
    """The occupancy sentence of a :func:`limits` result ("" where it is not measured)."""
    added, idle = d.get("occupancy_added_ms"), d.get("no_compute_added_ms")
    if added is None or idle is None:
        return ""
    mode, split_mode = d["mode"], d["split_mode"]
    lost = d["concurrency_lost_ms"]  # occupancy() gives every key, or none
    beside = (f"{lost:.2f} ms of compute that ran beside other compute in {split_mode} "
              "took device time of its own here" if lost >= 0 else
              f"{-lost:.2f} ms more of its compute ran beside other compute")  # fmt: skip
    return (" By occupancy (the union of compute kernels per step, an instant counted "
            f"once however many kernels ran): {mode}'s compute kept the device busy "
            f"{added:.2f} ms longer than {split_mode}'s: its kernels took "
            f"{d['kernel_time_added_ms']:.2f} ms longer in all (slower beside comm, or other "
            f"kernels: the tax, with the classes only one of them runs), and {beside}; "
            f"its time without compute grew "
            f"{idle:.2f} ms (exposed comm, host waits and idle); with the split's own cost "
            "these make the gap.")  # fmt: skip


def _ms(x: float | None, what: str = "not measured") -> str:
    return what if x is None else f"{x:.2f} ms"


def concurrent_text(d: Mapping) -> str:
    """The measured ``compute_concurrent_ms`` of a :func:`limits` result, per mode:
    "X ms a step in domino, Y ms a step in domino-nocomm" (why a tax is withheld)."""
    return ", ".join(f"{v:.2f} ms a step in {m}"
                     for m, v in d["compute_concurrent_ms"].items() if v is not None)


def limits_text(d: Mapping) -> str:
    """One paragraph: the figures of :func:`limits` in words."""
    mode, bound = d["mode"], d["bound"]
    split_mode = d.get("split_mode")
    speed = d.get("timed_of_bound")
    head = (f"{mode} runs at {speed:.3f} of {bound}'s speed (timed steps); "
            if speed is not None else "")  # fmt: skip
    parts = []
    if split_mode:
        parts.append(f"the split's own cost {d['split_ms']:.2f} ms ({split_mode}'s profiled "
                     f"step − {bound}'s, measured)")  # fmt: skip
    exposed, cost = d["exposed_comm_ms"], d.get("exposed_cost_ms")
    ex = f"exposed comm {exposed:.2f} ms"
    if d["top_exposed"]:
        worst = ", ".join(f"{t['op']} {t['exposed_ms_per_step']:.2f}" for t in d["top_exposed"])
        ex += f" (most: {worst})"
    if cost is not None:
        ex += f", of which {cost:.2f} ms added to the step"
        if d.get("exposed_bubble_us") is not None:
            ex += (f" (the rest, {exposed - cost:.2f} ms, lay in kernel-to-kernel bubbles of "
                   f"{d['exposed_bubble_us']:.2f} µs or beside memory ops on the compute "
                   "stream, which a step without comm has too)")  # fmt: skip
    elif d.get("exposed_cost_reason") and exposed:
        ex += (f" (its step cost not measured: {d['exposed_cost_reason']}; the exposed comm "
               "is the part)")  # fmt: skip
    parts.append(ex)
    tax = d.get("overlap_tax") or {}
    if d["overlap_tax_ms"] is None and d.get("tax_withheld"):
        parts.append(
            "overlap tax not measured (compute ran beside other compute of its device: "
            + concurrent_text(d) + f", over {100 * ADDS_UP_SHARE:.0f}% of the gap; a sum of "
            "kernel times counts such time in each kernel, so the classes' difference is no "
            "part of the step" + ("; by occupancy below" if d.get("occupancy_added_ms")
                                  is not None else "") + ")")  # fmt: skip
    elif d["overlap_tax_ms"] is None:
        parts.append("overlap tax not measured" + (
            " (an analysis without class rows, from before issue 33: "
            "domino-prof run --reanalyze)"
            if split_mode else ""))  # fmt: skip
    elif split_mode:
        parts.append(f"overlap tax {d['overlap_tax_ms']:.2f} ms ({mode}'s compute against "
                     f"{split_mode}'s, class by class: "
                     f"{tax['tax_overlapped_ms_per_step']:.2f} under comm, "
                     f"{tax['tax_alone_ms_per_step']:.2f} alone)")  # fmt: skip
        un = d.get("tax_unmatched_ms")
        if un is not None and abs(un) > ADDS_UP_SHARE * abs(d["gap_ms"]):
            parts[-1] += (f", over the kernel classes both run only: {abs(un):.2f} ms per "
                          f"step {'more' if un > 0 else 'less'} of {mode}'s compute than of "
                          f"{split_mode}'s is in classes the other does not run, which no "
                          "part measures; the residual holds it")  # fmt: skip
    else:
        un = tax.get("unmeasured_ms_per_step")
        parts.append(f"overlap tax {d['overlap_tax_ms']:.2f} ms (compute slowed under comm, "
                     "against its own alone runs"
                     + (f"; {un:.2f} ms of overlapped compute unmeasured: no alone baseline"
                        if un else "") + ")")  # fmt: skip
    if d.get("host_ms") is not None:
        parts.append(f"host {d['host_ms']:.2f} ms (the device idle waiting for launches, "
                     f"beyond {split_mode or bound}'s)")  # fmt: skip
    if split_mode and d["adds_up"] is None:
        parts.append(f"residual {d['residual_ms']:.2f} ms (it holds the unmeasured tax: "
                     "whether the parts add up is not known)")  # fmt: skip
    elif split_mode:
        word = "the parts add up" if d["adds_up"] else "the parts do not add up"
        parts.append(f"residual {d['residual_ms']:.2f} ms ({word}: |residual| "
                     f"{'<=' if d['adds_up'] else '>'} {100 * ADDS_UP_SHARE:.0f}% of the gap)")
        g = d.get("exposed_in_split_gaps_ms")
        if g is not None and cost is not None:
            # the step identity's figure against the step cost's: both say how much of the
            # exposed comm did not add to the step
            check = (f"cross-check: {mode}'s device idle beyond {split_mode}'s, less the "
                     f"host's, is {exposed - g:.2f} ms, so {g:.2f} ms of the exposed comm lay "
                     f"where {split_mode}'s device idles too, against the "
                     f"{exposed - cost:.2f} ms the step cost leaves in bubbles and beside "
                     "memory ops")  # fmt: skip
            if not d["adds_up"] and g > exposed - cost:
                check += (f": {g - (exposed - cost):.2f} ms of the step cost lies in "
                          f"{split_mode}'s own gaps, so it is in two parts")  # fmt: skip
            parts.append(check)
        elif g is not None and g > 0 and not d["adds_up"]:
            parts.append(f"of the exposed comm, {g:.2f} ms fell where {split_mode}'s device "
                         "is idle too (the split's own gaps), so it is in two parts")
    else:
        to_run = SPLIT_MODES.get(mode, SPLIT_MODE)
        parts.append(f"the rest {d['rest_ms']:.2f} ms (the split's own cost: smaller, more "
                     f"numerous kernels; a remainder: run {to_run} to measure it)")
    text = (f"{head}of the {d['gap_ms']:.2f} ms per profiled step by which it trails "
            f"{bound}: " + "; ".join(parts) + ".")
    st, st_un, st_tp = (d.get("comm_stretch_ms"), d.get("comm_stretch_unmeasured_ms"),
                        d.get("comm_stretch_vs_tp_ms"))  # fmt: skip
    if st is not None or st_un:
        bits = [f"{st:.2f} ms per step against its own alone runs" if st is not None
                else "not measured"]  # fmt: skip
        if st_un:
            bits.append(f"{st_un:.2f} ms of comm under compute unmeasured: no alone baseline")
        if st_tp is not None:
            bits.append(f"{st_tp:.2f} ms against tp's collectives of the same size")
        text += (" Comm stretched by compute: " + "; ".join(bits) + " (not a part: its "
                 "exposed share is in exposed comm).")
    text += occupancy_text(d)
    slow = {m: r for m, r in (d.get("profiled_over_timed") or {}).items() if r is not None}
    if any(abs(r - 1.0) > PROFILE_DRIFT for r in slow.values()):
        t = d.get("timed_step_ms") or {}
        ta, tb = t.get(mode), t.get(bound)
        timed = f", not the timed steps' {ta - tb:.2f} ms" if ta and tb else ""
        text += (" The profiled steps are not the timed ones (profiled / timed step: "
                 + ", ".join(f"{m} {r:.2f}" for m, r in slow.items())
                 + f"): the parts split the profiled step's gap of {d['gap_ms']:.2f} ms"
                 f"{timed}; read them as where the profiled step's time went.")  # fmt: skip
    if d.get("host_is_the_limit"):
        idle = d["host_idle_ms"]
        other = split_mode or bound
        text = (f"The host is the limit: the device waits for {mode}'s launches "
                f"{idle[mode]:.2f} ms per profiled step ({other}: "
                f"{idle[other]:.2f}). " + text + " CUDA graphs "
                "(--cuda-graphs) take the host off the step.")
    return text


def limits_by_mode(run: Mapping, analyses: Mapping[str, Any]) -> dict[str, dict]:
    """{run.json key: :func:`limits` of the overlapped schedule} for each of domino and
    domino-sp whose decomposition the run holds (each against nocomm, its split measured
    by its own no-comm mode when the run has it): ``{"limits": domino's, "limits_sp":
    domino-sp's}``, a key absent where that mode or nocomm lacks a profiled step."""
    out = {}
    for mode, key in RUN_KEYS.items():
        d = limits(run, analyses, mode=mode)
        if d is not None:
            out[key] = d
    return out
