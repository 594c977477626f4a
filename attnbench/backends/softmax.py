"""Exact softmax attention, written out: softmax(Q K^T / sqrt(d)) V. The reference."""

from __future__ import annotations

import math

import torch

from attnbench.backends.masking import key_mask, zero_masked_rows
from attnbench.backends.registry import Backend, register


def softmax_weights(q: torch.Tensor, k: torch.Tensor, mask=None) -> torch.Tensor:
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~key_mask(mask), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(weights, nan=0.0)  # rows with every key masked


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
        return 3 * batch * heads * n * n * itemsize  # scores, scaled scores, weights
