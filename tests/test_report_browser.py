"""Reports in a real headless Chromium: opened from file:// with networking disabled,
no console errors, every figure rendered with its expected number of traces, and a
screenshot written under test-artifacts/ (gitignored).

Needs a headless Chromium (``bash scripts/get_chromium.sh``: no root).
Skipped with a reason when it is missing outside CI; in CI (``$CI`` set) a missing
browser is a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from browser import Browser, find_chromium
from test_report import domino_trace, make_run_dir

from domino_prof.engine import analyze
from domino_prof.report import write_compare, write_report, write_run_report
from domino_prof.runs import resolve
from domino_prof.trace import load_trace

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

if find_chromium() is None:
    if os.environ.get("CI"):
        raise RuntimeError(
            "chromium is required in CI for the report browser tests: bash scripts/get_chromium.sh"
        )
    pytest.skip(
        "no chromium (bash scripts/get_chromium.sh gets one, no root); not CI, so skipped",
        allow_module_level=True,
    )

# For every figure div: what the page promised and what plotly drew (one SVG group per
# trace: g.trace for scatter/bar, g.hm for heatmaps).
PROBE = """
(() => Array.from(document.querySelectorAll('div.dp-plot')).map(d => ({
  id: d.id,
  expected: Number(d.dataset.expectedTraces),
  svg: d.querySelectorAll('svg.main-svg').length,
  drawn: d.querySelectorAll('g.trace, g.hm').length,
  height: d.getBoundingClientRect().height,
})).concat([{id: 'sections', n: document.querySelectorAll('section').length,
             notes: document.querySelectorAll('.unavailable').length}]))()
"""


@pytest.fixture(scope="module")
def browser():
    """One Chromium for the module's pages (each page its own target and session:
    browser.Browser); starting and closing it per page was ~2-3 s of each test."""
    with Browser() as b:
        yield b


def check_page(browser: Browser, html: Path, shot: str) -> tuple[list[dict], dict]:
    res = browser.render(html, probe=PROBE, screenshot=ARTIFACTS / shot)
    assert res.console_errors == [], res.console_messages
    assert res.network_requests == []
    *figs, summary = res.value
    for f in figs:
        assert f["svg"] >= 1, f  # plotly drew an SVG
        assert f["drawn"] == f["expected"] > 0, f
        assert f["height"] > 100, f
    assert (ARTIFACTS / shot).stat().st_size > 10_000  # a real PNG, not an empty canvas
    return figs, summary


def test_harness_sees_errors_and_network(tmp_path, browser):
    # the checks above can fail: a throwing script and an external image are reported
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<html><body><img src='http://example.invalid/x.png'>"
        "<script>throw new Error('boom')</script></body></html>"
    )
    res = browser.render(bad, probe="1")
    assert any("boom" in e for e in res.console_errors)
    assert res.network_requests == ["http://example.invalid/x.png"]


def test_run_report_renders(tmp_path, browser):
    run = make_run_dir(tmp_path / "run")
    src = resolve(run)
    analyses = {m: analyze(load_trace(d)) for m, d in src.modes.items()}
    out = write_run_report(analyses, tmp_path / "run.html", run=src.run.doc)
    figs, summary = check_page(browser, out, "report-run.png")
    # mode comparison (1 trace) + per mode: timeline (3), heatmap (2), ops (2),
    # collective types (2), launch delays (1), skew: all ranks start together -> a note
    assert [f["expected"] for f in figs] == [1, 3, 2, 2, 2, 1, 3, 2, 2, 2, 1]
    assert summary["notes"] >= 4


def test_single_report_renders(tmp_path, browser):
    a = analyze(load_trace(domino_trace(tmp_path / "t")))
    figs, _ = check_page(browser, write_report(a, tmp_path / "r.html"), "report-single.png")
    assert len(figs) == 5


def test_no_comm_report_renders(tmp_path, browser):
    a = analyze(load_trace(domino_trace(tmp_path / "t", with_comm=False)))
    page = write_report(a, tmp_path / "nc.html")
    figs, summary = check_page(browser, page, "report-nocomm.png")
    assert [f["expected"] for f in figs] == [1, 1]  # timeline (compute only), launch delays
    assert summary["notes"] >= 5


def test_compare_renders(tmp_path, browser):
    a = analyze(load_trace(domino_trace(tmp_path / "a", c1_start=70.0)))
    b = analyze(load_trace(domino_trace(tmp_path / "b")))
    out = write_compare(a, b, tmp_path / "c.html", labels=("tp", "domino"))
    figs, _ = check_page(browser, out, "compare.png")
    assert [f["expected"] for f in figs] == [2, 3, 3]


REAL_RUN = Path(__file__).resolve().parent / "data" / "h200_llama3_3b_2layers_tp2"


@pytest.mark.skipif(not (REAL_RUN / "run.json").is_file(), reason="real H200 run data missing")
def test_real_h200_run_report(tmp_path, browser):
    # The committed 2-rank H200 run (tp and domino modes): every section that has data
    # draws. tp runs comm on the compute stream, so it has no cross-stream waits.
    src = resolve(REAL_RUN)
    analyses = {m: analyze(load_trace(d)) for m, d in src.modes.items()}
    out = write_run_report(analyses, tmp_path / "h200.html", run=src.run.doc)
    figs, _ = check_page(browser, out, "report-h200.png")
    # modes | domino: timeline (compute, hidden, exposed, memory), heatmap fwd/bwd, ops,
    # collective types, switch gaps, launch delays, skew | tp: timeline (no hidden),
    # heatmap, ops, collective types, launch, skew
    assert [f["expected"] for f in figs] == [1, 4, 2, 2, 2, 1, 1, 2, 3, 2, 2, 2, 1, 2]


def test_unanalysable_trace_page_renders(tmp_path, browser):
    from domino_prof.report.figures import Unavailable

    why = Unavailable("Not analysed: rank0.json: no device activity (kernels/memcpy)")
    page = write_report(why, tmp_path / "u.html")
    figs, summary = check_page(browser, page, "report-unanalysable.png")
    assert figs == [] and summary["notes"] == 1
