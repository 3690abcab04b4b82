"""Plotly figure builders (``figures``) and the self-contained HTML page (``page``).

No metric is computed here: every number comes from ``domino_prof.analysis``.
"""

from domino_prof.report.page import (
    render_compare,
    render_report,
    render_run_report,
    write_compare,
    write_report,
    write_run_report,
)

__all__ = [
    "render_compare",
    "render_report",
    "render_run_report",
    "write_compare",
    "write_report",
    "write_run_report",
]
