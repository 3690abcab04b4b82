"""load_trace (domino_prof.trace.loader): directories of ranks, the rank of a file,
duplicate ranks, --skip-bad.

Expected values are worked by hand from the tiny traces built here (arithmetic in
comments) or computed independently with the stdlib ``json`` + ``Decimal`` (moved from
tests/test_loader.py, unchanged).
"""

from __future__ import annotations

import pytest
from trace_checks import (
    _bad,
    assert_schema,
    small_trace,
)

from domino_prof.errors import ConfigError, TraceError
from domino_prof.trace import load_trace


def test_directory_of_ranks_json_and_gz(tmp_path):
    small_trace(rank=0).write(tmp_path / "rank0.pt.trace.json")
    b1 = small_trace(rank=1)
    b1.kernel("late_kernel", stream=7, start=5, dur=1)  # sorts before the gemm on rank 1
    b1.write(tmp_path / "rank1.pt.trace.json.gz")
    t = load_trace(tmp_path)
    assert_schema(t.events)
    assert t.rank_ids == [0, 1]
    assert t.events["rank"].tolist() == [0] * 6 + [1] * 7
    r1 = t.events[t.events["rank"] == 1]
    # rank 1 order by ts (µs): step 0, annot 1, launch 2, launch 3, late_kernel 5, gemm 10.001, nccl 15
    assert r1["name"].astype(str).tolist() == [
        "ProfilerStep#1", "fwd.layer_attn_0_batch_0", "cudaLaunchKernel", "cudaLaunchKernel",
        "late_kernel", "sm90_gemm", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
    ]  # fmt: skip
    assert t.ranks[1].path.endswith("rank1.pt.trace.json.gz")
    # categories are the union over ranks
    assert "late_kernel" in t.events["name"].cat.categories


def test_nested_run_directory_duplicate_ranks_then_one_mode(tmp_path):
    run = tmp_path / "run"
    for mode in ("tp", "domino"):
        (run / mode).mkdir(parents=True)
        for r in range(2):
            small_trace(rank=r).write(run / mode / f"rank{r}.pt.trace.json.gz")
    (run / "run.json").write_text('{"schema": "domino-prof/run"}')
    (run / "tp" / "analysis.json").write_text('{"schema": "domino-prof/analysis"}')
    with pytest.raises(TraceError) as e:
        load_trace(run)
    msg = str(e.value)
    assert "two files claim rank 0" in msg
    assert str(run / "domino" / "rank0.pt.trace.json.gz") in msg
    assert str(run / "tp" / "rank0.pt.trace.json.gz") in msg
    assert "subdirectory" in msg
    t = load_trace(run / "tp")  # analysis.json beside the traces is not a trace
    assert t.rank_ids == [0, 1] and t.skipped == []


@pytest.mark.parametrize("name,rank", [("rank3.json", 3), ("trace_rank-3.json", 3),
                                       ("worker.rank_12.pt.trace.json", 12)])  # fmt: skip
def test_rank_from_file_name(tmp_path, name, rank):
    small_trace(include_dist_info=False).write(tmp_path / name)
    t = load_trace(tmp_path / name)
    assert t.rank_ids == [rank] and set(t.events["rank"]) == {rank}


def test_rank_argument_for_single_file(tmp_path):
    p = small_trace(include_dist_info=False).write(tmp_path / "trace.json")
    assert load_trace(p, rank=4).rank_ids == [4]
    # the file's own rank must agree with the argument
    q = small_trace(rank=1).write(tmp_path / "other.json")
    with pytest.raises(TraceError, match="distributedInfo.rank is 1 but rank=2"):
        load_trace(q, rank=2)
    assert load_trace(q, rank=1).rank_ids == [1]
    with pytest.raises(ConfigError, match="single trace file"):
        load_trace(tmp_path, rank=1)


@pytest.mark.parametrize("name", ["trace.json", "rank1_rank2.json", "ranking.json"])
def test_missing_rank_is_an_error(tmp_path, name):
    p = small_trace(include_dist_info=False).write(tmp_path / name)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    msg = str(e.value)
    assert str(p) in msg and "no distributedInfo.rank" in msg and "rank=N" in msg


def test_directory_without_traces(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "analysis.json").write_text("{}")
    with pytest.raises(TraceError) as e:
        load_trace(tmp_path)
    assert str(tmp_path) in str(e.value) and "no trace files" in str(e.value)


def test_bad_file_in_directory_names_it_and_suggests_skip_bad(tmp_path):
    small_trace(rank=1).write(tmp_path / "rank1.json")
    bad = _bad(tmp_path, "truncated_gz")
    with pytest.raises(TraceError) as e:
        load_trace(tmp_path)
    assert str(e.value).startswith(f"{bad}: truncated gzip") and "--skip-bad" in str(e.value)


def test_skip_bad_keeps_good_ranks(tmp_path):
    small_trace(rank=1).write(tmp_path / "rank1.json")
    bad = _bad(tmp_path, "invalid_json")
    empty = tmp_path / "rank2.json"
    empty.write_bytes(b"")
    t = load_trace(tmp_path, skip_bad=True)
    assert t.rank_ids == [1] and len(t.events) == 6
    assert sorted(t.skipped) == sorted([
        (str(bad), "invalid JSON at byte 21 (line 1): object keys must be strings"),
        (str(empty), "empty file"),
    ])  # fmt: skip


def test_skip_bad_with_nothing_good_left(tmp_path):
    _bad(tmp_path, "empty")
    with pytest.raises(TraceError, match="no loadable trace file .1 bad; first: .*empty file"):
        load_trace(tmp_path, skip_bad=True)


def test_duplicate_ranks_not_skipped(tmp_path):
    small_trace(rank=0).write(tmp_path / "a.json")
    small_trace(rank=0).write(tmp_path / "b.json")
    with pytest.raises(TraceError, match="two files claim rank 0: .*a.json and .*b.json"):
        load_trace(tmp_path, skip_bad=True)


def test_one_file_frame_shares_its_columns_and_two_files_are_concatenated(tmp_path):
    """assemble_events: one rank file's int columns go into the frame as they are (no
    second copy of every column while both exist); two files' are concatenated."""
    import numpy as np

    from domino_prof.trace.loader import assemble_events
    from domino_prof.trace.parse import parse_or_error

    small_trace(rank=0).write(tmp_path / "rank0.pt.trace.json")
    small_trace(rank=1).write(tmp_path / "rank1.pt.trace.json")
    p0 = parse_or_error(str(tmp_path / "rank0.pt.trace.json"), 1, rank=None)
    p1 = parse_or_error(str(tmp_path / "rank1.pt.trace.json"), 1, rank=None)
    one = assemble_events([p0])
    for col in ("ts", "dur", "correlation", "stream"):
        assert np.shares_memory(one[col].to_numpy(), p0.ints[col]), col
    both = assemble_events([p1, p0])  # rank order whatever the list's order
    assert both["rank"].tolist() == [0] * p0.n + [1] * p1.n
    for col in ("ts", "dur", "correlation"):
        assert both[col].tolist() == p0.ints[col].tolist() + p1.ints[col].tolist()
        assert not np.shares_memory(both[col].to_numpy(), p0.ints[col])
    assert one["ts"].tolist() == p0.ints["ts"].tolist()


def test_several_bad_files_name_the_first_with_its_problem_and_the_next_ones(tmp_path):
    """Several bad files (e.g. every task a dying Dask worker held): the error is the
    first's, and names the next three; more than that ends in '...'."""
    from domino_prof.trace.loader import MORE_NAMED, sort_results
    from domino_prof.trace.read import FileError

    bad = [FileError(str(tmp_path / f"rank{i}.json"), f"problem {i}", "fix it")
           for i in range(6)]  # fmt: skip
    r = [str(tmp_path / f"rank{i}.json") for i in range(6)]
    with pytest.raises(TraceError) as e:
        sort_results(tmp_path, [], bad[:3], is_dir=True, skip_bad=False)
    assert str(e.value) == (f"{r[0]}: problem 0 (and 2 more bad: {r[1]}, {r[2]}); fix it "
                            "(or use --skip-bad to skip bad files)")  # fmt: skip
    assert MORE_NAMED == 3
    with pytest.raises(TraceError) as e:
        sort_results(tmp_path, [], bad, is_dir=False, skip_bad=False)
    assert str(e.value) == (f"{r[0]}: problem 0 (and 5 more bad: {r[1]}, {r[2]}, {r[3]}, "
                            "...); fix it")  # fmt: skip
    with pytest.raises(TraceError) as e:  # one bad file: as before
        sort_results(tmp_path, [], bad[:1], is_dir=False, skip_bad=False)
    assert str(e.value) == f"{r[0]}: problem 0; fix it"
