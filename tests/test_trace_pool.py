"""Discovery and the pool (domino_prof.trace.pool): which files of a directory are
traces, a process pool that gives what one process gives, the progress bar.

Expected values are worked by hand from the tiny traces built here (arithmetic in
comments) or computed independently with the stdlib ``json`` + ``Decimal`` (moved from
tests/test_loader.py, unchanged).
"""

from __future__ import annotations

import pandas as pd
from trace_checks import (
    small_trace,
)

from domino_prof.trace import load_trace


def test_pool_matches_in_process(tmp_path):
    for r in range(3):
        small_trace(rank=r, world_size=3).write(tmp_path / f"rank{r}.json")
    serial = load_trace(tmp_path, workers=1)
    pooled = load_trace(tmp_path, workers=2)
    pd.testing.assert_frame_equal(serial.events, pooled.events)
    assert serial.ranks == pooled.ranks


def test_plain_json_directory_skips_own_outputs(tmp_path):
    small_trace(rank=0).write(tmp_path / "r0.json")
    (tmp_path / "deep" / "er").mkdir(parents=True)
    small_trace(rank=1).write(tmp_path / "deep" / "er" / "r1.json.gz")
    (tmp_path / "analysis.json").write_text("{}")
    (tmp_path / "run.json").write_text("{}")
    assert load_trace(tmp_path).rank_ids == [0, 1]


def test_progress_off_prints_nothing_and_on_works(tmp_path, capfd):
    p = small_trace().write(tmp_path / "rank0.json")
    load_trace(p, progress=False)
    load_trace(p)  # small: silent by default
    assert capfd.readouterr().err == ""
    assert len(load_trace(p, progress=True).events) == 6


def test_other_json_beside_kineto_files_is_named_not_silently_dropped(tmp_path):
    from tracegen import TraceBuilder

    from domino_prof.trace import load_trace

    TraceBuilder(rank=0, world_size=1).write(tmp_path / "rank0.pt.trace.json")
    (tmp_path / "notes.json").write_text("{}")
    (tmp_path / "run.json").write_text("{}")  # our own output: not a trace, not reported
    t = load_trace(tmp_path, progress=False)
    assert t.rank_ids == [0]
    assert t.skipped == [
        (str(tmp_path / "notes.json"),
         "not read: only *.pt.trace.json(.gz) files are taken when any exist")]  # fmt: skip


# ------------------------------------------------------------------ Forked
def _in_child(parent: int) -> bool:
    import os

    return os.getpid() != parent


def test_forked_returns_the_value_computed_in_the_child():
    import os

    from domino_prof.trace.pool import Forked

    parent = os.getpid()
    big = list(range(100_000))  # inherited, never sent
    f = Forked(lambda: (os.getpid(), sum(big)))
    pid, total = f.result()
    assert pid != parent and total == 4_999_950_000


def test_forked_falls_back_to_the_caller_when_the_child_cannot_answer():
    """A child that dies, a value that does not pickle, an exception: the caller
    computes fn() itself, so the value (or the exception) is a serial call's."""
    import os

    import pytest

    from domino_prof.trace.pool import Forked

    parent = os.getpid()

    def dies():
        if _in_child(parent):
            os._exit(3)
        return "computed here"

    assert Forked(dies).result() == "computed here"

    def unpicklable():
        return (os.getpid(), lambda: None)

    pid, fn = Forked(unpicklable).result()
    assert pid == parent and callable(fn)  # computed again, in the caller

    calls = []

    def raises():
        calls.append(os.getpid())
        raise ValueError("the same error")

    with pytest.raises(ValueError, match="the same error"):
        Forked(raises).result()
    assert calls == [parent]  # the child's call is in the child's memory only
