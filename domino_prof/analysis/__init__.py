"""Pure analysis: trace frames in, frames/dataclasses out. Never prints or plots.

The entry points are the engine's, one layer up (docs/ARCHITECTURE.md "Layers"):

>>> from domino_prof.analysis import AnalysisConfig
>>> from domino_prof.engine import analyse_path, analyze
>>> a = analyse_path("traces/", AnalysisConfig())  # doctest: +SKIP
>>> a = analyze(load_trace("traces/"))             # doctest: +SKIP
>>> a.totals["hidden_pct"], a.by_rank              # doctest: +SKIP
"""

from domino_prof.analysis.config import DEFAULT_COMM_PATTERN, AnalysisConfig, combine_comm_pattern
from domino_prof.analysis.document import Analysis

__all__ = ["DEFAULT_COMM_PATTERN", "Analysis", "AnalysisConfig", "combine_comm_pattern"]
