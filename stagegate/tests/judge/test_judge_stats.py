"""The statistics the judge recomputes: the exact bootstrap distribution of a resample's median
against enumeration, its interval against a long resampling run, quartiles against numpy's
linear method, and no random numbers anywhere in the judge."""

from __future__ import annotations

import ast
import itertools
import math
import random
import statistics
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import stagegate.judge
from stagegate.judge.stats import (
    RatioDistribution,
    median_distribution,
    quartiles,
    ratio_of_medians,
)

SAMPLES = [
    [1.0, 2.0],
    [1.0, 2.0, 3.0],
    [1.0, 2.0, 2.0, 5.0],  # ties
    [0.3, 0.1, 0.2, 0.4, 0.5, 0.6],
    [3.0, 1.0, 2.0, 2.0, 7.0],
    [1.0, 1.0, 1.0, 1.0],
    [1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 4.0, 4.0],
]


def _every_resample(values: list[float]) -> Iterator[tuple[list[float], int]]:
    """Every resample of ``values`` (with replacement), as each multiset of positions drawn and
    the number of ordered draws that give it: n**n draws in all, without walking each one."""
    n = len(values)
    for drawn in itertools.combinations_with_replacement(range(n), n):
        counts = Counter(drawn).values()
        yield (
            [values[i] for i in drawn],
            math.factorial(n) // math.prod(map(math.factorial, counts)),
        )


@pytest.mark.parametrize("values", SAMPLES, ids=str)
def test_the_median_distribution_is_every_resample_enumerated(values: list[float]) -> None:
    n, counted, draws = len(values), {}, 0
    for draw, ways in _every_resample(values):
        m = statistics.median(draw)
        counted[m] = counted.get(m, 0.0) + ways * n**-n
        draws += ways
    assert draws == n**n
    exact = median_distribution(values)
    assert set(exact) == set(counted)
    assert all(exact[m] == pytest.approx(p, abs=1e-12) for m, p in counted.items())


def _resampled(values: list[float], rng: random.Random) -> float:
    return statistics.median(rng.choices(values, k=len(values)))


@pytest.mark.parametrize(
    ("top", "bottom"),
    [
        (
            [4.44, 4.43, 4.40, 4.44, 4.42, 4.45, 4.44, 4.43, 4.41, 4.44],
            [0.64, 0.63, 0.64, 0.65, 0.63, 0.64, 0.64, 0.63, 0.64, 0.64],
        ),
        ([0.027, 0.025, 0.020, 0.019, 0.022], [0.031, 0.032, 0.031, 0.026, 0.028]),
        ([1.0, 1.1, 0.9, 1.05, 0.95, 1.5], [0.5, 0.52, 0.49, 0.7, 0.51, 0.5, 0.48]),
    ],
)
def test_the_interval_is_where_a_long_bootstrap_puts_it(
    top: list[float], bottom: list[float]
) -> None:
    """10,000 resampled ratios: their 2.5th and 97.5th percentiles sit at those shares of the
    exact distribution, within five standard errors (0.0016 each)."""
    rng = random.Random(7)
    ratios = sorted(_resampled(top, rng) / _resampled(bottom, rng) for _ in range(10_000))
    dist = RatioDistribution(top, bottom)
    for share in (0.025, 0.975):
        drawn = ratios[int(share * len(ratios))]
        assert (
            dist.share_below(drawn, False) - 0.008 <= share <= dist.share_below(drawn, True) + 0.008
        )
    low, high = dist.interval()
    assert low <= ratio_of_medians(top, bottom) <= high


def test_a_quantile_and_the_share_below_it_agree() -> None:
    dist = RatioDistribution(SAMPLES[3], SAMPLES[4])
    for share in (0.01, 0.025, 0.5, 0.975, 0.99):
        q = dist.quantile(share)
        assert dist.share_below(q, True) >= share > dist.share_below(q * (1 - 1e-9), True)


@pytest.mark.parametrize(
    ("values", "q1", "q3"),
    [
        ([1.0, 2.0, 3.0, 4.0], 1.75, 3.25),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 2.0, 4.0),
        ([2.0, 1.0], 1.25, 1.75),
    ],
)
def test_quartiles_interpolate_linearly_as_numpy_does(
    values: list[float], q1: float, q3: float
) -> None:
    assert quartiles(values) == pytest.approx((q1, q3))


def test_the_judge_draws_no_random_number() -> None:
    """The same file gets the same interval and decision on any machine."""
    package = Path(stagegate.judge.__file__).parent
    imported = {
        alias.name
        for path in package.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert not {"random", "secrets", "numpy"} & imported
