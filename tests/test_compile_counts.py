"""``--compile`` counted (never timed): every segment of a step runs as one compiled
graph, with no graph break, no recompile after the first step and no per-layer variant.

On one H200 the sp row of benchmarks/bench_schedule.py with ``--compile`` was once
host-bound (reports/schedule-h200/confirm-2026-12-02: 138.5 ms wall, 138.1 ms issue).
The causes that would be ours are graph breaks, recompiles every step, a fallback to
eager, or a variant per layer (guards on something that differs per layer, e.g. the
storage offset of a norm weight's gradient, a view of SP's one flat buffer); this pins
all four down on CPU. (That row was the host's speed, not the code: the H200 checks of
reports/schedule-h200/compile-host-2026-12-02 measured the same Python calls per step in a
slow and a fast sp compile row of one process, and a pure-Python probe twice as slow in
the slow one.)

Per schedule (tp, sp, domino-sp, and domino with 2 micro-batches and Domino's column
split in 2, which adds a segment per chunk; tp 1 on CPU, 3 layers = 6 sub-layer units):

* the first step compiles each segment function fullgraph (a break would raise) into at
  most VARIANTS[fn] graphs — the variants the schedule's Python arguments ask for (layer
  kind, first micro-batch or not, None inputs), never one per layer;
* steps 2 and 3 compile nothing (Dynamo's counters do not move);
* in a step every segment call runs a compiled region ("Torch-Compiled Region" profiler
  events = the executor's segment runs, less the deferred weight gradients, which are
  never compiled).
"""

from __future__ import annotations

import collections

import pytest

torch = pytest.importorskip("torch")
from torch._dynamo.utils import counters  # noqa: E402

from domino_prof.reference_model.comm import ProcessGroupComm  # noqa: E402
from domino_prof.reference_model.config import ModelConfig  # noqa: E402
from domino_prof.reference_model.parallel import shard_model  # noqa: E402
from domino_prof.reference_model.schedule import StepRunner  # noqa: E402
from domino_prof.reference_model.verify import batch  # noqa: E402

LAYERS = 3
# compiled variants a segment function may need (measured on torch 2.13 CPU, 3 layers),
# none of them per layer: kind (attn / mlp); y or g None (first unit) or not; the first
# micro-batch (allocates the [N, T, .] buffers) or a later one; seg_norm_bwd's norm-grad
# view into SP's flat buffer at storage offset 0, 1 (Dynamo specialises both) and any
# other offset (one symbolic entry: 3 on CPU, 2 on the H200 with torch 2.11)
VARIANTS = {
    "seg_embed": 2,
    "seg_fwd": 9,  # measured 3 (tp)
    "seg_dgrad": 9,  # measured 3 (tp)
    "seg_embed_bwd": 3,  # measured 1 (tp)
    "seg_norm": 4,  # measured 2 (sp), 4 (domino-sp)
    "seg_core_fwd": 4,  # measured 2 (sp), 4 (domino-sp)
    "seg_core_dgrad": 4,  # measured 2 (sp), 4 (domino-sp)
    "seg_norm_bwd": 6,  # measured 3 (sp), 6 (domino-sp)
    "seg_head_logits": 5,
    "seg_head_stats": 2,
    "seg_head_loss": 2,
    "seg_head_dgrad": 4,
    "seg_scatter_add": 2,
    "seg_out_chunk": 10,  # measured 8 (domino, K = 2): per GEMM shape and micro-batch
}
# Dynamo's own counters that move when something is traced, breaks or recompiles
DYNAMO_KEYS = ("stats", "graph_break", "recompiles", "unimplemented", "frames")


def _cfg() -> ModelConfig:
    return ModelConfig(name="compile-counts", dim=64, ffn_dim=128, n_heads=4, n_kv_heads=2,
                       n_layers=LAYERS, vocab_size=128)  # fmt: skip


def _dynamo_counts() -> dict:
    return {(k, kk): v for k in DYNAMO_KEYS for kk, v in counters.get(k, {}).items()}


def _moved(before: dict, after: dict) -> dict:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def _entries(fn) -> int:
    return len(torch._C._dynamo.eval_frame._debug_get_cache_entry_list(fn.__code__))


@pytest.fixture
def dynamo_only(monkeypatch):
    """The executor's ``torch.compile`` with the ``aot_eager`` backend: Dynamo traces,
    guards, caches and breaks exactly as under the default backend (what is counted
    here), but no C++ kernel is generated, so no compiler toolchain is needed and the
    test is quick."""
    import functools

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))


@pytest.mark.parametrize("schedule", ["tp", "sp", "domino-sp", "domino-col2", "domino-acc"])
def test_compiled_step_counts(schedule, dynamo_only):
    torch._dynamo.reset()  # no entries from another test's compiled segments
    cfg = _cfg()
    inp, tgt = batch(cfg, mbs=2, seq=16, seed=3, device=torch.device("cpu"))
    comm = ProcessGroupComm()
    model = shard_model(cfg, comm, seed=1, device=torch.device("cpu"), dtype=torch.float32)
    col = 2 if schedule.endswith("-col2") else 1
    wgrad_in = "accumulate" if schedule.endswith("-acc") else "joint"  # --wgrad-in
    runner = StepRunner(model, comm, schedule=schedule.removesuffix("-col2").removesuffix("-acc"),
                        splits=2, col_splits=col, compile=True, record=True,
                        wgrad_in=wgrad_in)  # fmt: skip

    c0 = _dynamo_counts()
    runner.step(inp, tgt)  # compiles
    first = _moved(c0, _dynamo_counts())
    assert not [k for k in first if k[0] in ("graph_break", "unimplemented")], first
    compiled = runner.executor._compiled
    entries = {fn.__name__: _entries(fn) for fn in compiled}
    assert set(entries) <= set(VARIANTS), entries
    too_many = {n: e for n, e in entries.items() if e > VARIANTS[n]}
    assert not too_many, f"compiled variants per segment function over the bound: {too_many}"
    assert first.get(("stats", "unique_graphs"), 0) == sum(entries.values())

    c1 = _dynamo_counts()
    for _ in range(2):
        runner.step(inp, tgt)
    assert _moved(c1, _dynamo_counts()) == {}, "a later step traced or recompiled"
    assert {fn.__name__: _entries(fn) for fn in compiled} == entries

    runner.executor.events.clear()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        runner.step(inp, tgt)
    names = collections.Counter(e.name.split(":")[0] for e in prof.events())
    runs = [k for kind, k in runner.executor.events if kind == "run"]
    segments = [k for k in runs if k[0] != "W"]  # deferred weight gradients run eagerly
    assert len(segments) >= 2 * 2 * LAYERS  # a forward and a backward per sub-layer unit
    assert names["Torch-Compiled Region"] == len(segments)
