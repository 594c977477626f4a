"""Brute-force torch oracle for SCRAM's PatchMatch and window softmax (small sizes only).

Everything is dense O(n^2) in float64: exact top-kappa keys ("max"), greedy non-maximum
suppression ("mode"), the candidate mask of the (2b+1)^2 windows around given matches, and
softmax attention restricted to a mask. The numba kernels are tested against these.
"""

from __future__ import annotations

import math

import torch


def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """s(p, j) = <q_p, k_j> / sqrt(d) in float64, [B, n, n]."""
    q64, k64 = q.double(), k.double()
    return q64 @ k64.transpose(1, 2) / math.sqrt(q.shape[-1])


def _coords(H: int, W: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.arange(H * W, device=device)
    return idx // W, idx % W


def topk_max(q: torch.Tensor, k: torch.Tensor, kappa: int):
    """The kappa best keys per query, best first: (indices int64, scores float64)."""
    values, indices = torch.topk(scores(q, k), kappa, dim=-1)
    return indices, values


def topk_mode(q: torch.Tensor, k: torch.Tensor, H: int, W: int, kappa: int, L: int):
    """Greedy NMS: repeatedly take the best remaining key, then drop every key within
    Chebyshev distance < L of it. Missing modes are index -1 with score -inf."""
    s = scores(q, k).clone()
    ys, xs = _coords(H, W, q.device)
    indices = torch.full(s.shape[:2] + (kappa,), -1, dtype=torch.int64, device=q.device)
    values = torch.full(s.shape[:2] + (kappa,), -math.inf, dtype=torch.float64, device=q.device)
    for e in range(kappa):
        best, j = s.max(dim=-1)
        found = best > -math.inf
        indices[..., e] = torch.where(found, j, -1)
        values[..., e] = best
        near = torch.maximum(
            (ys[None, None, :] - ys[j][..., None]).abs(),
            (xs[None, None, :] - xs[j][..., None]).abs(),
        )
        s = s.masked_fill(near < L, -math.inf)
    return indices, values


def window_candidates(matches: torch.Tensor, H: int, W: int, b: int) -> torch.Tensor:
    """bool [B, n, n]: key j is a candidate of query p if it lies in the (2b+1)x(2b+1)
    window (clipped at the border) around one of p's matches [B, n, kappa] (-1 = none)."""
    ys, xs = _coords(H, W, matches.device)
    m = matches.long()
    valid = m >= 0
    my, mx = ys[m.clamp(min=0)], xs[m.clamp(min=0)]
    inside = ((ys[None, None, None, :] - my[..., None]).abs() <= b) & (
        (xs[None, None, None, :] - mx[..., None]).abs() <= b
    )
    return (inside & valid[..., None]).any(dim=2)


def sparse_softmax_reference(q, k, v, candidate_mask: torch.Tensor) -> torch.Tensor:
    """Softmax attention over the candidate keys only (float64); rows with none give 0."""
    s = scores(q, k).masked_fill(~candidate_mask, -math.inf)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return p @ v.double()


def dense_attention(q, k, v) -> torch.Tensor:
    """Exact softmax attention (float64)."""
    return torch.softmax(scores(q, k), dim=-1) @ v.double()
