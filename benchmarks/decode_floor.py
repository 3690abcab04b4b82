"""The decode floor of one trace file: gunzip plus a msgspec typed decode of the basic
event fields (ph, cat, name, ts, dur, pid, tid; args left raw), GC off.

    python benchmarks/decode_floor.py FILE [--procs N]

``--procs 1`` (default): one process, gunzip and decode one after the other. ``--procs
N``: the same work with the cores an N-process command has: one process inflates and
cuts the text at event boundaries, N forked processes decode the chunks (what a perfect
split of the decode alone would cost). The inflater is the stdlib's zlib (the issue's
floor), or ISA-L's with ``--inflater isal`` (the one domino-prof uses when the
``fast-gzip`` extra is installed). Prints one JSON line (``events``, ``json_bytes``,
``gunzip_s``, ``decode_s``, ``wall_s``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
import time
import zlib

import msgspec


class Ev(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0
    pid: int | str = 0
    tid: int | str = 0
    args: msgspec.Raw = msgspec.Raw(b"null")


class Doc(msgspec.Struct, gc=False):
    traceEvents: list[Ev] = []


CHUNK = msgspec.json.Decoder(list[Ev])
GAP = re.compile(rb"\}\s*,\s*\{\s*\"")


INFLATE = zlib.decompress  # --inflater isal: ISA-L's (what domino-prof uses when installed)


def text_of(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = INFLATE(data, wbits=31)
    return data


def one(path: str) -> dict:
    gc.disable()
    t0 = time.perf_counter()
    data = text_of(path)
    t1 = time.perf_counter()
    n = len(msgspec.json.decode(data, type=Doc).traceEvents)
    t2 = time.perf_counter()
    return {"events": n, "json_bytes": len(data), "gunzip_s": t1 - t0, "decode_s": t2 - t1,
            "wall_s": t2 - t0}  # fmt: skip


def _worker(conn) -> None:
    gc.disable()
    n = 0
    while True:
        chunk = conn.recv_bytes()
        if not chunk:
            break
        n += len(CHUNK.decode(chunk))
    conn.send(n)
    os._exit(0)


def split(path: str, procs: int, target: int = 8 << 20) -> dict:
    import multiprocessing as mp

    gc.disable()
    ctx = mp.get_context("fork")
    pipes = []
    for _ in range(procs):
        a, b = ctx.Pipe()
        ctx.Process(target=_worker, args=(b,), daemon=True).start()
        pipes.append(a)
    t0 = time.perf_counter()
    data = text_of(path)
    t1 = time.perf_counter()
    start = data.index(b"[", data.index(b'"traceEvents"')) + 1
    end = data.rindex(b"]")
    lo, i = start, 0
    while lo < end:
        m = GAP.search(data, lo + target, end)
        hi = data.rfind(b"}", m.start(), m.end()) + 1 if m else end
        pipes[i % procs].send_bytes(b"[" + data[lo:hi].strip() + b"]")
        i += 1
        lo = data.find(b"{", hi, m.end()) if m else end
    n = 0
    for p in pipes:
        p.send_bytes(b"")
        n += p.recv()
    t2 = time.perf_counter()
    return {"events": n, "json_bytes": len(data), "gunzip_s": t1 - t0, "decode_s": t2 - t1,
            "wall_s": t2 - t0, "procs": procs}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--inflater", choices=("zlib", "isal"), default="zlib",
                    help="the gunzip: the stdlib's (the issue's floor) or ISA-L's")
    a = ap.parse_args()
    if a.inflater == "isal":
        global INFLATE
        from isal import isal_zlib

        INFLATE = isal_zlib.decompress
    out = one(a.file) if a.procs <= 1 else split(a.file, a.procs)
    json.dump({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
