"""SCRAM's numba kernels called on torch tensors: picks the CPU or CUDA kernels by the
tensors' device (`kernel_target`), allocates outputs and scratch through torch (so memory
counters see them) and hands zero-copy views to numba.
"""

from __future__ import annotations

import torch

from attnbench.kernels.target import as_array, contiguous, kernel_module, kernel_target


def patchmatch(
    q: torch.Tensor,
    k: torch.Tensor,
    H: int,
    W: int,
    kappa: int,
    variant: str = "max",
    L: int = 1,
    T: int = 8,
    jumps: tuple[int, ...] = (8, 4, 2, 1),
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Approximate top-kappa keys of every query (q, k [B, H*W, d], score <q, k>/sqrt(d)).

    Returns matches int32 [B, n, kappa] (linear key indices, best first; -1 where the mode
    variant found fewer than kappa modes) and their scores float32 [B, n, kappa].
    """
    if q.dim() != 3:
        raise ValueError(f"q must be [B, n, d], got {tuple(q.shape)}")
    B, n = q.shape[0], q.shape[1]
    matches = torch.empty(B, n, kappa, dtype=torch.int32, device=q.device)
    scores = torch.empty(B, n, kappa, dtype=torch.float32, device=q.device)
    tmp_ids, tmp_sc = torch.empty_like(matches), torch.empty_like(scores)
    arrays = [as_array(t) for t in (contiguous(q), contiguous(k), matches, scores, tmp_ids, tmp_sc)]
    qa, ka, *fields = arrays
    kernel_module("patchmatch", kernel_target(q)).patchmatch(
        qa, ka, H, W, kappa, variant, L, T, tuple(jumps), seed, *fields
    )
    return matches, scores


def window_softmax(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, matches: torch.Tensor, H: int, W: int, b: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of each query over the union of the (2b+1)^2 windows (clipped, each
    key once) around its matches [B, n, kappa]: out float32 [B, n, dv] and the number of
    distinct candidate keys int32 [B, n]."""
    if v.dim() != 3 or matches.dim() != 3:
        raise ValueError(f"v and matches must be 3-D, got {tuple(v.shape)}, {tuple(matches.shape)}")
    B, n, dv = v.shape
    if matches.numel() and (matches.max() >= H * W or matches.min() < -1):
        raise ValueError(f"matches must be key indices in [-1, {H * W})")
    out = torch.empty(B, n, dv, dtype=torch.float32, device=v.device)
    counts = torch.empty(B, n, dtype=torch.int32, device=v.device)
    args = [as_array(contiguous(t)) for t in (q, k, v)]
    args.append(as_array(contiguous(matches, torch.int32)))
    kernel_module("patchmatch", kernel_target(q)).window_softmax(
        *args, H, W, b, as_array(out), as_array(counts)
    )
    return out, counts
