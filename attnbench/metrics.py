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


VS_SOFTMAX = {
    "radian_vs_softmax": mean_radian,
    "rel_frobenius_vs_softmax": rel_frobenius,
    "max_abs_vs_softmax": max_abs,
}
