"""Gradient check of the sharded schedules against the unsharded model.

Every rank builds the unsharded reference (same deterministic init), runs one
step on the full batch, and compares *its shard* of every reference gradient with
the gradient the schedule produced, as relative error ‖g − g_ref‖ / ‖g_ref‖.
Used by the CPU tests (gloo, fp32) and by the GPU check (NCCL, bf16).
"""

from __future__ import annotations

import torch

from domino_prof.reference_model.comm import Comm
from domino_prof.reference_model.config import ModelConfig
from domino_prof.reference_model.parallel import build_reference, shard_model, shard_tensor
from domino_prof.reference_model.schedule import StepRunner


def batch(cfg: ModelConfig, *, mbs: int, seq: int, seed: int, device) -> tuple:
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, cfg.vocab_size, (mbs, seq + 1), generator=g).to(device)
    return t[:, :-1], t[:, 1:]


def reference_grads(cfg: ModelConfig, inp, tgt, *, seed: int, device, dtype) -> tuple:
    ref = build_reference(cfg, seed=seed, device=device, dtype=dtype)
    loss = ref.loss(inp, tgt)
    loss.backward()
    return float(loss.detach()), {n: p.grad for n, p in ref.named_parameters()}


def compare(
    cfg: ModelConfig,
    comm: Comm,
    ref_grads: dict,
    inp,
    tgt,
    *,
    splits: int,
    seed: int,
    device,
    dtype,
    schedule: str | None = None,
    overlap: bool = False,
    graphs: bool = False,
    sp: bool = False,
    compile: bool = False,
    col_splits: int = 1,
    split_sizes: tuple[int, ...] | None = None,
    graph_scope: str = "segment",
    wgrad_in: str = "joint",
    mb_streams: int = 1,
    sp_wgrad_input: str = "keep",
    sp_residual: str = "fold",
) -> tuple[float, dict[str, float]]:
    """(loss, {param name: relative error of this rank's gradient shard}).
    ``schedule``: a registered schedule name (or, without it, ``overlap`` / ``sp`` pick
    tp / domino / sp / domino-sp). With ``graphs`` the step runs twice (capture, then
    replay) and the second, replayed step's gradients are compared. ``col_splits``,
    ``split_sizes``, ``graph_scope``, ``wgrad_in``, ``mb_streams``, ``sp_wgrad_input``,
    ``sp_residual``: as StepRunner's."""
    model = shard_model(cfg, comm, seed=seed, device=device, dtype=dtype)
    runner = StepRunner(
        model, comm, schedule=schedule, splits=splits, overlap=overlap, sp=sp, graphs=graphs,
        compile=compile, col_splits=col_splits, split_sizes=split_sizes, graph_scope=graph_scope,
        wgrad_in=wgrad_in, mb_streams=mb_streams, sp_wgrad_input=sp_wgrad_input,
        sp_residual=sp_residual,
    )  # fmt: skip
    loss = runner.step(inp, tgt)
    if graphs:  # the first step captured; check a replayed one (grads are overwritten)
        loss = runner.step(inp, tgt)
    errs = {}
    for name, p in model.named_parameters():
        want = shard_tensor(name, ref_grads[name], cfg=cfg, rank=comm.rank, tp=comm.size)
        errs[name] = float((p.grad.float() - want.float()).norm() / want.float().norm())
    return float(loss), errs


def train_losses(
    cfg: ModelConfig,
    comm: Comm | None,
    *,
    steps: int,
    mbs: int,
    seq: int,
    splits: int,
    seed: int,
    overlap: bool = False,
    lr: float = 1e-3,
    sp: bool = False,
    schedule: str | None = None,
) -> list[float]:
    """Losses of ``steps`` AdamW steps: sharded (comm given) or unsharded (comm None)."""
    if comm is None:
        model = build_reference(cfg, seed=seed)
    else:
        model = shard_model(cfg, comm, seed=seed)
        runner = StepRunner(
            model, comm, schedule=schedule, splits=splits, overlap=overlap, sp=sp
        )
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for s in range(steps):
        inp, tgt = batch(cfg, mbs=mbs, seq=seq, seed=seed + s, device="cpu")
        if comm is None:
            loss = model.loss(inp, tgt)
            loss.backward()
        else:
            loss = runner.step(inp, tgt)
        opt.step()
        if comm is None:  # the runner overwrites its own gradient buffers each step
            opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
    return losses
