"""Pure analysis: trace frames in, frames/dataclasses out. Never prints or plots.

>>> from domino_prof.analysis import AnalysisConfig, analyze
>>> a = analyze(trace, AnalysisConfig())          # doctest: +SKIP
>>> a.totals["hidden_pct"], a.by_rank            # doctest: +SKIP
"""

from domino_prof.analysis.config import DEFAULT_COMM_PATTERN, AnalysisConfig, combine_comm_pattern
from domino_prof.analysis.document import Analysis
from domino_prof.analysis.overlap import analyze

__all__ = ["DEFAULT_COMM_PATTERN", "Analysis", "AnalysisConfig", "analyze", "combine_comm_pattern"]
