"""benchmarks/host_lead.py: the lead summary on a hand-worked set of marks, and its CPU
dry run (marks at every segment, host times only)."""

from __future__ import annotations

import json
import sys

import pytest
import script_module

sys.path.insert(0, str(script_module.ROOT / "benchmarks"))  # its `from _headline import`
hl = script_module.load("benchmarks/host_lead.py")


def test_summarize_hand_worked() -> None:
    # (key, host ms, gpu ms, lead ms): three forward cores, two of them starved (< 0.05)
    leads = [(("C", 0, 0), 1.0, 1.02, 0.02), (("C", 1, 0), 2.0, 2.5, 0.5),
             (("C", 2, 0), 3.0, 3.03, 0.03), (("D", 2, 0), 4.0, 6.0, 2.0),
             (("D", 1, 0), 5.0, 6.5, 1.5)]  # fmt: skip
    s = hl.summarize(leads, 0.05)
    f, b = s["fwd"], s["bwd"]
    assert (f["marks"], f["starved"], b["marks"], b["starved"]) == (3, 2, 2, 0)
    assert (f["lead_min"], f["lead_median"], f["lead_max"]) == (0.02, 0.03, 0.5)
    assert f["starved_span_ms"] == pytest.approx(3.03 - 1.02)  # first to last starved mark
    assert (f["gpu_first_ms"], f["gpu_last_ms"]) == (1.02, 3.03)
    assert (b["lead_min"], b["lead_median"], b["lead_max"]) == (1.5, 1.75, 2.0)
    assert b["starved_span_ms"] == 0.0


def test_phase_of_keys() -> None:
    keys = ("emb", "N", "C", "F", "H3", "HD", "D", "B", "E")
    assert [hl.phase((k, 0, 0)) for k in keys] == ["fwd"] * 5 + ["bwd"] * 4


def test_cpu_dry_run_marks_every_segment(tmp_path, capsys) -> None:
    out = tmp_path / "hl.json"
    rc = hl.main(["--device", "cpu", "--model", "tiny", "--tp", "1", "--comm", "gloo",
                  "--seq", "64", "--mode", "domino", "--steps", "1", "--all",
                  "--out", str(out)])  # fmt: skip
    assert rc == 0
    d = json.loads(out.read_text())
    marks = d["steps"][0]["marks"]
    keys = [tuple(m[0]) for m in marks]
    assert keys[0] == ("emb", 0, 0)
    assert {k[0] for k in keys} >= {"emb", "F", "D", "E"}
    hosts = [m[1] for m in marks]
    assert hosts == sorted(hosts) and hosts[0] >= 0  # issue order, from the step's start
    assert all(m[2] is None and m[3] is None for m in marks)  # no GPU: no event times
    assert "domino eager, marks at every segment" in capsys.readouterr().out


def test_cpu_dry_run_back_to_back(tmp_path, capsys) -> None:
    """--stream: the steps issued back to back on one clock; each step's marks are its
    own (the end marks that split them are not among them), and its wall runs from the
    previous step's end to its own, on CPU the host's clock: the walls add up to the
    last step's end. ``--device cpu`` alone gives the dry run's shape (tiny, tp 1, gloo,
    seq 64: _headline.SHAPE_DEFAULTS), and ``--out`` a folder writes host_lead.json in it."""
    rc = hl.main(["--device", "cpu", "--mode", "domino", "--steps", "3", "--stream",
                  "--out", str(tmp_path)])  # fmt: skip
    assert rc == 0
    d = json.loads((tmp_path / "host_lead.json").read_text())
    assert d["shape"] == "tiny, 2 layers, TP 1 (gloo), seq 64, mbs 2"
    steps = d["steps"]
    assert len(steps) == 3
    for s in steps:
        keys = [m[0][0] for m in s["marks"]]
        assert "end" not in keys and {"F", "D"} <= set(keys)
        assert s["wall_ms"] > 0 and s["probe_ms"] == steps[0]["probe_ms"]  # one probe
    # one clock: step 1's first mark comes after step 0's wall, step 2's after both
    assert steps[1]["marks"][0][1] > steps[0]["wall_ms"]
    assert steps[2]["marks"][0][1] > steps[0]["wall_ms"] + steps[1]["wall_ms"]
    assert "steps back to back" in capsys.readouterr().out


def test_out_in_a_missing_folder_is_one_line(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        hl.main(["--device", "cpu", "--out", str(tmp_path / "no" / "hl.json")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith("hl.json: its folder does not exist; make it or name another")
