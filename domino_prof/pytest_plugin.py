"""Gate overlap from a project's own test suite (a pytest-plugin style helper).

Use the function directly::

    from domino_prof.pytest_plugin import assert_overlap

    def test_tp_comm_stays_hidden(tmp_path):
        run_my_profiled_steps(out=tmp_path)            # writes rank*.pt.trace.json.gz
        assert_overlap(tmp_path, min_hidden=80, phase="fwd")

or enable the plugin (``pytest_plugins = ["domino_prof.pytest_plugin"]`` in a
``conftest.py``, or ``pytest -p domino_prof.pytest_plugin``) and take the
``overlap_gate`` fixture, which is the same function.

``assert_overlap`` takes the options of ``domino-prof check`` as keyword
arguments (the rules; the reading options, e.g. ``comm_pattern``, ``rank``,
``skip_bad``, ``scheduler``, are the fields of ``domino_prof.engine.Reading``) and raises ``AssertionError`` with the check table when a rule fails
(exit 1) or a figure is n/a (exit 2). Bad input (no such trace, a malformed
baseline, an op pattern that matches nothing) raises the usual
``domino_prof.errors.DominoProfError`` with its one-line message.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from domino_prof.engine import Reading
from domino_prof.gate import format_table, run_check

if TYPE_CHECKING:
    from domino_prof.analysis.baseline import RuleResult

__all__ = ["assert_overlap", "overlap_gate"]


def assert_overlap(
    path: str | os.PathLike,
    *,
    min_hidden: float | None = None,
    phase: str = "all",
    max_exposed_ms: float | None = None,
    baseline: str | os.PathLike | None = None,
    max_drop: float | None = None,
    op_pattern: str | None = None,
    mode: str | None = None,
    max_critical_comm_ms: float | None = None,
    min_speedup: float | None = None,
    **reading: Any,
) -> list[RuleResult]:
    """Run the ``domino-prof check`` gate on ``path``; return its rows when all hold.
    ``reading``: the fields of :class:`~domino_prof.engine.Reading` (one bundle, as the
    CLI builds it)."""
    outcome = run_check(
        path,
        min_hidden=min_hidden,
        phase=phase,
        max_exposed_ms=max_exposed_ms,
        baseline=baseline,
        max_drop=max_drop,
        op_pattern=op_pattern,
        mode=mode,
        reading=Reading(**reading),
        max_critical_comm_ms=max_critical_comm_ms,
        min_speedup=min_speedup,
    )
    if outcome.exit_code != 0:
        notes = "".join(f"\nnote: {n}" for n in outcome.notes)
        raise AssertionError(
            f"domino-prof overlap gate on {path}: {outcome.summary}\n"
            f"{format_table(outcome.results)}{notes}"
        )
    return outcome.results


try:  # the fixture exists only where pytest does (it is not a runtime dependency)
    import pytest
except ImportError:  # pragma: no cover
    pass
else:

    @pytest.fixture
    def overlap_gate():
        """The :func:`assert_overlap` function, as a fixture."""
        return assert_overlap
