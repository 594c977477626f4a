"""Gradient-fidelity metrics: one call's gradient, and a stack of gradient draws, against a
reference gradient, all in float64.

Bias and noise are relative to the reference's norm |r|, the denominator of the one-call
error too, so that over the same draws they add up exactly:
    mean_s |X_s - r|^2 / |r|^2 = bias^2 + noise^2
(bias^2 the unbiased estimate below, noise^2 = tr Sigma^ / |r|^2). |r| is also defined where
the mean of a few draws cannot be told from zero, which the draws' own mean norm is not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine between two gradients flattened; 1 when both are zero, 0 when one is."""
    a, b = a.double().flatten(), b.double().flatten()
    na, nb = a.norm(), b.norm()
    if na == 0 and nb == 0:
        return 1.0
    return float((a @ b) / (na * nb).clamp_min(torch.finfo(torch.float64).tiny))


@dataclass(frozen=True)
class DrawStats:
    """What S gradient draws X_s of one estimator say about it against a reference r.

    `bias2`: (|mean_s X_s - r|^2 - tr Sigma^ / S) / |r|^2, an unbiased estimate of the
    squared relative bias |E X - r|^2 / |r|^2: the plain |mean - r|^2 carries the mean's
    own noise tr Sigma / S, which for a noisy estimator swamps its bias. May be below 0
    when the bias is within that noise.
    `noise`: sqrt(tr Sigma^) / |r|, one draw's spread (the sum of per-entry variances over
    the draws, ddof 1) relative to the reference.
    `*_se`: their standard errors by the jackknife over draws (NaN below 3 draws)."""

    bias2: float
    bias2_se: float
    noise: float
    noise_se: float


def draw_statistics(draws: torch.Tensor, reference: torch.Tensor) -> DrawStats:
    """`DrawStats` of draws [S, ...] (S >= 2) against `reference` [...]."""
    x = draws.double().flatten(1)
    r = reference.double().flatten()
    if x.shape[0] < 2:
        raise ValueError("bias and noise need at least two draws")
    scale = float(r.norm()) ** 2 or torch.finfo(torch.float64).tiny

    def stats(rows: torch.Tensor) -> tuple[float, float]:
        count = rows.shape[0]
        spread = float(rows.var(0, unbiased=True).sum())  # tr Sigma^
        offset = float((rows.mean(0) - r).square().sum())
        return (offset - spread / count) / scale, math.sqrt(spread / scale)

    bias2, noise = stats(x)
    count = x.shape[0]
    if count < 3:
        return DrawStats(bias2, math.nan, noise, math.nan)
    keep = torch.ones(count, dtype=torch.bool)
    left_out = []
    for i in range(count):
        keep[i] = False
        left_out.append(stats(x[keep]))
        keep[i] = True
    jack = torch.tensor(left_out, dtype=torch.float64)  # [S, 2]
    se = ((count - 1) / count * (jack - jack.mean(0)).square().sum(0)).sqrt()
    return DrawStats(bias2, float(se[0]), noise, float(se[1]))


def pooled_bias(stats: list[DrawStats]) -> tuple[float, float]:
    """The relative bias over several inputs' draws and its standard error: sqrt of the
    mean bias2 (0 where that is below 0), and half the width of sqrt(mean +- se) as its
    error, se = sqrt(sum se^2) / count; near 0 that is the smallest bias the draws resolve,
    where the delta method's se / (2 bias) would grow without bound."""
    mean = sum(s.bias2 for s in stats) / len(stats)
    se = math.sqrt(sum(s.bias2_se**2 for s in stats)) / len(stats)
    bias = math.sqrt(max(mean, 0.0))
    if math.isnan(se):
        return bias, math.nan
    return bias, (math.sqrt(max(mean + se, 0.0)) - math.sqrt(max(mean - se, 0.0))) / 2


def pooled_noise(stats: list[DrawStats]) -> tuple[float, float]:
    """The mean relative noise over several inputs' draws and its standard error."""
    mean = sum(s.noise for s in stats) / len(stats)
    return mean, math.sqrt(sum(s.noise_se**2 for s in stats)) / len(stats)
