"""domino_prof.stats (block medians, distribution-free intervals) on hand-worked samples,
and its plumbing through a hand-built run.json: the comparison table, the verdict, the
report's title and `check --min-speedup`."""

from __future__ import annotations

from pathlib import Path

import pytest
from rundirs import write_run_dir
from typer.testing import CliRunner

from domino_prof import stats
from domino_prof.cli import app
from domino_prof.runs import comparison_rows, comparison_table, verdict_text, verdicts


# --------------------------------------------------------------------------- stats
def test_median_odd_and_even():
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError):
        stats.median([])


def test_split_blocks_keeps_a_short_last_block():
    assert stats.split_blocks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert stats.block_medians([[1.0, 3.0], [4.0, 2.0, 9.0], [5.0]]) == [2.0, 4.0, 5.0]


def test_binomial_cdf_exact():
    assert stats.binom_half_cdf(0, 6) == 1 / 64
    assert stats.binom_half_cdf(1, 10) == 11 / 1024  # 1 + 10
    assert stats.binom_half_cdf(2, 10) == 56 / 1024  # 1 + 10 + 45
    assert stats.binom_half_cdf(-1, 10) == 0.0
    assert stats.binom_half_cdf(10, 10) == 1.0


def test_order_rank_is_the_widest_95_percent_rank():
    # 2·P(Bin(n,½) <= k-1) <= 0.05: n=5: 2/32 = 0.0625 > 0.05, no interval
    assert stats.order_rank(5) is None
    assert stats.order_rank(6) == 1  # 2/64 = 0.031
    assert stats.order_rank(8) == 1  # k=2 would need 2·9/256 = 0.070
    assert stats.order_rank(9) == 2  # 2·10/512 = 0.039; k=3: 2·46/512 = 0.18
    assert stats.order_rank(10) == 2  # 2·11/1024 = 0.021; k=3: 2·56/1024 = 0.109
    # n=20: 2·21700/2^20 = 0.041 (k=6); k=7: 2·60460/2^20 = 0.115
    assert stats.order_rank(20) == 6


def test_median_interval_six_and_ten_values():
    e = stats.median_interval([5.0, 1.0, 4.0, 2.0, 3.0, 6.0])
    assert (e.value, e.low, e.high, e.n) == (3.5, 1.0, 6.0, 6)
    assert e.coverage == 1 - 2 / 64
    e = stats.median_interval([float(x) for x in range(10, 0, -1)])
    assert (e.value, e.low, e.high) == (5.5, 2.0, 9.0)  # x(2), x(9)
    assert e.coverage == 1 - 22 / 1024
    e = stats.median_interval([1.0, 2.0, 3.0, 4.0, 5.0])  # too few for 95%
    assert (e.value, e.low, e.high, e.coverage) == (3.0, None, None, None)
    assert not e.has_interval and e.rel_half_width is None and not e.contains(3.0)


def test_paired_ratio_faster_slower_and_within_noise():
    # base / other per block: 1.25, 1.125, 1.5, 1.25, 1.25, 1.75 (exact in binary)
    base, other = [5.0, 4.5, 6.0, 5.0, 5.0, 7.0], [4.0] * 6
    r = stats.paired_ratio(base, other)
    assert (r.value, r.low, r.high, r.n) == (1.25, 1.125, 1.75, 6)
    assert r.rel_half_width == 0.5 / 1.25
    assert stats.verdict_word(r) == "faster"
    s = stats.paired_ratio(other, base)  # 0.8, 0.888.., 0.666.., 0.8, 0.8, 0.571..
    assert (s.value, s.low, s.high) == (0.8, 4.0 / 7.0, 4.0 / 4.5)
    assert stats.verdict_word(s) == "slower"
    # ratios 2, 1, 0.5, 1.25, 2.5, 0.625: median (1 + 1.25)/2, interval holds 1.0
    w = stats.paired_ratio([10.0] * 6, [5.0, 10.0, 20.0, 8.0, 4.0, 16.0])
    assert (w.value, w.low, w.high) == (1.125, 0.5, 2.5)
    assert stats.verdict_word(w) == "within noise"


def test_pairing_cancels_drift():
    """The machine slows down 6× over the run; block i of both modes sees the same
    moment, so the paired ratio is exactly 2 with no spread, while the modes' own
    intervals are as wide as the drift."""
    base = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    other = [b / 2 for b in base]
    r = stats.paired_ratio(base, other)
    assert (r.value, r.low, r.high) == (2.0, 2.0, 2.0)
    m = stats.median_interval(base)
    assert (m.low, m.high) == (10.0, 60.0)


def test_paired_ratio_rejects_unpaired_blocks():
    with pytest.raises(ValueError, match="pair up"):
        stats.paired_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="<= 0"):
        stats.paired_ratio([1.0], [0.0])


def test_verdict_word_without_interval():
    def est(v):
        return stats.Estimate(value=v, low=None, high=None, n=3, coverage=None)

    assert stats.verdict_word(est(0.8)) == "slower, no interval"
    assert stats.verdict_word(est(1.2)) == "faster, no interval"
    assert stats.verdict_word(est(1.0)) == "the same"


# --------------------------------------------------------------------------- run.json
# six blocks of two steps per mode; block medians (ms):
#   tp      [10, 10, 10, 10, 10, 10]
#   nocomm  [ 5,  5,  5,  5,  5,  5]
#   domino  [ 8,  8, 16,  8,  8,  8]    tp/domino: 1.25 ×5, 0.625 -> 1.25 [0.625, 1.25]
#   sp      [10, 10, 10, 10, 10, 10]
#   domino-sp [8, 10, 12.5, 10, 10, 8]  sp/domino-sp: 1.25, 1, 0.8, 1, 1, 1.25 -> 1.0 [0.8, 1.25]
BLOCKS = {
    "tp": [[9.0, 11.0]] * 6,
    "nocomm": [[5.0, 5.0]] * 6,
    "domino": [[8.0, 8.0], [7.0, 9.0], [16.0, 16.0], [8.0, 8.0], [8.0, 8.0], [8.0, 8.0]],
    "sp": [[10.0, 10.0]] * 6,
    "domino-sp": [[8.0, 8.0], [10.0, 10.0], [12.5, 12.5], [10.0, 10.0], [10.0, 10.0],
                  [8.0, 8.0]],
}  # fmt: skip


def _modes(blocks=BLOCKS) -> dict:
    out = {}
    for m, bl in blocks.items():
        med = stats.block_medians(bl)
        step = stats.median(med)
        out[m] = {
            "trace_dir": m, "step_ms": step, "step_times_ms": [t for b in bl for t in b],
            "blocks": {"steps": bl, "medians_ms": med, "interleaved": True,
                       "method": stats.METHOD},
            "tokens_per_s": 256 / step * 1e3, "mfu": None, "losses": [1.0],
            "hidden_pct": None,
        }  # fmt: skip
    return out


def test_comparison_rows_carry_paired_ratios_and_intervals():
    rows = {r["mode"]: r for r in comparison_rows(_modes())}
    d = rows["domino"]
    assert (d["step_ms"], d["step_ms_low"], d["step_ms_high"]) == (8.0, 8.0, 16.0)
    assert (d["speedup_vs_tp"], d["speedup_vs_tp_low"], d["speedup_vs_tp_high"]) == (
        1.25, 0.625, 1.25)  # fmt: skip
    # of nocomm: nocomm/domino per block 0.625 ×5, 0.3125
    assert (d["frac_of_nocomm"], d["frac_of_nocomm_low"], d["frac_of_nocomm_high"]) == (
        0.625, 0.3125, 0.625)  # fmt: skip
    # a mode against itself: 1 exactly, no interval shown
    assert (rows["tp"]["speedup_vs_tp"], rows["tp"]["speedup_vs_tp_low"]) == (1.0, None)
    assert (rows["nocomm"]["frac_of_nocomm"], rows["nocomm"]["frac_of_nocomm_high"]) == (
        1.0, None)  # fmt: skip
    headers, cells = comparison_table(list(rows.values()))
    assert headers == ["mode", "timed step ms", "tokens/s", "hidden %", "speedup vs tp",
                       "of nocomm"]  # fmt: skip
    assert cells[2] == ["domino", "8.00 [8.00, 16.00]", "32,000", "n/a",
                        "1.250 [0.625, 1.250]", "0.625 [0.312, 0.625]"]  # fmt: skip
    assert cells[0][4:] == ["1.000", "0.500 [0.500, 0.500]"]
    # the CLI's 80 columns: the wider side, rounded up: (16 - 8)/8 = 100 %,
    # (1.25 - 0.625)/1.25 = 50 %, (0.625 - 0.3125)/0.625 = 50 %; an empty interval ±0 %
    _, cells = comparison_table(list(rows.values()), compact=True)
    assert cells[2][1:] == ["8.00 ±100%", "32,000", "n/a", "1.250 ±50%", "0.625 ±50%"]
    assert cells[0][4:] == ["1.000", "0.500 ±0%"]


def test_verdict_says_within_noise_only_when_the_interval_holds_one():
    v = verdicts(_modes())
    assert [(x["mode"], x["base"], x["ratio"], x["low"], x["high"], x["word"]) for x in v] == [
        ("domino", "tp", 1.25, 0.625, 1.25, "within noise"),
        ("domino-sp", "sp", 1.0, 0.8, 1.25, "within noise"),
    ]
    fast = dict(BLOCKS, domino=[[8.0, 8.0]] * 5 + [[9.0, 9.0]])  # 1.25 ×5, 10/9
    v = verdicts(_modes(fast))
    assert (v[0]["low"], v[0]["high"], v[0]["word"]) == (10 / 9, 1.25, "faster")
    assert verdict_text(v) == (
        "domino 1.250× tp [1.111, 1.250] (faster), "
        "domino-sp 1.000× sp [0.800, 1.250] (within noise)"
    )


def test_old_run_json_without_blocks_has_no_interval():
    modes = {m: {"step_ms": s, "tokens_per_s": 1.0} for m, s in (("tp", 2.0), ("domino", 2.5))}
    row = comparison_rows(modes)[1]
    assert (row["speedup_vs_tp"], row["speedup_vs_tp_low"], row["step_ms_low"]) == (
        0.8, None, None)  # fmt: skip
    assert verdict_text(verdicts(modes)) == "domino 0.800× tp (slower, no interval)"


def test_report_title_carries_the_interval():
    from domino_prof.report import figures as F

    modes = _modes()
    run = {"modes": modes, "comparison": comparison_rows(modes), "verdict": verdicts(modes)}
    sec = F.mode_comparison(run)
    assert sec.title == (
        "Modes compared: domino 1.250× tp [0.625, 1.250] (within noise), "
        "domino-sp 1.000× sp [0.800, 1.250] (within noise)"
    )
    bar = sec.body.data[0]  # error bars: each mode's timed-step interval
    assert list(bar.error_y.array)[2] == 8.0 and list(bar.error_y.arrayminus)[2] == 0.0
    cards = F.headline(None, comparison=run["comparison"][2]).body
    assert "95% interval [1.250, 1.250]" not in cards[3].sub
    assert cards[3].sub == "tp timed step / this mode's; 95% interval [0.625, 1.250]"
    assert "95% interval [8.00, 16.00]" in cards[2].sub


# --------------------------------------------------------------------------- check
def _run_dir(tmp_path: Path, blocks=BLOCKS) -> Path:
    modes = _modes(blocks)
    return write_run_dir(tmp_path / "run", modes, comparison=comparison_rows(modes),
                         verdict=verdicts(modes))  # fmt: skip


def _check(*args):
    return CliRunner().invoke(app, ["check", *map(str, args)])


def test_min_speedup_passes_on_the_lower_bound_only(tmp_path):
    fast = dict(BLOCKS, domino=[[8.0, 8.0]] * 5 + [[9.0, 9.0]])  # [1.111, 1.250]
    d = _run_dir(tmp_path, fast)
    r = _check(d, "--mode", "domino", "--min-speedup", "1.1")
    assert r.exit_code == 0, r.output
    assert "min-speedup [vs tp, 95% low]   all    1.111×  >= 1.100×  pass" in r.stdout
    r = _check(d, "--mode", "domino", "--min-speedup", "1.2")  # 1.25 point, 1.111 low
    assert r.exit_code == 1, r.output
    assert "1.111×  >= 1.200×  FAIL" in r.stdout
    # both overlapped modes by default: domino-sp 1.000 [0.800, 1.250] fails 1.0
    r = _check(d, "--min-speedup", "1.0")
    assert r.exit_code == 1
    assert [ln.split()[0] for ln in r.stdout.splitlines()[2:4]] == ["domino", "domino-sp"]
    assert "FAIL: 1 of 2 checks failed" in r.stdout


def test_min_speedup_on_a_bare_trace_directory_is_one_line_exit_2(tmp_path):
    d = tmp_path / "traces"
    d.mkdir()
    (d / "rank0.json").write_text("{}")
    r = _check(d, "--min-speedup", "1.0")
    assert r.exit_code == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--min-speedup gates the timed steps of a run directory" in (
        lines[0]
    )
    assert r.stdout == ""


def test_min_speedup_needs_an_interval_and_the_counterpart(tmp_path):
    few = {m: b[:5] for m, b in BLOCKS.items()}  # 5 blocks: no 95% interval
    d = _run_dir(tmp_path, few)
    r = _check(d, "--mode", "domino", "--min-speedup", "1.0")
    assert r.exit_code == 2
    assert "5 timed blocks per mode, 6 needed" in r.stdout
    d2 = _run_dir(tmp_path / "b", {"domino": BLOCKS["domino"]})
    r = _check(d2, "--min-speedup", "1.0")
    assert r.exit_code == 2 and "tp did not run" in r.stdout
    r = _check(d, "--min-speedup", "0")
    assert r.exit_code == 2 and "--min-speedup 0.0 must be > 0" in r.stderr
