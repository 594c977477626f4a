"""Exact float64 references for the error study, a block of query rows at a time
(see `attnbench.backends.rowblocks` for why blocks)."""

from __future__ import annotations

import torch

from attnbench.backends.rowblocks import by_rows
from attnbench.backends.softmax import softmax_weights

__all__ = ["exact_softmax", "softmax_attention"]


def softmax_attention(q, k, v):
    """softmax(QK^T / sqrt(d)) V, differentiable: what the float64 references compute."""
    return softmax_weights(q, k) @ v


def exact_softmax(q, k, v, budget: int | None = None) -> torch.Tensor:
    """The float64 softmax attention every backend is compared with."""
    return by_rows(softmax_attention, q.double(), k.double(), v.double(), budget=budget)
