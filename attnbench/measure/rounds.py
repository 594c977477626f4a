"""Speed-ups from rounds: backends that take turns, round by round, compared within a round.

A slow drift of the machine (another tenant, the clock, the memory's state) moves every
backend of a round alike, so the ratio of two backends' medians within one round keeps
little of it, while medians pooled over a whole run keep all of it. The speed-up of a
backend is then the geometric mean of its per-round ratios (the baseline's median over its
own), and its interval Student's t interval of their logarithms: the rounds are the
independent units, their samples only make each round's median.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

LEVEL = 0.95


def split(samples: list[float], sizes: list[int]) -> list[list[float]]:
    """The samples of each round, given how many each round kept (all in one round when
    `sizes` is empty); ValueError when the sizes do not add up to the samples."""
    if not sizes:
        return [list(samples)]
    if sum(sizes) != len(samples) or min(sizes) < 1:
        raise ValueError(f"round sizes {sizes} do not split {len(samples)} samples")
    bounds = np.cumsum([0, *sizes])
    return [list(samples[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def round_medians(samples: list[float], sizes: list[int]) -> list[float]:
    return [float(np.median(part)) for part in split(samples, sizes)]


def paired_speedup(
    baseline: list[float], own: list[float], level: float = LEVEL
) -> tuple[float, float | None, float | None]:
    """(speed-up, low, high) from per-round medians of the baseline and of a backend, round
    by round: the geometric mean of baseline / own and the `level` t interval of the mean
    log ratio; no interval from fewer than two rounds."""
    if len(baseline) != len(own) or not own:
        raise ValueError(f"{len(baseline)} baseline rounds against {len(own)}")
    logs = np.log(np.asarray(baseline, dtype=float) / np.asarray(own, dtype=float))
    mean = float(logs.mean())
    if logs.size < 2:
        return math.exp(mean), None, None
    half = stats.t.ppf(0.5 + level / 2, logs.size - 1) * logs.std(ddof=1) / math.sqrt(logs.size)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)
