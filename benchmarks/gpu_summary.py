"""Summaries of a GPU session's output directory, printed (stdlib only: the GPU image has
no msgspec / plotly). Called by benchmarks/gpu_session.sh's suites; run them here too:

    python3 benchmarks/gpu_summary.py refactor-check OUT   # before/after bench_schedule table
    python3 benchmarks/gpu_summary.py sp-check OUT         # domino-sp eager vs plain-mb target
    python3 benchmarks/gpu_summary.py modes RUN_DIR/run.json  # step and issue ms per mode
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path


def _worst(errs: dict, dtype: str) -> float | None:
    return max((e for k, e in errs.items() if dtype in k and e is not None), default=None)


def refactor_check(out: Path) -> None:
    """bench_{before,after}_N.json: the median wall per row before and after, and whether
    no row got slower by more than max(2 %, its before-spread); the gradient checks."""
    rows = {}
    for side in ("before", "after"):
        for p in sorted(out.glob(f"bench_{side}_*.json")):
            for r in json.loads(p.read_text())["rows"]:
                if "wall_ms" in r:
                    key = (r["schedule"], r["graphs"], r["compile"])
                    rows.setdefault(key, {}).setdefault(side, []).append(r["wall_ms"])
    print(f"{'row':34s} {'before ms':>10s} {'spread':>7s} {'after ms':>10s} {'ratio':>6s}  ok")
    for key, v in rows.items():
        b, a = v.get("before", []), v.get("after", [])
        if not b or not a:
            continue
        mb, ma = statistics.median(b), statistics.median(a)
        spread = max(b) - min(b)
        ok = ma - mb <= max(0.02 * mb, spread)
        print(f"{str(key):34s} {mb:10.2f} {spread:7.2f} {ma:10.2f} {ma / mb:6.3f}  {ok}")
    for name in ("verify_tp1", "verify_gloo_tp2"):
        p = out / name / "gpu_verify.json"
        if p.exists():
            res = json.loads(p.read_text())
            errs = {k: v.get("max_rel_err") for k, v in res.items() if isinstance(v, dict)}
            f32 = _worst(errs, "float32")
            b16 = _worst(errs, "bfloat16")
            bad = [k for k, v in res.items() if isinstance(v, dict) and "error" in v]
            print(f"{name}: fp32 max {f32} (<= 1.1e-5), bf16 max {b16} (<= 0.03), errors {bad}")


def sp_check(out: Path) -> None:
    """bench_N.json: domino-sp eager / plain-mb per repeat (target <= 1.05, issue <= 0.98 x
    wall), the gradient check, and the profiled steps' host-op breakdown."""
    print("domino-sp eager / plain-mb (wall), per repeat; target <= 1.05 in all, "
          "issue <= 0.98 x wall")
    ok_all, n = True, 0
    for p in sorted(out.glob("bench_[0-9]*.json")):
        rows = {r["schedule"]: r for r in json.loads(p.read_text())["rows"] if "wall_ms" in r}
        ds, mb = rows.get("domino-sp"), rows.get("plain-mb")
        if not ds or not mb:
            print(f"{p.name}: missing rows ({', '.join(rows)})")
            ok_all = False
            continue
        n += 1
        ratio = ds["wall_ms"] / mb["wall_ms"]
        below = ds["issue_ms"] <= 0.98 * ds["wall_ms"]
        ok = ratio <= 1.05 and below
        ok_all &= ok
        extra = "  ".join(
            f"{s} {rows[s]['wall_ms']:.1f}/{rows[s]['issue_ms']:.1f}"
            for s in ("plain", "domino", "sp") if s in rows
        )
        print(f"{p.name}: domino-sp / plain-mb {ratio:.3f}  domino-sp wall {ds['wall_ms']:.1f} "
              f"issue {ds['issue_ms']:.1f} ms (issue/wall {ds['issue_ms'] / ds['wall_ms']:.3f}, "
              f"{'below' if below else 'NOT below'})  plain-mb wall {mb['wall_ms']:.1f} "
              f"issue {mb['issue_ms']:.1f}  |  wall/issue ms: {extra}  "
              f"domino / plain-mb "
              f"{rows['domino']['wall_ms'] / mb['wall_ms'] if 'domino' in rows else float('nan'):.3f}  "
              f"{'ok' if ok else 'MISSED'}")
    print(f"target {'met' if ok_all and n == 3 else 'NOT met'} ({n} repeats read)")

    vf = out / "verify" / "gpu_verify.json"
    if vf.exists():
        res = json.loads(vf.read_text())
        for k, v in res.items():
            if k.startswith("domino-sp") or k.startswith("sp_"):
                print(f"gpu_verify {k}: {v.get('max_rel_err', v.get('error'))}")
        errs = {k: v.get("max_rel_err") for k, v in res.items() if isinstance(v, dict)}
        f32 = _worst(errs, "float32")
        b16 = _worst(errs, "bfloat16")
        bad = [k for k, v in res.items() if isinstance(v, dict) and "error" in v]
        print(f"gpu_verify --tp 1: fp32 max {f32} (<= 1.1e-5), bf16 max {b16} (<= 0.03), "
              f"errors {bad}")

    # the profiled steps: host ops' median µs (a slower host shows in view / empty, which
    # launch nothing), side-stream CUDA calls, and the host time outside any op (Python)
    for name in ("domino", "domino-sp"):
        p = out / f"{name}.json.gz"
        if not p.exists():
            continue
        ev = [e for e in json.load(gzip.open(p))["traceEvents"]
              if e.get("cat") in ("cpu_op", "cuda_runtime") and "dur" in e]
        if not ev:
            continue
        main = max({(e["pid"], e["tid"]) for e in ev},
                   key=lambda k: sum(1 for e in ev if (e["pid"], e["tid"]) == k))
        ev = sorted((e for e in ev if (e["pid"], e["tid"]) == main), key=lambda e: e["ts"])
        by = {}
        for e in ev:
            by.setdefault(e["name"], []).append(e["dur"])
        def med(k: str, by: dict = by) -> str:
            return f"{statistics.median(by[k]):.1f}" if k in by else "-"

        span = max(e["ts"] + e["dur"] for e in ev) - ev[0]["ts"]
        covered, end = 0.0, ev[0]["ts"]
        for e in ev:
            if e["ts"] + e["dur"] > end:
                covered += e["ts"] + e["dur"] - max(e["ts"], end)
                end = e["ts"] + e["dur"]
        counts = {k: len(by.get(k, ())) for k in ("cudaLaunchKernel", "cudaEventRecord",
                  "cudaEventRecordWithFlags", "cudaStreamWaitEvent", "aten::copy_")}
        print(f"profile {name}: host span {span / 1e3:.1f} ms, outside ops {(span - covered) / 1e3:.1f}"
              f" ms; median us: view {med('aten::view')} empty {med('aten::empty')} mm "
              f"{med('aten::mm')} launch {med('cudaLaunchKernel')}; counts {counts}")


def modes(run_json: Path) -> None:
    """One line per mode of a run.json: timed step and host issue ms."""
    try:
        d = json.loads(run_json.read_text())
    except (OSError, ValueError) as e:
        print("  no run.json:", e)
        return
    for m, r in d.get("modes", {}).items():
        print(f"  {m:10s} step {r.get('step_ms', float('nan')):7.2f} ms  "
              f"issue {r.get('issue_ms', float('nan')):7.2f} ms")


COMMANDS = {"refactor-check": refactor_check, "sp-check": sp_check, "modes": modes}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: gpu_summary.py {{{'|'.join(COMMANDS)}}} PATH")
    COMMANDS[sys.argv[1]](Path(sys.argv[2]))
