"""``--mb-streams 2``: domino's two micro-batches each on a CUDA stream (lane) of its own.

Gradients against the unsharded model at tp 2 on gloo are tests/gloo_cases.py SPLIT_CASES
(``*-lanes*``: uneven sizes, the column split, accumulate, a whole-step graph). CPU has no
CUDA streams, so here the lanes run on ``streams.CountingStreams`` and the test reads the
order of stream calls and segments the step issued, against the rules written out in
tp_step.py: which lane each segment runs on, what the follower waits for, where the
weight gradients go, the barrier between the phases and the join at the end.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from domino_prof.errors import ConfigError
from domino_prof.reference_model.config import RunConfig, tiny


def _logging_streams():
    """CountingStreams that also log each call in order: (call, event or stream, stream)."""
    from domino_prof.reference_model.streams import CountingStreams

    class Logging(CountingStreams):
        def __init__(self) -> None:
            super().__init__()
            self.log: list = []

        def record(self, ev, stream) -> None:
            super().record(ev, stream)
            self.log.append(("record", ev, stream))

        def wait(self, ev, stream) -> None:
            super().wait(ev, stream)
            self.log.append(("wait", ev, stream))

        def join(self, main, side) -> None:
            super().join(main, side)
            self.log.append(("join", side, main))

    return Logging()


def _lanes_step(wgrad_in: str = "joint", mb_streams: int = 2):
    """One tiny domino step (2 layers, 2 micro-batches, no collectives) with lanes on
    CountingStreams; the log holds the stream calls and ("run", key, stream) per segment."""
    from domino_prof.reference_model.comm import SkipComm
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    cfg = tiny()
    inp, tgt = batch(cfg, mbs=2, seq=8, seed=1, device="cpu")
    comm = SkipComm(2, 1)
    model = shard_model(cfg, comm, seed=1)
    runner = StepRunner(model, comm, schedule="domino", splits=2, wgrad_in=wgrad_in,
                        mb_streams=mb_streams)  # fmt: skip
    cs = _logging_streams()
    ex = runner.executor
    if mb_streams == 2:
        ex.use_lane_streams(cs)
    run = ex.run

    def logged(key, fn, *args, pre=None, **kw):
        if pre is not None:
            cs.log.append(("run", pre.key, cs.stream))
        cs.log.append(("run", key, cs.stream))
        return run(key, fn, *args, pre=pre, **kw)

    ex.run = logged
    loss = runner.step(inp, tgt)
    return cs, ex, loss, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("lock", ["dgrad", "off"])
def test_lanes_give_the_same_gradients_bit_for_bit(lock, monkeypatch):
    monkeypatch.setenv("DOMINO_PROF_LANE_LOCK", lock)  # dgrad: the lanes' default
    for wgrad_in in ("joint", "accumulate"):
        _, _, l1, g1 = _lanes_step(wgrad_in, mb_streams=1)
        _, _, l2, g2 = _lanes_step(wgrad_in, mb_streams=2)
        assert float(l1) == float(l2)
        assert all(torch.equal(a, b) for a, b in zip(g1, g2))


@pytest.mark.parametrize("phases", ["fwd,bwd", "bwd"])
def test_lanes_order_the_two_micro_batches_as_written(phases, monkeypatch):
    """The unlocked lanes (DOMINO_PROF_LANE_LOCK=off; the lock's own order is
    test_the_lane_lock_alternates_the_dgrads)."""
    monkeypatch.setenv("DOMINO_PROF_LANE_PHASES", phases)
    monkeypatch.setenv("DOMINO_PROF_LANE_LOCK", "off")
    cs, ex, _, _ = _lanes_step()
    split_fwd = phases == "fwd,bwd"
    log = cs.log
    runs = [(i, e[1], e[2]) for i, e in enumerate(log) if e[0] == "run"]
    # fork: the first stream calls are a record on the step's stream, both lanes wait it
    assert [e[0] for e in log[:3]] == ["record", "wait", "wait"]
    assert log[0][2] == "main" and {log[1][2], log[2][2]} == {"lead", "follow"}
    assert log[1][1] is log[0][1] and log[2][1] is log[0][1]
    # each segment on its micro-batch's lane: forward 0 leads, backward 1 leads
    fwd = {"emb", "F", "H1", "H2", "H3"}
    last_fwd = max(i for i, k, _ in runs if k[0] in fwd)
    for i, key, stream in runs:
        name, _, b = key[:3]
        if name == "W":  # weight gradients: inside micro-batch 0's backward segments
            assert stream == "follow", key
            nxt = next(k for j, k, _ in runs if j > i)
            assert nxt[2] == 0 and nxt[0] in ("D", "HD", "E"), (key, nxt)
            continue
        lead = (b == 0 or not split_fwd) if i <= last_fwd else (b == 1)
        assert stream == ("lead" if lead else "follow"), key
    # one W per unit: 4 sub-layers and the head
    assert sorted(k[1] for _, k, _ in runs if k[0] == "W") == [0, 1, 2, 3, 4]

    def wait_before(i):  # the last wait on the follower lane before log[i]
        return next(log[j] for j in range(i - 1, -1, -1)
                    if log[j][0] == "wait" and log[j][2] == "follow")  # fmt: skip

    def recorded_at(ev, before):  # index of the last record of ev before `before`
        return max(j for j in range(before) if log[j][0] == "record" and log[j][1] is ev)

    for i, key, stream in runs:
        name, u, b = key[:3]
        if stream != "follow" or name == "W":
            continue
        assert i > last_fwd or split_fwd, key  # "bwd": no follower in forward
        if i <= last_fwd and name in ("F", "H1"):
            # forward follower: waits for the leader's point just before its segment of
            # the same unit (after the [ΣT, ·] buffers were allocated there)
            w = wait_before(i)
            r = recorded_at(w[1], i)
            assert log[r][2] == "lead"
            lead_run = next(j for j, k, _ in runs if k[:3] == (name, u, 0))
            assert r < lead_run < i, key
            prev_lead = [j for j, k, s in runs if s == "lead" and j < lead_run]
            assert not prev_lead or prev_lead[-1] < r, key
        if i > last_fwd and name in ("D", "HD", "E") and b == 0:
            # backward follower: waits for the end of the leader's segment of the unit
            w = wait_before(i)
            r = recorded_at(w[1], i)
            lead_run = next(j for j, k, _ in runs if k[:3] == (name, u, 1))
            assert log[r][2] == "lead" and lead_run < r < i, key
    # forward -> backward: each lane waits for the other's forward
    first_bwd = min(i for i, k, _ in runs if i > last_fwd)
    between = [e for e in log[last_fwd + 1 : first_bwd] if e[0] in ("record", "wait")]
    recs = {e[2]: e[1] for e in between if e[0] == "record"}
    waits = {e[2]: e[1] for e in between if e[0] == "wait"}
    assert set(recs) == {"lead", "follow"}
    assert waits["lead"] is recs["follow"] and waits["follow"] is recs["lead"]
    # the end: the step's stream joins both lanes; nothing is held after the step
    assert [(e[0], e[1], e[2]) for e in log[-2:]] == [("join", "lead", "main"),
                                                      ("join", "follow", "main")]  # fmt: skip
    assert ex._held == []


def test_lane_knobs_are_checked(monkeypatch):
    from domino_prof.reference_model.config import lane_phases, lane_priorities

    assert lane_priorities() == (-100, 0) and lane_phases() == ("fwd", "bwd")
    monkeypatch.setenv("DOMINO_PROF_LANE_PRIORITY", "-1,0")
    monkeypatch.setenv("DOMINO_PROF_LANE_PHASES", "bwd")
    assert lane_priorities() == (-1, 0) and lane_phases() == ("bwd",)
    monkeypatch.setenv("DOMINO_PROF_LANE_PRIORITY", "high")
    with pytest.raises(ValueError, match="give two integers, lead,follow"):
        lane_priorities()
    with pytest.raises(ConfigError, match="--mb-streams 2: DOMINO_PROF_LANE_PRIORITY='high': "
                                          "give two integers"):  # fmt: skip
        RunConfig(model=tiny(), device="cuda", mb_streams=2).validate()
    monkeypatch.setenv("DOMINO_PROF_LANE_PHASES", "fwd,back")
    with pytest.raises(ValueError, match="give fwd,bwd or bwd or fwd"):
        lane_phases()


def test_run_json_records_the_lanes_knobs(monkeypatch):
    from domino_prof.reference_model.config import lanes_info

    assert lanes_info(RunConfig(model=tiny())) is None
    cfg = RunConfig(model=tiny(), device="cuda", comm="emulate", tp=2, mb_streams=2)
    assert lanes_info(cfg) == {"phases": ["fwd", "bwd"], "priority": [-100, 0],
                               "comm": "shared", "lock": "dgrad"}  # fmt: skip
    monkeypatch.setenv("DOMINO_PROF_LANE_PHASES", "bwd")
    monkeypatch.setenv("DOMINO_PROF_LANE_PRIORITY", "0,0")
    monkeypatch.setenv("DOMINO_PROF_LANE_COMM", "own")
    monkeypatch.setenv("DOMINO_PROF_LANE_LOCK", "off")
    assert lanes_info(cfg) == {"phases": ["bwd"], "priority": [0, 0], "comm": "own",
                               "lock": "off"}  # fmt: skip


def test_lane_lock_knob_is_checked(monkeypatch):
    from domino_prof.reference_model.config import lane_lock

    assert lane_lock() == "dgrad"
    monkeypatch.setenv("DOMINO_PROF_LANE_LOCK", "off")
    assert lane_lock() == "off"
    RunConfig(model=tiny(), device="cuda", tp=2, mb_streams=2).validate()
    monkeypatch.setenv("DOMINO_PROF_LANE_LOCK", "on")
    with pytest.raises(ConfigError, match="--mb-streams 2: DOMINO_PROF_LANE_LOCK='on': "
                                          "give dgrad or off"):  # fmt: skip
        RunConfig(model=tiny(), device="cuda", tp=2, mb_streams=2).validate()


@pytest.mark.parametrize("wgrad_in", ["joint", "accumulate"])
def test_the_lane_lock_alternates_the_dgrads(wgrad_in, monkeypatch):
    """DOMINO_PROF_LANE_LOCK=dgrad (tp_step.py): gradients bit-equal to one stream's; each
    unit's weight gradients run as a segment of their own on the follower's lane right
    after its dgrad of the unit (none deferred into a later segment); every backward
    segment of the leader but the first waits for an event the follower recorded right
    after its previous dgrad, before that unit's weight gradients."""
    _, _, l1, g1 = _lanes_step(wgrad_in, mb_streams=1)
    monkeypatch.setenv("DOMINO_PROF_LANE_LOCK", "dgrad")
    cs, ex, l2, g2 = _lanes_step(wgrad_in, mb_streams=2)
    assert float(l1) == float(l2)
    assert all(torch.equal(a, b) for a, b in zip(g1, g2))
    log = cs.log
    runs = [(i, e[1], e[2]) for i, e in enumerate(log) if e[0] == "run"]
    bwd = [(i, k, s) for i, k, s in runs if k[0] in ("HD", "D", "E", "W")]
    ws = [(i, k, s) for i, k, s in bwd if k[0] == "W"]
    assert sorted(k[1] for _, k, _ in ws) == [0, 1, 2, 3, 4]  # the head and 4 sub-layers
    for i, key, stream in ws:
        prev = max((j, k, s) for j, k, s in bwd if j < i and k[0] != "W")
        assert stream == "follow" and prev[2] == "follow" and prev[1][1:3] == (key[1], 0), key
        # its own run: the log's previous run is the follower's dgrad, not a pre
        assert runs[[r[0] for r in runs].index(i) - 1][0] == prev[0], key
    leads = [(i, k) for i, k, s in bwd if s == "lead"]
    assert [k[0] for _, k in leads] == ["HD", "D", "D", "D", "D", "E"]
    for i, key in leads[1:]:
        w = next(log[j] for j in range(i - 1, -1, -1)
                 if log[j][0] == "wait" and log[j][2] == "lead")  # fmt: skip
        r = max(j for j in range(i) if log[j][0] == "record" and log[j][1] is w[1])
        assert log[r][2] == "follow", key
        fol_d = max(j for j, k, s in bwd if j < r and s == "follow" and k[0] != "W")
        fol_w = [j for j, k, s in ws if fol_d < j < i]
        assert all(r < j for j in fol_w), key  # recorded before the unit's W
        # the follower's dgrad it waits for is of the unit just above the leader's
        assert any(k[0] == "W" for j, k, s in bwd if fol_d < j < i), key


def test_lane_comm_knob_is_checked(monkeypatch):
    from domino_prof.reference_model.config import lane_comm

    assert lane_comm() == "shared"
    kw = {"model": tiny(), "device": "cuda", "comm": "emulate", "tp": 2, "mb_streams": 2,
          "cuda_graphs": True}  # fmt: skip
    monkeypatch.setenv("DOMINO_PROF_LANE_COMM", "own")
    assert lane_comm() == "own"
    for engine in ("ce", "sm"):  # either stand-in takes the shared link
        RunConfig(comm_engine=engine, **kw).validate()
    RunConfig(model=tiny(), device="cuda", tp=2, mb_streams=2).validate()  # a real group
    monkeypatch.setenv("DOMINO_PROF_LANE_COMM", "two")
    with pytest.raises(ConfigError, match="--mb-streams 2: DOMINO_PROF_LANE_COMM='two': "
                                          "give shared or own"):  # fmt: skip
        RunConfig(comm_engine="ce", **kw).validate()


class _LaneComm:
    """A SkipComm that notes the stream current at each collective (CountingStreams')."""

    def __init__(self, streams) -> None:
        from domino_prof.reference_model.comm import SkipComm

        self.inner, self.streams, self.seen = SkipComm(2, 1), streams, []
        self.size, self.rank = 2, 1

    def all_reduce(self, t, *, async_op, op="sum"):
        self.seen.append(self.streams.stream)
        return self.inner.all_reduce(t, async_op=async_op, op=op)


def test_each_lane_issues_its_collectives_through_its_own_comm():
    """DOMINO_PROF_LANE_COMM=own: the executor sends lane i's collectives to lane_comms[i]
    (emulated: a comm stream each) and none to the runner's comm; the gradients are the
    shared comm's (a SkipComm both ways)."""
    from domino_prof.reference_model.comm import SkipComm
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    cfg = tiny()
    inp, tgt = batch(cfg, mbs=2, seq=8, seed=1, device="cpu")
    grads = []
    for own in (False, True):
        cs = _logging_streams()
        comm = SkipComm(2, 1)
        pair = (_LaneComm(cs), _LaneComm(cs)) if own else None
        model = shard_model(cfg, comm, seed=1)
        runner = StepRunner(model, comm, schedule="domino", splits=2, mb_streams=2,
                            lane_comms=pair)  # fmt: skip
        runner.executor.use_lane_streams(cs)
        runner.step(inp, tgt)
        grads.append([p.grad.clone() for p in model.parameters()])
    lead, follow = pair
    # 2 layers = 4 sub-layers; an all-reduce per sub-layer, micro-batch and phase; the
    # vocab-parallel head's all-reduces (max, sum) per micro-batch go with its lane too
    assert set(lead.seen) == {"lead"} and set(follow.seen) == {"follow"}
    assert len(lead.seen) == len(follow.seen) >= 8
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_lanes_hold_what_a_lane_touched_until_the_join():
    from domino_prof.reference_model.comm import NoComm
    from domino_prof.reference_model.executor import SegmentExecutor
    from domino_prof.reference_model.streams import CountingStreams

    ex = SegmentExecutor(NoComm(), device=torch.device("cpu"), mb_lanes=True)
    ex.use_lane_streams(CountingStreams())
    ex._begin()
    x = torch.ones(3)
    with ex.lane(1):
        (y,) = ex.run(("F", 0, 1), lambda t: (t + 1,), x)
        ex.launch(("ar", 0, 1), "all_reduce", y, async_op=False)
    assert ex._held == [(x,), (y,), (y,)]
    ex.join_lanes()
    assert ex._held == []


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"mb_streams": 3}, "--mb-streams must be 1 or 2, got 3"),
        ({"mb_streams": 2}, "--mb-streams 2 needs --device cuda"),
        ({"mb_streams": 2, "device": "cuda", "modes": ("tp", "sp")},
         "--mb-streams 2 applies to the micro-batched all-reduce modes (domino, "
         "domino-nocomm); --mode tp, sp takes none"),
        ({"mb_streams": 2, "device": "cuda", "splits": 4, "mbs": 4},
         "--mb-streams 2 takes 2 micro-batches, got --splits 4"),
        ({"mb_streams": 2, "device": "cuda", "cuda_graphs": True, "graph_scope": "segment",
          "comm": "emulate", "tp": 2}, "--mb-streams 2 with --cuda-graphs needs one graph per step"),
    ],
)  # fmt: skip
def test_config_errors(kw, needle):
    with pytest.raises(ConfigError) as e:
        RunConfig(model=tiny(), **kw).validate()
    assert needle in str(e.value)


def test_config_resolves_per_mode_and_round_trips():
    cfg = RunConfig(model=tiny(), device="cuda", comm="emulate", tp=2, cuda_graphs=True,
                    mb_streams=2).validate()  # fmt: skip
    assert cfg.graph_scope == "step"
    assert {m: cfg.mb_streams_for(m) for m in cfg.modes} == {
        "tp": 1, "nocomm": 1, "domino": 2, "domino-nocomm": 2, "sp": 1, "domino-sp": 1,
        "domino-sp-nocomm": 1}  # fmt: skip
    assert RunConfig.from_dict(cfg.to_dict()).mb_streams == 2


def test_runner_refuses_what_lanes_do_not_take():
    from domino_prof.reference_model.comm import SkipComm
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner

    comm = SkipComm(2, 1)
    model = shard_model(tiny(), comm, seed=1)
    for kw in ({"schedule": "domino", "splits": 3}, {"schedule": "domino-sp", "splits": 2},
               {"schedule": "tp"}):  # fmt: skip
        with pytest.raises(ValueError, match="mb_streams 2 takes a micro-batched all-reduce"):
            StepRunner(model, comm, mb_streams=2, **kw)
    with pytest.raises(ValueError, match="not a graph per segment"):
        StepRunner(model, comm, schedule="domino", splits=2, graphs=True, mb_streams=2)


def test_a_process_groups_lane_sibling_is_a_second_group():
    """ProcessGroupComm.lane_sibling at tp 2 on gloo (tests/gloo_cases.py): a new group of
    the same two ranks, kept, whose all-reduce sums: [1, 10] + [2, 20]."""
    from gloo_cases import results

    res = results(2)
    for rank in (0, 1):
        got = res[rank]["lane_sibling"]
        assert got == {"new_group": True, "kept": True, "size": 2, "rank": rank,
                       "label": "gloo", "sum": [3.0, 30.0]}  # fmt: skip
