"""Start-up (issue 23): loading a trace without the comm-emulation mark does not import
the emulation package, and the decode's result classes are msgspec Structs (no code
generated at import, as dataclasses do); a marked trace still gets its label."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec

from domino_prof.trace import decode

ROOT = Path(__file__).resolve().parents[1]
EVENTS = [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 100, "dur": 50, "pid": 0,
           "tid": 7, "args": {"stream": 7, "device": 0}}]  # fmt: skip


def test_a_trace_without_the_mark_does_not_import_emulation(tmp_path):
    f = tmp_path / "rank0.json"
    f.write_text(json.dumps({"distributedInfo": {"rank": 0}, "traceEvents": EVENTS}))
    code = (
        "import sys\nfrom domino_prof.trace.loader import load_trace\n"
        f"t = load_trace({str(f)!r})\n"
        "print(len(t.events), 'domino_prof.emulation' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         cwd=str(ROOT), timeout=120)  # fmt: skip
    assert out.stdout.split() == ["1", "False"], out.stderr


def test_a_marked_trace_still_gets_its_label():
    top = {"domino_prof": {"comm": "emulated", "profile": "h200-nccl"}}
    assert decode._emulation("rank0.json", top) == "emulated comm (profile h200-nccl)"
    assert decode._emulation("rank0.json", {"domino_prof": None}) is None


def test_results_are_structs_that_pickle():
    import pickle

    import numpy as np

    assert all(issubclass(c, msgspec.Struct) for c in (decode._Parsed, decode._Part,
                                                        decode._Ends))  # fmt: skip
    part = decode._Part(n=1, ints={"ts": np.array([5], np.int64)}, cats={}, str_rows={},
                        meta_events=[("thread_name", 0, 7, "stream 7")], unit="us")  # fmt: skip
    back = pickle.loads(pickle.dumps(part))
    assert back.n == 1 and back.ints["ts"].tolist() == [5] and back.unit == "us"
    assert back.meta_events == [("thread_name", 0, 7, "stream 7")] and back.ends is None
