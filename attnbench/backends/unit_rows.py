"""l2 row normalisation as an autograd op that keeps the least memory for its backward.

`F.normalize` saves its input and differentiates through a division and a norm, leaving
several row-sized temporaries in the backward. Here the backward needs only the unit rows
u = x / |x| and the norms: dx = (g - u <u, g>) / |x|, one new buffer. YOSO normalises Q, K
and its output with it, so its forward + backward peak stays close to the forward's.
`unit_rows_pair` writes the unit rows of Q and K into one buffer, so both are hashed in
one kernel call.
"""

from __future__ import annotations

import torch

EPS = 1e-12  # as F.normalize: rows shorter than this are divided by EPS instead (zero rows)


def _norm(x: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min_(EPS)


def _unit_backward(grad, unit, norm):
    """dx = (g - u <u, g>) / |x| into one new buffer."""
    along = (grad.unsqueeze(-2) @ unit.unsqueeze(-1)).squeeze(-1)  # <u, g> per row
    return torch.addcmul(grad, unit, along, value=-1.0).div_(norm)


def _into_pair(q, k):
    """([2, *q.shape] unit rows of q then k, their norms), written in place."""
    both = torch.empty((2, *q.shape), dtype=q.dtype, device=q.device)
    norms = (_norm(q), _norm(k))
    for half, x, norm in zip(both, (q, k), norms, strict=True):
        torch.div(x, norm, out=half)
    return both, norms


class _UnitRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        norm = _norm(x)
        unit = x / norm
        ctx.save_for_backward(unit, norm)
        return unit

    @staticmethod
    def backward(ctx, grad):
        return _unit_backward(grad, *ctx.saved_tensors)


class _UnitRowsPair(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k):
        both, norms = _into_pair(q, k)
        ctx.save_for_backward(both, *norms)
        return both

    @staticmethod
    def backward(ctx, grad):
        both, *norms = ctx.saved_tensors
        return tuple(map(_unit_backward, grad, both, norms))


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """x / max(|x|, EPS) along the last axis; differentiable with a lean backward."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _UnitRows.apply(x)
    return x / _norm(x)


def unit_rows_pair(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """[2, *q.shape]: unit_rows(q) and unit_rows(k) in one contiguous buffer (q and k of
    one shape); differentiable like unit_rows."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
        return _UnitRowsPair.apply(q, k)
    return _into_pair(q, k)[0]
