"""One reading bundle (issue 24 item 1): the reading options are declared once
(``commands._options.READING_OPTIONS`` / ``FINDINGS_OPTIONS``), built once into an
``engine.Reading`` and carried unchanged to ``engine.analyse_path``, from every command
that declares them and from ``pytest_plugin.assert_overlap``."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from domino_prof import engine
from domino_prof.analysis import DEFAULT_COMM_PATTERN
from domino_prof.cli import app
from domino_prof.commands._options import reading_options
from domino_prof.pytest_plugin import assert_overlap

FILE = Path(__file__).parent / "data" / "h200_two_stream" / "rank0.pt.trace.json.gz"
runner = CliRunner()


@pytest.fixture
def seen(monkeypatch):
    """What reaches the engine: (config, keywords) per analyse_path call; the scheduler
    is recorded, then left out (the traces are analysed here)."""
    calls = []
    real = engine.analyse_path

    def spy(path, config, **kw):
        calls.append((config, dict(kw)))
        return real(path, config, **{**kw, "scheduler": None})

    monkeypatch.setattr(engine, "analyse_path", spy)
    return calls


FINDINGS = ["--no-align-clocks", "--threshold", "top_n=3"]
READING = ["--rank", "0", "--skip-bad", "--comm-pattern", "Elementwise",
           "--memcpy-as-comm", "--scheduler", "tcp://nowhere:1"]  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [
        ["analyze", str(FILE), *READING, *FINDINGS],
        ["report", str(FILE), "-o", "{tmp}/r.html", *READING, *FINDINGS],
        ["compare", str(FILE), str(FILE), "-o", "{tmp}/c.html", *READING, *FINDINGS],
        ["check", str(FILE), "--min-hidden", "0", *READING],
        ["baseline", str(FILE), "-o", "{tmp}/b.json", *READING],
    ],
    ids=lambda a: a[0],
)
def test_every_command_carries_the_options_to_the_engine(argv, seen, tmp_path):
    r = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert r.exit_code == 0, r.output
    findings = argv[0] in ("analyze", "report", "compare")
    assert len(seen) == (2 if argv[0] == "compare" else 1)
    for config, kw in seen:
        assert kw["rank"] == 0 and kw["skip_bad"] is True
        assert kw["scheduler"] == "tcp://nowhere:1"
        assert config.comm_pattern == f"(?:{DEFAULT_COMM_PATTERN})|(?:Elementwise)"
        assert config.memcpy_as_comm is True
        assert config.overhead_thresholds == ({"top_n": 3.0} if findings else {})
        assert config.align_clocks is (not findings)


def test_assert_overlap_takes_every_reading_option(seen):
    """``scheduler`` was missing from assert_overlap's copy of the keyword list."""
    rows = assert_overlap(FILE, min_hidden=0, rank=0, scheduler="tcp://nowhere:1",
                          comm_pattern_only=True, comm_pattern="nccl")  # fmt: skip
    assert rows and all(r.ok for r in rows)
    ((config, kw),) = seen
    assert kw["scheduler"] == "tcp://nowhere:1" and kw["rank"] == 0
    assert config.comm_pattern == "nccl"
    with pytest.raises(TypeError, match="no_such_option"):
        assert_overlap(FILE, min_hidden=0, no_such_option=1)


def test_reading_options_needs_a_reading_parameter():
    def command(path: str) -> None: ...

    with pytest.raises(TypeError, match="no `reading` parameter"):
        reading_options()(command)
