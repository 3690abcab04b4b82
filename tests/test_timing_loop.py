"""The timing loop's plan (reference_model/train.py): how the timed steps split into
blocks, when the modes interleave block by block, and what the issue's CPU time counts.
The loop itself runs in tests/test_run_cli.py (a real CPU run)."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("torch")

from domino_prof.reference_model.config import MODES, RunConfig, preset, tiny  # noqa: E402
from domino_prof.reference_model.train import block_sizes, interleaved  # noqa: E402


def test_block_sizes_keep_the_rest_in_a_short_last_block():
    assert block_sizes(RunConfig(model=tiny(), timed_steps=10, block_steps=4)) == [4, 4, 2]
    assert block_sizes(RunConfig(model=tiny(), timed_steps=8, block_steps=4)) == [4, 4]
    assert block_sizes(RunConfig(model=tiny(), timed_steps=3, block_steps=4)) == [3]
    assert block_sizes(RunConfig(model=tiny(), timed_steps=200, block_steps=4)) == [4] * 50


def test_modes_interleave_on_cpu_when_every_mode_fits():
    assert interleaved(RunConfig(model=tiny(), modes=MODES))  # the default run
    assert not interleaved(RunConfig(model=tiny(), modes=("domino",)))  # nothing to alternate
    # CUDA: whole modes one after the other (each mode's peak memory is its own)
    assert not interleaved(RunConfig(model=tiny(), modes=MODES, device="cuda"))
    # llama3-8b on CPU: 16 B/param × 8.0e9 / tp 2 × 5 modes = 320 GB per rank: no
    assert not interleaved(RunConfig(model=preset("llama3-8b"), modes=MODES))


def test_block_steps_must_be_positive():
    from domino_prof.errors import ConfigError

    with pytest.raises(ConfigError, match="--block-steps must be >= 1, got 0"):
        RunConfig(model=tiny(), block_steps=0).validate()


def test_issue_cpu_time_counts_the_hosts_work_not_its_waits():
    """run.json's issue_cpu_times_ms is the issuing thread's CPU time over each step's
    issue: a step that sleeps 40 ms (off the core) adds 40 ms to issue_times_ms and
    nothing to it; one that spins 40 ms on the core adds 40 ms to both."""
    import statistics
    import time

    import torch

    from domino_prof.reference_model.train import ModeRun

    # --timing step: a probe after every step (stream timing probes once a block)
    cfg = RunConfig(model=tiny(), tp=1, seq=8, mbs=2, modes=("tp",), timing="step").validate()
    run = ModeRun(cfg, "tp", device=torch.device("cpu"))
    real = run.runner.step

    def spin(s):
        t = time.thread_time()
        while time.thread_time() - t < s:
            pass

    run.timed_block(2)  # the plain steps' times: the baseline
    for extra in (lambda: time.sleep(0.04), lambda: spin(0.04)):
        run.runner.step = lambda inp, tgt, extra=extra: (extra(), real(inp, tgt))[1]
        run.timed_block(2)
    r = run.result(interleave=False)
    wall, cpu = r["issue_times_ms"], r["issue_cpu_times_ms"]
    assert len(wall) == len(cpu) == 6 and r["issue_cpu_ms"] > 0
    plain_c = max(cpu[:2])
    assert all(w >= 40 for w in wall[2:])  # the sleeping steps
    assert all(c < plain_c + 20 for c in cpu[2:4])
    assert all(c >= 40 for c in cpu[4:])  # the spinning steps
    probes = r["host_probe_times_ms"]  # train.host_probe after every timed step
    assert len(probes) == 6 and all(p > 0 for p in probes)
    meds = [statistics.median(probes[i : i + 2]) for i in (0, 2, 4)]  # three blocks of 2
    assert r["host_probe_ms"] == pytest.approx(statistics.median(meds))


def test_timing_must_be_stream_or_step():
    from domino_prof.errors import ConfigError

    with pytest.raises(ConfigError, match="--timing must be one of auto, stream, step, got 'both'"):
        RunConfig(model=tiny(), timing="both").validate()


def test_timing_auto_is_stream_on_cuda_and_step_on_cpu():
    # validate resolves auto by device (config._resolve_timing); a named timing is kept
    assert RunConfig(model=tiny(), tp=1, modes=("tp",)).timing == "auto"
    assert RunConfig(model=tiny(), tp=1, modes=("tp",))._resolve_timing().timing == "step"
    cuda = RunConfig(model=tiny(), tp=1, modes=("tp",), device="cuda")
    assert cuda._resolve_timing().timing == "stream"
    assert dataclasses.replace(cuda, timing="step")._resolve_timing().timing == "step"
    assert RunConfig(model=tiny(), tp=1, modes=("tp",)).validate().timing == "step"


def test_the_mode_header_names_stream_timing_only():
    from domino_prof.reference_model.train import _header

    stream = RunConfig(model=tiny(), tp=1, modes=("tp",), timing="stream").validate()
    step = RunConfig(model=tiny(), tp=1, modes=("tp",)).validate()
    assert ", timed back to back (--timing stream)" in _header(stream, "tp")
    assert "timed back to back" not in _header(step, "tp")


def test_step_marks_on_cpu_are_the_host_clock(monkeypatch):
    from domino_prof.reference_model import train

    clock = iter([1.0, 1.5, 2.25, 2.26])
    monkeypatch.setattr(train.time, "perf_counter", lambda: next(clock))
    m = train.StepMarks(train.torch.device("cpu"))
    for _ in range(4):
        m.mark()
    assert m.intervals_ms() == pytest.approx([500.0, 750.0, 10.0])


def test_step_marks_on_cuda_are_events_timed_one_to_the_next(monkeypatch):
    """CUDA marks are events recorded on the current stream, timed by elapsed_time from
    each to the next (a stand-in Event: its device time is the order it was recorded in,
    times 10 ms)."""
    from domino_prof.reference_model import train

    recorded = []

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t = None

        def record(self, stream=None):
            assert stream is None  # the current stream
            self.t = 10.0 * len(recorded) ** 2
            recorded.append(self)

        def elapsed_time(self, end):
            return end.t - self.t

    monkeypatch.setattr(train.torch.cuda, "Event", Event)
    m = train.StepMarks(train.torch.device("cuda", 0))
    for _ in range(4):
        m.mark()
    assert len(recorded) == 4
    assert m.intervals_ms() == [10.0, 30.0, 50.0]  # 0, 10, 40, 90 ms


def test_a_stream_block_reads_its_losses_after_its_steps_and_probes_once():
    """--timing stream: the block's steps are issued back to back, no loss
    read between them; each step's time runs from the mark after the step before (the
    block's start) to the mark after it, so a step that spends 40 ms on the host is at
    least 40 ms; the losses are read after the block, the host probed once."""
    import time

    import torch

    from domino_prof.reference_model.train import ModeRun

    cfg = RunConfig(model=tiny(), tp=1, seq=8, mbs=2, modes=("tp",), timing="stream").validate()
    run = ModeRun(cfg, "tp", device=torch.device("cpu"))
    real = run.runner.step
    read = []

    class Loss(float):  # a loss whose read is seen
        def __float__(self):
            read.append(len(seen))
            return float.__float__(self)

    seen = []

    def step(inp, tgt):
        time.sleep(0.04)
        seen.append(1)
        return Loss(float(real(inp, tgt)))

    run.runner.step = step
    run.timed_block(3)
    assert read == [3, 3, 3]  # every loss read after the block's third step
    r = run.result(interleave=False)
    assert len(r["step_times_ms"]) == 3 and all(t >= 40 for t in r["step_times_ms"])
    assert len(r["host_probe_times_ms"]) == 1 and r["host_probe_ms"] > 0
    assert len(r["losses"]) == 3 and run.step == 3
    # the block's first step's issue only: a later step's may hold waits for a full queue
    assert len(r["issue_times_ms"]) == len(r["issue_cpu_times_ms"]) == 1
    assert r["issue_times_ms"][0] >= 40


def test_no_mode_is_timed_after_a_profile(tmp_path, monkeypatch):
    """The modes run one after the other (not interleaved: the CUDA order): every mode's
    timed steps come before any profile, since a profile leaves the process slower on the
    host (train.run_modes says why); the last mode profiles after its own timed steps,
    the others are built, warmed up and profiled again at the end. Each mode's run.json
    entry is its timed pass's, and each has its trace."""
    import torch

    from domino_prof.reference_model import train

    cfg = RunConfig(model=tiny(), tp=1, seq=8, mbs=2, modes=("tp", "domino", "sp"),
                    timed_steps=2, block_steps=2, profile_steps=1).validate()  # fmt: skip
    events = []
    real = train.ModeRun

    class Logged(real):
        def __init__(self, cfg, mode, **kw):
            events.append(("build", mode))
            super().__init__(cfg, mode, **kw)

        def timed_block(self, n):
            events.append(("time", self.mode))
            super().timed_block(n)

        def profile(self, out):
            events.append(("profile", self.mode))
            super().profile(out)

    monkeypatch.setattr(train, "ModeRun", Logged)
    monkeypatch.setattr(train, "interleaved", lambda cfg: False)
    res = train.run_modes(cfg, device=torch.device("cpu"), out=tmp_path)
    assert events == [
        ("build", "tp"), ("time", "tp"),
        ("build", "domino"), ("time", "domino"),
        ("build", "sp"), ("time", "sp"), ("profile", "sp"),
        ("build", "tp"), ("profile", "tp"),
        ("build", "domino"), ("profile", "domino"),
    ]  # fmt: skip
    assert list(res) == ["tp", "domino", "sp"]
    for mode, r in res.items():
        assert len(r["step_times_ms"]) == 2
        assert len(r["losses"]) == cfg.warmup_steps + 2  # the timed pass's steps
        assert (tmp_path / mode / "rank0.pt.trace.json.gz").is_file()
