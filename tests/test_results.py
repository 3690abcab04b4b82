"""Typed overhead results and notes (analysis.results): frozen dataclasses that the
findings and the report read by attribute, whose JSON form is the document's, and
notes that carry a topic so nobody parses their wording.

The trace is tests/test_launches.py's: one rank, host-bound launches (23 µs of device
idle waiting for the host per step, analysed exactly there)."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
from test_launches import launch_rank
from tracegen import TraceBuilder

from domino_prof.analysis.results import (
    AcrossRanks,
    Finding,
    Launches,
    Note,
    Overheads,
    Stats,
    StreamSwitches,
    Where,
)
from domino_prof.engine import analyze
from domino_prof.report import figures as F
from domino_prof.trace import load_trace


@pytest.fixture(scope="module")
def a(tmp_path_factory):
    d = tmp_path_factory.mktemp("res")
    launch_rank().write(d / "rank0.json")
    return analyze(load_trace(d))


def test_sections_are_typed_and_frozen(a):
    ov = a.overheads
    assert isinstance(ov, Overheads)
    assert isinstance(ov.stream_switches, StreamSwitches)
    assert isinstance(ov.launches, Launches) and ov.launches.computed
    assert isinstance(ov.launches.launch_delay, Stats)
    assert ov.launches.host_bound_device_idle_ns == 23_000  # as test_launches has it
    assert isinstance(ov.across_ranks, AcrossRanks) and not ov.across_ranks.computed
    assert ov.across_ranks.reason.startswith("the trace has one rank")
    assert [f.id for f in ov.findings] == ["host_bound_launches", "tiny_kernels"]
    f = ov.findings[0]
    assert isinstance(f, Finding) and isinstance(f.where, Where)
    assert (f.where.rank, f.where.stream, f.where.op, f.where.iteration) == (
        0, 7, "fwd.small_ops", 1)  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        ov.launches.n_tiny = 0  # type: ignore[misc]


def test_json_form_is_the_document(a):
    doc = json.loads(json.dumps(a.to_json(), allow_nan=False))["overheads"]
    assert doc == a.overheads.to_json()
    assert Overheads.of(doc).to_json() == doc  # read back from analysis.json: the same
    assert list(doc) == ["step_ms", "thresholds", "stream_switches", "launches",
                         "across_ranks", "findings", "notes", "whatif"]  # fmt: skip
    # a section that was not computed writes only that and why
    assert doc["across_ranks"] == {"computed": False, "reason": a.overheads.across_ranks.reason}
    # the JSON keys still read (code and tests written against analysis.json)
    assert a.overheads["launches"]["n_tiny"] == a.overheads.launches.n_tiny
    assert a.overheads.findings[0]["where"] == doc["findings"][0]["where"]


def test_notes_have_topics(a, tmp_path):
    topics = {n.topic for n in a.notes}
    assert "across_ranks" in topics
    assert all(isinstance(n, Note) and n.topic for n in a.notes)
    (n,) = [n for n in a.notes if n.topic == "across_ranks"]
    assert n.startswith("across ranks: not computed")  # still the text, a str
    # a skipped file is a note of topic "skipped", however it is worded
    d = tmp_path / "d"
    d.mkdir()
    launch_rank().write(d / "rank0.json")
    (d / "rank1.json").write_text("{broken")
    b = analyze(load_trace(d, skip_bad=True))
    assert [n.topic for n in b.notes if "rank1.json" in n] == ["skipped"]


def test_report_says_why_from_the_section_not_from_note_text(a):
    why = "the profiler wrote no runtime events (made up for this test)"
    ov = dataclasses.replace(a.overheads, launches=Launches(computed=False, reason=why))
    fake = SimpleNamespace(**{**a.__dict__, "overheads": ov, "notes": []})
    for fn in (F.launch_delays, F.graph_candidates):
        body = fn(fake).body
        assert isinstance(body, F.Unavailable) and body.reason.endswith(f"not computed: {why}")


def test_cpu_trace_sections_say_not_applicable(tmp_path):
    b = TraceBuilder(rank=0, world_size=1, backend="gloo")
    b.thread_name(77, "pt_gloo_runloop")
    b.step(1, 0, 100)
    b.cpu("aten::mm", 10, 20)
    b.cpu("c10d::allreduce_", 31, 2)
    b.annotation("gloo:all_reduce", 35, 20, tid=77)
    ov = analyze(load_trace(b.write(tmp_path / "rank0.pt.trace.json"))).overheads
    for sec in (ov.stream_switches, ov.launches):
        assert not sec.computed and sec.reason.startswith("not applicable: CPU-only trace")
