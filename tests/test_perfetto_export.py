"""The Perfetto export (``-o FILE.pftrace``, ``domino_prof.export.perfetto``).

No registry package ships Perfetto's trace processor for offline use (the ``perfetto``
package downloads ``trace_processor_shell`` at first use), so each export is read back
with the published protos the package bundles (``perfetto.decode``) and checked against
Perfetto's TrackEvent rules: declared tracks, interned names, every end closing an open
slice on its track, nothing left open, and every slice coming back on its track as laid
out (a partial overlap on one track would come back cut). Skipped without the extra.
Builder times are µs; expected values are ns.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tracegen import TraceBuilder
from typer.testing import CliRunner

from domino_prof.export import perfetto as pf

pytestmark = pytest.mark.skipif(not pf.available(), reason="pip install 'domino-prof[perfetto]'")
DATA = Path(__file__).parent / "data" / "h200_llama3_3b_2layers_tp2"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
runner = CliRunner()


def _analyse(path, **kw):
    from domino_prof.engine import Reading

    return Reading(**kw).analyse(Path(path))


def _tracks(d: pf.Decoded) -> dict[tuple[str, str], list[int]]:
    """(process name, track name without its lane suffix) -> track uuids."""
    out: dict[tuple[str, str], list[int]] = {}
    for u, name in d.tracks.items():
        par = d.parents[u]
        base = name.split(" (overlap ")[0]
        out.setdefault((d.tracks[par] if par is not None else "", base), []).append(u)
    return out


def _on(d: pf.Decoded, proc: str, track: str) -> pd.DataFrame:
    uu = _tracks(d).get((proc, track), [])
    return d.slices.loc[d.slices["track"].isin(uu)]


def _assert_as_laid_out(lay, d: pf.Decoded) -> None:
    """Every slice of the layout comes back on its own track with its times and name."""
    want = pd.concat(lay.slices, ignore_index=True)[["track", "name", "start", "end"]]
    got = d.slices[["track", "name", "start", "end"]]
    key = ["track", "start", "end", "name"]
    a = want.astype({"name": str}).sort_values(key).reset_index(drop=True)
    b = got.astype({"name": str}).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, check_dtype=False)


def hand_trace(tmp_path) -> Path:
    """Rank 0: compute s7 [0,100) and [210,220), comm s13 [50,150) and [200,230), a
    memset s7 [300,305); step 1 [0,400); launches under fwd.layer_attn_0_batch_0
    (compute, first comm) and fwd.layer_mlp_0_batch_1 (second comm).
    -> stream 13 hidden: [50,100) and [210,220) = 2 slices, 60 µs;
       exposed: [100,150), [200,210), [220,230) = 3 slices, 70 µs."""
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 400)
    b.annotation("fwd.layer_attn_0_batch_0", 0.5, 2)
    b.annotation("fwd.layer_mlp_0_batch_1", 3, 2)
    b.kernel("gemm", stream=7, start=0, dur=100, launch=1)
    b.kernel(NCCL, stream=13, start=50, dur=100, launch=2)
    b.kernel(NCCL, stream=13, start=200, dur=30, launch=4)
    b.kernel("gemm2", stream=7, start=210, dur=10, launch=6)
    d = tmp_path / "trace"
    d.mkdir()
    b.write(d / "rank0.json")
    return d


def test_lanes_keep_each_track_nested():
    # sorted by (start, longest first): [0,10) [5,15) [6,8) [10,12) [14,20)
    s = np.array([0, 5, 6, 10, 14])
    e = np.array([10, 15, 8, 12, 20])
    # [5,15) crosses [0,10): lane 1; [6,8) nests in [0,10); [10,12) follows it;
    # [14,20) crosses [5,15) in lane 1 and follows [10,12) in lane 0
    assert pf.lanes(s, e).tolist() == [0, 1, 0, 0, 0]
    assert pf.lanes(np.array([0, 10]), np.array([10, 20])).tolist() == [0, 0]


def test_hand_trace_hidden_and_exposed_tracks(tmp_path):
    path = hand_trace(tmp_path)
    a = _analyse(path)
    row = a.by_stream.loc[a.by_stream["stream"] == 13].iloc[0]
    assert (row["hidden_ns"], row["exposed_ns"]) == (60_000, 70_000)
    lay = pf.layout({"": a}, host={"": pf.host_events(path)})
    data = pf.encode(lay)
    d = pf.decode(data)
    assert d.problems == []
    _assert_as_laid_out(lay, d)
    hid = _on(d, "rank 0", "GPU 0 stream 13 comm hidden")
    exp = _on(d, "rank 0", "GPU 0 stream 13 comm exposed")
    t0 = int(a.intervals["start"].min())  # the gemm at 0 µs
    assert sorted((hid["start"] - t0).tolist()) == [50_000, 210_000]
    assert (len(hid), int((hid["end"] - hid["start"]).sum())) == (2, 60_000)
    assert (len(exp), int((exp["end"] - exp["start"]).sum())) == (3, 70_000)
    # the stream track: every device interval, comm slices with their hidden/exposed ns
    s13 = _on(d, "rank 0", "GPU 0 stream 13")
    first = d.args[s13.index[np.argmin(s13["start"].to_numpy())]]
    assert (first["kind"], first["hidden_ns"], first["exposed_ns"]) == ("comm", 50_000, 50_000)
    assert first["op"] == "fwd.layer_attn_0_batch_0"
    # the step and the micro-batch ranges, named from the op names
    (step,) = _on(d, "rank 0", "steps").itertuples()
    assert step.name == "ProfilerStep#1" and (step.start - t0, step.end - t0) == (0, 230_000)
    (mb0,) = _on(d, "rank 0", "micro-batch 0").itertuples()
    assert (mb0.name, mb0.start - t0, mb0.end - t0) == ("fwd.layer_attn_0_batch_0", 0, 150_000)
    args = d.args[mb0.Index]
    assert (args["phase"], args["block"], args["layer"], args["batch"]) == ("fwd", "attn", 0, 0)
    assert args["op_comm_ns_all_steps"] == 100_000 and args["op_hidden_ns_all_steps"] == 50_000
    (mb1,) = _on(d, "rank 0", "micro-batch 1").itertuples()
    assert (mb1.name, mb1.start - t0, mb1.end - t0) == ("fwd.layer_mlp_0_batch_1", 200_000,
                                                         230_000)  # fmt: skip
    # host thread: the step, the annotations and the launch calls
    host = [n for (p, n) in _tracks(d) if p == "rank 0" and n.startswith("thread ")]
    assert host and "ProfilerStep#1" in set(_on(d, "rank 0", host[0])["name"])


def test_overlapping_kernels_on_one_stream_get_a_lane(tmp_path):
    """Kineto puts kernels that overlap on one stream (clock conversion): [0,10) and
    [8,20) on stream 7 would be mis-nested on one Perfetto track; the second goes to
    'GPU 0 stream 7 (overlap 1)', and both come back whole."""
    b = TraceBuilder(rank=0, world_size=1)
    b.step(1, 0, 50)
    b.kernel("k1", stream=7, start=0, dur=10, launch=1)
    b.kernel("k2", stream=7, start=8, dur=12, launch=2)
    b.kernel(NCCL, stream=13, start=5, dur=20, launch=3)
    d = tmp_path / "t"
    d.mkdir()
    b.write(d / "rank0.json")
    a = _analyse(d)
    lay = pf.layout({"": a})
    dec = pf.decode(pf.encode(lay))
    assert dec.problems == []
    _assert_as_laid_out(lay, dec)
    names = {n for (p, n) in _tracks(dec)}
    assert "GPU 0 stream 7" in names
    assert "GPU 0 stream 7 (overlap 1)" in dec.tracks.values()
    s7 = _on(dec, "rank 0", "GPU 0 stream 7")
    assert sorted((s7["end"] - s7["start"]).tolist()) == [10_000, 12_000]


def test_fixture_slices_equal_the_analysis(tmp_path):
    """The committed H200 trace (domino, rank 0): per stream, the hidden and exposed
    comm tracks hold the analysis' own pieces (timeline.split_hidden_exposed), and
    their totals are by_stream's hidden_ns / exposed_ns; every slice of every track
    comes back as laid out; the findings carry their numbers."""
    from domino_prof.analysis.timeline import split_hidden_exposed

    path = DATA / "domino" / "rank0.pt.trace.json.gz"
    a = _analyse(path)
    lay = pf.layout({"": a}, host={"": pf.host_events(path)})
    d = pf.decode(pf.encode(lay))
    assert d.problems == []
    _assert_as_laid_out(lay, d)
    pieces = split_hidden_exposed(a.intervals, reference=a.reference)
    n_checked = 0
    for row in a.by_stream.itertuples():
        label = f"GPU {row.device} stream {row.stream}"
        for part, total in (("hidden", row.hidden_ns), ("exposed", row.exposed_ns)):
            got = _on(d, "rank 0", f"{label} comm {part}")
            want = pieces.loc[(pieces["stream"] == row.stream)
                              & (pieces["part"] == f"comm_{part}")]  # fmt: skip
            assert len(got) == len(want)
            assert int((got["end"] - got["start"]).sum()) == total
            assert sorted(got["start"]) == sorted(want["start"])
            n_checked += len(got)
    assert n_checked == len(pieces.loc[pieces["part"] != "compute"]
                            .loc[lambda p: p["part"] != "memory"])  # fmt: skip
    assert n_checked > 100  # stream 17's all-reduces cut at many compute boundaries
    fi = _on(d, "rank 0", "findings")
    findings = [f for f in a.overheads.findings if f.where.rank == 0]
    assert len(fi) == len(findings) > 0
    got = sorted((d.args[i]["id"], d.args[i].get("est_gain_ms_per_step")) for i in fi.index)
    assert got == sorted((f.id, f.est_gain_ms_per_step) for f in findings)


def test_two_hosts_are_drawn_on_the_aligned_clock(tmp_path):
    """test_ranks' three ranks, rank 2 on host-b whose clock reads 1000 µs ahead: the
    export shows rank 2's kernels 1000 µs earlier than in its file, and says so."""
    import json

    from test_ranks import rank_doc

    d = tmp_path / "t"
    d.mkdir()
    for r in range(3):
        (d / f"rank{r}.json").write_text(json.dumps(rank_doc(r, with_seq=True, hosts=True)))
    a = _analyse(d)
    dec = pf.decode(pf.perfetto_trace(a))
    assert dec.problems == []
    procs = {n for u, n in dec.tracks.items() if dec.parents[u] is None}
    assert "rank 2 · host-b · clock -1.000 ms" in procs
    iv2 = a.intervals.loc[a.intervals["rank"] == 2]
    s = _on(dec, "rank 2 · host-b · clock -1.000 ms", "GPU 0 stream 13")
    assert sorted(s["start"]) == sorted(iv2["start"] - 1_000_000)


def test_cli_analyze_and_report_write_a_pftrace(tmp_path):
    from domino_prof.cli import app

    path = hand_trace(tmp_path)
    out = tmp_path / "a.pftrace"
    r = runner.invoke(app, ["analyze", str(path), "-o", str(out), "-o", str(tmp_path / "a.json")])
    assert r.exit_code == 0, r.output
    d = pf.decode(out.read_bytes())
    assert d.problems == [] and "GPU 0 stream 13 comm exposed" in d.tracks.values()
    assert (tmp_path / "a.json").exists()
    out2 = tmp_path / "r.pftrace"
    r = runner.invoke(app, ["report", str(path), "-o", str(out2)])
    assert r.exit_code == 0, r.output
    assert pf.decode(out2.read_bytes()).slices.shape == d.slices.shape


def test_cli_without_the_extra_is_one_line_and_no_file(tmp_path, monkeypatch):
    from domino_prof.cli import app

    def missing():
        raise pf.ConfigError(f"a .pftrace output needs the perfetto package (perfetto is "
                             f"missing); {pf.INSTALL_HINT}")  # fmt: skip

    monkeypatch.setattr(pf, "require", missing)
    path = hand_trace(tmp_path)
    for cmd in ("analyze", "report"):
        out = tmp_path / f"{cmd}.pftrace"
        r = runner.invoke(app, [cmd, str(path), "-o", str(out)])
        assert r.exit_code == 2
        lines = [x for x in r.output.splitlines() if x.startswith("domino-prof: error:")]
        assert lines == [
            "domino-prof: error: a .pftrace output needs the perfetto package (perfetto is "
            "missing); pip install 'domino-prof[perfetto]'"
        ]
        assert not out.exists() and list(tmp_path.glob("*.pftrace*")) == []


def test_run_directory_exports_one_per_mode(tmp_path):
    """write_run_exports (for runs.py): RUN_DIR/<mode>/trace.pftrace for each analysed
    mode, a mode without intervals (not analysed) left out."""
    path = hand_trace(tmp_path)
    a = _analyse(path)
    run = tmp_path / "run"
    (run / "domino").mkdir(parents=True)
    (run / "tp").mkdir()
    written = pf.write_run_exports(run, {"domino": a, "tp": object()},
                                   {"domino": path, "tp": path})  # fmt: skip
    assert written == [run / "domino" / "trace.pftrace"]
    d = pf.decode(written[0].read_bytes())
    assert d.problems == [] and "rank 0" in d.tracks.values()
    assert not (run / "tp" / "trace.pftrace").exists()
