"""Plotly figure builders (``figures``) and the self-contained HTML page (``page``).

No metric is computed here: every number comes from ``domino_prof.analysis``.
"""

from domino_prof.report.page import write_compare, write_report, write_run_report

__all__ = ["write_compare", "write_report", "write_run_report"]
