import os
import sys
from pathlib import Path

import pytest

# tests/ holds shared builders (tracegen.py); make them importable as plain modules.
sys.path.insert(0, str(Path(__file__).parent))

# An xdist worker (scripts/test.sh -n 2) shares the cores with the other worker: one
# OpenMP thread for its in-process torch work, as every rank process has (the launcher,
# tests/gloo_job.py); two threads spinning against the other worker's processes only
# slow both down. Set before any test module imports torch.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# ---- scheduling under pytest-xdist (scripts/test.sh: -n 2 --dist loadgroup) ----------
# Which tests share a worker, and in which order the units are handed out. Nothing here
# changes what a test does or asserts; a plain (serial) run is left as collected.
#
# * Every test that starts rank processes (gloo jobs, `domino-prof run`, torchrun, the
#   Dask cluster) is in ONE unit, "ranks", handed out LAST: one worker runs them one
#   after the other once the in-process tests are done, i.e. as in a serial run, alone
#   on the cores. A gloo job needs every rank on a core at each collective: beside other
#   work it slows down far more than that work gains (the two gloo_cases jobs side by
#   side: 117 s against 46 s one after the other), and its timing tests (a hung rank,
#   Ctrl-C, a rank 100 ms late) are safest alone.
# * Every other module is one unit (one worker runs all of it), so that its
#   module-scoped fixtures (a Chromium, decoded traces, an emulated run) are built once.
#   These run on both workers; the longest go first (measured), so that the two
#   workers finish the in-process part at about the same time.
_RANK_MODULES = {
    "test_run_cli",  # `domino-prof run`: 2 and 8 ranks, torchrun, crash, hang, Ctrl-C
    "test_reference_model",  # tests/gloo_cases.py's jobs (2 and 4 ranks; cached per
    "test_schedules",  # process: one worker must run both modules' tests)
    "test_domino_splits",  # gloo_cases' 2-rank job too
    "test_tune",  # `domino-prof tune`: two candidate runs of 2 ranks
    "test_schedule_extension",  # a 2-rank mp.spawn job
    "test_gloo_trace",  # a 2-rank gloo job (tests/gloo_job.py)
    "test_dask_processes",  # a scheduler and two worker processes, one of them killed
    "test_device_image",  # `run --no-analyze`, 2 ranks, without msgspec / plotly
}
_LONG_FIRST = [  # in-process modules of ~10-40 s on the shared 2-core box, longest first;
    # the many short ones follow (collection order), so both workers end together
    "test_front_door",
    "test_check_cli",
    "test_report_browser",
    "test_output_errors",
    "test_user_mistakes_cli",
    "test_emulate_run",
    "test_rank_and_skip_bad_options",
    "test_engine",
    "test_compile_counts",  # ~9 s alone: Dynamo (aot_eager) over three schedules
    "test_decode_columns",
    "test_trace_units_and_forms",
    "test_readme",
    "test_check_ci",
    "test_launcher",
]


def _unit(item: pytest.Item) -> str:
    module = item.path.stem
    # test_trace_decode / test_ranks: their one real gloo job each (tests/gloo_job.py)
    if module in _RANK_MODULES or "real_gloo" in item.name:
        return "ranks"
    return module


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):
        return  # not an xdist worker of --dist loadgroup (xdist sets it on its workers)
    units = {item: _unit(item) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(units[item]))
    rank = {u: i for i, u in enumerate(_LONG_FIRST)}
    last = len(rank) + 1
    order = {item: i for i, item in enumerate(items)}
    items.sort(
        key=lambda it: (last if units[it] == "ranks" else rank.get(units[it], len(rank)), order[it])
    )


def pytest_configure(config: pytest.Config) -> None:
    """Stop a --dist loadgroup run whose xdist cannot group (before any test runs, in the
    controller: one line). xdist 3.8 passes an item's group to its scheduler by renaming
    the item through the ``_nodeid`` field ("...::test@ranks"); pytest 9.2's structured
    node ids no longer read it (pytest-dev/pytest-xdist#1386), so every group above is
    silently dropped and the rank-process tests run on both workers at once. pyproject's
    test extra pins pytest below 9.2."""
    if os.environ.get("PYTEST_XDIST_WORKER") or config.getoption("dist", "no") != "loadgroup":
        return
    import xdist
    from packaging.version import Version  # pytest's own dependency

    # release segments: a 9.2 pre-release (9.2.0rc1) counts as 9.2
    pytest_v, xdist_v = Version(pytest.__version__).release, Version(xdist.__version__).release
    if pytest_v >= (9, 2) and xdist_v <= (3, 8, 0):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} with pytest-xdist {xdist.__version__} ignores "
            "--dist loadgroup's groups (pytest-dev/pytest-xdist#1386): install the test "
            "extra's pytest (pip install -e '.[test]', pytest<9.2)"
        )
