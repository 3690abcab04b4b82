"""domino-sp's host cost per step, counted (never timed), so it cannot silently regress.

Issue 19: eager domino-sp was host-bound on one H200 (issue time = wall time) while
domino was not. On the host a step costs the aten ops it dispatches, the Python around
them and, on CUDA, the side stream's bookkeeping: stream switches and the events that
order the two streams. Each ``torch.cuda.stream(...)`` context or ``current_stream()``
lookup runs tens of Python calls of torch.cuda (device index, availability checks, a new
Stream object), and the side-stream path used to do about ten switches, five event
objects and ten current-stream lookups per (unit, micro-batch).

Counted here in one CPU process at tp 1 (every collective a copy, as in
benchmarks/bench_schedule.py), the side stream run through ``streams.CountingStreams``:

* aten ops (TorchDispatchMode) of a domino-sp step with n micro-batches
  ≤ n × those of an sp step (the same segments per micro-batch) + PER_UNIT_MB_OPS per
  (unit, micro-batch) (the joint weight gradients' row blocks, sp_step.py), and
  ≤ (1 + DOMINO_SLACK) × those of a domino step with n micro-batches (its extra ops are
  the tp-1 gathers' and scatters' buffer + copy);
* Python and C calls (``sys.setprofile``) of a domino-sp step ≤ n × sp's
  + PER_UNIT_MB_CALLS per (unit, micro-batch): the side stream's own bookkeeping (with
  CountingStreams; on CUDA each of its calls is a torch.cuda wrapper and one CUDA call);
* per (unit, micro-batch), side-stream calls: exactly 4 stream switches (each chain,
  forward and backward, switches to the side stream once and back once), ≤ 5 events
  recorded and ≤ 5 waited for, one join per step, and no event created after the first
  step (a pool);
* the side-stream path computes exactly what the single-stream path does (bitwise).
"""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from domino_prof.reference_model.comm import ProcessGroupComm  # noqa: E402
from domino_prof.reference_model.config import ModelConfig  # noqa: E402
from domino_prof.reference_model.parallel import shard_model  # noqa: E402
from domino_prof.reference_model.schedule import StepRunner  # noqa: E402
from domino_prof.reference_model.streams import CountingStreams  # noqa: E402
from domino_prof.reference_model.verify import batch  # noqa: E402

# aten ops a domino-sp (unit, micro-batch) may add over an sp step's share: the views of
# the joint weight gradients' [ΣT, ·] buffers and the sequence-major dqkv's copy into its
# block; the n W GEMMs per unit become one (measured 2026-12-06: +15 (2 layers, n 2) and
# +18 (4 layers, n 3) over n × sp, i.e. 1.5 and 0.7 per (unit, micro-batch); with one W per
# micro-batch, --wgrad-in accumulate: -5 and -10)
PER_UNIT_MB_OPS = 3
DOMINO_SLACK = 0.20  # domino-sp's aten ops over domino's (measured: +8-12%)
PER_UNIT_MB_CALLS = 40  # measured 32: 5 events recorded, 5 waits, 4 switches, held tuples
SWITCHES = 4  # per (unit, micro-batch): forward chain in + out, backward chain in + out
EVENTS = 5  # per (unit, micro-batch): forward 2 (reduce-scatter, all-gather), backward 3


def _cfg(layers: int) -> ModelConfig:
    return ModelConfig(name="host-cost", dim=64, ffn_dim=128, n_heads=4, n_kv_heads=2,
                       n_layers=layers, vocab_size=128)  # fmt: skip


class _AtenOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def _runner(cfg, schedule: str, splits: int, *, counting: bool = False, graphs: bool = False):
    comm = ProcessGroupComm()  # not initialised: tp 1, gathers and scatters are copies
    model = shard_model(cfg, comm, seed=1, device="cpu", dtype=torch.float32)
    r = StepRunner(model, comm, schedule=schedule, splits=splits, graphs=graphs)
    streams = None
    if counting:
        streams = CountingStreams()
        r.executor.use_streams(streams)
    return r, streams


def _step_cost(r, inp, tgt) -> tuple[int, int]:
    """(aten ops, Python + C calls) of one steady-state step (after a first one)."""
    r.step(inp, tgt)
    with _AtenOps() as ops:
        r.step(inp, tgt)
    calls = 0

    def prof(frame, event, arg):
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(prof)
    try:
        r.step(inp, tgt)
    finally:
        sys.setprofile(None)
    return ops.n, calls


@pytest.mark.parametrize("layers,n", [(2, 2), (4, 3)])
def test_domino_sp_host_cost_is_n_sp_steps(layers, n):
    cfg = _cfg(layers)
    inp, tgt = batch(cfg, mbs=6, seq=8, seed=7, device="cpu")
    sp_ops, sp_calls = _step_cost(_runner(cfg, "sp", 1)[0], inp, tgt)
    d_ops, _ = _step_cost(_runner(cfg, "domino", n)[0], inp, tgt)
    r, streams = _runner(cfg, "domino-sp", n, counting=True)
    ds_ops, ds_calls = _step_cost(r, inp, tgt)
    units = 2 * layers + 1  # attn and mlp of every layer, the head
    assert ds_ops <= n * sp_ops + n * units * PER_UNIT_MB_OPS, (ds_ops, sp_ops)
    assert ds_ops <= (1 + DOMINO_SLACK) * d_ops, (ds_ops, d_ops)
    assert ds_calls <= n * sp_calls + n * units * PER_UNIT_MB_CALLS, (ds_calls, sp_calls)

    # side-stream calls of one steady-state step
    streams.calls.clear()
    r.step(inp, tgt)
    c = streams.calls
    assert c["set"] == SWITCHES * units * n, dict(c)
    assert c["record"] <= EVENTS * units * n, dict(c)
    assert c["wait"] <= EVENTS * units * n, dict(c)
    assert c["join"] == 1, dict(c)
    assert c["event"] == 0, dict(c)  # the pool from the first step is reused
    assert streams.stream == "main"  # every switch to the side stream came back


@pytest.mark.parametrize("splits,graphs", [(2, False), (3, False), (2, True)])
def test_side_stream_path_computes_what_the_single_stream_path_does(splits, graphs):
    """domino-sp with the side stream (CountingStreams: the chains, held tensors, event
    handles, stream joins all taken) and without: identical loss and gradients, two steps
    each (graphs: capture, then replay on fixed buffers)."""
    cfg = _cfg(2)
    inp, tgt = batch(cfg, mbs=6, seq=8, seed=3, device="cpu")
    out = []
    for counting in (False, True):
        r, streams = _runner(cfg, "domino-sp", splits, counting=counting, graphs=graphs)
        losses = [r.step(inp, tgt) for _ in range(2)]
        grads = {k: p.grad.clone() for k, p in r.model.named_parameters()}
        out.append((losses, grads))
        if counting:
            assert streams.calls["set"] > 0 and streams.stream == "main"
    (l0, g0), (l1, g1) = out
    assert all(torch.equal(a, b) for a, b in zip(l0, l1))
    assert g0.keys() == g1.keys()
    for k in g0:
        assert torch.equal(g0[k], g1[k]), k
