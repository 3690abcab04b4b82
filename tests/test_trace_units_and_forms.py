"""Issue 22 B.1, B.7, B.15 (BOM): timestamps written in ns, B/E pairs instead of X
events, a UTF-8 byte-order mark. Each is S (tests/data/h200_llama3_3b_2layers_tp2/
domino) rewritten in that form: the analysis document must be S's, to the ns."""

from __future__ import annotations

import functools
import gzip
import json
import warnings
from decimal import Decimal
from pathlib import Path

import pytest

from domino_prof.analysis.results import notes_about

ROOT = Path(__file__).resolve().parents[1]
S = ROOT / "tests" / "data" / "h200_llama3_3b_2layers_tp2" / "domino"


def _analysis(path: Path):
    from domino_prof.analysis import AnalysisConfig
    from domino_prof.engine import analyse_path

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # was: invalid value in cast
        return analyse_path(path, AnalysisConfig(), workers=1, progress=False)


def _json(a) -> dict:
    d = a.to_json()
    d["source"] = "h200-domino"
    return json.loads(json.dumps(d))


def _doc(path: Path) -> dict:
    return _json(_analysis(path))


@functools.cache
def _s_doc_json() -> str:
    return json.dumps(_doc(S))


def _s_doc() -> dict:
    """S's own document by today's code (its numbers are cd6e349's: test_decode_columns)."""
    return json.loads(_s_doc_json())


def _without(doc: dict, notes: list[str]) -> dict:
    doc = dict(doc)
    doc["notes"] = [n for n in doc["notes"] if n not in notes]
    return doc


def _rewrite(tmp: Path, fn, *, name: str = "rank{r}.pt.trace.json", raw=None) -> Path:
    out = tmp / "s"
    out.mkdir()
    for r in (0, 1):
        text = gzip.decompress((S / f"rank{r}.pt.trace.json.gz").read_bytes())
        doc = json.loads(text, parse_float=Decimal)
        doc["traceEvents"] = fn(doc["traceEvents"])
        body = json.dumps(_dec_to_raw(doc)).encode()
        (out / name.format(r=r)).write_bytes(raw(body) if raw else body)
    return out


class _Raw(float):
    def __new__(cls, text: str):
        self = super().__new__(cls, float(text))
        self.text = text
        return self

    def __repr__(self) -> str:
        return self.text


def _num(d):  # Decimal -> its exact text (json.dumps has no Decimal support)
    raise TypeError


def _dec_to_raw(obj):
    if isinstance(obj, Decimal):
        return _Raw(format(obj, "f") if obj != obj.to_integral() else str(int(obj)))
    if isinstance(obj, dict):
        return {k: _dec_to_raw(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_dec_to_raw(v) for v in obj]
    return obj


def _patched_rewrite(tmp: Path, fn, **kw) -> Path:
    return _rewrite(tmp, lambda evs: _dec_to_raw(fn(evs)), **kw)


def test_the_copy_of_s_itself_gives_s(tmp_path):
    want = _s_doc()
    assert _doc(_patched_rewrite(tmp_path, lambda evs: evs)) == want


def test_timestamps_in_ns_read_as_ns_with_a_note(tmp_path):
    """ts and dur x 1000 (exact integers): the old code warned 'invalid value encountered
    in cast' and said 'profiled step 45450.5 ms' for a 45.45 ms step."""

    def to_ns(evs):
        out = []
        for e in evs:
            e = dict(e)
            for k in ("ts", "dur"):
                if k in e and e.get("ph") != "M":
                    e[k] = int(e[k] * 1000)
            out.append(e)
        return out

    a = _analysis(_patched_rewrite(tmp_path, to_ns))
    got = _json(a)
    want = _s_doc()
    notes = notes_about(a.notes, "time_unit")
    assert notes == [
        "rank(s) [0, 1]: ts/dur written in ns, not the µs of Chrome traces (read as µs "
        "they would lie beyond the year 2100); read as ns"
    ]
    assert _without(got, notes) == want
    assert got["totals"]["step_ms"] == want["totals"]["step_ms"] == pytest.approx(45.63, abs=0.01)


def test_absolute_ns_timestamps_without_a_base_are_exact(tmp_path):
    """ts ~1.7e18 ns (beyond a float's 2**53): read as exact integers."""
    from domino_prof.trace import load_trace

    p = tmp_path / "rank0.json"
    evs = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
         "ts": 1_790_857_026_123_456_789 + i, "dur": 1001, "args": {"stream": 7}}
        for i in range(3)
    ]  # fmt: skip
    p.write_text(json.dumps({"traceEvents": evs}))
    t = load_trace(p)
    assert t.events["ts"].tolist() == [1_790_857_026_123_456_789 + i for i in range(3)]
    assert t.events["dur"].tolist() == [1001] * 3
    assert t.ranks[0].time_unit == "ns"


def test_begin_end_pairs_read_as_complete_events(tmp_path):
    """Every device event of S (kernels, memcpys, memsets: one after the other on their
    stream, as B/E needs) as a B at ts and an E at ts + dur, the E events after all
    others (pairing goes by pid/tid and time, not by file position); the old code:
    'no device activity ... ProfilerActivity.CUDA?'."""

    def to_be(evs):
        out, ends = [], []
        for e in evs:
            if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
                out.append(e)
                continue
            b = {k: v for k, v in e.items() if k != "dur"}
            b["ph"] = "B"
            out.append(b)
            ends.append({"ph": "E", "pid": e["pid"], "tid": e["tid"],
                         "ts": e["ts"] + e.get("dur", 0)})  # fmt: skip
        return out + ends[::-1]

    want = _s_doc()
    assert _doc(_patched_rewrite(tmp_path, to_be)) == want


def test_nested_begin_end_on_one_thread_and_an_unclosed_begin(tmp_path):
    from domino_prof.trace import load_trace

    p = tmp_path / "rank0.json"
    evs = [
        {"ph": "B", "name": "outer", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": 10},
        {"ph": "B", "name": "inner", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": 12},
        {"ph": "B", "name": "other", "cat": "cpu_op", "pid": 1, "tid": 3, "ts": 11},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 15},
        {"ph": "E", "pid": 1, "tid": 3, "ts": 14.5},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 20},
        {"ph": "B", "name": "open", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": 30},
    ]
    p.write_text(json.dumps({"traceEvents": evs}))
    ev = load_trace(p).events
    got = dict(zip(ev["name"].astype(str), ev["dur"].tolist()))
    assert got == {"outer": 10_000, "inner": 3_000, "other": 3_500, "open": 0}


@pytest.mark.parametrize("gz", [False, True])
def test_a_utf8_bom_is_read_past(tmp_path, gz):
    """The old code: 'invalid JSON at byte 0: invalid character'."""
    raw = (lambda b: gzip.compress(b"\xef\xbb\xbf" + b)) if gz else (lambda b: b"\xef\xbb\xbf" + b)
    want = _s_doc()
    assert _doc(_patched_rewrite(tmp_path, lambda evs: evs, raw=raw)) == want


def test_a_bom_on_a_big_streamed_file(tmp_path, monkeypatch):
    from domino_prof.trace import chunked, parse

    monkeypatch.setattr(parse, "_STREAM_BYTES", 1)
    monkeypatch.setattr(chunked, "_CHUNK_TARGET", 64 * 1024)
    want = _s_doc()
    path = _patched_rewrite(tmp_path, lambda evs: evs, raw=lambda b: b"\xef\xbb\xbf" + b)
    assert chunked._parse_streaming(str(path / "rank0.pt.trace.json"), None, 1) is not None
    assert _doc(path) == want
