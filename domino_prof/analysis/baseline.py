"""Overlap figures for CI gating: baselines and rule evaluation (pure; never prints).

Two things live here:

* :func:`make_baseline` turns an :class:`~domino_prof.analysis.Analysis` into a
  versioned JSON-able dict (``{"schema": "domino-prof/baseline", "version": 1,
  ...}``) holding, per rank, per (rank, phase) and per (rank, op name), the
  overlap figures of ``docs/METRICS.md``: ``comm_ns``, ``hidden_ns``,
  ``exposed_ns`` and ``hidden_pct`` (``null`` when there is no comm).
* :func:`evaluate` applies :class:`CheckRules` (a floor on hidden %, a ceiling
  on exposed comm per step, a tolerated drop against a baseline) to an
  Analysis and returns one :class:`RuleResult` per rule and rank.

Selections. ``phase`` restricts comm to the intervals whose ``phase`` is
``forward`` / ``backward`` (compute on the device still hides it, whatever its
phase: that is how METRICS.md defines per-phase figures). ``op_pattern`` (a
regular expression, ``re.search``) restricts comm to intervals whose launching
op name matches. Without an op pattern the figures are read from the
analysis' own ``by_rank`` / ``by_phase`` frames, so ``check`` gates exactly the
numbers ``analyze`` prints; with one they are recomputed from ``intervals`` as
the exact union over the matching comm intervals (not a sum of per-op rows,
which would count comm that runs concurrently for two ops twice).

Verdicts: ``pass``, ``fail`` (a regression: exit 1 in the CLI), ``n/a`` (the
figure is undefined, e.g. no comm so hidden % has no value: the input cannot
be gated, exit 2) and ``skip`` (nothing to compare against, e.g. the baseline
itself has no comm for that phase: reported, never failing).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from domino_prof import __version__
from domino_prof.analysis.document import Analysis
from domino_prof.analysis.overlap import ComputeReference, comm_overlap
from domino_prof.errors import ConfigError, OptionError, opt

BASELINE_SCHEMA = "domino-prof/baseline"
BASELINE_VERSION = 1

PHASES: tuple[str, ...] = ("forward", "backward", "optimizer", "other")
#: Spellings of the phase option -> phase column values (None = all phases).
PHASE_ALIASES: dict[str, str | None] = {
    "all": None,
    "fwd": "forward",
    "forward": "forward",
    "bwd": "backward",
    "backward": "backward",
}

PASS, FAIL, NA, SKIP = "pass", "fail", "n/a", "skip"

# A drop is compared with this slack so that a figure that moved by exactly the
# tolerance (up to float rounding of ns ratios) still passes.
_EPS = 1e-9


# --------------------------------------------------------------------------- figures
@dataclass(frozen=True, kw_only=True)
class Figures:
    """One rank's overlap figures for one selection (all times int ns)."""

    rank: int
    comm_ns: int
    hidden_ns: int
    exposed_ns: int
    n_iterations: int
    step_exposed_ns: int = 0  # exposed comm launched inside ProfilerStep windows

    @property
    def hidden_pct(self) -> float | None:
        """100·H/C, or None when there is no comm (undefined, never 0 or NaN)."""
        if self.comm_ns <= 0:
            return None
        return 100.0 * self.hidden_ns / self.comm_ns

    @property
    def exposed_ms_per_step(self) -> float | None:
        """Exposed comm per profiled step in ms (the mean over this rank's steps of
        the per-iteration exposed time, as ``totals["exposed_ms_per_step"]``; comm
        launched outside any step is not counted); None without ProfilerStep windows."""
        if self.n_iterations <= 0:
            return None
        return self.step_exposed_ns / self.n_iterations / 1e6

    def to_json(self) -> dict[str, Any]:
        return {
            "comm_ns": int(self.comm_ns),
            "hidden_ns": int(self.hidden_ns),
            "exposed_ns": int(self.exposed_ns),
            "hidden_pct": self.hidden_pct,
        }


def parse_phase(phase: str | None) -> str | None:
    """``all``/``fwd``/``bwd`` (or the long names) -> phase column value or None."""
    key = "all" if phase is None else str(phase).strip().lower()
    if key not in PHASE_ALIASES:
        raise OptionError(
            f"{opt('phase')} {phase!r} is not a phase; use one of fwd, bwd, all (or "
            "forward, backward)"
        )
    return PHASE_ALIASES[key]


def compile_op_pattern(pattern: str | None) -> re.Pattern[str] | None:
    """Compile an op pattern (matched with ``re.search``)."""
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as e:
        raise OptionError(
            f"{opt('op_pattern')} {pattern!r} is not a valid regular expression ({e}); "
            "fix it, e.g. 'attn' or '^fwd\\.'"
        ) from None


def _int(x: object) -> int:
    return int(x) if x is not None and not (isinstance(x, float) and math.isnan(x)) else 0


def _clean_pct(x: object) -> float | None:
    """A frame's hidden_pct (NaN when no comm) -> float or None (never NaN)."""
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def n_iterations_by_rank(analysis: Analysis) -> dict[int, int]:
    """Profiled steps per rank: the ``by_iteration`` rows with iteration >= 0;
    ranks without any fall back to ``totals["n_iterations"]`` (0 if absent)."""
    out: dict[int, int] = {}
    frame = getattr(analysis, "by_iteration", None)
    if isinstance(frame, pd.DataFrame) and len(frame) and "iteration" in frame:
        steps = frame[frame["iteration"] >= 0]
        out = {int(r): int(n) for r, n in steps.groupby("rank", observed=True).size().items()}
    fallback = _int((getattr(analysis, "totals", None) or {}).get("n_iterations"))
    return {int(r): out.get(int(r), fallback) for r in analysis.ranks}


def _per_rank(frame: pd.DataFrame) -> pd.DataFrame:
    """Sum comm/hidden ns per rank (index: rank)."""
    if not len(frame):
        return pd.DataFrame({"comm_ns": [], "hidden_ns": []}, index=pd.Index([], name="rank"))
    out = frame.groupby("rank", observed=True)[["comm_ns", "hidden_ns"]].sum()
    out.index = out.index.astype(np.int64)
    return out


def _assemble(
    ranks: list[int], n_iter: dict[int, int], whole: pd.DataFrame, steps: pd.DataFrame
) -> dict[int, Figures]:
    """Figures per rank from per-rank sums over the whole trace and over steps."""
    w, st = _per_rank(whole), _per_rank(steps)
    out: dict[int, Figures] = {}
    for r in ranks:
        c, h = (int(w.at[r, "comm_ns"]), int(w.at[r, "hidden_ns"])) if r in w.index else (0, 0)
        sc, sh = (int(st.at[r, "comm_ns"]), int(st.at[r, "hidden_ns"])) if r in st.index else (0, 0)
        out[r] = Figures(
            rank=r,
            comm_ns=c,
            hidden_ns=h,
            exposed_ns=c - h,
            n_iterations=n_iter[r],
            step_exposed_ns=sc - sh,
        )
    return out


def _interval_figures(analysis: Analysis, comm_mask: pd.Series, by: list[str]) -> pd.DataFrame:
    """Exact comm/hidden ns of the selected comm intervals, grouped by ``by`` (rank first).

    Per (group, device): C = |∪ selected comm|, H = |(∪ selected comm) ∩ compute
    reference of that device| -- METRICS.md's definitions through the analysis' own
    overlap routine (``overlap.comm_overlap``), with the union taken over the selection
    (so comm running concurrently for two selected ops counts once).
    """
    iv = analysis.intervals
    ref = getattr(analysis, "reference", None)
    if ref is None:  # a frame-only analysis (tests, old pickles): its compute rows
        ref = ComputeReference.of_intervals(iv)
    comm = iv.loc[comm_mask.to_numpy(dtype=bool)]
    if not len(comm):
        return pd.DataFrame({**{k: [] for k in by}, "comm_ns": [], "hidden_ns": []})
    keys = comm_overlap(ref, comm, by)
    for k in by:
        keys[k] = keys[k].astype(np.int64) if k in ("rank", "iteration") else keys[k].astype(str)
    return keys.groupby(by, sort=True)[["comm_ns", "hidden_ns"]].sum().reset_index()


def op_names_with_comm(analysis: Analysis) -> list[str]:
    """Names of the ops that launched comm (the values an op pattern is matched against)."""
    frame = analysis.by_op
    if not len(frame):
        return []
    rows = frame[frame["comm_ns"] > 0]
    return sorted({str(o) for o in rows["op"]})


def select_ops(analysis: Analysis, pattern: re.Pattern[str]) -> list[str]:
    """Op names launching comm that ``pattern`` finds (``re.search``); an error when none.

    A pattern that matches nothing must never turn into a silently passing gate.
    """
    names = op_names_with_comm(analysis)
    hits = [n for n in names if pattern.search(n)]
    if hits:
        return hits
    all_ops = sorted({str(o) for o in analysis.by_op["op"]}) if len(analysis.by_op) else []
    other = [n for n in all_ops if pattern.search(n)]
    sample = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    if other:
        raise OptionError(
            f"{opt('op_pattern')} {pattern.pattern!r} matches {len(other)} op(s) but none of "
            f"them launches comm kernels; ops with comm: {sample or 'none'}"
        )
    raise OptionError(
        f"{opt('op_pattern')} {pattern.pattern!r} matches no op name in the trace; "
        f"ops with comm: {sample or 'none (the trace has no comm kernels)'}"
    )


def figures(
    analysis: Analysis, *, phase: str | None = None, op_pattern: str | re.Pattern[str] | None = None
) -> dict[int, Figures]:
    """Per-rank figures for a selection of comm (``phase``: None/forward/backward/...).

    Without a selection they are the analysis' own ``by_rank`` and ``by_iteration``
    sums; with a phase (no op pattern) ``by_phase``; exposed-per-step and any op
    selection are computed from ``intervals`` (per rank and iteration, as
    ``by_iteration`` is).
    """
    ranks = [int(r) for r in analysis.ranks]
    n_iter = n_iterations_by_rank(analysis)
    if phase is not None and phase not in PHASES:
        raise ConfigError(f"phase {phase!r} is not one of {', '.join(PHASES)}")
    iv = analysis.intervals
    if op_pattern is None and phase is None:
        it = analysis.by_iteration
        return _assemble(ranks, n_iter, analysis.by_rank, it[it["iteration"] >= 0])
    mask = iv["kind"].astype(str) == "comm"
    if phase is not None:
        mask &= iv["phase"].astype(str) == phase
    if op_pattern is not None:
        pat = op_pattern if isinstance(op_pattern, re.Pattern) else compile_op_pattern(op_pattern)
        assert pat is not None
        mask &= iv["op"].astype(str).isin(select_ops(analysis, pat))
    if op_pattern is None:
        bp = analysis.by_phase
        whole = bp[bp["phase"].astype(str) == phase]
    else:
        whole = _interval_figures(analysis, mask, ["rank"])
    steps = _interval_figures(analysis, mask & (iv["iteration"] >= 0), ["rank", "iteration"])
    return _assemble(ranks, n_iter, whole, steps)


# --------------------------------------------------------------------------- baseline
def make_baseline(analysis: Analysis) -> dict[str, Any]:
    """The versioned figures a later ``check --baseline`` compares against.

    ``per_rank[r]`` holds every rank (``hidden_pct`` null when it has no comm);
    ``per_phase[r]`` and ``per_op[r]`` hold only phases / ops that have comm.
    Keys are strings (JSON); all times are int ns.
    """
    per_rank = {}
    for r, f in figures(analysis).items():
        per_rank[str(r)] = {
            **f.to_json(),
            "n_iterations": f.n_iterations,
            "exposed_ms_per_step": f.exposed_ms_per_step,
        }
    per_phase: dict[str, dict[str, Any]] = {str(r): {} for r in analysis.ranks}
    for row in analysis.by_phase.itertuples(index=False):
        if int(row.comm_ns) > 0:
            per_phase.setdefault(str(int(row.rank)), {})[str(row.phase)] = _row_json(row)
    per_op: dict[str, dict[str, Any]] = {str(r): {} for r in analysis.ranks}
    for row in analysis.by_op.itertuples(index=False):
        if int(row.comm_ns) > 0:
            per_op.setdefault(str(int(row.rank)), {})[str(row.op)] = _row_json(row)
    return {
        "schema": BASELINE_SCHEMA,
        "version": BASELINE_VERSION,
        "tool": f"domino-prof {__version__}",
        "source": str(getattr(analysis, "source", "")),
        "mode": getattr(analysis, "mode", None),
        "config": _classification(analysis),
        "ranks": [int(r) for r in analysis.ranks],
        "per_rank": per_rank,
        "per_phase": per_phase,
        "per_op": per_op,
    }


def _classification(analysis: Analysis) -> dict[str, Any] | None:
    """The analysis settings that change what is comm (a check compares them)."""
    cfg = getattr(analysis, "config", None)
    if cfg is None:
        return None
    return {"comm_pattern": cfg.comm_pattern, "memcpy_as_comm": bool(cfg.memcpy_as_comm)}


def config_mismatch(baseline: Mapping[str, Any], analysis: Analysis) -> str | None:
    """A note when the baseline classified comm differently from ``analysis``."""
    then, now = baseline.get("config"), _classification(analysis)
    if not isinstance(then, Mapping) or now is None:
        return None
    diff = [k for k in now if k in then and then[k] != now[k]]
    if not diff:
        return None
    parts = ", ".join(f"{k} {then[k]!r} then, {now[k]!r} now" for k in diff)
    return f"the baseline classified comm differently ({parts}): figures may not be comparable"


def _row_json(row: Any) -> dict[str, Any]:
    return {
        "comm_ns": int(row.comm_ns),
        "hidden_ns": int(row.hidden_ns),
        "exposed_ns": int(row.exposed_ns),
        "hidden_pct": _clean_pct(row.hidden_pct),
    }


def validate_baseline(doc: object, *, source: str = "baseline") -> dict[str, Any]:
    """Check a loaded baseline document; a ConfigError (exit 2) names what is wrong."""
    regen = "regenerate it with `domino-prof baseline PATH -o FILE`"
    if not isinstance(doc, Mapping) or doc.get("schema") != BASELINE_SCHEMA:
        got = doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__
        raise ConfigError(
            f"{source}: not a domino-prof baseline (schema {got!r}, expected "
            f"{BASELINE_SCHEMA!r}); {regen}"
        )
    if doc.get("version") != BASELINE_VERSION:
        raise ConfigError(
            f"{source}: baseline version {doc.get('version')!r} is not supported "
            f"(this domino-prof reads version {BASELINE_VERSION}); {regen}"
        )
    for key in ("per_rank", "per_phase", "per_op"):
        if not isinstance(doc.get(key), Mapping):
            raise ConfigError(f"{source}: baseline has no {key!r} table; {regen}")
    for r, entry in doc["per_rank"].items():
        ok = isinstance(entry, Mapping) and _is_pct(entry.get("hidden_pct"))
        if not ok or not str(r).lstrip("-").isdigit():
            raise ConfigError(
                f"{source}: per_rank[{r!r}] is malformed (needs an integer rank key and "
                f"hidden_pct: number or null); {regen}"
            )
    for key in ("per_phase", "per_op"):
        for r, table in doc[key].items():
            if not isinstance(table, Mapping) or not all(
                isinstance(v, Mapping) and _is_pct(v.get("hidden_pct")) for v in table.values()
            ):
                raise ConfigError(f"{source}: {key}[{r!r}] is malformed; {regen}")
    return dict(doc)


def _is_pct(x: object) -> bool:
    return x is None or (
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    )


# --------------------------------------------------------------------------- rules
@dataclass(frozen=True, kw_only=True)
class CheckRules:
    """What ``domino-prof check`` gates on. At least one rule must be set.

    ``phase``: None (all) or a phase column value; ``op_pattern``: regex or None;
    ``baseline``: a validated baseline dict, used with ``max_drop`` (points).
    """

    min_hidden: float | None = None
    max_exposed_ms: float | None = None
    baseline: Mapping[str, Any] | None = None
    max_drop: float | None = None
    phase: str | None = None
    op_pattern: str | None = None
    # exposed comm on the replay's critical path (ms per step; analysis.replay)
    max_critical_comm_ms: float | None = None

    def __post_init__(self) -> None:
        if (self.baseline is None) != (self.max_drop is None):
            raise OptionError(
                f"{opt('baseline')} FILE and {opt('max_drop')} PP go together (the drop in "
                f"hidden % points tolerated vs the baseline, e.g. {opt('max_drop')} 2)"
            )
        if (self.min_hidden is None and self.max_exposed_ms is None and self.baseline is None
                and self.max_critical_comm_ms is None):  # fmt: skip
            raise OptionError(
                f"no rule given: pass at least one of {opt('min_hidden')} PCT, "
                f"{opt('max_exposed_ms')} MS, {opt('max_critical_comm')} MS, "
                f"{opt('baseline')} FILE {opt('max_drop')} PP"
            )
        if self.min_hidden is not None and not 0 <= self.min_hidden <= 100:
            raise OptionError(
                f"{opt('min_hidden')} {self.min_hidden} is not a percentage in [0, 100]"
            )
        if self.max_exposed_ms is not None and not self.max_exposed_ms >= 0:
            raise OptionError(f"{opt('max_exposed_ms')} {self.max_exposed_ms} must be >= 0 (ms)")
        if self.max_critical_comm_ms is not None and not self.max_critical_comm_ms >= 0:
            raise OptionError(
                f"{opt('max_critical_comm')} {self.max_critical_comm_ms} must be >= 0 (ms)"
            )
        if self.max_drop is not None and not self.max_drop >= 0:
            raise OptionError(f"{opt('max_drop')} {self.max_drop} must be >= 0 (percentage points)")
        if self.phase is not None and self.phase not in PHASES:
            raise ConfigError(f"phase {self.phase!r} is not one of {', '.join(PHASES)}")
        compile_op_pattern(self.op_pattern)  # a bad regex is an error before any loading


@dataclass(frozen=True, kw_only=True)
class RuleResult:
    """One row of the gate: a rule applied to one rank (and scope)."""

    rule: str  # "min-hidden" | "max-exposed-ms" | "rank present" | "hidden drop"
    rank: int
    measured: float | None  # None = n/a
    limit: float | None
    verdict: str  # pass | fail | n/a | skip
    scope: str = "all"  # "all", a phase, an op name, or "ops~REGEX"
    mode: str = ""  # the run directory's mode ("" for traces outside a run)
    unit: str = "%"  # "%" | "ms" | "" (rank present)
    op: str = ">="  # how measured compares with limit
    message: str = ""

    @property
    def label(self) -> str:
        return self.rule if self.scope == "all" else f"{self.rule} [{self.scope}]"

    @property
    def ok(self) -> bool:
        return self.verdict in (PASS, SKIP)


def _scope(phase: str | None, op_pattern: str | None) -> str:
    parts = [phase] if phase else []
    if op_pattern is not None:
        parts.append(f"ops~{op_pattern}")
    return " ".join(parts) or "all"


def _fmt(x: float | None, unit: str) -> str:
    if x is None:
        return "n/a"
    return f"{x:.2f}%" if unit == "%" else f"{x:.3f} ms"


def evaluate(analysis: Analysis, rules: CheckRules) -> list[RuleResult]:
    """Apply ``rules`` to ``analysis``: one result per rule and rank, in rank order.

    Raises ConfigError (exit 2) when the selection is empty (an op pattern that
    matches nothing, no comm at all): a gate that cannot measure must not pass.
    """
    pat = compile_op_pattern(rules.op_pattern)
    scope = _scope(rules.phase, rules.op_pattern)
    out: list[RuleResult] = []
    if rules.min_hidden is not None or rules.max_exposed_ms is not None:
        figs = figures(analysis, phase=rules.phase, op_pattern=pat)
        if not any(f.comm_ns > 0 for f in figs.values()):
            what = f"in phase {rules.phase!r}" if rules.phase else "in the trace"
            raise OptionError(
                f"{getattr(analysis, 'source', '') or 'trace'}: no comm kernels {what}: "
                "hidden % is n/a and there is nothing to gate; check the trace "
                f"(comm pattern, {opt('phase')}, {opt('op_pattern')})"
            )
        if rules.min_hidden is not None:
            out += [_min_hidden(f, rules.min_hidden, scope) for f in figs.values()]
        if rules.max_exposed_ms is not None:
            out += [_max_exposed(f, rules.max_exposed_ms, scope) for f in figs.values()]
    if rules.baseline is not None:
        assert rules.max_drop is not None
        out += _vs_baseline(analysis, rules, pat)
    if rules.max_critical_comm_ms is not None:
        out += max_critical_comm(analysis, rules.max_critical_comm_ms)
    return out


def max_critical_comm(analysis: Analysis, ceiling: float) -> list[RuleResult]:
    """Per rank: the exposed comm on its critical path (analysis.replay), mean ms per
    profiled step, against ``ceiling``. n/a when the step was not replayed or the replay
    does not reproduce it (docs/METRICS.md "Extension: replay model")."""
    ov = getattr(analysis, "overheads", None)
    w = (ov.get("whatif") if ov is not None else None) or {}
    ranks = list(getattr(analysis, "ranks", []) or [])
    rows = w.get("critical_path") or []
    out = []
    for r in ranks:
        mine = [x["exposed_comm_ns"] for x in rows if x["rank"] == r]
        if not w.get("computed") or not w.get("explained") or not mine:
            why = w.get("reason") or "no replayed step on this rank"
            out.append(RuleResult(rule="max-critical-comm", rank=r, measured=None,
                                  limit=float(ceiling), verdict=NA, unit="ms", op="<=",
                                  message=f"rank {r}: critical-path comm is n/a: {why}"))  # fmt: skip
            continue
        ms = sum(mine) / len(mine) / 1e6
        verdict = PASS if ms <= ceiling + _EPS else FAIL
        out.append(RuleResult(
            rule="max-critical-comm", rank=r, measured=ms, limit=float(ceiling),
            verdict=verdict, unit="ms", op="<=",
            message=f"rank {r}: exposed comm on the critical path {ms:.3f} ms/step "
            + (f"<= {ceiling:g} ms" if verdict == PASS else f"exceeds {ceiling:g} ms"),
        ))  # fmt: skip
    return out


def _min_hidden(f: Figures, floor: float, scope: str) -> RuleResult:
    pct = f.hidden_pct
    if pct is None:
        verdict, msg = NA, f"rank {f.rank}: no comm kernels: hidden % is n/a"
    else:
        verdict = PASS if pct + _EPS >= floor else FAIL
        msg = f"rank {f.rank}: hidden comm {pct:.2f}% " + (
            f">= floor {floor:g}%" if verdict == PASS else f"is below the floor {floor:g}%"
        )
    return RuleResult(
        rule="min-hidden",
        rank=f.rank,
        measured=pct,
        limit=float(floor),
        verdict=verdict,
        scope=scope,
        unit="%",
        op=">=",
        message=msg,
    )


def _max_exposed(f: Figures, ceiling: float, scope: str) -> RuleResult:
    ms = f.exposed_ms_per_step
    if ms is None:
        verdict = NA
        msg = f"rank {f.rank}: no ProfilerStep# windows: exposed ms per step is n/a"
    else:
        verdict = PASS if ms <= ceiling + _EPS else FAIL
        msg = f"rank {f.rank}: exposed comm {ms:.3f} ms/step " + (
            f"<= {ceiling:g} ms" if verdict == PASS else f"exceeds {ceiling:g} ms"
        )
    return RuleResult(
        rule="max-exposed-ms",
        rank=f.rank,
        measured=ms,
        limit=float(ceiling),
        verdict=verdict,
        scope=scope,
        unit="ms",
        op="<=",
        message=msg,
    )


def _drop(
    rank: int, scope: str, base: float | None, cur: float | None, max_drop: float
) -> RuleResult:
    def res(verdict: str, limit: float | None, msg: str) -> RuleResult:
        return RuleResult(
            rule="hidden drop",
            rank=rank,
            measured=cur,
            limit=limit,
            verdict=verdict,
            scope=scope,
            unit="%",
            op=">=",
            message=msg,
        )

    where = f"rank {rank}" + ("" if scope == "all" else f" {scope}")
    if base is None:
        return res(SKIP, None, f"{where}: the baseline has no comm here; nothing to compare")
    limit = base - max_drop
    if cur is None:
        return res(NA, limit, f"{where}: no comm kernels now (baseline {base:.2f}%): n/a")
    drop = base - cur
    if drop <= max_drop + _EPS:
        return res(PASS, limit, f"{where}: hidden {cur:.2f}% vs baseline {base:.2f}%")
    return res(
        FAIL,
        limit,
        f"{where}: hidden % dropped {drop:.2f} points ({base:.2f}% -> {cur:.2f}%), "
        f"more than the tolerated {max_drop:g}",
    )


def _vs_baseline(
    analysis: Analysis, rules: CheckRules, pat: re.Pattern[str] | None
) -> list[RuleResult]:
    base = rules.baseline
    assert base is not None and rules.max_drop is not None
    max_drop = float(rules.max_drop)
    current = {int(r) for r in analysis.ranks}
    out: list[RuleResult] = []
    base_ranks = sorted(int(r) for r in base["per_rank"])
    for r in base_ranks:
        present = r in current
        out.append(
            RuleResult(
                rule="rank present",
                rank=r,
                measured=None,
                limit=None,
                verdict=PASS if present else FAIL,
                unit="",
                op="",
                message=f"rank {r}: "
                + ("present" if present else "in the baseline but missing from the trace"),
            )
        )
    ranks = [r for r in base_ranks if r in current]
    if pat is not None:
        # Per op name: every baseline op the pattern finds, on every rank.
        base_ops = {o for r in ranks for o in base["per_op"].get(str(r), {})}
        hits = sorted(o for o in base_ops if pat.search(o))
        if not hits:
            raise OptionError(
                f"{opt('op_pattern')} {pat.pattern!r} matches no op name in the baseline "
                f"({len(base_ops)} ops with comm there); fix the pattern or regenerate "
                "the baseline"
            )
        cur = _op_table(analysis, rules.phase)
        for r in ranks:
            for o in hits:
                entry = base["per_op"].get(str(r), {}).get(o)
                if entry is None:
                    continue
                now = cur.get((r, o))
                scope = f"op {o}"
                if now is None and entry.get("hidden_pct") is not None:
                    out.append(
                        RuleResult(
                            rule="op present",
                            rank=r,
                            measured=None,
                            limit=None,
                            verdict=FAIL,
                            scope=scope,
                            unit="",
                            op="",
                            message=f"rank {r}: op {o!r} launched comm in the baseline "
                            "but launches none now",
                        )
                    )
                    continue
                out.append(_drop(r, scope, entry.get("hidden_pct"), now, max_drop))
        return out
    if rules.phase is None:
        now = figures(analysis)
        for r in ranks:
            out.append(
                _drop(
                    r,
                    "all",
                    base["per_rank"][str(r)].get("hidden_pct"),
                    now[r].hidden_pct,
                    max_drop,
                )
            )
        phases = [p for p in PHASES if any(p in base["per_phase"].get(str(r), {}) for r in ranks)]
    else:
        phases = [rules.phase]
    for p in phases:
        now = figures(analysis, phase=p)
        for r in ranks:
            entry = base["per_phase"].get(str(r), {}).get(p)
            base_pct = None if entry is None else entry.get("hidden_pct")
            out.append(_drop(r, p, base_pct, now[r].hidden_pct, max_drop))
    return out


def _op_table(analysis: Analysis, phase: str | None) -> dict[tuple[int, str], float | None]:
    """(rank, op) -> current hidden % (by_op; restricted to a phase via intervals)."""
    frame = analysis.by_op
    if phase is None:
        return {
            (int(row.rank), str(row.op)): _clean_pct(row.hidden_pct)
            for row in frame.itertuples(index=False)
            if int(row.comm_ns) > 0
        }
    iv = analysis.intervals
    mask = (iv["kind"].astype(str) == "comm") & (iv["phase"].astype(str) == phase)
    table = _interval_figures(analysis, mask, ["rank", "op"])
    return {
        (int(row.rank), str(row.op)): 100.0 * row.hidden_ns / row.comm_ns
        for row in table.itertuples(index=False)
        if row.comm_ns > 0
    }


# --------------------------------------------------------------------------- outcome
def exit_code(results: list[RuleResult]) -> int:
    """0 every rule holds; 2 some figure is n/a (cannot be gated); else 1 on a failure.

    n/a wins over fail: a gate that could not measure everything is bad input,
    which CI should treat as broken rather than as a plain regression.
    """
    if any(r.verdict == NA for r in results):
        return 2
    if any(r.verdict == FAIL for r in results):
        return 1
    return 0
