"""The decode into columns changes no number: the analysis documents of the committed
fixtures and of small built sets (the real trace tiled, a gen_trace kernel-heavy pair)
are byte-identical to those the code before the decode work (cd6e349) wrote, committed
under tests/data/golden_cd6e349 by benchmarks/golden_docs.py. Whole-file, chunked and
several-process decodes are all held to the same bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_module import load

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden_cd6e349"


GD = load("benchmarks/golden_docs.py", "_golden_docs")
NAMES = sorted(p.stem for p in GOLDEN.glob("*.json"))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    return GD.build_inputs(tmp_path_factory.mktemp("golden-inputs"))


@pytest.fixture(scope="module")
def whole_docs(inputs):
    """name -> ``GD.document(inputs[name], name, workers=1)``, today's whole-file decode
    of an input (the defaults: no patched chunking), made once for the module: both
    tests below compare against it."""
    docs: dict[str, bytes] = {}

    def get(name: str) -> bytes:
        if name not in docs:
            docs[name] = GD.document(inputs[name], name, workers=1)
        return docs[name]

    return get


def _diff(got: bytes, want: bytes) -> str:
    g, w = got.decode().splitlines(), want.decode().splitlines()
    for a, b in zip(g, w):
        if a != b:
            return f"first differing line:\n got: {a[:300]}\nwant: {b[:300]}"
    return f"{len(g)} lines against {len(w)}"


# Parts of the document that later work changed on purpose, none of them a number of the
# decode: the default comm pattern (the emulated-comm family, issue 20), the
# align_clocks option (issue 25), notes (new topics of issues 22 and 25), the
# findings / what-if (gains from the replay model, issue 21) and the totals' exposed
# comm's step cost (new keys, issue 33). Every other key -- every table, total, launch,
# switch and cross-rank figure -- must equal cd6e349's.
CHANGED_ON_PURPOSE = (
    ("config", "comm_pattern"),
    ("config", "align_clocks"),
    ("totals", "exposed_cost_ms_per_step"),
    ("totals", "exposed_cost"),
    ("notes",),
    ("overheads", "notes"),
    ("overheads", "findings"),
    ("overheads", "whatif"),
)


def _numbers(doc: bytes) -> dict:
    d = json.loads(doc)
    for *parents, key in CHANGED_ON_PURPOSE:
        node = d
        for p in parents:
            node = node.get(p, {})
        node.pop(key, None)
    return d


def test_the_golden_set_is_complete():
    assert NAMES == ["h200-domino", "h200-tp", "h200-two-stream", "kernel-heavy-30k", "tiled-2x4"]


@pytest.mark.parametrize("name", NAMES)
def test_documents_are_those_of_the_code_before(name, whole_docs):
    want = (GOLDEN / f"{name}.json").read_bytes()
    got = whole_docs(name)
    assert _numbers(got) == _numbers(want), _diff(got, want)


@pytest.mark.parametrize("name", ["tiled-2x4", "kernel-heavy-30k", "h200-domino"])
def test_chunked_and_parallel_decodes_give_the_same_bytes(name, inputs, whole_docs, monkeypatch):
    """Every file decoded in many small chunks, on two processes per file."""
    from domino_prof.trace import chunked, parse

    want = (GOLDEN / f"{name}.json").read_bytes()
    path = inputs[name]
    whole = whole_docs(name)  # today's whole-file decode (before the patches below)
    monkeypatch.setattr(parse, "_STREAM_BYTES", 1)
    monkeypatch.setattr(chunked, "_CHUNK_TARGET", 64 * 1024)
    if name == "tiled-2x4":  # one file alone: its chunks over 2 forked workers
        f = sorted(path.iterdir())[0]
        one = GD.document(f, name, workers=2)
        base = GD.document(f, name, workers=1)
        assert one == base, _diff(one, base)
    got = GD.document(path, name, workers=2)
    assert _numbers(got) == _numbers(want), _diff(got, want)
    assert got == whole, _diff(got, whole)


def test_the_cli_imports_only_the_command_it_runs():
    """Start-up (issue 23): `domino-prof analyze ...` does not import check/report/run."""
    import subprocess
    import sys

    # printed by an atexit handler: the CLI ends this process (cli._exit) and runs them
    code = (
        "import atexit, sys, runpy; sys.argv = ['domino-prof', 'analyze', '--help']\n"
        "atexit.register(lambda: print(sorted(m for m in sys.modules if"
        " m.startswith('domino_prof.commands.') and not"
        " m.startswith('domino_prof.commands._'))))\n"
        "runpy.run_module('domino_prof.cli', run_name='__main__')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=str(ROOT), timeout=120)  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "['domino_prof.commands.analyze']", out.stderr
    from domino_prof.cli import COMMANDS, _commands_to_register

    assert _commands_to_register(["pytest", "analyze"]) == COMMANDS
    assert _commands_to_register(["/usr/bin/domino-prof", "check", "x"]) == ("check",)
    assert _commands_to_register(["/usr/bin/domino-prof", "--help"]) == COMMANDS


@pytest.mark.parametrize("inflater", ["zlib", "auto"])
def test_every_inflater_streams_the_same_text(tmp_path, monkeypatch, inflater):
    """isal / zlib-ng when installed, the stdlib zlib otherwise (or when forced): the
    same text, block by block, over two gzip members and trailing garbage."""
    import gzip

    from domino_prof.trace import read

    monkeypatch.setenv("DOMINO_PROF_INFLATER", inflater if inflater == "zlib" else "")
    monkeypatch.setattr(read, "BLOCK", 1000)
    monkeypatch.setattr(read, "_READ", 100)
    data = b"\xef\xbb\xbf" + b'{"traceEvents": [' + b",".join(b'{"ph": "X", "ts": %d}' % i
                                                              for i in range(3000)) + b"]}"
    half = len(data) // 2
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]) + b"\0junk")
    blocks = list(read.iter_blocks(p))
    assert len(blocks) > 10 and b"".join(blocks) == data[3:]
    assert read.read_bytes(p) == data[3:]
    if inflater == "zlib":
        assert read._inflater()[1] == "zlib"
    p.write_bytes(gzip.compress(data)[:-30])
    with pytest.raises(read.FileError, match="truncated gzip"):
        list(read.iter_blocks(p))
