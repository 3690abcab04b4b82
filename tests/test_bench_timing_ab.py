"""benchmarks/bench_timing_ab.py: the ABAB order of its blocks and their bookkeeping (a
stand-in runner whose block times and probes are set by hand), its summary on hand-worked
pairs, and a CPU dry run."""

from __future__ import annotations

import dataclasses
import json
import sys
import warnings

import pytest
import script_module

sys.path.insert(0, str(script_module.ROOT / "benchmarks"))  # its `from _headline import`
ab = script_module.load("benchmarks/bench_timing_ab.py")


@dataclasses.dataclass(frozen=True)
class Cfg:
    timing: str = "step"


class FakeRun:
    """ModeRun's block interface: each block's step ms and probes by hand, per timing."""

    def __init__(self, cfg, script):
        self.cfg, self.script = cfg, script  # script: [(timing, step ms list, probes)]
        self.blocks, self.probe_blocks, self.seen = [], [], []
        self.issue_blocks, self.issue_cpu_blocks = [], []

    def timed_block(self, n):
        timing, ms, probes = self.script[len(self.seen)]
        assert timing == self.cfg.timing and len(ms) == n
        self.seen.append(self.cfg.timing)
        self.blocks.append(ms)
        self.probe_blocks.append(probes)
        self.issue_blocks.append(ms[:1])  # as --timing stream keeps it: the first step's
        self.issue_cpu_blocks.append(ms[:1])


def test_pairs_alternate_and_keep_block_medians() -> None:
    script = [("step", [10, 12, 11], [1.0, 1.0, 1.0]), ("stream", [9, 8, 10], [1.2]),
              ("stream", [20, 18, 22], [2.0]), ("step", [21, 25, 23], [2.0, 3.0, 4.0])]  # fmt: skip
    cfg = Cfg()
    run = FakeRun(cfg, script)
    res = ab.pairs_of(run, cfg, pairs=2, block=3)
    assert run.seen == ["step", "stream", "stream", "step"]  # A B, then B A
    assert run.cfg is cfg  # the runner's own config back after the pairs
    assert (res["step"]["wall"], res["step"]["probe"]) == ([11, 23], [1.0, 3.0])
    assert (res["stream"]["wall"], res["stream"]["probe"]) == ([9, 20], [1.2, 2.0])


def test_summary_hand_worked() -> None:
    # pair ratios 0.9, 0.8, 1.0; fastest probe 0.5: pairs whose both probes are <= 0.625
    # are at the fast level: pair 0 (0.5, 0.6) and pair 2 (0.55, 0.62); pair 1 has 1.1
    res = {"step": {"wall": [100.0, 120.0, 90.0], "probe": [0.5, 1.1, 0.55]},
           "stream": {"wall": [90.0, 96.0, 90.0], "probe": [0.6, 0.6, 0.62]}}  # fmt: skip
    s = ab.summary(res)
    a, f = s["all"], s["fast"]
    assert (a["pairs"], a["step_ms"], a["stream_ms"]) == (3, 100.0, 90.0)
    assert (a["ratio_min"], a["ratio_median"], a["ratio_max"]) == pytest.approx((0.8, 0.9, 1.0))
    assert (f["pairs"], f["step_ms"], f["stream_ms"]) == (2, 95.0, 90.0)
    assert (f["ratio_min"], f["ratio_max"]) == pytest.approx((0.9, 1.0))
    assert s["fastest_probe_ms"] == 0.5 and s["step_probe_ms"] == 0.55
    # no pair at the fast level: said, not a summary of nothing
    slow = {"step": {"wall": [1.0], "probe": [0.5]}, "stream": {"wall": [1.0], "probe": [1.0]}}
    assert ab.summary(slow)["fast"] is None
    assert "no pair" in ab._line("fast", None)


def test_sync_sites_keep_only_synchronizing_calls() -> None:
    # torch's two warnings under the sync debug mode: a synchronizing call's, and the
    # notice that setting the mode gives once a process (its text has "synchronizing"
    # too: it was counted as a sync of the first mode checked)
    def warning(text, where, line):
        return warnings.WarningMessage(UserWarning(text), UserWarning, where, line)

    caught = [
        warning("Synchronization debug mode is a prototype feature and does not yet detect "
                "all synchronizing operations", "/t/torch/cuda/__init__.py", 1270),
        warning("called a synchronizing CUDA operation", "/w/domino_prof/train.py", 131),
        warning("an unrelated warning", "/w/x.py", 1),
        warning("called a synchronizing CUDA operation", "/w/emulate.py", 601),
    ]
    assert ab.sync_sites(caught) == ["train.py:131", "emulate.py:601"]
    assert ab.sync_sites(caught[:1]) == []


def test_cpu_dry_run(tmp_path, capsys) -> None:
    out = tmp_path / "ab.json"
    assert ab.main(["--device", "cpu", "--modes", "nocomm", "--pairs", "1", "--block", "2",
                    "--warmup", "1", "--json", str(out)]) == 0  # fmt: skip
    d = json.loads(out.read_text())
    pairs = d["modes"]["nocomm"]["pairs"]
    assert [len(pairs[t]["wall"]) for t in ("step", "stream")] == [1, 1]
    assert all(pairs[t]["wall"][0] > 0 for t in ("step", "stream"))
    assert d["shape"]["tp"] == 1 and d["shape"]["comm"] == "gloo"
    assert "--timing step against stream" in capsys.readouterr().out
