"""Exact softmax attention, written out: softmax(Q K^T / sqrt(d)) V. The reference."""

from __future__ import annotations

import math

import torch

from attnbench.backends.masking import key_mask, zero_masked_rows
from attnbench.backends.registry import Backend, register


def softmax_weights(q: torch.Tensor, k: torch.Tensor, mask=None) -> torch.Tensor:
    """Two n x n matrices at most (scores, weights): scaling and masking work in place (the
    product's backward needs q and k, not its output), and only a mask can empty a row."""
    scores = (q @ k.transpose(-1, -2)).div_(math.sqrt(q.shape[-1]))
    if mask is None:
        return torch.softmax(scores, dim=-1)
    scores.masked_fill_(~key_mask(mask), float("-inf"))
    return torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)  # rows with every key masked


@register
class Softmax(Backend):
    name = "softmax"
    map_in_blocks = True  # a map row depends on its query alone
    complexity = "O(n^2 d) time, O(n^2) memory"
    summary = "exact attention, materialises the n x n matrix"

    def forward(self, q, k, v, mask=None):
        return zero_masked_rows(softmax_weights(q, k, mask) @ v, mask)

    def attention_map(self, q, k, mask=None):
        return softmax_weights(q, k, mask)

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        return 3 * batch * heads * n * n * itemsize  # scores, weights, and a copy when masked
