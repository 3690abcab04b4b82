"""The multi-process gradient and training cases of tests/test_reference_model.py,
tests/test_schedules.py and tests/test_domino_splits.py, run in ONE spawned gloo job per world size (2 and 4) and
shared by those tests (``results(world)``, cached for the pytest session).

Why one job: each case itself takes 0.1-1 s on CPU, but a job costs every rank a
process start, ``import torch`` and, on the first model build, the import of
torch._dynamo (``torch.device`` as a context manager routes ``nn.init`` through
torch._refs, whose wrapper imports the compiler: ~5 s of CPU per rank), then a
rendezvous and a clean shutdown. Seven jobs (five of 2 ranks, two of 4) took ~150 s
of the suite on 2 cores; two jobs do the same cases. The ranks are forked from a
forkserver that imported torch, torch._dynamo and the reference model once
(tests/gloo_job.py ``start_ranks``), not spawned each to import them again.

Every case builds its own model, runner, optimizer and batch from its own seeds, so
running them one after another in one process gives what a process per case gave
(nothing but the process group is shared; the norm spy is undone after its case).
The cases, their sizes, seeds and the assertions (in the test files) are unchanged.
"""

from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: see tests/gloo_job.py
from gloo_job import clean_shutdown, rank_queue, start_ranks

_cache: dict[int, dict] = {}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _compare_cases(cfg, mbs: int, cases) -> dict:
    """test_reference_model / test_schedules: one step of each schedule vs the unsharded
    model on one batch: (loss, worst rel err, its parameter, number of parameters)."""
    from domino_prof.reference_model.comm import ProcessGroupComm
    from domino_prof.reference_model.verify import batch, compare, reference_grads

    inp, tgt = batch(cfg, mbs=mbs, seq=16, seed=3, device="cpu")
    ref_loss, ref = reference_grads(cfg, inp, tgt, seed=5, device="cpu", dtype=torch.float32)
    out = {"ref_loss": ref_loss}
    for name, kw in cases:
        loss, errs = compare(
            cfg, ProcessGroupComm(), ref, inp, tgt, seed=5, device="cpu", dtype=torch.float32, **kw
        )
        out[name] = (loss, max(errs.values()), max(errs, key=errs.get), len(errs))
    return out


GRAD_CASES = (  # test_reference_model.test_gradients_match_unsharded_model
    ("tp", {"splits": 1, "schedule": "tp"}),
    ("domino2", {"splits": 2, "schedule": "domino"}),
    ("domino3", {"splits": 3, "schedule": "domino"}),
    ("domino4", {"splits": 4, "schedule": "domino"}),
)
SP_CASES = (  # test_schedules.test_sp_and_graph_schedules_match_unsharded_model
    ("sp", {"splits": 1, "schedule": "sp"}),
    ("domino-sp2", {"splits": 2, "schedule": "domino-sp"}),
    ("domino-sp3", {"splits": 3, "schedule": "domino-sp"}),
    # graph semantics (CPU emulation): capture on step 1, replay on step 2
    ("tp-graphs", {"splits": 1, "schedule": "tp", "graphs": True}),
    ("domino-graphs", {"splits": 2, "schedule": "domino", "graphs": True}),
    ("domino-sp-graphs", {"splits": 2, "schedule": "domino-sp", "graphs": True}),
    # one graph per step, collectives inside (the CPU stand-in replays the whole step)
    ("domino-step-graphs", {"splits": 2, "schedule": "domino", "graphs": True,
                            "graph_scope": "step"}),  # fmt: skip
    ("domino-sp-step-graphs", {"splits": 2, "schedule": "domino-sp", "graphs": True,
                               "graph_scope": "step"}),  # fmt: skip
)


SPLIT_CASES = (  # tests/test_domino_splits.py: the column split and uneven micro-batches
    ("col2", {"splits": 1, "col_splits": 2, "schedule": "domino"}),
    ("col4", {"splits": 1, "col_splits": 4, "schedule": "domino"}),
    ("domino2-col2", {"splits": 2, "col_splits": 2, "schedule": "domino"}),
    ("domino2-col4-graphs", {"splits": 2, "col_splits": 4, "schedule": "domino", "graphs": True}),
    ("sizes31", {"splits": 2, "split_sizes": (3, 1), "schedule": "domino"}),
    ("sizes121-col2", {"splits": 3, "split_sizes": (1, 2, 1), "col_splits": 2,
                       "schedule": "domino"}),  # fmt: skip
    ("sizes13-graphs", {"splits": 2, "split_sizes": (1, 3), "schedule": "domino",
                        "graphs": True}),  # fmt: skip
    ("sp-sizes31", {"splits": 2, "split_sizes": (3, 1), "schedule": "domino-sp"}),
    ("sp-sizes13-graphs", {"splits": 2, "split_sizes": (1, 3), "schedule": "domino-sp",
                           "graphs": True}),  # fmt: skip
    # domino-sp's weight gradients: joint (the default, above) and one per micro-batch;
    # joint with three micro-batches in a whole-step graph (sp_step.py)
    ("sp-sizes31-acc", {"splits": 2, "split_sizes": (3, 1), "schedule": "domino-sp",
                        "wgrad_in": "accumulate"}),  # fmt: skip
    ("sp-sizes121-step-graph", {"splits": 3, "split_sizes": (1, 2, 1), "schedule": "domino-sp",
                                "graphs": True, "graph_scope": "step"}),  # fmt: skip
    # --sp-wgrad-input keep: the forward's gathered norm outputs feed the weight gradients
    # (sp; domino-sp joint, one per micro-batch, and joint in a whole-step graph)
    ("sp-keep", {"splits": 1, "schedule": "sp", "sp_wgrad_input": "keep"}),
    ("sp-sizes31-keep", {"splits": 2, "split_sizes": (3, 1), "schedule": "domino-sp",
                         "sp_wgrad_input": "keep"}),  # fmt: skip
    ("sp-sizes13-acc-keep", {"splits": 2, "split_sizes": (1, 3), "schedule": "domino-sp",
                             "wgrad_in": "accumulate", "sp_wgrad_input": "keep"}),  # fmt: skip
    ("sp-sizes121-keep-step-graph", {"splits": 3, "split_sizes": (1, 2, 1),
                                     "schedule": "domino-sp", "graphs": True,
                                     "graph_scope": "step", "sp_wgrad_input": "keep"}),  # fmt: skip
    # --sp-residual chain (Megatron's; the cases above fold, the default): the residual
    # added after the reduce-scatter (sp; domino-sp joint, one per micro-batch under
    # graphs, joint in a whole-step graph)
    ("sp-chain", {"splits": 1, "schedule": "sp", "sp_residual": "chain"}),
    ("sp-sizes31-chain", {"splits": 2, "split_sizes": (3, 1), "schedule": "domino-sp",
                          "sp_residual": "chain"}),  # fmt: skip
    ("sp-sizes13-acc-chain-graphs", {"splits": 2, "split_sizes": (1, 3),
                                     "schedule": "domino-sp", "wgrad_in": "accumulate",
                                     "graphs": True, "sp_residual": "chain"}),  # fmt: skip
    ("sp-sizes121-chain-step-graph", {"splits": 3, "split_sizes": (1, 2, 1),
                                      "schedule": "domino-sp", "graphs": True,
                                      "graph_scope": "step", "sp_residual": "chain"}),  # fmt: skip
    # --wgrad-in accumulate: w_in's gradient one GEMM per micro-batch (uneven rows, with
    # the column split, under the CPU emulation of CUDA graphs and of a whole-step graph)
    ("sizes31-acc", {"splits": 2, "split_sizes": (3, 1), "schedule": "domino",
                     "wgrad_in": "accumulate"}),  # fmt: skip
    ("sizes121-col2-acc-graphs", {"splits": 3, "split_sizes": (1, 2, 1), "col_splits": 2,
                                  "schedule": "domino", "graphs": True,
                                  "wgrad_in": "accumulate"}),  # fmt: skip
    ("domino2-acc-step-graph", {"splits": 2, "schedule": "domino", "graphs": True,
                                "graph_scope": "step", "wgrad_in": "accumulate"}),  # fmt: skip
    # --mb-streams 2 (no CUDA streams on CPU: the lanes' data flow, i.e. the buffers
    # allocated before the leader's segment and the weight gradients in micro-batch 0's
    # backward segments; their stream order is tests/test_mb_streams.py's)
    ("sizes31-lanes", {"splits": 2, "split_sizes": (3, 1), "schedule": "domino",
                       "mb_streams": 2}),  # fmt: skip
    ("sizes13-col2-lanes-acc-step-graph", {"splits": 2, "split_sizes": (1, 3), "col_splits": 2,
                                           "schedule": "domino", "graphs": True,
                                           "graph_scope": "step", "wgrad_in": "accumulate",
                                           "mb_streams": 2}),  # fmt: skip
)


def _losses(specs) -> dict:
    """20 AdamW steps per (name, schedule, splits); schedule None: the unsharded model."""
    from domino_prof.reference_model.comm import ProcessGroupComm
    from domino_prof.reference_model.config import tiny
    from domino_prof.reference_model.verify import train_losses

    kw = {"steps": 20, "mbs": 4, "seq": 16, "seed": 9}
    out = {}
    for name, sched, n in specs:
        if sched is None:
            out[name] = train_losses(tiny(), None, splits=n, **kw)
        else:
            out[name] = train_losses(tiny(), ProcessGroupComm(), schedule=sched, splits=n, **kw)
    return out


def _norm_rows() -> dict:
    """test_schedules.test_sp_norm_activations_are_cut_by_tp: rows of every norm input
    and output one step touches, tp vs sp (a direct count of the norm activations each
    rank holds)."""
    from domino_prof.reference_model import units
    from domino_prof.reference_model.comm import ProcessGroupComm
    from domino_prof.reference_model.config import tiny
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    seen = []
    real = units.norm_fwd

    def spy(x, w, eps):
        n, rstd = real(x, w, eps)
        seen.append(x.numel() + n.numel())
        return n, rstd

    cfg = tiny()
    inp, tgt = batch(cfg, mbs=2, seq=16, seed=1, device="cpu")
    out = {}
    units.norm_fwd = spy
    try:
        for name in ("tp", "sp"):
            seen.clear()
            comm = ProcessGroupComm()
            StepRunner(shard_model(cfg, comm, seed=1), comm, schedule=name).step(inp, tgt)
            out[name] = (len(seen), sum(seen))
    finally:
        units.norm_fwd = real
    return out


def _keep_bits() -> dict:
    """test_sp_wgrad_input.test_keep_gives_regather_s_gradients_bit_for_bit: one step of
    sp and domino-sp (joint, accumulate) each way on one batch; {case: (losses equal,
    parameters whose gradients differ in any bit)}."""
    from domino_prof.reference_model.comm import ProcessGroupComm
    from domino_prof.reference_model.config import tiny
    from domino_prof.reference_model.parallel import shard_model
    from domino_prof.reference_model.schedule import StepRunner
    from domino_prof.reference_model.verify import batch

    cfg = tiny()
    inp, tgt = batch(cfg, mbs=4, seq=16, seed=7, device="cpu")
    out = {}
    for case, kw in (("sp", {"schedule": "sp"}),
                     ("domino-sp", {"schedule": "domino-sp", "splits": 2}),
                     ("domino-sp-acc", {"schedule": "domino-sp", "splits": 2,
                                        "wgrad_in": "accumulate"})):  # fmt: skip
        got = {}
        for how in ("regather", "keep"):
            comm = ProcessGroupComm()
            model = shard_model(cfg, comm, seed=5, device="cpu", dtype=torch.float32)
            loss = StepRunner(model, comm, sp_wgrad_input=how, **kw).step(inp, tgt)
            got[how] = (float(loss), {n: p.grad.clone() for n, p in model.named_parameters()})
        (la, ga), (lb, gb) = got["regather"], got["keep"]
        out[case] = (la == lb, sorted(n for n in ga if not torch.equal(ga[n], gb[n])), len(ga))
    return out


def _lane_sibling(rank: int) -> dict:
    """test_mb_streams.test_a_process_groups_lane_sibling_is_a_second_group: the second
    lane's comm (DOMINO_PROF_LANE_COMM=own) is a new group of the same ranks, kept, and
    its all-reduce sums over them."""
    from domino_prof.reference_model.comm import ProcessGroupComm

    pg = ProcessGroupComm()
    sib = pg.lane_sibling()
    t = torch.tensor([1.0 + rank, 10.0 * (rank + 1)])
    sib.all_reduce(t, async_op=False)
    return {"new_group": sib.group is not None and sib.group is not dist.group.WORLD,
            "kept": pg.lane_sibling() is sib, "size": sib.size, "rank": sib.rank,
            "label": sib.label, "sum": t.tolist()}  # fmt: skip


def _worker(rank: int, world: int, port: int, q) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from domino_prof.reference_model.config import tiny

    cfg = tiny()
    out = {
        "grad": _compare_cases(cfg, 12, GRAD_CASES),  # 12: divisible by 2, 3, 4
        "sp": _compare_cases(cfg, 6, SP_CASES),  # 6: divisible by 2 and 3
    }
    if world == 2:  # the 2-rank-only tests
        # the 20-step trainings; tp's (the same run for both tests: same schedule,
        # splits, steps, batch and seeds) is trained once
        runs = _losses((("domino", "domino", 2), ("tp", "tp", 1), ("ref", None, 1),
                        ("sp", "sp", 1), ("domino-sp", "domino-sp", 2)))  # fmt: skip
        # test_reference_model.test_twenty_optimizer_steps_...
        out["losses"] = {k: runs[k] for k in ("domino", "tp", "ref")}
        # test_schedules.test_sp_twenty_optimizer_steps_match_tp
        out["sp_losses"] = {k: runs[k] for k in ("tp", "sp", "domino-sp")}
        out["norm_rows"] = _norm_rows()
        out["splits"] = _compare_cases(cfg, 4, SPLIT_CASES)  # 4: 3 + 1, 1 + 2 + 1
        out["lane_sibling"] = _lane_sibling(rank)
        out["keep_bits"] = _keep_bits()
    q.put((rank, out))
    clean_shutdown()


def results(world: int) -> dict:
    """{rank: {"grad" | "sp" | "losses" | "sp_losses" | "norm_rows" | "splits": ...}} of the
    one job of ``world`` gloo ranks (run on first use, then cached for the session)."""
    if world not in _cache:
        q = rank_queue()
        start_ranks(_worker, world, world, _port(), q)  # forked from the preloaded forkserver
        _cache[world] = dict(q.get() for _ in range(world))
    return _cache[world]
