"""Statistics the judge recomputes from a benchmark's raw window timings: medians, quartiles,
and a percentile bootstrap interval of a ratio of medians.

The same method as the benchmark's own (each side resampled apart, 2000 resamples, the 2.5th
and 97.5th percentiles with linear interpolation), drawn from Python's ``random.Random`` with a
fixed seed: its ``random()`` sequence for a given seed is the one thing Python promises never
to change across versions, so the same file gives the same interval on every machine.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

RESAMPLES = 2000
SEED = 0
LEVEL = 0.95


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


def _percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of already sorted values, linearly interpolated."""
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _resampled_median(values: Sequence[float], rng: random.Random) -> float:
    n = len(values)
    return median([values[int(rng.random() * n)] for _ in range(n)])


def bootstrap_ratio_ci(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`ratio_of_medians`, each side resampled apart."""
    rng = random.Random(seed)
    tops = [_resampled_median(numerator, rng) for _ in range(resamples)]
    bottoms = [_resampled_median(denominator, rng) for _ in range(resamples)]
    ratios = sorted(t / b for t, b in zip(tops, bottoms, strict=True))
    tail = (1 - level) / 2 * 100
    return _percentile(ratios, tail), _percentile(ratios, 100 - tail)
