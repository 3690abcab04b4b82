"""What keeps an overlapped mode from its comm-free bound, in one run (docs/METRICS.md,
"Extension: what limits domino").

A run of ``--mode all`` holds ``domino`` and ``nocomm`` (the tp schedule with every
collective skipped: the step with no comm at all) on the same machine and config. The
profiled step of domino exceeds nocomm's by ``gap``; this module splits that gap into

* **exposed comm** — domino's comm not under compute, per rank and step
  (``totals.exposed_ms_per_step``), with the (layer, sub-layer, micro-batch) ranges that
  expose the most (``by_op`` rows named ``fwd|bwd.layer_{attn|mlp}_{L}_batch_{b}``);
* **overlap tax** — compute slowed by the comm it hides (``overheads.whatif.overlap_tax``:
  ``tax_ms_per_step``), when the analysis could measure it;
* **host** — the device idle waiting for the host's launches, beyond the bound's
  (``launches.host_bound_device_idle_ms_per_step`` of the mode minus the bound's), when
  both analyses measured it (CUDA traces; a CPU trace has no launches);
* **the rest** — gap − exposed − tax − host: what the split itself costs (each
  micro-batch's kernels are smaller and more numerous) and the remainder.

When host is the largest part, the text leads with it and points to ``--cuda-graphs``.
It gives no predicted graphs step: the what-if replay's ``cuda_graphs`` scenario of a
host-bound *domino* trace was measured wrong (emulated tp 8, llama3-3b, 28 layers, one
H200, 2026-12-02: 100.1 ms predicted for domino from the eager trace, 83.8 ms timed with
``--cuda-graphs``; tp's 94.9 against 97.4), so domino / tp came out 0.95 instead of 1.16.
The replay keeps the eager trace's cross-stream order, which the slow host had set.

All four parts are per profiled step (the same profiler overhead on both sides); the timed
steps' ratio is shown beside them, since that is what the verdict compares. The rest is a
difference, so it carries the error of both profiled steps: it is printed, never hidden,
and labelled as a remainder. Torch-free; reads ``Analysis`` objects or their JSON
documents alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pandas as pd

from domino_prof.analysis.document import table

LAYER_OP = re.compile(r"^(fwd|bwd)\.layer_(attn|mlp)_(\d+)_batch_(\d+)$")


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


def limits(run: Mapping, analyses: Mapping[str, Any], *, mode: str = "domino",
           bound: str = "nocomm") -> dict | None:  # fmt: skip
    """The split of ``mode``'s profiled step gap to ``bound`` (see the module doc), or None
    when the run lacks either analysis or a profiled step."""
    a, b = analyses.get(mode), analyses.get(bound)
    if a is None or b is None:
        return None
    ta, tb = _get(a, "totals") or {}, _get(b, "totals") or {}
    sa, sb = ta.get("step_ms"), tb.get("step_ms")
    if sa is None or sb is None:
        return None
    gap = float(sa) - float(sb)
    exposed = float(ta.get("exposed_ms_per_step") or 0.0)
    tax_doc = _whatif(a).get("overlap_tax") or {}
    tax = tax_doc.get("tax_ms_per_step")
    tax = None if tax is None else float(tax)
    ha, hb = _host_idle_ms(a), _host_idle_ms(b)
    host = None if ha is None or hb is None else ha - hb
    rest = gap - exposed - (tax or 0.0) - (host or 0.0)
    host_limit = host is not None and host > max(exposed, tax or 0.0, rest)
    modes = run.get("modes") or {}
    ma, mb = (modes.get(mode) or {}).get("step_ms"), (modes.get(bound) or {}).get("step_ms")
    out = {
        "mode": mode,
        "bound": bound,
        "profiled_step_ms": {mode: float(sa), bound: float(sb)},
        "gap_ms": gap,
        "exposed_comm_ms": exposed,
        "overlap_tax_ms": tax,
        "host_ms": host,
        "host_idle_ms": {mode: ha, bound: hb},
        "host_is_the_limit": host_limit,
        "rest_ms": rest,
        "top_exposed": top_exposed(a),
        "timed_step_ms": {mode: ma, bound: mb},
        "timed_of_bound": (mb / ma) if ma and mb else None,
    }
    out["text"] = limits_text(out)
    return out


def limits_text(d: Mapping) -> str:
    """One paragraph: the figures of :func:`limits` in words."""
    mode, bound = d["mode"], d["bound"]
    speed = d.get("timed_of_bound")
    head = (f"{mode} runs at {speed:.3f} of {bound}'s speed (timed steps); "
            if speed is not None else "")  # fmt: skip
    parts = [f"exposed comm {d['exposed_comm_ms']:.2f} ms"]
    if d["top_exposed"]:
        worst = ", ".join(f"{t['op']} {t['exposed_ms_per_step']:.2f}" for t in d["top_exposed"])
        parts[0] += f" (most: {worst})"
    if d["overlap_tax_ms"] is None:
        parts.append("overlap tax not measured")
    else:
        parts.append(f"overlap tax {d['overlap_tax_ms']:.2f} ms (compute slowed under comm)")
    if d.get("host_ms") is not None:
        parts.append(f"host {d['host_ms']:.2f} ms (the device idle waiting for launches, "
                     f"beyond {bound}'s)")  # fmt: skip
    parts.append(f"the rest {d['rest_ms']:.2f} ms (the split's own cost: smaller, more "
                 "numerous kernels; a remainder)")  # fmt: skip
    text = (f"{head}of the {d['gap_ms']:.2f} ms per profiled step by which it trails "
            f"{bound}: " + "; ".join(parts) + ".")
    if d.get("host_is_the_limit"):
        text = (f"The host is the limit: the device waits for {mode}'s launches "
                f"{d['host_idle_ms'][mode]:.2f} ms per profiled step ({bound}: "
                f"{d['host_idle_ms'][bound]:.2f}). " + text + " CUDA graphs "
                "(--cuda-graphs) take the host off the step.")
    return text
