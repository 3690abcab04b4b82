"""What a run.json says, for every reader: the modes' timed steps and ratios, the verdict,
the comparison table, the emulation label. Pure functions over the run.json dict (and
``stats``): low in the layers, so the report, the gate and the CLI read a run directory's
data without importing ``domino_prof.runs`` (the orchestrator, which writes it and
imports the report).
"""

from __future__ import annotations

import math

from domino_prof.stats import Estimate, median_interval, paired_ratio, verdict_word


def block_medians(entry: dict) -> list[float] | None:
    """A mode's block times (run.json ``modes.<mode>.blocks.medians_ms``), or None for a
    run written before blocks (one step list, no interval)."""
    b = entry.get("blocks")
    if not isinstance(b, dict) or not isinstance(b.get("medians_ms"), list):
        return None
    return [float(x) for x in b["medians_ms"]] or None


def mode_ratio(modes: dict, mode: str, base: str) -> Estimate | None:
    """Speedup of ``mode`` over ``base`` (base's time / mode's; > 1: mode is faster): the
    median of the paired block ratios with its 95% interval (``stats.paired_ratio``),
    or, for runs without blocks, the ratio of the step times with no interval. None
    when either mode is missing."""
    m, b = modes.get(mode), modes.get(base)
    if not isinstance(m, dict) or not isinstance(b, dict):
        return None
    bm, bb = block_medians(m), block_medians(b)
    if bm is not None and bb is not None and len(bm) == len(bb):
        return paired_ratio(bb, bm)
    if not m.get("step_ms") or b.get("step_ms") is None:
        return None
    return Estimate(value=b["step_ms"] / m["step_ms"], low=None, high=None, n=0, coverage=None)


def step_estimate(entry: dict) -> Estimate | None:
    """The mode's timed step (median of its block times) with its 95% interval."""
    meds = block_medians(entry)
    return median_interval(meds) if meds is not None else None


# each overlapped schedule against the synchronous one it replaces: the run's verdict
# (report title, CLI line, `check --min-speedup`)
VERDICT_PAIRS = (("domino", "tp"), ("domino-sp", "sp"))
BASE_MODE = {"domino": "tp", "domino-sp": "sp", "sp": "tp", "nocomm": "tp",
             "domino-nocomm": "nocomm",  # the split's cost: nocomm / domino-nocomm
             "domino-sp-nocomm": "nocomm"}  # fmt: skip


def verdicts(modes: dict) -> list[dict]:
    """One row per overlapped mode of the run whose synchronous counterpart also ran:
    ``{mode, base, ratio, low, high, n_blocks, coverage, word}`` (``word``: faster,
    slower, within noise: ``stats.verdict_word``)."""
    rows = []
    for mode, base in VERDICT_PAIRS:
        r = mode_ratio(modes, mode, base)
        if r is None:
            continue
        rows.append(
            {"mode": mode, "base": base, "ratio": r.value, "low": r.low, "high": r.high,
             "n_blocks": r.n, "coverage": r.coverage, "word": verdict_word(r)}
        )  # fmt: skip
    return rows


def verdict_text(rows: list[dict]) -> str:
    """'domino 0.962× tp [0.941, 0.983] (slower), domino-sp 1.004× sp [0.990, 1.020]
    (within noise)'; "" without rows."""
    parts = []
    for v in rows:
        ci = "" if v.get("low") is None else f" [{v['low']:.3f}, {v['high']:.3f}]"
        parts.append(f"{v['mode']} {v['ratio']:.3f}× {v['base']}{ci} ({v['word']})")
    return ", ".join(parts)


def verdict_reason(run: dict) -> str | None:
    """One sentence on why this run cannot show overlap paying off, or None when nothing
    stands in its way: tp 1 (no collective), gloo on CPU (the collectives take the
    compute's cores), or a host-bound step (run.json ``limits.host_is_the_limit``, said
    only when the verdict is not "faster")."""
    cfg = run.get("config") or {}
    if cfg.get("tp") == 1:
        return ("at tp 1 there is no collective to hide, so domino's difference from tp "
                "is the micro-batch split's own cost")  # fmt: skip
    if run.get("backend") == "gloo":
        cores = run.get("cpu_count")
        where = (f"{cfg.get('tp')} ranks and their gloo threads on {cores} cores"
                 if cores and cfg.get("tp") else "the ranks share the host's cores")  # fmt: skip
        return (
            f"on CPU, gloo's collectives are computed by the cores that run the model "
            f"({where}), so comm hidden behind compute still takes core time from it and "
            "overlap cannot make domino faster here: this run checks the schedules and "
            "the analysis; the speedup needs GPUs (NCCL)"
        )
    lim = run.get("limits") or {}
    faster = any(v.get("word") == "faster" for v in run.get("verdict") or ())
    if lim.get("host_is_the_limit") and not faster:
        mode = lim.get("mode", "domino")
        return (
            f"the host is the limit: the device waits for {mode}'s kernel launches, so "
            f"hidden comm does not shorten the step (what limits {mode}, below); CUDA "
            "graphs (--cuda-graphs) take the host off the step"
        )
    return None


HOST_SPEED_SPREAD = 1.3  # host_speed_note speaks from this p90 / p10 of the probes on


def host_speed_note(run: dict) -> str | None:
    """One sentence when the host's speed moved during a CUDA run's timed steps: the
    modes' ``host_probe_times_ms`` (a fixed pure-Python loop after each timed step, or
    each block under ``--timing stream``: ``train.host_probe``) with a 90th / 10th
    percentile ratio of HOST_SPEED_SPREAD or more. A host-bound (eager) step's time
    moves with the host, so such a run's eager figures say as much about the host as
    about the schedule. None otherwise, for a CPU run (the ranks and gloo share the cores
    the probe runs on), for a ``--cuda-graphs`` run (its steps replay graphs: the host is
    off them) and for runs from before the probe."""
    cfg = run.get("config") or {}
    if cfg.get("device") != "cuda" or cfg.get("cuda_graphs"):
        return None
    probes = sorted(float(t) for m in (run.get("modes") or {}).values() if isinstance(m, dict)
                    for t in m.get("host_probe_times_ms") or ())  # fmt: skip
    if len(probes) < 2:
        return None
    lo = probes[(len(probes) - 1) // 10]  # nearest rank, low side
    hi = probes[len(probes) - 1 - (len(probes) - 1) // 10]
    if lo <= 0 or hi / lo < HOST_SPEED_SPREAD:
        return None
    return (
        f"the host's speed moved {hi / lo:.1f}x during the timed steps (a fixed Python loop "
        f"took {lo:.2f} to {hi:.2f} ms, 10th to 90th percentile): a host-bound (eager) "
        "step's time moves with it, so read eager figures as the host's as much as the "
        "schedule's; --cuda-graphs takes the host off the step"
    )


def comparison_rows(modes: dict) -> list[dict]:
    """The side-by-side table. ``step_ms`` is the mode's timed step: the median of its
    block times (the median of its timed steps for runs without blocks), the one step
    time every comparison uses; speedup vs tp = tp's time / this mode's and
    ``frac_of_nocomm`` = nocomm's time / this mode's (= this throughput / nocomm's),
    each the median of the paired block ratios; ``*_low``/``*_high``: their 95%
    intervals (``domino_prof.stats``), None without blocks."""
    rows = []
    for mode, r in modes.items():
        step = step_estimate(r)
        # a mode against itself is 1 exactly: no interval to show
        sp = mode_ratio(modes, mode, "tp") if mode != "tp" else Estimate(
            value=1.0, low=None, high=None, n=0, coverage=None)
        nc = mode_ratio(modes, mode, "nocomm") if mode != "nocomm" else Estimate(
            value=1.0, low=None, high=None, n=0, coverage=None)
        rows.append(
            {
                "mode": mode,
                "step_ms": r["step_ms"],
                "step_ms_low": step.low if step else None,
                "step_ms_high": step.high if step else None,
                "tokens_per_s": r["tokens_per_s"],
                "mfu": r.get("mfu"),
                "hidden_pct": r.get("hidden_pct"),
                "issue_ms": r.get("issue_ms"),
                "peak_mem_gb": (r.get("memory") or {}).get("peak_reserved_gb"),
                "speedup_vs_tp": sp.value if sp else None,
                "speedup_vs_tp_low": sp.low if sp else None,
                "speedup_vs_tp_high": sp.high if sp else None,
                "frac_of_nocomm": nc.value if nc else None,
                "frac_of_nocomm_low": nc.low if nc else None,
                "frac_of_nocomm_high": nc.high if nc else None,
            }
        )
    return rows


# (key, header, format) of the comparison table: the CLI (`run`, `analyze RUN_DIR`) and
# the report show the same columns in the same units. "timed step ms" is the median of
# the timed (unprofiled) steps' block times; hidden % comes from the profiled steps. A
# cell of a key with ``<key>_low``/``<key>_high`` carries its 95% interval: "0.962
# [0.941, 0.983]".
COMPARISON_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("mode", "mode", "s"),
    ("step_ms", "timed step ms", ".2f"),
    ("issue_ms", "issue ms", ".2f"),
    ("peak_mem_gb", "peak GB", ".1f"),
    ("tokens_per_s", "tokens/s", ",.0f"),
    ("mfu", "MFU %", ".1f"),
    ("hidden_pct", "hidden %", ".1f"),
    ("speedup_vs_tp", "speedup vs tp", ".3f"),
    ("frac_of_nocomm", "of nocomm", ".3f"),
)
_OPTIONAL_COLUMNS = ("issue_ms", "peak_mem_gb", "mfu")  # shown when some mode has them


def comparison_table(
    rows: list[dict], *, compact: bool = False
) -> tuple[list[str], list[list[str]]]:
    """(headers, cells) of the comparison table, formatted ("n/a" when missing).
    ``compact`` (the CLI's 80 columns): an interval as "±P%", P the larger side of it
    relative to the value, rounded up (conservative); else "[low, high]"."""
    cols = [
        c for c in COMPARISON_COLUMNS
        if c[0] not in _OPTIONAL_COLUMNS or any(r.get(c[0]) is not None for r in rows)
    ]  # fmt: skip
    cells = []
    for r in rows:
        line = []
        for key, _, spec in cols:
            v = r.get(key)
            if key == "mfu" and v is not None:
                v = 100 * v
            cell = "n/a" if v is None else format(v, spec)
            lo, hi = r.get(f"{key}_low"), r.get(f"{key}_high")
            if v is not None and lo is not None and hi is not None:
                if compact and v:
                    pct = math.ceil(round(100 * max(hi - v, v - lo) / abs(v), 9))
                    cell += f" ±{pct}%"
                else:
                    cell += f" [{format(lo, spec)}, {format(hi, spec)}]"
            line.append(cell)
        cells.append(line)
    return [c[1] for c in cols], cells


def comm_label(run: dict) -> str | None:
    """The emulation label of a run.json (None: real collectives, or a run from before
    ``--comm``)."""
    c = run.get("comm")
    if isinstance(c, dict) and c.get("kind") == "emulated" and isinstance(c.get("label"), str):
        return c["label"]
    return None
