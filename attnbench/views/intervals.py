"""Intervals of a ratio B / A of a statistic (the median of times, the mean of an error's
trials): over the samples of one run a side, or over the units of several (runs, or a lone
run's rounds), for `compare`."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import stats

RESAMPLES = 2000
LEVEL = 0.95
Statistic = Callable[..., np.ndarray]  # np.median or np.mean: of an array, or along an axis


def units(runs: list[list[list[float]]]) -> int:
    """The independent units of a side: its runs, or a lone run's rounds."""
    return len(runs) if len(runs) != 1 else len(runs[0])


def ratio_interval(
    a: list[float],
    b: list[float],
    resamples: int = RESAMPLES,
    level: float = LEVEL,
    seed: int = 0,
    statistic: Statistic = np.median,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of statistic(b) / statistic(a) (the median by default),
    resampling A and B apart."""
    rng = np.random.default_rng(seed)
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    stat_a = statistic(rng.choice(a_arr, size=(resamples, a_arr.size)), axis=1)
    stat_b = statistic(rng.choice(b_arr, size=(resamples, b_arr.size)), axis=1)
    ratios = stat_b / stat_a
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def runs_interval(
    a: list[list[list[float]]],
    b: list[list[list[float]]],
    resamples: int = RESAMPLES,
    level: float = LEVEL,
    seed: int = 0,
    statistic: Statistic = np.median,
) -> tuple[float, float]:
    """Interval of statistic(b) / statistic(a) (the median by default) over the sides' units
    (`units`: runs, or a lone run's rounds), from a hierarchical bootstrap: each resample
    draws a side's runs with replacement, then each drawn run's rounds, then each drawn
    round's samples, and takes the statistic of what it drew, so drift between runs and
    rounds is in its spread.

    A percentile interval from a handful of units is too narrow: resampling k units
    understates the variance of their mean by (k - 1) / k, and its tails come from k values.
    So the interval is the observed log ratio +- Student's t at min(k) - 1 degrees of
    freedom times the spread of the resampled log ratios, each side's variance scaled by
    k / (k - 1)."""
    rng = np.random.default_rng(seed)
    side_a = [[np.asarray(part, dtype=float) for part in run] for run in a]
    side_b = [[np.asarray(part, dtype=float) for part in run] for run in b]

    def draw(items: list) -> list:
        return [items[i] for i in rng.integers(len(items), size=len(items))]

    def log_statistics(runs: list[list[np.ndarray]]) -> np.ndarray:
        def once() -> float:
            drawn = [rng.choice(part, part.size) for run in draw(runs) for part in draw(run)]
            return float(statistic(np.concatenate(drawn)))

        return np.log([once() for _ in range(resamples)])

    k_a, k_b = units(a), units(b)
    variance = log_statistics(side_a).var() * k_a / (k_a - 1)
    variance += log_statistics(side_b).var() * k_b / (k_b - 1)
    pooled = [statistic(np.concatenate([p for run in side for p in run])) for side in (a, b)]
    center = math.log(pooled[1] / pooled[0])
    half = stats.t.ppf(0.5 + level / 2, min(k_a, k_b) - 1) * math.sqrt(variance)
    return math.exp(center - half), math.exp(center + half)
