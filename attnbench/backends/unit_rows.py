"""l2 row normalisation as an autograd op that keeps the least memory for its backward.

`F.normalize` saves its input and differentiates through a division and a norm, leaving
several row-sized temporaries in the backward. Here the backward needs only the unit rows
u = x / |x| and the norms: dx = (g - u <u, g>) / |x|, one new buffer. YOSO normalises Q, K
and its output with it, so its forward + backward peak stays close to the forward's.
"""

from __future__ import annotations

import torch

EPS = 1e-12  # as F.normalize: rows shorter than this are divided by EPS instead (zero rows)


class _UnitRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min_(EPS)
        unit = x / norm
        ctx.save_for_backward(unit, norm)
        return unit

    @staticmethod
    def backward(ctx, grad):
        unit, norm = ctx.saved_tensors
        along = (grad.unsqueeze(-2) @ unit.unsqueeze(-1)).squeeze(-1)  # <u, g> per row
        return torch.addcmul(grad, unit, along, value=-1.0).div_(norm)


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """x / max(|x|, EPS) along the last axis; differentiable with a lean backward."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _UnitRows.apply(x)
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min_(EPS)
    return x / norm
