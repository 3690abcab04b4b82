"""Run a small multi-process gloo job, for the tests that need a real trace or real
collectives: ``start_ranks`` (a function on N ranks forked from a forkserver that has
imported torch once) and ``run_ranks`` (the same for a job's source text: ``PREAMBLE``
goes at the top of every such job), and ``clean_shutdown()`` ends every rank.

Why (tests/test_trace_decode.py::test_real_gloo_trace failed about 1 run in 7 with rank 0
or 1 aborting at exit, "terminate called without an active exception"):

* ``torch.distributed.nn.functional`` binds ``group.WORLD`` as default arguments
  when it is imported. The profiler imports it lazily (``profile.prepare_trace``
  touches ``torch._inductor``, whose imports reach ``torch.distributed.nn``), i.e.
  *after* ``init_process_group`` in a job that profiles. Those defaults then hold
  the live process group, so ``destroy_process_group`` cannot free it and the
  ProcessGroupGloo destructor, which joins its ``pt_gloo_runloop`` threads, never runs.
* A runloop thread that is still releasing the last collective's work when the
  interpreter exits drops the output tensor's Python object, which needs the GIL.
  A finalizing interpreter ends such a thread with ``pthread_exit``, whose unwind
  through a ``noexcept`` destructor calls ``std::terminate`` (seen under gdb:
  ``~AsyncAllreduceWork -> decref_pyobject -> take_gil -> PyThread_exit_thread``).

Importing ``torch.distributed.nn`` before ``init_process_group`` leaves those
defaults ``None``; then ``barrier`` (no rank tears its pairs down while a peer is
still in a collective), ``destroy_process_group`` (frees the group: its destructor
joins the runloop threads) and only then exit. ``clean_shutdown`` also fails the
rank loudly if a runloop thread is still alive afterwards, so a regression of this
fix fails every run instead of one in seven.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

# the job imports this module's clean_shutdown (one copy of the shutdown logic);
# torch.distributed.nn first: before init_process_group (module docstring)
PREAMBLE = textwrap.dedent(
    f"""
    import sys as _sys
    import torch.distributed.nn  # noqa: F401
    _sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
    from gloo_job import clean_shutdown
    """
)


# What the rank processes of start_ranks() import, once, in the forkserver they are
# forked from (each rank then starts with them loaded): torch, torch.distributed.nn
# (before any init_process_group: module docstring), torch._dynamo (the reference
# model's first build imports it: ~1.3 s per process) and the reference model.
FORKSERVER_PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.distributed.nn",
    "torch.multiprocessing",
    "torch.profiler",
    "torch._dynamo",
    "domino_prof.reference_model.comm",
    "domino_prof.reference_model.config",
    "domino_prof.reference_model.parallel",
    "domino_prof.reference_model.schedule",
    "domino_prof.reference_model.verify",
)


def start_ranks(fn, world: int, *args) -> None:
    """``fn(rank, *args)`` in ``world`` processes, to completion (a rank that fails fails
    the test with its traceback). The processes are forked from this test process's
    forkserver, a fresh interpreter of its own (started on first use, kept for the
    session), which has imported ``FORKSERVER_PRELOAD`` once: a spawned rank paid
    ``import torch`` and torch._dynamo itself, ~3.5 s of CPU each. A forkserver child is
    a fresh process as a spawned one is (nothing of this process is inherited: no
    threads, no state of the tests run before), ``sys.path`` is this process's, and
    ``fn`` and ``args`` travel pickled as with spawn. If the forkserver was started
    before without the preload, the ranks import what they need themselves."""
    import torch.multiprocessing as mp

    mp.get_context("forkserver").set_forkserver_preload(list(FORKSERVER_PRELOAD))
    mp.start_processes(fn, args=args, nprocs=world, join=True, start_method="forkserver")


def rank_queue():
    """A queue the ranks of start_ranks() can put their results on."""
    import torch.multiprocessing as mp

    return mp.get_context("forkserver").Queue()


def _job_rank(rank: int, body: str, fn: str, args: tuple) -> None:
    import torch

    torch.set_num_threads(1)  # one intra-op thread, as every rank process has
    ns = {"__name__": "gloo_job_body"}
    exec(compile(PREAMBLE + textwrap.dedent(body), "<gloo job>", "exec"), ns)  # noqa: S102
    ns[fn](rank, *args)


def run_ranks(body: str, fn: str, world: int, *args) -> None:
    """Run ``PREAMBLE + body``'s function ``fn(rank, *args)`` on ``world`` ranks
    (start_ranks: processes forked from the preloaded forkserver, each executing the
    job's source afresh) to completion; a failing rank fails the test with its
    traceback. (Each job was a script run in an interpreter of its own, which, and
    then its ``mp.spawn`` ranks, each imported torch: ~4-6 s a job on 2 cores.)"""
    start_ranks(_job_rank, world, body, fn, args)


def _gloo_threads() -> list[str]:
    task = "/proc/self/task"
    if not os.path.isdir(task):
        return []
    names = []
    for t in os.listdir(task):
        try:
            with open(f"{task}/{t}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return [n for n in names if n == "pt_gloo_runloop"]


def clean_shutdown() -> None:
    """End a rank (a ``run_ranks`` job via ``PREAMBLE``, or a ``start_ranks`` worker):
    barrier, destroy the group (joins its runloop threads), fail if a runloop thread is
    left. The worker's module must import ``torch.distributed.nn`` before
    ``init_process_group`` (see the module docstring): the reference model's first step
    imports torch._dynamo, which reaches it."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    left = _gloo_threads()
    if left:
        raise SystemExit(f"{len(left)} pt_gloo_runloop threads alive after destroy")
