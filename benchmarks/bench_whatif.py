"""Predicted against measured: one run's trace replayed with an edit (analysis.replay)
against another run's profiled step (same profiler overhead), beside its timed steps.

Torch-free. Examples::

    # nocomm predicted from the tp trace of one `run --mode all`
    python benchmarks/bench_whatif.py --trace RUN/tp --scenario no_comm \\
        --measured RUN/nocomm --run-json RUN/run.json --measured-mode nocomm -o nocomm.json
    # the --cuda-graphs step predicted from an eager trace (two runs)
    python benchmarks/bench_whatif.py --trace EAGER/tp --scenario cuda_graphs \\
        --measured GRAPHS/tp --run-json GRAPHS/run.json --measured-mode tp -o graphs.json

Writes one JSON object (and prints it): the scenario, the predicted step, the measured
profiled step, the error in % of the measured step, whether the sign of the predicted
change (against the trace's own replayed step) matches the measured one, whether it is
within ``--tolerance`` percent (benchmark target: 5), the measured run's timed steps,
and the HTA-free replay facts (explained, error of the unedited replay). A measured CPU
trace without gloo (a nocomm run) is measured by ``replay.cpu_profiled_step``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def profiled_step_ms(path: str) -> float | None:
    from domino_prof.analysis.classify import trace_mode
    from domino_prof.analysis.replay import cpu_profiled_step
    from domino_prof.engine import analyze
    from domino_prof.trace import load_trace

    tr = load_trace(path)
    if trace_mode(tr.events) in (None, "cpu") and not tr.events["name"].astype(str).str.startswith(
            "gloo:").any():  # fmt: skip
        ns, _ = cpu_profiled_step(tr.events)
        return ns / 1e6 if ns is not None else None
    w = analyze(tr).overheads.whatif
    return w.get("profiled_step_ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", required=True, help="trace (dir) whose replay predicts")
    ap.add_argument("--scenario", required=True, help="what-if scenario name (no_comm, ...)")
    ap.add_argument("--measured", required=True, help="trace (dir) of the run that applies it")
    ap.add_argument("--run-json", help="run.json of the measured run (its timed steps)")
    ap.add_argument("--measured-mode", help="mode of the measured run in run.json")
    ap.add_argument("--trace-run-json", help="run.json of the predicting run (its timed steps)")
    ap.add_argument("--trace-mode", help="mode of the predicting run in --trace-run-json")
    ap.add_argument("--tolerance", type=float, default=5.0, help="percent (default 5)")
    ap.add_argument("-o", "--output", help="JSON file to write (atomically)")
    a = ap.parse_args(argv)
    from domino_prof.engine import analyze
    from domino_prof.trace import load_trace

    w = analyze(load_trace(a.trace)).overheads.whatif
    row = next((s for s in w.get("scenarios") or () if s["name"] == a.scenario), None)
    if row is None:
        names = ", ".join(s["name"] for s in w.get("scenarios") or ())
        print(f"bench_whatif: scenario {a.scenario!r} not replayed for {a.trace}; "
              f"one of: {names}", file=sys.stderr)  # fmt: skip
        return 2
    measured = profiled_step_ms(a.measured)
    pred = row["step_ms"]
    base = w.get("replayed_step_ms")
    out = {
        "trace": a.trace, "scenario": a.scenario, "measured_trace": a.measured,
        "explained": w.get("explained"), "replay_error_pct": w.get("error_pct"),
        "trace_profiled_step_ms": w.get("profiled_step_ms"),
        "predicted_step_ms": pred, "measured_profiled_step_ms": measured,
        "error_pct": (100 * (pred - measured) / measured) if measured else None,
        "sign_right": (None if measured is None or base is None
                       else (pred - base) * (measured - w["profiled_step_ms"]) >= 0),
        "graph_kernel_gap_ns": w.get("graph_kernel_gap_ns"),
        "tolerance_pct": a.tolerance,
    }  # fmt: skip
    out["within_tolerance"] = (None if out["error_pct"] is None
                               else abs(out["error_pct"]) <= a.tolerance)  # fmt: skip
    if a.run_json:
        run = json.loads(Path(a.run_json).read_text())
        m = (run.get("modes") or {}).get(a.measured_mode or "", {})
        out["measured_timed_step_ms"] = m.get("step_ms")
        out["measured_timed_steps_ms"] = m.get("step_times_ms")
    if a.run_json and a.trace_run_json:
        # the sign is judged only where the fix measurably changes the step: the two runs'
        # timed-step 95% intervals (stats.py) do not overlap. Where they do, the measured
        # change is within the runs' noise and its sign says nothing (sign_judged false).
        # (too few blocks for an interval: the timed steps' interquartile range instead,
        # nearest-rank quartiles; a run's one slow step does not make every change noise)
        def interval(path, mode):
            m = (json.loads(Path(path).read_text()).get("modes") or {}).get(mode or "", {})
            iv = m.get("step_ms_interval") or [None, None]
            if None in iv:
                v = sorted(m["step_times_ms"])
                q = [v[max(1, math.ceil(f * len(v))) - 1] for f in (0.25, 0.75)]
                iv = q
            return iv, m.get("step_ms")

        (lo_a, hi_a), med_a = interval(a.trace_run_json, a.trace_mode)
        (lo_b, hi_b), med_b = interval(a.run_json, a.measured_mode)
        out["trace_timed_step_ms"], out["trace_timed_interval_ms"] = med_a, [lo_a, hi_a]
        out["measured_timed_interval_ms"] = [lo_b, hi_b]
        out["sign_judged"] = hi_a < lo_b or hi_b < lo_a
        if not out["sign_judged"]:
            out["sign_note"] = ("the two runs' timed intervals overlap: the measured change is "
                                "within noise, so its sign is not judged")
    text = json.dumps(out, indent=1)
    print(text)
    if a.output:
        tmp = Path(a.output).with_name(Path(a.output).name + ".tmp")
        tmp.write_text(text + "\n")
        os.replace(tmp, a.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
