"""Exact softmax attention, written out: softmax(Q K^T / sqrt(d)) V. The reference.

Also the cost of a softmax, which the other plain-torch backends share.
"""

from __future__ import annotations

import math

import torch

from attnbench.backends.cost import Cost, Shape, autograd_backward, matmul
from attnbench.backends.masking import key_mask, zero_masked_rows
from attnbench.backends.registry import Backend, register

# Flops per entry of a softmax: the row max, subtracting it, exp, the row sum, dividing.
SOFTMAX_FLOPS = 5


def scaled_scores(q: torch.Tensor, k: torch.Tensor, mask=None) -> torch.Tensor:
    """Q K^T / sqrt(d), masked keys at -inf. Scaling and masking work in place: the
    product's backward needs q and k, not its output."""
    scores = (q @ k.transpose(-1, -2)).div_(math.sqrt(q.shape[-1]))
    if mask is not None:
        scores.masked_fill_(~key_mask(mask), float("-inf"))
    return scores


def masked_softmax(scores: torch.Tensor, mask=None) -> torch.Tensor:
    """Softmax over keys; only a mask can empty a row, whose weights are then zero."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    return torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)


def softmax_weights(q: torch.Tensor, k: torch.Tensor, mask=None) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d)) with two n x n matrices at most (scores, weights)."""
    return masked_softmax(scaled_scores(q, k, mask), mask)


def softmax_cost(entries: float, itemsize: int) -> Cost:
    """A softmax over `entries` scores in all: SOFTMAX_FLOPS each; scores read once, weights
    written once."""
    return Cost(other_flops=SOFTMAX_FLOPS * entries, bytes=2.0 * entries * itemsize)


@register
class Softmax(Backend):
    name = "softmax"
    map_in_blocks = True  # a map row depends on its query alone
    complexity = "O(n^2 d) time, O(n^2) memory"
    summary = "exact attention, materialises the n x n matrix"
    stages = ("scores", "softmax", "weighted_sum")

    def forward(self, q, k, v, mask=None):
        # each n x n matrix is dropped inside the stage that reads it last, so the stage
        # that ends its use also pays for freeing it
        with self.stage("scores"):
            scores = scaled_scores(q, k, mask)
        with self.stage("softmax"):
            weights = masked_softmax(scores, mask)
            del scores
        with self.stage("weighted_sum"):
            out = zero_masked_rows(weights @ v, mask)
            del weights
        return out

    def attention_map(self, q, k, mask=None):
        return softmax_weights(q, k, mask)

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """scores: 2 P n^2 d matmul (P = B H), P n^2 scalings, q and k read, n^2 scores
        written; softmax: 5 P n^2; weighted_sum: 2 P n^2 dv matmul, weights and v read, the
        output written. Backward: `autograd_backward` of all three (4 P n^2 (d + dv))."""
        n, d, dv, size = shape.n, shape.dim, shape.dv, shape.itemsize
        scores = shape.elements(n, n)
        forward = {
            "scores": Cost(matmul(shape.planes, n, d, n), scores, shape.bytes(2 * n * d + n * n)),
            "softmax": softmax_cost(scores, size),
            "weighted_sum": Cost(
                matmul(shape.planes, n, n, dv), 0.0, shape.bytes(n * n + 2 * n * dv)
            ),
        }
        costs = dict(forward) if shape.forward else {}
        if shape.backward:
            costs["backward"] = autograd_backward(forward.values())
        return costs

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        return 3 * batch * heads * n * n * itemsize  # scores, weights, and a copy when masked
