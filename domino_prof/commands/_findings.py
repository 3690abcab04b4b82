"""The ranked findings of ``analysis.overheads`` as a rich table (printed by `analyze`).

Rendering only: every number comes from the typed overheads
(``analysis.results``: ``Overheads.findings``); nothing is computed here.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

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
