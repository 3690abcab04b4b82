"""The ranked findings of ``analysis.overheads`` as a rich table (printed by `analyze`).

Rendering only: every number comes from the typed overheads
(``analysis.results``: ``Overheads.findings``); nothing is computed here.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from domino_prof.analysis.findings import ZERO_GAIN_MS
from domino_prof.analysis.results import Overheads, Where

_STYLE = {"high": "bold red", "medium": "yellow", "low": "dim"}


def _fmt_num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "n/a"
    s = f"{x:.3f}" if isinstance(x, float) else str(x)
    return f"{s} {unit}".strip()


def format_where(where: Any) -> str:
    """'rank 0 · stream 7->13 · op fwd.mlp · iter 1', skipping the parts that are None."""
    w = where.to_json() if isinstance(where, Where) else (where or {})
    parts = []
    for key, label in (("rank", "rank"), ("stream", "stream"), ("op", "op"),
                       ("iteration", "iter")):  # fmt: skip
        if w.get(key) is not None:
            parts.append(f"{label} {w[key]}")
    return " · ".join(parts) or "-"


def findings_table(overheads: Any) -> Table:
    """Severity, the number, where, the suggested fix and the estimated gain per step.

    Where and fix sit under each finding's title (dim), so the table stays readable in
    an 80-column terminal instead of squeezing five text columns side by side."""
    table = Table(title="Findings (overheads beyond overlap)", show_lines=True)
    table.add_column("#", justify="right")
    table.add_column("sev.")
    table.add_column("finding · where · fix", ratio=1, min_width=30)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("gain\nms/step", justify="right", no_wrap=True)
    ov = overheads if isinstance(overheads, Overheads) else Overheads.of(overheads)
    for i, f in enumerate(ov.findings, 1):
        text = (
            f"[bold]{escape(f.title)}[/]\n"
            f"[dim]{escape(format_where(f.where))}[/]\n"
            f"fix: {escape(f.fix)}"
        )
        table.add_row(
            str(i),
            f"[{_STYLE.get(f.severity, '')}]{f.severity}[/]",
            text,
            _fmt_num(f.value, f.unit),
            _fmt_num(f.est_gain_ms_per_step),
        )
    if not ov.findings:
        table.add_row("", "", "no overhead above its threshold", "", "")
    return table


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def whatif_renderables(overheads: Any) -> list:
    """The replay's what-if table (scenario, predicted step, gain) and each rank's
    critical-path breakdown, with the overlap tax line; without a replay, the overlap
    tax line alone (it is measured, not replayed), or nothing."""
    ov = overheads if isinstance(overheads, Overheads) else Overheads.of(overheads)
    w = ov.whatif or {}
    if not w.get("computed"):
        return _tax_line(w.get("overlap_tax") or {})
    out: list = []
    t = Table(title="What if (the step replayed with each change; analysis.replay)")
    t.add_column("scenario", ratio=1, min_width=24)
    t.add_column("predicted\nstep ms", justify="right", no_wrap=True)
    t.add_column("gain\nms/step", justify="right", no_wrap=True)
    idle = []  # scenarios that change nothing: named on one line, not as rows of 0.000
    for s in w.get("scenarios") or ():
        g = s.get("gain_ms")
        if s.get("name") != "measured" and g is not None and abs(g) < ZERO_GAIN_MS:
            idle.append(str(s["label"]))
            continue
        t.add_row(escape(str(s["label"])), _fmt_num(s.get("step_ms")), _fmt_num(g))
    out.append(t)
    if idle:
        out.append(f"no gain (under {ZERO_GAIN_MS:g} ms per step): " + "; ".join(idle))
    if w.get("explained"):
        add = w.get("gains_add")
        if add is not None:
            out.append(
                f"gains of the fixes {'add up' if add else 'do not add up'}: their sum "
                f"{_fmt_num(w.get('sum_of_fix_gains_ms'))} ms against "
                f"{_fmt_num(w.get('combined_gain_ms'))} ms with every fix applied together"
            )
    else:
        out.append(f"what if: {w.get('reason')}")
    cp = Table(title="Critical path of the profiled step (share of the rank's wall)")
    for c, j in (("rank", "right"), ("step", "right"), ("wall ms", "right"),
                 ("compute", "right"), ("exposed comm", "right"), ("host", "right"),
                 ("idle", "right")):  # fmt: skip
        cp.add_column(c, justify=j, no_wrap=True)
    for r in w.get("critical_path") or ():
        cp.add_row(str(r["rank"]), str(r["iteration"]), _fmt_num(r["length_ns"] / 1e6),
                   _pct(r.get("compute_share")), _pct(r.get("exposed_comm_share")),
                   _pct(r.get("host_share")), _pct(r.get("idle_share")))  # fmt: skip
    out.append(cp)
    return out + _tax_line(w.get("overlap_tax") or {})


def _tax_line(tax: dict) -> list[str]:
    if not tax.get("n_classes"):
        return []
    un, st = tax.get("unmeasured_ms_per_step"), tax.get("comm_stretch_ms_per_step")
    return [
        f"overlap tax: compute runs {_fmt_num(tax.get('tax_ms_per_step'))} ms per step "
        f"slower while comm runs beside it ({tax.get('n_measured', 0)} of {tax['n_classes']} "
        "kernel classes measured against their alone runs"
        + (f"; {_fmt_num(un)} ms per step of overlapped compute unmeasured: no alone baseline"
           if un else "")
        + f"); net hidden = hidden {_fmt_num(tax.get('hidden_ms_per_step'))} - tax = "
        f"{_fmt_num(tax.get('net_hidden_ms_per_step'))} ms per step; comm stretched by "
        f"compute {_fmt_num(st)} ms per step"
    ]
