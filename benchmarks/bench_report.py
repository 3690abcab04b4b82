"""Report size and speed on a large trace (the target: a 2M-event trace gives a report
under 15 MB that a browser opens in seconds). Prints numbers; asserts nothing.

    python benchmarks/gen_trace.py --events 2000000 --out /tmp/bench2m/rank0.pt.trace.json
    python benchmarks/bench_report.py /tmp/bench2m [--browser]

``--browser`` also opens the report in headless Chromium (tests/browser.py) and
reports the time from navigation to every figure drawn.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", help="trace file or directory")
    ap.add_argument("--out", default="/tmp/bench_report.html")
    ap.add_argument("--browser", action="store_true")
    args = ap.parse_args()

    from domino_prof.engine import analyze
    from domino_prof.report import write_report
    from domino_prof.trace import load_trace

    t0 = time.perf_counter()
    trace = load_trace(args.trace)
    t1 = time.perf_counter()
    a = analyze(trace)
    t2 = time.perf_counter()
    out = write_report(a, args.out)
    t3 = time.perf_counter()
    n_ev = len(trace.events)
    print(f"events {n_ev:,}  intervals {len(a.intervals):,}")
    print(f"load {t1 - t0:.1f} s  analyze {t2 - t1:.1f} s  report {t3 - t2:.2f} s")
    print(f"report {out}: {out.stat().st_size / 1e6:.2f} MB")
    if args.browser:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from browser import render_page

        probe = (
            "(() => { const t = performance.now(); return {drawn_ms: t, "
            "figs: document.querySelectorAll('div.dp-plot .main-svg').length > 0 ? "
            "document.querySelectorAll('div.dp-plot').length : 0}; })()"
        )
        t4 = time.perf_counter()
        res = render_page(
            out, probe=probe, settle_s=0.0, screenshot=Path(args.out).with_suffix(".png")
        )
        t5 = time.perf_counter()
        print(
            f"browser: load+draw {res.value['drawn_ms'] / 1e3:.2f} s (page clock), "
            f"{t5 - t4:.1f} s wall incl. start-up and screenshot; figures {res.value['figs']}; "
            f"console errors {len(res.console_errors)}"
        )


if __name__ == "__main__":
    main()
