"""The shared meaning of `mask`: a bool [B, n] token mask, True for real tokens."""

from __future__ import annotations

import torch


def key_mask(mask: torch.Tensor) -> torch.Tensor:
    """[B, n] -> [B, 1, 1, n], broadcastable over heads and query rows of a score matrix."""
    return mask[:, None, None, :]


def token_mask(mask: torch.Tensor) -> torch.Tensor:
    """[B, n] -> [B, 1, n, 1], broadcastable over heads and feature columns of an output."""
    return mask[:, None, :, None]


def zero_masked_rows(out: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Masked tokens output zeros (never NaN, even when every key is masked)."""
    if mask is None:
        return out
    return torch.where(token_mask(mask), out, torch.zeros((), dtype=out.dtype, device=out.device))
