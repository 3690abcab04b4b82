"""comm.SkipComm, the skip modes' collectives (nocomm, domino-nocomm, domino-sp-nocomm):
on CPU a gather / scatter writes what the real one would on this rank (one copy), on a GPU
nothing (the real collective's writes are its own kernel's, comm; a no-comm step must not
charge them to compute: docs/METRICS.md, "what limits domino", domino-sp)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from domino_prof.reference_model.comm import SkipComm  # noqa: E402


def test_cpu_gather_and_scatter_write_this_ranks_rows():
    c = SkipComm(4, 2)
    t = torch.arange(6.0).reshape(2, 3)
    out = torch.full((8, 3), -1.0)
    assert c.all_gather(out, t, async_op=True) is None
    assert torch.equal(out, t.repeat(4, 1))  # t in every rank's rows: [t; t; t; t]
    big = torch.arange(24.0).reshape(8, 3)
    out = torch.full((2, 3), -1.0)
    assert c.reduce_scatter(out, big, async_op=True) is None
    assert torch.equal(out, big[4:6])  # rank 2's rows of 4 x 2
    assert c.all_reduce(big, async_op=True) is None and big[0, 1] == 1.0  # untouched
    one = SkipComm()
    out = torch.zeros(2, 3)
    one.all_gather(out, t, async_op=False)
    assert torch.equal(out, t)


class _CudaLike:
    """What SkipComm reads of a GPU tensor: ``is_cuda``; any write fails the test."""

    is_cuda = True
    shape = (2, 3)

    def copy_(self, *_):  # pragma: no cover - reached only if SkipComm writes
        raise AssertionError("SkipComm wrote a GPU tensor")

    def view(self, *_):  # pragma: no cover
        raise AssertionError("SkipComm wrote a GPU tensor")


def test_gpu_gather_and_scatter_write_nothing():
    c = SkipComm(4, 2)
    t = torch.ones(2, 3)
    assert c.all_gather(_CudaLike(), t, async_op=True) is None
    assert c.reduce_scatter(_CudaLike(), t, async_op=True) is None
