"""Inputs that are not regular files: a FIFO, a ``<(cat f)`` pipe (``/dev/fd/N``), gzip
through a pipe, a big piped file decoded in chunks, and Ctrl-C during a chunked decode.

A FIFO or pipe can be read once only: the loader used to open it twice (once to sniff
gzip magic and size, once to read), which hung on a FIFO and lost the first bytes of a
pipe ("invalid JSON"). Expected numbers are exact (µs in the builder, ns here).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tracegen import TraceBuilder

from domino_prof.errors import TraceError
from domino_prof.trace import chunked, load_trace, parse, read

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def trace_bytes(*, n_extra: int = 0) -> bytes:
    """GEMM [10, 30) on stream 7, NCCL [20, 40) on 13: comm 20 µs, hidden 10 µs;
    ``n_extra`` CPU ops pad the file (to make it big enough for chunks)."""
    b = TraceBuilder(rank=0)
    b.step(1, 0, 100)
    b.kernel("sm90_gemm", stream=7, start=10, dur=20, launch=1)
    b.kernel(NCCL, stream=13, start=20, dur=20, launch=2)
    for i in range(n_extra):
        b.cpu(f"aten::op{i}", 50 + i * 0.001, 0.0005)
    return json.dumps(b.to_dict()).encode()


def _writer(path: str, data: bytes) -> threading.Thread:
    def run() -> None:
        with open(path, "wb") as f:  # blocks until the reader opens: like `cat f > fifo`
            f.write(data)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _cli(path: str, **kw) -> subprocess.CompletedProcess:
    # a subprocess so that a loader that opens the FIFO twice fails the test (timeout)
    # instead of hanging the suite
    return subprocess.run(
        [sys.executable, "-m", "domino_prof.cli", "analyze", path, "--json", "-"],
        capture_output=True, text=True, timeout=120, check=False, **kw,
    )  # fmt: skip


@pytest.mark.parametrize("gz", [False, True])
def test_fifo_is_read_once(tmp_path, gz):
    fifo = tmp_path / "rank0.json"
    os.mkfifo(fifo)
    data = trace_bytes()
    w = _writer(str(fifo), gzip.compress(data) if gz else data)
    p = _cli(str(fifo))
    w.join(timeout=10)
    assert p.returncode == 0, p.stderr
    totals = json.loads(p.stdout)["totals"]
    assert (totals["comm_ns"], totals["hidden_ns"]) == (20_000, 10_000)


def test_process_substitution_pipe_is_read_once(tmp_path):
    """What ``domino-prof analyze <(cat f)`` passes: /dev/fd/N, the read end of a pipe."""
    r, w = os.pipe()
    data = trace_bytes()

    def feed() -> None:
        with os.fdopen(w, "wb") as f:
            f.write(data)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        p = _cli(f"/dev/fd/{r}", pass_fds=(r,))
    finally:
        os.close(r)
        t.join(timeout=10)
    assert p.returncode == 0, p.stderr
    totals = json.loads(p.stdout)["totals"]
    assert (totals["comm_ns"], totals["hidden_ns"]) == (20_000, 10_000)


def _pipe_path(data: bytes) -> tuple[str, int, threading.Thread]:
    r, w = os.pipe()

    def feed() -> None:
        with os.fdopen(w, "wb") as f:
            f.write(data)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    return f"/dev/fd/{r}", r, t


def test_big_pipe_is_decoded_in_chunks_from_memory(tmp_path, monkeypatch):
    """A pipe over the chunking threshold: read once, then the chunked decode runs on
    the bytes read (no second open); same events as the file decoded whole."""
    data = trace_bytes(n_extra=400)
    f = tmp_path / "rank0.json"
    f.write_bytes(data)
    whole = load_trace(f)
    monkeypatch.setattr(parse, "_STREAM_BYTES", 0)
    monkeypatch.setattr(chunked, "_CHUNK_TARGET", 2000)
    calls = []
    real = chunked._decode_chunks
    monkeypatch.setattr(chunked, "_decode_chunks", lambda *a: calls.append(1) or real(*a))
    path, r, t = _pipe_path(data)
    try:
        piped = load_trace(path, rank=0)
    finally:
        os.close(r)
        t.join(timeout=10)
    assert calls  # the chunk path ran
    cols = ["cat", "name", "ts", "dur", "stream"]
    assert piped.events[cols].astype(str).equals(whole.events[cols].astype(str))
    assert len(piped.events) == len(whole.events) == 1 + 2 + 2 + 400


def test_stream_gunzip_members_trailing_garbage_and_truncation(tmp_path):
    data = trace_bytes()
    half = len(data) // 2
    two_members = gzip.compress(data[:half]) + gzip.compress(data[half:]) + b"\0garbage"
    path, r, t = _pipe_path(two_members)
    try:
        assert bytes(read._read_stream(Path(path))) == data
    finally:
        os.close(r)
        t.join(timeout=10)
    path, r, t = _pipe_path(gzip.compress(data)[:-20])
    try:
        with pytest.raises(TraceError, match="truncated gzip file"):
            load_trace(path, rank=0)
    finally:
        os.close(r)
        t.join(timeout=10)


def test_empty_pipe_is_one_clear_error(tmp_path):
    path, r, t = _pipe_path(b"")
    try:
        with pytest.raises(TraceError, match=r"/dev/fd/\d+: empty file"):
            load_trace(path, rank=0)
    finally:
        os.close(r)
        t.join(timeout=10)


def test_ctrl_c_during_chunked_decode_is_a_keyboard_interrupt(tmp_path, monkeypatch):
    """Ctrl-C while a big file is decoded in chunks from its memory map used to end in
    'BufferError: cannot close exported pointers exist' (a chunk view still exported
    when the map was closed): now the KeyboardInterrupt itself comes out, and the CLI
    turns it into one line and exit 130."""
    f = tmp_path / "rank0.json"
    f.write_bytes(trace_bytes(n_extra=400))
    monkeypatch.setattr(parse, "_STREAM_BYTES", 0)
    monkeypatch.setattr(chunked, "_CHUNK_TARGET", 2000)
    real = chunked._events_to_part
    n = []

    def interrupted(*a):
        n.append(1)
        if len(n) == 3:
            raise KeyboardInterrupt
        return real(*a)

    monkeypatch.setattr(chunked, "_events_to_part", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_trace(f)
    n.clear()
    from typer.testing import CliRunner

    from domino_prof.cli import app

    res = CliRunner().invoke(app, ["analyze", str(f)])
    assert res.exit_code == 130
    assert res.stderr.strip() == "domino-prof: error: interrupted"
