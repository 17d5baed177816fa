"""Statistics of raw timing samples: median, quartiles, and a bootstrap interval for a ratio."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """Median, quartiles (linear interpolation), IQR, min, max and mean of ``samples``."""
    if not samples:
        raise ValueError("no samples to summarize")
    a = np.asarray(samples, dtype=float)
    q1, median, q3 = np.percentile(a, [25, 50, 75])
    return {
        "n": len(a),
        "median": float(median),
        "q1": float(q1),
        "q3": float(q3),
        "iqr": float(q3 - q1),
        "min": float(a.min()),
        "max": float(a.max()),
        "mean": float(a.mean()),
    }


def ratio_of_medians(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    """``median(numerator) / median(denominator)``: the speedup when both are times."""
    return float(np.median(numerator) / np.median(denominator))


def bootstrap_ratio_ci(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``ratio_of_medians``, each side resampled apart."""
    rng = np.random.default_rng(seed)
    num = np.asarray(numerator, dtype=float)
    den = np.asarray(denominator, dtype=float)
    num_medians = np.median(rng.choice(num, (resamples, num.size)), axis=1)
    den_medians = np.median(rng.choice(den, (resamples, den.size)), axis=1)
    ratios = num_medians / den_medians
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(lo), float(hi)


def slope(values: Sequence[float]) -> float:
    """Least-squares slope of ``values`` against their index (units of value per index)."""
    if len(values) < 2:
        return 0.0
    x = np.arange(len(values), dtype=float)
    return float(np.polyfit(x, np.asarray(values, dtype=float), 1)[0])
