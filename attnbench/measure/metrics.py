"""Approximation-error metrics between an output and a reference, computed in float64."""

from __future__ import annotations

import torch


def row_angles(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Radian angle between matching rows (last dim) of a and b; 0 when both rows are zero,
    pi/2 when only one is (a zero row points nowhere)."""
    a, b = a.double(), b.double()
    na, nb = a.norm(dim=-1), b.norm(dim=-1)
    cos = (a * b).sum(-1) / (na * nb).clamp_min(torch.finfo(torch.float64).tiny)
    angle = torch.arccos(cos.clamp(-1.0, 1.0))
    both_zero = (na == 0) & (nb == 0)
    return torch.where(both_zero, torch.zeros_like(angle), angle)


def mean_radian(a: torch.Tensor, b: torch.Tensor) -> float:
    """YOSO Fig. 8's error: the angle between output rows, averaged over rows, heads, batch."""
    return row_angles(a, b).mean().item()


def rel_frobenius(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def max_abs(out: torch.Tensor, ref: torch.Tensor) -> float:
    return (out.double() - ref.double()).abs().max().item()


# Metric prefix of the error study's fitted slope of the angle against log2 n: the study
# writes these rows and the views set them apart, so the name lives below both.
SLOPE = "radian_slope_log2n"

VS_SOFTMAX = {
    "radian_vs_softmax": mean_radian,
    "rel_frobenius_vs_softmax": rel_frobenius,
    "max_abs_vs_softmax": max_abs,
}


# --- attention-map metrics: how much of exact softmax's attention a method keeps -----------


def row_normalise(weights: torch.Tensor) -> torch.Tensor:
    """Rows scaled to sum to 1 (all-zero rows stay zero): a map as a distribution over keys."""
    weights = weights.double()
    return weights / weights.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)


def captured_mass(reference: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """Per row, the exact softmax mass on the keys a method looks at (SCRAM's mu_p)."""
    return (reference.double() * support).sum(-1)


def total_variation(reference: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per row, the total-variation distance between softmax and a method's row-normalised map."""
    return 0.5 * (reference.double() - row_normalise(weights)).abs().sum(-1)


def map_summary(mass: torch.Tensor, tv: torch.Tensor) -> dict[str, float]:
    """Captured mass (mean and 5th percentile over rows) and mean TV distance vs softmax,
    from their per-row values (which may have been computed a block of rows at a time)."""
    mass = mass.flatten()
    return {
        "captured_mass_vs_softmax": mass.mean().item(),
        "captured_mass_p5_vs_softmax": torch.quantile(mass, 0.05).item(),
        "tv_vs_softmax": tv.double().mean().item(),
    }


def map_metrics(reference: torch.Tensor, weights: torch.Tensor) -> dict[str, float]:
    """`map_summary` of a whole map against the whole softmax map."""
    return map_summary(captured_mass(reference, weights > 0), total_variation(reference, weights))


def argmax_hit_rate(best_found: torch.Tensor, true_best: torch.Tensor, tol: float = 1e-5) -> float:
    """Share of queries whose best found score reaches the true maximum (within tol)."""
    return (best_found.double() >= true_best.double() - tol).double().mean().item()


def recall_at_k(found: torch.Tensor, truth: torch.Tensor) -> float:
    """Mean share of the true top-k keys (truth [..., k]) among the found ones [..., k']."""
    hits = (found[..., :, None] == truth[..., None, :]).any(-2)
    return hits.double().mean().item()
