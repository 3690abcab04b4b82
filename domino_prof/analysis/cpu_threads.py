"""CPU traces: how many of the ranks' threads were busy at once (docs/METRICS.md
"Extension: replay model", CPU threads). From the intervals of a CPU (gloo) analysis:
each thread's busy time is the union of its rows (compute ``cpu_op`` rows of the
compute threads, ``gloo:*`` events of the runloop threads); a sweep over every thread's
busy intervals gives the number of busy threads over the profiled steps' span (first to
last interval launched in a step, over all ranks). Compared with the host's cores when
the run recorded them (run.json ``cpu_count``), this says from the trace whether the
ranks' compute and comm threads had to share cores. Vectorised; no torch."""

from __future__ import annotations

import numpy as np
import pandas as pd

from domino_prof.analysis import intervals as ivm
from domino_prof.analysis.attribution import tuple_ids


def busy_threads(intervals: pd.DataFrame, *, cpu_count: int | None = None) -> dict | None:
    """{n_threads, n_comm_threads, span_ns, mean_busy, peak_busy, cpu_count,
    over_cores_share} of a CPU analysis's intervals (None without steps)."""
    if intervals is None or len(intervals) == 0:
        return None
    iv = intervals
    steps = iv["iteration"].to_numpy(np.int64) >= 0
    if not steps.any():
        return None
    t0 = int(iv["start"].to_numpy(np.int64)[steps].min())
    t1 = int(iv["end"].to_numpy(np.int64)[steps].max())
    thr = tuple_ids(*(iv[c].to_numpy(np.int64) for c in ("rank", "device", "stream")))
    mk, ms, me = ivm.grouped_merge(thr, np.clip(iv["start"].to_numpy(np.int64), t0, t1),
                                   np.clip(iv["end"].to_numpy(np.int64), t0, t1))  # fmt: skip
    keep = me > ms
    ms, me = ms[keep], me[keep]
    t = np.concatenate([ms, me])
    d = np.concatenate([np.ones(len(ms), np.int64), -np.ones(len(me), np.int64)])
    o = np.lexsort((d, t))  # ends before starts at one instant
    t, d = t[o], d[o]
    level = np.cumsum(d)
    dt = np.diff(t, append=t[-1]) if len(t) else t
    span = max(t1 - t0, 1)
    comm_thr = np.unique(thr[iv["kind"].astype(str).to_numpy() == "comm"])
    over = float(dt[level > cpu_count].sum()) / span if cpu_count else None
    return {
        "n_threads": int(len(np.unique(thr))),
        "n_comm_threads": int(len(comm_thr)),
        "span_ns": int(t1 - t0),
        "mean_busy": float((level * dt).sum()) / span,
        "peak_busy": int(level.max()) if len(level) else 0,
        "cpu_count": cpu_count,
        "over_cores_share": over,
    }


def cpu_count_of(run: dict | None) -> int | None:
    """The cores of the run's host, where run.json records them."""
    run = run or {}
    for v in (run.get("cpu_count"), (run.get("host") or {}).get("cpu_count")
              if isinstance(run.get("host"), dict) else None):  # fmt: skip
        if isinstance(v, int) and v > 0:
            return v
    return None


def why_text(b: dict, tax: dict | None) -> str:
    """One paragraph, from the figures: why overlap does not pay on this CPU run."""
    parts = [
        f"{b['n_threads']} threads of the ranks ({b['n_comm_threads']} gloo runloop threads) "
        f"were busy {b['mean_busy']:.2f} at a time on average over the profiled steps "
        f"(peak {b['peak_busy']})"
    ]
    if b.get("cpu_count"):
        share = b.get("over_cores_share") or 0.0
        parts.append(
            f"on a host with {b['cpu_count']} cores: more threads than cores wanted to run "
            f"{100 * share:.0f}% of the time, so compute and comm threads took turns on "
            "the cores instead of running side by side"
        )
    else:
        parts.append(
            "the run did not record the host's cores (run.json has no cpu_count): "
            "compare that peak with os.cpu_count() of the machine that ran it"
        )
    t = (tax or {}).get("tax_ms_per_step")
    if t is not None and (tax or {}).get("n_measured"):
        un = tax.get("unmeasured_ms_per_step")
        parts.append(
            f"compute ops ran {t:.3f} ms per step slower while a gloo thread was busy "
            f"(overlap tax against their own runs with no gloo thread busy"
            + (f"; {un:.3f} ms per step of overlapped ops unmeasured, no such run" if un else "")
            + f"; net hidden {tax.get('net_hidden_ms_per_step') or 0:.3f} ms per step)"
        )
    return "; ".join(parts) + "."
