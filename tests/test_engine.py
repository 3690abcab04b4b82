"""Per-rank map, cross-rank reduce (``domino_prof/engine.py``).

The local process pool and a Dask cluster (a ``LocalCluster`` of 2 worker processes)
give the same JSON document, byte for byte, as ``engine.analyze`` of the loaded trace
(one pass over all ranks in memory), cross-rank section included; a rank file that
cannot be read or analysed is named, and skipped with ``skip_bad``.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest
from tracegen import TraceBuilder
from typer.testing import CliRunner

from domino_prof.analysis import AnalysisConfig
from domino_prof.analysis.document import encode, read_document, table
from domino_prof.cli import app
from domino_prof.engine import analyse_path, analyze
from domino_prof.errors import TraceError
from domino_prof.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from tile_trace import write_ranks

CFG = AnalysisConfig()


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> Path:
    """The committed H200 trace as 4 ranks (2 TP pairs) of 2 steps each."""
    d = tmp_path_factory.mktemp("four") / "traces"
    write_ranks(d, tiles=2, ranks=4, gz=True)
    return d


def one_pass(path: Path, **kw) -> bytes:
    return encode(analyze(load_trace(path, **kw), CFG).to_json())


@pytest.fixture(scope="module")
def four_ranks_one_pass(four_ranks):
    """``engine.analyze`` of ``four_ranks`` loaded whole, once for the module's tests that
    compare against it (each had made its own: the same Analysis of the same files)."""
    return analyze(load_trace(four_ranks), CFG)


@pytest.fixture(scope="module")
def four_ranks_doc(four_ranks_one_pass) -> bytes:
    """``one_pass(four_ranks)``: the document every way of analysing the four ranks must
    give, byte for byte."""
    return encode(four_ranks_one_pass.to_json())


@pytest.fixture(scope="module")
def four_ranks_pool(four_ranks):
    """``analyse_path`` of the four ranks on the local pool (2 processes), once: the
    pool's own test and the Dask test (its local reference) both read it."""
    return analyse_path(four_ranks, CFG, workers=2, keep_intervals=False)


def test_pool_gives_the_one_pass_document(four_ranks_pool, four_ranks_doc):
    want = four_ranks_doc
    a = four_ranks_pool
    assert a.intervals is None  # only the per-rank results crossed
    assert encode(a.to_json()) == want
    doc = json.loads(want)
    ar = doc["overheads"]["across_ranks"]
    assert ar["computed"] and ar["n_ranks"] == 4 and ar["n_instances"] == 2 * 2 * 24
    assert doc["by_rank"]["rank"] == [0, 1, 2, 3]


def test_a_rank_without_device_work_is_analysed_in_the_trace_s_mode(tmp_path):
    # rank 1 has only CPU ops: on its own no mode, in this GPU trace an empty rank
    b = TraceBuilder(rank=0, world_size=2)
    b.step(1, 0, 100)
    b.kernel("gemm", stream=7, start=0, dur=40, launch=1)
    b.kernel("ncclDevKernel_AllReduce", stream=13, start=20, dur=40, launch=2)
    b.write(tmp_path / "rank0.json")
    c = TraceBuilder(rank=1, world_size=2)
    c.step(1, 0, 100)
    c.cpu("aten::mm", 1, 10)
    c.write(tmp_path / "rank1.json")
    a = analyse_path(tmp_path, CFG, workers=1, keep_intervals=False)
    assert encode(a.to_json()) == one_pass(tmp_path)
    assert a.by_rank["comm_ns"].tolist() == [40_000, 0]


def test_a_rank_that_fails_its_analysis_is_named(tmp_path, monkeypatch):
    from domino_prof.analysis import rankwise

    for r in (0, 1):
        b = TraceBuilder(rank=r, world_size=2)
        b.step(1, 0, 100)
        b.kernel("ncclDevKernel_AllReduce", stream=13, start=20, dur=40, launch=2)
        b.write(tmp_path / f"rank{r}.json")
    real = rankwise.analyze_rank

    def flaky(trace, config, *, rank, **kw):
        if rank == 1:
            raise RuntimeError("boom")
        return real(trace, config, rank=rank, **kw)

    monkeypatch.setattr(rankwise, "analyze_rank", flaky)
    with pytest.raises(TraceError) as e:
        analyse_path(tmp_path, CFG, workers=1)
    assert str(e.value).startswith(f"{tmp_path / 'rank1.json'}: analysis failed (RuntimeError")
    a = analyse_path(tmp_path, CFG, workers=1, skip_bad=True)
    assert a.ranks == [0]
    assert any(str(tmp_path / "rank1.json") in n and n.topic == "skipped" for n in a.notes)


# --------------------------------------------------------------------------- Dask
@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    import logging

    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
        silence_logs=logging.ERROR, death_timeout=60,
    ) as c:  # fmt: skip
        yield c


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_dask_gives_the_local_document(cluster, four_ranks, four_ranks_pool, four_ranks_doc):
    local = four_ranks_pool
    on_dask = analyse_path(four_ranks, CFG, scheduler=cluster.scheduler_address,
                           keep_intervals=False)  # fmt: skip
    assert encode(on_dask.to_json()) == encode(local.to_json()) == four_ranks_doc
    assert on_dask.overheads.across_ranks.computed


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_dask_names_a_bad_rank_file(cluster, four_ranks, tmp_path):
    d = tmp_path / "traces"
    shutil.copytree(four_ranks, d)
    bad = d / "rank2.pt.trace.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [')[:40])  # truncated gzip
    with pytest.raises(TraceError) as e:
        analyse_path(d, CFG, scheduler=cluster.scheduler_address)
    assert str(e.value).startswith(str(bad)) and "--skip-bad" in str(e.value)
    skipped = analyse_path(d, CFG, scheduler=cluster.scheduler_address, skip_bad=True,
                           keep_intervals=False)  # fmt: skip
    assert skipped.ranks == [0, 1, 3]
    assert any(n.topic == "skipped" and str(bad) in n for n in skipped.notes)
    local = analyse_path(d, CFG, workers=2, skip_bad=True, keep_intervals=False)
    assert encode(skipped.to_json()) == encode(local.to_json())


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_cli_scheduler_local(four_ranks, four_ranks_doc):
    pytest.importorskip("distributed")
    runner = CliRunner()
    r = runner.invoke(app, ["analyze", str(four_ranks), "--scheduler", "local", "-o", "-"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == json.loads(four_ranks_doc)


@pytest.mark.parametrize("address", ["bogus", "tcp://127.0.0.1:1"])
def test_a_scheduler_that_cannot_be_reached_is_one_line(address, four_ranks):
    """Not an address (was a traceback), or nothing listening: one line, exit 2, and
    quickly (the connect timeout is 10 s by default; 1 s here)."""
    pytest.importorskip("distributed")
    from domino_prof.engine import dask_map
    from domino_prof.errors import ConfigError

    files = sorted(four_ranks.glob("*.json.gz"))
    with pytest.raises(ConfigError, match=r"cannot reach the Dask scheduler .*'local'"):
        dask_map(len, files, scheduler=address, progress=False, timeout_s=1.0)
    if address == "bogus":
        r = CliRunner().invoke(app, ["analyze", str(four_ranks), "--scheduler", address])
        assert r.exit_code == 2, r.output
        assert "--scheduler bogus: cannot reach the Dask scheduler" in r.output
        assert "Traceback" not in r.output


# --------------------------------------------------------------------------- document
def test_document_v2_is_json_and_reads_as_frames(four_ranks_one_pass):
    a = four_ranks_one_pass
    doc = json.loads(encode(a.to_json()))  # the stdlib reads msgspec's output
    assert doc == json.loads(json.dumps(a.to_json(), allow_nan=False))
    assert read_document(doc)["version"] == 2
    by_op = table(doc, "by_op")
    assert by_op[["rank", "op", "comm_ns", "hidden_ns"]].to_dict("records") == a.by_op[
        ["rank", "op", "comm_ns", "hidden_ns"]
    ].to_dict("records")
    assert len(table(doc, "by_collective")) == len(a.by_collective) == 4 * 2 * 24


def test_committed_v1_documents_still_read():
    path = ROOT / "reports" / "h200x2-llama3-3b-tp2-seq4096" / "domino" / "analysis.json"
    doc = read_document(path)
    assert doc["version"] == 1
    by_rank = table(doc, "by_rank")
    assert by_rank["rank"].tolist() == [0, 1]
    assert by_rank["comm_ns"].tolist() == [458_740_321, 368_627_248]
    assert by_rank["hidden_pct"].tolist() == [43.95341738447273, 49.84003027361667]
    assert set(table(doc, "by_collective").columns) >= {"rank", "name", "comm_ns", "hidden_ns"}
    with pytest.raises(ValueError, match="version 3 is not supported"):
        read_document({**doc, "version": 3})


def _uneven_ranks(tmp_path) -> Path:
    """Two GPU rank files of unequal replay graphs: the committed domino run's rank 0
    (1597 nodes: device intervals + top-level host calls) and the tp run's rank 1
    (1009 nodes); 2606 in all."""
    fix = ROOT / "tests" / "data" / "h200_llama3_3b_2layers_tp2"
    d = tmp_path / "uneven"
    d.mkdir()
    shutil.copy(fix / "domino" / "rank0.pt.trace.json.gz", d / "rank0.pt.trace.json.gz")
    shutil.copy(fix / "tp" / "rank1.pt.trace.json.gz", d / "rank1.pt.trace.json.gz")
    return d


@pytest.mark.parametrize("limit, replayed", [(2606, True), (2605, False)])
def test_graph_cap_gives_the_uncapped_what_if(tmp_path, monkeypatch, limit, replayed):
    """A rank job of 2 builds its replay graph only up to half of REPLAY_MAX_NODES
    (replay.graph_cap). With the limit at 2606 the two graphs fit together: rank 0
    (1597 > 2606 // 2 = 1303) is analysed again with its graph built, and the what-if is
    the one computed with every graph built; at 2605 they do not fit, nothing is
    analysed again, and the document (its "not replayed" reason included) is again the
    uncapped one."""
    import domino_prof.analysis.replay as rp
    import domino_prof.engine as eng

    d = _uneven_ranks(tmp_path)
    jobs = []
    real_job = eng.rank_job

    def counting(path_s, nproc=1, **kw):
        jobs.append((Path(path_s).name, kw.get("graph_nodes")))
        return real_job(path_s, nproc, **kw)

    monkeypatch.setattr(eng, "rank_job", counting)
    monkeypatch.setattr(rp, "REPLAY_MAX_NODES", limit)
    capped = analyse_path(d, CFG, workers=1, keep_intervals=False).to_json()
    assert jobs[:2] == [("rank0.pt.trace.json.gz", limit // 2),
                        ("rank1.pt.trace.json.gz", limit // 2)]  # fmt: skip
    assert jobs[2:] == ([("rank0.pt.trace.json.gz", None)] if replayed else [])
    whatif = capped["overheads"]["whatif"]
    assert whatif["computed"] is replayed
    if replayed:
        assert whatif["n_nodes"] == 2606
    else:
        assert whatif["reason"].startswith(f"not replayed: 2606 nodes exceed the {limit} ")
    jobs.clear()
    monkeypatch.setattr(rp, "graph_cap", lambda n_ranks: limit)  # every graph built
    uncapped = analyse_path(d, CFG, workers=1, keep_intervals=False).to_json()
    assert [j[1] for j in jobs] == [limit, limit]
    assert encode(capped) == encode(uncapped)



def test_overlap_tax_is_given_without_the_replay(tmp_path, monkeypatch):
    """The overlap tax is measured on the intervals: a trace over the replay's node limit
    (what-if not computed) carries the same overlap tax as with the step replayed, and
    the CLI prints its line."""
    import domino_prof.analysis.replay as rp
    from domino_prof.commands._findings import whatif_renderables

    d = _uneven_ranks(tmp_path)
    docs = {}
    for limit in (2605, 2606):
        monkeypatch.setattr(rp, "REPLAY_MAX_NODES", limit)
        docs[limit] = analyse_path(d, CFG, workers=1, keep_intervals=False).to_json()
    over, replayed = docs[2605]["overheads"]["whatif"], docs[2606]["overheads"]["whatif"]
    assert over["computed"] is False and replayed["computed"] is True
    assert over["overlap_tax"] == replayed["overlap_tax"]
    assert over["overlap_tax"]["n_classes"] > 0  # domino's rank 0 overlaps compute and comm
    lines = whatif_renderables(docs[2605]["overheads"])
    assert len(lines) == 1 and lines[0].startswith("overlap tax: compute runs ")


def test_one_big_rank_beside_itself_gives_the_serial_document(tmp_path, monkeypatch):
    """One file analysed with 2 processes: the launch and switch parts in a forked child
    (rankwise.PARALLEL_INTERVALS lowered so that the committed rank qualifies) give
    the document of the serial analysis, byte for byte."""
    import domino_prof.analysis.rankwise as rw
    import domino_prof.trace.pool as pool

    f = _uneven_ranks(tmp_path) / "rank0.pt.trace.json.gz"
    serial = encode(analyse_path(f, CFG, workers=1, keep_intervals=False).to_json())
    forks = []

    class Spy(pool.Forked):
        def __init__(self, fn):
            super().__init__(fn)
            forks.append(self.proc is not None)

    monkeypatch.setattr(rw, "PARALLEL_INTERVALS", 0)
    monkeypatch.setattr(pool, "Forked", Spy)
    beside = encode(analyse_path(f, CFG, workers=2, keep_intervals=False).to_json())
    assert forks == [True]
    assert beside == serial


def test_a_rank_that_fails_when_analysed_again_is_raised_or_skipped(monkeypatch):
    """``engine._rerun`` (the mode redo and the graph redo of ``analyse_path``): the
    ranks named are analysed again in place; one that now fails raises its own error,
    or, given a ``skipped`` list (``--skip-bad`` on a directory), is noted there and
    left out, the others kept in order."""
    from domino_prof import engine
    from domino_prof.trace.read import FileError

    monkeypatch.setattr(engine, "_map", lambda job, paths, **_: [job(p) for p in paths])

    class R:  # a rank result as the redo sees it: its path is meta.path
        def __init__(self, path, tag):
            self.meta, self.tag = type("M", (), {"path": path})(), tag

    good = [R("a.json", 0), R("b.json", 0), R("c.json", 0)]

    def job(p):
        return FileError(str(p), "truncated JSON", "re-export") if p.name == "b.json" else (
            R(str(p), 1))  # fmt: skip

    with pytest.raises(TraceError, match=r"b\.json.*truncated JSON"):
        engine._rerun(good, [1, 2], job, skipped=None)
    skipped: list = []
    out = engine._rerun(good, [1, 2], job, skipped=skipped)
    assert [(r.meta.path, r.tag) for r in out] == [("a.json", 0), ("c.json", 1)]
    assert skipped == [("b.json", "truncated JSON")]
    assert [r.tag for r in good] == [0, 0, 0]  # the list given is left as it was
