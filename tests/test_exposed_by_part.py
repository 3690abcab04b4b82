"""benchmarks/exposed_by_part.py: exposed comm per slice of a step, by hand."""

from __future__ import annotations

import numpy as np
import pytest
import script_module


def _mod():
    return script_module.load("benchmarks/exposed_by_part.py")


def test_exposed_comm_per_slice_by_hand():
    m = _mod()
    a = lambda *x: np.array(x, dtype=float)  # noqa: E731
    # step [0, 100), 4 slices of 25. comm [10, 40) and [30, 60) (union [10, 60)) and
    # [80, 90); compute [0, 20), [50, 85) and [15, 55) (union [0, 85)).
    # comm outside compute: [85, 90) only -> slice 3 holds 5, the others 0
    comm = (a(10, 30, 80), a(40, 60, 90))
    comp = (a(0, 50, 15), a(20, 85, 55))
    assert m.exposed_by_part(comm, comp, (0.0, 100.0), 4) == [0.0, 0.0, 0.0, 5.0]
    # compute only [0, 20): comm [20, 60) and [80, 90) exposed: slices [25-20... by hand:
    # slice 0 [0,25): 5, slice 1 [25,50): 25, slice 2 [50,75): 10, slice 3 [75,100): 10
    assert m.exposed_by_part(comm, (a(0), a(20)), (0.0, 100.0), 4) == [5.0, 25.0, 10.0, 10.0]
    # no compute at all: every comm interval exposed, once (the union)
    assert sum(m.exposed_by_part(comm, (a(), a()), (0.0, 100.0), 10)) == pytest.approx(60.0)


def test_phase_totals_by_hand():
    """--phases: step [0, 100) cut at 40. comm [10, 30) and [35, 60); compute [0, 20) and
    [50, 90). fwd [0, 40): comm 20 + 5 = 25, compute 20, both [0, 30) + [35, 40) = 35, so
    exposed 15 and idle 5; comm span 10 -> 40 (clipped) = 30. bwd [40, 100): comm [40, 60)
    = 20, compute 40, both [40, 90) = 50, so exposed 10 and idle 10; comm span 20."""
    m = _mod()
    a = lambda *x: np.array(x, dtype=float)  # noqa: E731
    got = m.phase_totals((a(10, 35), a(30, 60)), (a(0, 50), a(20, 90)), (0.0, 100.0), 40.0)
    assert got["fwd"] == {"span": 40.0, "comm": 25.0, "compute": 20.0, "exposed": 15.0,
                          "idle": 5.0, "comm_span": 30.0}  # fmt: skip
    assert got["bwd"] == {"span": 60.0, "comm": 20.0, "compute": 40.0, "exposed": 10.0,
                          "idle": 10.0, "comm_span": 20.0}  # fmt: skip
    # comm in the forward only: the backward's comm span is 0, its idle what compute leaves
    got = m.phase_totals((a(10), a(30)), (a(0, 50), a(20, 90)), (0.0, 100.0), 40.0)
    assert got["bwd"]["comm_span"] == 0.0 and got["bwd"]["idle"] == 20.0
    assert got["fwd"]["exposed"] == 10.0 and got["fwd"]["comm_span"] == 20.0


def test_phases_say_one_line_when_no_kernel_marks_the_loss(tmp_path, capsys):
    """A trace without the --boundary kernel: one line naming the file and the flag, exit 2."""
    import gzip
    import json

    m = _mod()
    ev = [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10.0,
           "dur": 5.0, "args": {"stream": 7, "device": 0, "correlation": 1}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
           "ts": 2.0, "dur": 1.0, "args": {"correlation": 1}},
          {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
           "ts": 0.0, "dur": 50.0, "args": {}}]  # fmt: skip
    p = tmp_path / "rank0.pt.trace.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump({"traceEvents": ev, "distributedInfo": {"rank": 0}}, f)
    assert m.main([str(p), "--phases"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--boundary" in err[0] and str(p) in err[0]


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path):
    """`exposed_by_part.py TRACE | head -1` over several steps: the pipe closes under the
    script; it exits 1 with nothing on stderr (Python's advice for EPIPE), not a
    BrokenPipeError traceback."""
    import gzip
    import json
    import subprocess
    import sys
    from pathlib import Path

    ev = []
    for i in range(400):  # 400 profiled steps, a line each: more than a pipe's buffer
        t = 100.0 * i
        ev += [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 10,
                "dur": 5.0, "args": {"stream": 7, "device": 0, "correlation": i + 1}},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                "tid": 1, "ts": t + 2, "dur": 1.0, "args": {"correlation": i + 1}},
               {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1,
                "tid": 1, "ts": t, "dur": 50.0, "args": {}}]  # fmt: skip
    p = tmp_path / "rank0.pt.trace.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump({"traceEvents": ev, "distributedInfo": {"rank": 0}}, f)
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "exposed_by_part.py"
    proc = subprocess.Popen([sys.executable, str(script), str(p)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1, err
    assert first.startswith(b"step 0: ") and err == ""
