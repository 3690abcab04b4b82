"""Timed-step statistics: a mode's step time and the ratios between modes, each with a
95% interval (docs/METRICS.md, "Extension: timed blocks"). Pure Python, no torch, no
numpy: samples are a few dozen blocks.

Method (block medians, distribution-free intervals). Each mode's timed steps come in
blocks of consecutive steps; on CPU the modes run their blocks in turn (A B C D E A B
C D E ..., ``reference_model/train.py``), so block ``i`` of every mode sees the same
moment of the machine. Then:

- a block's time is the median of its steps (one slow step — a page fault, another
  process — moves it little);
- a mode's step time is the median of its block times; a ratio (speedup of mode M
  vs tp = tp's time / M's) is the median over blocks of the *paired* ratio
  ``base_i / mode_i``: drift of the machine between blocks cancels within a pair;
- the 95% interval of either median is the order-statistic interval
  ``[x(k), x(n-k+1)]`` of the sorted block values (Hollander & Wolfe, *Nonparametric
  Statistical Methods*, ch. 3): its coverage ``1 - 2·P(Bin(n, 1/2) <= k-1)`` holds for
  any continuous distribution of independent block values, with no resampling and no
  seed, so every number can be checked by hand. ``k`` is the largest rank whose
  coverage is still >= 95%; the exact coverage is kept with the interval. Fewer than
  6 blocks cannot give 95% (``2·2^-n > 0.05``): the interval is then absent (None),
  never made up.

The interval is for the median block time (the median paired ratio): what a rerun of
the same blocks on the same machine would give, not a claim about other machines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
METHOD = (
    "median of paired block ratios (block = median of its consecutive timed steps), "
    "95% distribution-free order-statistic interval"
)


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """A median with its interval. ``low``/``high``/``coverage`` are None when there
    are too few blocks for the confidence asked."""

    value: float
    low: float | None
    high: float | None
    n: int  # blocks (paired blocks for a ratio)
    coverage: float | None  # exact coverage of [low, high], >= the confidence asked

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def rel_half_width(self) -> float | None:
        """The interval's larger side relative to the value (0.05 = within ±5%)."""
        if not self.has_interval or not self.value:
            return None
        return max(self.high - self.value, self.value - self.low) / abs(self.value)

    def contains(self, x: float) -> bool:
        return self.has_interval and self.low <= x <= self.high

    def to_json(self) -> dict:
        return {
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "n_blocks": self.n,
            "coverage": self.coverage,
        }


def median(xs: Sequence[float]) -> float:
    """The sample median (mean of the two middle values for an even count)."""
    if not xs:
        raise ValueError("median of no values")
    s = sorted(xs)
    n = len(s)
    mid = n // 2
    return float(s[mid]) if n % 2 else (s[mid - 1] + s[mid]) / 2


def split_blocks(times: Sequence[float], size: int) -> list[list[float]]:
    """Consecutive blocks of ``size`` steps; a shorter last block keeps the rest."""
    if size < 1:
        raise ValueError(f"block size must be >= 1, got {size}")
    return [list(times[i : i + size]) for i in range(0, len(times), size)]


def binom_half_cdf(k: int, n: int) -> float:
    """P(Bin(n, 1/2) <= k), exactly (as a float of an exact fraction)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, j) for j in range(min(k, n) + 1)) / 2**n


def order_rank(n: int, *, confidence: float = CONFIDENCE) -> int | None:
    """The largest k >= 1 with ``1 - 2·P(Bin(n, 1/2) <= k-1) >= confidence`` (the
    interval is ``[x(k), x(n-k+1)]``, 1-based ranks of the sorted sample), or None."""
    best = None
    for k in range(1, n // 2 + 1):
        if 1 - 2 * binom_half_cdf(k - 1, n) >= confidence:
            best = k
        else:
            break
    return best


def median_interval(xs: Sequence[float], *, confidence: float = CONFIDENCE) -> Estimate:
    """The median of ``xs`` and its distribution-free interval (module doc)."""
    s = sorted(float(x) for x in xs)
    n = len(s)
    k = order_rank(n, confidence=confidence)
    if k is None:
        return Estimate(value=median(s), low=None, high=None, n=n, coverage=None)
    return Estimate(
        value=median(s),
        low=s[k - 1],
        high=s[n - k],
        n=n,
        coverage=1 - 2 * binom_half_cdf(k - 1, n),
    )


def block_medians(blocks: Sequence[Sequence[float]]) -> list[float]:
    return [median(b) for b in blocks]


def paired_ratio(
    base: Sequence[float], other: Sequence[float], *, confidence: float = CONFIDENCE
) -> Estimate:
    """``base_i / other_i`` over paired block times, its median and interval: the speedup
    of ``other`` over ``base`` (> 1: ``other`` is faster). Both lists: one value per
    block, in block order; they must pair up."""
    if len(base) != len(other):
        raise ValueError(f"{len(base)} blocks against {len(other)}: blocks must pair up")
    if any(o <= 0 for o in other):
        raise ValueError("a block time <= 0 cannot divide")
    return median_interval([b / o for b, o in zip(base, other)], confidence=confidence)


def verdict_word(r: Estimate) -> str:
    """'faster' / 'slower' when the interval excludes 1.0, 'within noise' when it
    contains it; without an interval the point's direction, said to be unsure."""
    if r.has_interval:
        if r.contains(1.0):
            return "within noise"
        return "faster" if r.low > 1.0 else "slower"
    if r.value == 1.0:
        return "the same"
    return ("faster" if r.value > 1.0 else "slower") + ", no interval"
