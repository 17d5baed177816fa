"""Statistics the judge derives from a benchmark's raw window timings: medians, quartiles,
and the bootstrap distribution of a ratio of medians, computed exactly.

A speedup's interval is a percentile bootstrap: each side's windows resampled with
replacement, the median of each resample, the ratio of the two, 2000 times, and the 2.5th and
97.5th percentiles of those ratios. The distribution those 2000 ratios are drawn from is
computed here exactly (a resample's median is an order statistic, or the mean of two, whose
probabilities are binomial), so the judge's interval is the one the bootstrap tends to with
endless resamples: no random numbers, the same on every machine.
"""

from __future__ import annotations

import bisect
import statistics
from collections import Counter
from collections.abc import Sequence
from itertools import accumulate
from math import comb

LEVEL = 0.95
NEGLIGIBLE = 1e-15  # a resampled median less likely than this is left out of the distribution
ROUNDING = 1e-12  # relative: ratios this close are the same ratio, computed two ways
BISECTIONS = 200  # enough to reach adjacent floats from any starting interval


def median(values: Sequence[float]) -> float:
    """The middle value, or the mean of the two middle values."""
    return float(statistics.median(values))


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """First and third quartiles, linearly interpolated between order statistics (numpy's
    default ``percentile`` method); at least two values."""
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return float(q1), float(q3)


def ratio_of_medians(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    """``median(numerator) / median(denominator)``: a speedup when both are times."""
    return median(numerator) / median(denominator)


def _atoms(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """The distinct values, sorted, and the cumulative share of the sample at or below each."""
    counts = Counter(values)
    distinct = sorted(counts)
    return distinct, [c / len(values) for c in accumulate(counts[x] for x in distinct)]


def _at_most(n: int, k: int, p: float) -> float:
    """P(at most ``k`` of ``n`` draws land where each lands with probability ``p``)."""
    return sum(comb(n, m) * p**m * (1 - p) ** (n - m) for m in range(k + 1))


def _odd_medians(values: Sequence[float]) -> dict[float, float]:
    """Each value a resample's median can take, with its probability (odd sample size)."""
    n, (distinct, below) = len(values), _atoms(values)
    k = (n + 1) // 2  # the median is the k-th smallest draw: x or less when k draws are
    tails = [1 - _at_most(n, k - 1, p) for p in below]
    return {x: t - s for x, t, s in zip(distinct, tails, [0.0, *tails[:-1]], strict=True)}


def _even_medians(values: Sequence[float]) -> dict[float, float]:
    """Each value a resample's median (the mean of the k-th and (k+1)-th smallest draws) can
    take, with its probability (even sample size)."""
    n, (distinct, below) = len(values), _atoms(values)
    k, starts = n // 2, [0.0, *below[:-1]]
    out: dict[float, float] = {}
    for i, x in enumerate(distinct):
        lo, hi = starts[i], below[i]  # shares below x, and at or below it
        # both middle draws are x: at most k - 1 draws below x, at least k + 1 at or below it
        both = _at_most(n, k - 1, lo) - _at_most(n, k, hi) + comb(n, k) * lo**k * (1 - hi) ** k
        out[x] = out.get(x, 0.0) + both
        # the k-th draw is x, the (k+1)-th the next value drawn, y: none between them
        left = comb(n, k) * (hi**k - lo**k)
        for j in range(i + 1, len(distinct)):
            if left * (1 - starts[j]) ** k < NEGLIGIBLE:
                break  # a bound on this pair and every later one
            y, right = distinct[j], (1 - starts[j]) ** k - (1 - below[j]) ** k
            mid = (x + y) / 2
            out[mid] = out.get(mid, 0.0) + left * right
    return out


def median_distribution(values: Sequence[float]) -> dict[float, float]:
    """The exact distribution of the median of a resample of ``values`` (with replacement),
    without the values whose probability is below ``NEGLIGIBLE``."""
    atoms = _odd_medians(values) if len(values) % 2 else _even_medians(values)
    return {x: p for x, p in atoms.items() if p >= NEGLIGIBLE}


class RatioDistribution:
    """The exact bootstrap distribution of ``median(numerator) / median(denominator)``, each
    side resampled apart (positive values)."""

    def __init__(self, numerator: Sequence[float], denominator: Sequence[float]) -> None:
        tops = sorted(median_distribution(numerator).items())
        self.tops = [t for t, _ in tops]
        self.top_shares = list(accumulate(p for _, p in tops))
        self.bottoms = sorted(median_distribution(denominator).items())
        self.total = self.top_shares[-1] * sum(p for _, p in self.bottoms)

    def share_below(self, value: float, inclusive: bool) -> float:
        """The share of the distribution below ``value`` (or at or below it)."""
        # top / bottom <= value  <=>  top <= value * bottom, up to the rounding of either side
        find = bisect.bisect_right if inclusive else bisect.bisect_left
        value *= 1 + ROUNDING if inclusive else 1 - ROUNDING
        share = 0.0
        for bottom, p in self.bottoms:
            i = find(self.tops, value * bottom)
            share += p * self.top_shares[i - 1] if i else 0.0
        return share / self.total

    def quantile(self, share: float) -> float:
        """The smallest ratio with at least ``share`` of the distribution at or below it
        (found by bisection to the last bit)."""
        low = self.tops[0] / self.bottoms[-1][0]
        high = self.tops[-1] / self.bottoms[0][0]
        for _ in range(BISECTIONS):
            mid = (low + high) / 2
            if mid in (low, high):
                break
            low, high = (low, mid) if self.share_below(mid, True) >= share else (mid, high)
        return high

    def interval(self, level: float = LEVEL) -> tuple[float, float]:
        """The percentile interval the bootstrap tends to with endless resamples."""
        tail = (1 - level) / 2
        return self.quantile(tail), self.quantile(1 - tail)
