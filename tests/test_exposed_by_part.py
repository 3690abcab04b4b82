"""benchmarks/exposed_by_part.py: exposed comm per slice of a step, by hand."""

from __future__ import annotations

import numpy as np
import pytest
import script_module


def _mod():
    return script_module.load("benchmarks/exposed_by_part.py")


def test_exposed_comm_per_slice_by_hand():
    m = _mod()
    a = lambda *x: np.array(x, dtype=float)  # noqa: E731
    # step [0, 100), 4 slices of 25. comm [10, 40) and [30, 60) (union [10, 60)) and
    # [80, 90); compute [0, 20), [50, 85) and [15, 55) (union [0, 85)).
    # comm outside compute: [85, 90) only -> slice 3 holds 5, the others 0
    comm = (a(10, 30, 80), a(40, 60, 90))
    comp = (a(0, 50, 15), a(20, 85, 55))
    assert m.exposed_by_part(comm, comp, (0.0, 100.0), 4) == [0.0, 0.0, 0.0, 5.0]
    # compute only [0, 20): comm [20, 60) and [80, 90) exposed: slices [25-20... by hand:
    # slice 0 [0,25): 5, slice 1 [25,50): 25, slice 2 [50,75): 10, slice 3 [75,100): 10
    assert m.exposed_by_part(comm, (a(0), a(20)), (0.0, 100.0), 4) == [5.0, 25.0, 10.0, 10.0]
    # no compute at all: every comm interval exposed, once (the union)
    assert sum(m.exposed_by_part(comm, (a(), a()), (0.0, 100.0), 10)) == pytest.approx(60.0)
