"""Run a small multi-process gloo job in a child interpreter, for the tests that need
a real trace. ``PREAMBLE`` goes at the top of every such job script and
``clean_shutdown()`` ends every rank.

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
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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


def run_job(script: Path, body: str, *args: str, timeout: float = 300) -> None:
    """Write ``PREAMBLE + body`` to ``script`` and run it; on failure the test fails
    with the child's exit code, stdout and stderr (never hidden)."""
    script.write_text(PREAMBLE + textwrap.dedent(body))
    p = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if p.returncode != 0:
        pytest.fail(
            f"gloo job {script.name} exited with {p.returncode}\n"
            f"--- stdout ---\n{p.stdout[-3000:]}\n--- stderr ---\n{p.stderr[-6000:]}",
            pytrace=False,
        )


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
    """End a rank (a ``run_job`` script via ``PREAMBLE``, or an ``mp.spawn`` worker):
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
