"""docs/RESULTS.md is generated from the committed JSON under reports/ by
scripts/gen_results.py (issue 35): the committed page is exactly what the script writes,
a table's number changes with its source file, and every emulated figure says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _gen():
    from script_module import load

    return load("scripts/gen_results.py", "_gen_results")


def test_the_committed_page_is_what_the_script_writes():
    gen = _gen()
    assert (ROOT / "docs" / "RESULTS.md").read_text(encoding="utf-8") == gen.render(), (
        "docs/RESULTS.md differs from its sources: run python3 scripts/gen_results.py")
    assert gen.main(["--check"]) == 0


def test_a_number_follows_its_source_and_check_catches_a_stale_page(tmp_path, monkeypatch, capsys):
    """A copy of the tree's reports/ with one run.json edited: the regenerated CPU table
    carries the new step time, and --check of the old page fails with one line."""
    gen = _gen()
    root = tmp_path / "tree"
    shutil.copytree(ROOT / "reports", root / "reports")
    (root / "docs").mkdir()
    (root / "docs" / "RESULTS.md").write_text(gen.render(), encoding="utf-8")
    p = root / "reports" / "cpu-default-2026-12-03" / "run.json"
    doc = json.loads(p.read_text())
    row = next(r for r in doc["comparison"] if r["mode"] == "domino")
    old = f"| domino | {row['step_ms']:.2f} |"
    row["step_ms"] = 12345.678
    p.write_text(json.dumps(doc))
    monkeypatch.setattr(gen, "ROOT", root)
    monkeypatch.setattr(gen, "OUT", root / "docs" / "RESULTS.md")
    text = gen.render()
    assert "| domino | 12345.68 |" in text and old not in text
    assert gen.main(["--check"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "docs/RESULTS.md is not what scripts/gen_results.py writes from reports/; run python3 "
        "scripts/gen_results.py and commit it"]  # fmt: skip
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
    assert not list((root / "docs").glob(".*"))  # written through a temp file, renamed


def test_every_emulated_figure_says_emulated():
    """A section whose sources include a run of emulated collectives says "emulated" in
    its title and on every row of its table."""
    gen = _gen()
    n = 0
    for s in gen.SECTIONS:
        files = [f for k in ("run", "runs") if k in s["args"] for f in gen._files(s["args"][k])]
        kinds = {(json.loads(f.read_text()).get("comm") or {}).get("kind") for f in files}
        if "emulated" not in kinds:
            continue
        n += 1
        assert "emulated" in s["title"], s["title"]
        rows = [ln for ln in s["render"](**s["args"]) if ln.startswith("| ") and "---" not in ln]
        assert len(rows) > 1 and all("emulated" in r for r in rows[1:]), s["title"]
    # the full-depth headline, the paced headline, its limits, the TP 2/4/8 table; then
    # (2026-12-03b) the paced table, the stand-in before/after row, the re-run headline and
    # 8b, their limits, the tune sweeps; (2026-12-03c) one graph per step and its limits;
    # (2026-12-04d) the copy-engine collectives, their limits, the knobs beside them;
    # (2026-12-06) a stream per micro-batch, its limits, the backward-only / priority rows;
    # (2026-12-06, H100) a comm stream per lane, the micro-batch size, its limits, 8b, eager;
    # (2026-12-06b, H100) the lanes' lock at mbs 2, at mbs 4 and 8b, eager;
    # (2026-12-06c, H100) domino-sp near the bound, its llama3-8b row, its tune sweep;
    # (2026-12-07, H100) domino-sp against its own no-comm mode
    # (2026-12-07b, H100) domino-sp keeps the forward's gathered inputs (--sp-wgrad-input)
    # (2026-12-07c, H100) the residual folded, the backward carve-out (--carveout-auto)
    # (2026-12-07d, H100) the step under inference mode, eager on a host of two speeds
    # (2026-12-07e, H100) the rotary embedding's Triton launch
    # (2026-12-07f, H100) modes timed before any profile, eager without the carve-out
    # (2026-12-07g, H100) where eager domino-sp waits for the host
    # (2026-12-07h, H100) domino-sp with CUDA graphs on a second host
    # (2026-12-07i, H100) domino-sp with CUDA graphs, streamed, on a third host
    # (2026-12-08, H100) the residual add and norm as one Triton launch
    # (2026-12-07c, H100) domino-sp's gap by occupancy, read back (2026-12-08)
    assert n == 39


def test_the_readme_fits_on_a_screen_or_two():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, len(lines)


def test_a_row_names_an_uneven_split_and_the_driver_copier():
    """The run label says --split-sizes for an uneven split (even sizes read as --splits),
    and names the copy-engine stand-in's copier when it is not torch's."""
    gen = _gen()
    assert gen._knob_flags({"splits": 2, "split_sizes": [1, 3]}) == ["--split-sizes 1,3"]
    assert gen._knob_flags({"splits": 4, "split_sizes": [1, 1, 1, 1]}) == ["--splits 4"]
    assert gen._knob_flags({"splits": 2, "split_sizes": None}) == []
    rows = gen.run_rows(runs=["reports/emulated-h100-2026-12-06/call2/eager-ce-drv/run.json",
                              "reports/emulated-h100-2026-12-06/call2/ce-own-s13/run.json"],
                        modes=["tp"], ratios=("domino/nocomm",))
    assert "copy engines (pace phase, copier driver)" in rows[2]
    assert "`--split-sizes 1,3`" in rows[3] and "| 0.765 |" in rows[3]


def test_a_row_names_the_lane_lock_where_it_is_not_the_default():
    """The lanes' lock is `dgrad` by default since reports/emulated-h100-2026-12-06b: a run
    with `off`, or one recorded before the knob existed (no "lock": it ran unlocked), is
    labelled DOMINO_PROF_LANE_LOCK=off; a locked one needs no label."""
    gen = _gen()
    base = {"phases": ["fwd", "bwd"], "priority": [-100, 0], "comm": "shared"}
    assert gen._lanes_env({**base, "lock": "dgrad"}) == []
    assert gen._lanes_env({**base, "lock": "off"}) == ["DOMINO_PROF_LANE_LOCK=off"]
    assert gen._lanes_env(base) == ["DOMINO_PROF_LANE_LOCK=off"]
    assert gen._lanes_env(None) == []
    assert gen._lanes_env({**base, "comm": "own"}) == [
        "DOMINO_PROF_LANE_COMM=own", "DOMINO_PROF_LANE_LOCK=off"]
