"""``--graph-scope step``: one CUDA graph per step, collectives captured (executor.py).

On CPU the graph is the executor's stand-in (capture runs the step; replay runs it again
on the captured inputs and copies the results into the captured outputs), so these
tests check what the scope changes in the data flow: a replay must compute the batch it
is given (its inputs are copied into the captured ones), write the runner's gradient
buffers, and hold every tensor a collective touches until it is waited for. The gloo
cases (tests/gloo_cases.py: ``domino-step-graphs``, ``domino-sp-step-graphs``) check the
gradients against the unsharded model on 2 and 4 ranks.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from domino_prof.errors import ConfigError
from domino_prof.reference_model.config import RunConfig, tiny


def _runner(schedule, graphs, scope="segment", splits=2):
    from domino_prof.reference_model import schedule as S
    from domino_prof.reference_model.comm import ProcessGroupComm
    from domino_prof.reference_model.parallel import shard_model

    comm = ProcessGroupComm()  # tp 1, no process group
    model = shard_model(tiny(), comm, seed=1)
    return model, S.StepRunner(model, comm, schedule=schedule, splits=splits, graphs=graphs,
                               graph_scope=scope)  # fmt: skip


@pytest.mark.parametrize("schedule", ["tp", "domino"])
def test_step_graph_replays_the_batch_it_is_given(schedule):
    """Captured on batch A, replayed on batch B: loss and every gradient equal an eager
    runner's on B, bit for bit (the same ops in the same order, fp32 CPU); one graph."""
    from domino_prof.reference_model.verify import batch

    cfg = tiny()
    a = batch(cfg, mbs=2, seq=8, seed=1, device="cpu")
    b = batch(cfg, mbs=2, seq=8, seed=2, device="cpu")
    assert not torch.equal(a[0], b[0])
    m_eager, eager = _runner(schedule, graphs=False)
    m_graph, graph = _runner(schedule, graphs=True, scope="step")
    graph.step(*a)  # capture (on A)
    assert graph.graphs_per_step == 1
    loss_a = float(eager.step(*a))
    loss_b = float(eager.step(*b))
    assert loss_a != loss_b
    want = {n: p.grad.clone() for n, p in m_eager.named_parameters()}
    assert float(graph.step(*b)) == loss_b  # replay, fed B
    for n, p in m_graph.named_parameters():
        assert torch.equal(p.grad, want[n]), n
    assert float(graph.step(*a)) == loss_a  # and back


def test_segment_scope_keeps_a_graph_per_segment():
    from domino_prof.reference_model.verify import batch

    inp = batch(tiny(), mbs=2, seq=8, seed=1, device="cpu")
    _, seg = _runner("domino", graphs=True)
    seg.step(*inp)
    # tiny: 2 layers x 2 units x 2 micro-batches, forward and backward, + head / embedding
    assert seg.graphs_per_step > 16


def test_step_capture_holds_collective_tensors_until_waited():
    """Inside a whole-step capture an async collective's tensors ride on its Pending
    (freed with it, after the wait); one waited on the side stream, and a synchronous
    one issued there, are held until the streams join."""
    from domino_prof.reference_model.comm import NoComm
    from domino_prof.reference_model.executor import SegmentExecutor
    from domino_prof.reference_model.streams import CountingStreams

    ex = SegmentExecutor(NoComm(), device=torch.device("cpu"), graphs=True, graph_scope="step")
    ex.use_streams(CountingStreams())
    t, u, v = torch.ones(4), torch.ones(4), torch.ones(4)
    p = ex.launch(("ar", 0, 0), "all_reduce", t, async_op=True)
    assert p.held == ()  # not capturing: nothing held
    ex._step_capture = True
    p = ex.launch(("ar", 0, 0), "all_reduce", t, async_op=True)
    assert p.held == (t,)
    ex.wait(p)  # on the compute stream: nothing more to hold
    assert ex._held == []
    q = ex.launch(("ar", 1, 0), "all_reduce", u, async_op=True)
    ex.wait(q, side=True)
    assert ex._held == [(u,)]
    ex.launch(("ar", 2, 0), "all_reduce", v, async_op=False, side=True)
    assert ex._held == [(u,), (v,)]
    ex.join_side()
    assert ex._held == []


def test_graph_scope_is_checked():
    cfg = tiny()
    with pytest.raises(ConfigError, match="--graph-scope must be auto, segment or step"):
        RunConfig(model=cfg, graph_scope="layer").validate()
    with pytest.raises(ConfigError, match="--graph-scope step needs --cuda-graphs"):
        RunConfig(model=cfg, graph_scope="step").validate()
    with pytest.raises(ValueError, match="graph_scope 'layer'"):
        _runner("tp", graphs=True, scope="layer")


def test_graph_scope_auto_resolves_to_what_can_be_captured():
    """auto: the whole step where its collectives can be captured (emulated; tp 1, where
    there are none), a graph per segment with real NCCL at tp >= 2 and without graphs;
    run.json records the resolved scope."""
    cfg = tiny()

    def scope(**kw):
        return RunConfig(model=cfg, device="cuda", **kw).validate().graph_scope

    assert scope(tp=8, comm="emulate", cuda_graphs=True) == "step"
    assert scope(tp=1, comm="nccl", cuda_graphs=True) == "step"
    assert scope(tp=1, cuda_graphs=True) == "step"  # comm auto: nccl on CUDA
    assert scope(tp=2, cuda_graphs=True) == "segment"
    assert scope(tp=2, comm="nccl", cuda_graphs=True) == "segment"
    assert scope(tp=8, comm="emulate") == "segment"  # no graphs
    assert scope(tp=2, comm="nccl", cuda_graphs=True, graph_scope="segment") == "segment"
    assert scope(tp=8, comm="emulate", cuda_graphs=True, graph_scope="segment") == "segment"


def test_graph_scope_step_refuses_real_nccl():
    with pytest.raises(ConfigError, match="real NCCL"):
        RunConfig(model=tiny(), tp=2, device="cuda", comm="nccl", cuda_graphs=True,
                  graph_scope="step").validate()  # fmt: skip
    with pytest.raises(ConfigError, match="real NCCL"):  # comm auto is nccl on CUDA
        RunConfig(model=tiny(), tp=2, device="cuda", cuda_graphs=True,
                  graph_scope="step").validate()  # fmt: skip
