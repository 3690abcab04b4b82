"""A new schedule is a short function and two registry lines: ``domino-fwd`` — Domino's
overlapped forward, every backward all-reduce waited for at once (the variant nanotron
#286's authors call weaker) — defined here, checked against the unsharded model at
tp 2 on gloo, and its executed event order (recorded by the executor) against the order
it declares. fp32 on CPU, 1e-5 relative per parameter.
"""

from __future__ import annotations

import os
import socket

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist
import torch.distributed.nn  # noqa: F811  before init_process_group: see tests/gloo_job.py
from gloo_job import clean_shutdown, rank_queue, start_ranks

from domino_prof.reference_model.config import RunConfig, tiny

TOL = 1e-5


# --- the new schedule: this block is all it takes ---------------------------------------
def domino_fwd(s, n: int) -> None:
    """fwd as domino (⧖b F(u,b) ▷b, async); bwd: D(u,b) ▷⧖ (synchronous), W(u) deferred."""
    for b in range(n):
        with s.at("fwd", s.embedding, b):
            s.embed(b)
    for u in s.layers:
        for b in range(n):
            with s.at("fwd", u, b):
                s.wait(b)
                s.forward(u, b)
                s.launch(b, async_op=True)
    for b in range(n):
        with s.at("fwd", s.head, b):
            s.wait(b)
            s.forward(s.head, b)
    for u in [s.head, *reversed(s.layers)]:
        for b in reversed(range(n)):
            with s.at("bwd", u, b):
                s.dgrad(u, b)
                s.launch(b, async_op=False)
        s.wgrad(u)
    for b in reversed(range(n)):
        with s.at("bwd", s.embedding, b):
            s.embed_bwd(b)


def register() -> None:
    from domino_prof.reference_model import modes

    modes.register_schedule("domino-fwd", domino_fwd, micro_batched=True)
    modes.register_mode("domino-fwd", schedule="domino-fwd",
                        description="Domino forward, synchronous backward")  # fmt: skip


# --- the checks ---------------------------------------------------------------------------
def declared_events(n: int, n_layers: int) -> list:
    """domino-fwd's order, written out independently of the code above."""
    L, H = 2 * n_layers, 2 * n_layers  # sub-layers 0 .. L−1, the head is unit L
    ev = [("run", ("emb", 0, b)) for b in range(n)]
    for u in range(L):
        for b in range(n):
            ev += [("wait", ("y", u - 1, b))] if u else []
            ev += [("run", ("F", u, b)), ("launch", ("y", u, b))]
    for b in range(n):
        ev += [("wait", ("y", L - 1, b)), ("run", ("H1", H, b)), ("launch", ("max", H, b)),
               ("run", ("H2", H, b)), ("launch", ("sum", H, b)), ("run", ("H3", H, b))]  # fmt: skip
    for u in range(H, -2, -1):
        for b in reversed(range(n)):
            if b == n - 1 and u < H:  # the unit above's deferred weight gradients run first
                ev.append(("run", ("W", u + 1, 0)))
            name = {H: "HD", -1: "E"}.get(u, "D")
            ev.append(("run", (name, max(u, 0), b)))
            ev += [] if u == -1 else [("launch", ("dn", u, b))]
    return ev


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, q) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    register()
    from domino_prof.reference_model.comm import ProcessGroupComm
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch, compare, reference_grads

    cfg = tiny()
    inp, tgt = batch(cfg, mbs=4, seq=16, seed=3, device="cpu")
    ref_loss, ref = reference_grads(cfg, inp, tgt, seed=5, device="cpu", dtype=torch.float32)
    out = {"ref_loss": ref_loss}
    run_cfg = RunConfig(model=cfg, tp=2, mbs=6, splits=3, modes=("domino-fwd",)).validate()
    out["splits_for"] = run_cfg.splits_for("domino-fwd")
    for splits, graphs in ((2, False), (2, True)):
        loss, errs = compare(cfg, ProcessGroupComm(), ref, inp, tgt, schedule="domino-fwd",
                             splits=splits, graphs=graphs, seed=5, device="cpu",
                             dtype=torch.float32)  # fmt: skip
        out[splits, graphs] = (loss, max(errs.values()), max(errs, key=errs.get), len(errs))
    comm = ProcessGroupComm()
    runner = StepRunner(shard_model(cfg, comm, seed=5), comm, schedule="domino-fwd", splits=2,
                        record=True)  # fmt: skip
    runner.step(inp, tgt)
    out["events"] = list(runner.events)
    q.put((rank, out))
    clean_shutdown()


def test_domino_fwd_matches_unsharded_model_and_runs_in_declared_order():
    q = rank_queue()
    start_ranks(_worker, 2, 2, _port(), q)  # forked from the preloaded forkserver (gloo_job)
    res = dict(q.get() for _ in range(2))
    want = declared_events(2, tiny().n_layers)
    assert len(want) == 63  # hand-counted: fwd 2 + 22 + 12, bwd 4 + 4·5 + 3
    for rank, out in res.items():
        assert out["splits_for"] == 3
        for key in ((2, False), (2, True)):
            loss, worst, worst_name, n = out[key]
            assert n == 3 + 6 * tiny().n_layers  # every parameter compared
            assert abs(loss - out["ref_loss"]) <= TOL * abs(out["ref_loss"]), (rank, key)
            assert worst <= TOL, f"rank {rank} {key}: {worst_name} rel err {worst:.2e}"
        assert out["events"] == want, rank
