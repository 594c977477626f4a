"""Intervals of a ratio of medians B / A: over the samples of one run a side, or over the
units of several (runs, or a lone run's rounds), for `compare`."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

RESAMPLES = 2000
LEVEL = 0.95


def units(runs: list[list[list[float]]]) -> int:
    """The independent units of a side: its runs, or a lone run's rounds."""
    return len(runs) if len(runs) != 1 else len(runs[0])


def ratio_interval(
    a: list[float], b: list[float], resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap interval of median(b) / median(a), resampling A and B apart."""
    rng = np.random.default_rng(seed)
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    med_a = np.median(rng.choice(a_arr, size=(resamples, a_arr.size)), axis=1)
    med_b = np.median(rng.choice(b_arr, size=(resamples, b_arr.size)), axis=1)
    ratios = med_b / med_a
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def runs_interval(
    a: list[list[list[float]]],
    b: list[list[list[float]]],
    resamples: int = RESAMPLES,
    level: float = LEVEL,
    seed: int = 0,
) -> tuple[float, float]:
    """Interval of median(b) / median(a) over the sides' units (`units`: runs, or a lone
    run's rounds), from a hierarchical bootstrap: each resample draws a side's runs with
    replacement, then each drawn run's rounds, then each drawn round's samples, and takes
    the median of what it drew, so drift between runs and rounds is in its spread.

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

    def log_medians(runs: list[list[np.ndarray]]) -> np.ndarray:
        def once() -> float:
            drawn = [rng.choice(part, part.size) for run in draw(runs) for part in draw(run)]
            return float(np.median(np.concatenate(drawn)))

        return np.log([once() for _ in range(resamples)])

    k_a, k_b = units(a), units(b)
    variance = log_medians(side_a).var() * k_a / (k_a - 1)
    variance += log_medians(side_b).var() * k_b / (k_b - 1)
    pooled = [np.median(np.concatenate([p for run in side for p in run])) for side in (a, b)]
    center = math.log(pooled[1] / pooled[0])
    half = stats.t.ppf(0.5 + level / 2, min(k_a, k_b) - 1) * math.sqrt(variance)
    return math.exp(center - half), math.exp(center + half)
