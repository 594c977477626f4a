"""Plain dense references shared by the backend tests, written without the backends' code."""

import math

import torch


def masked_softmax_attention(q, k, v, allowed, mask=None):
    """softmax(QK^T / sqrt(d)) V over the allowed [n, n] pairs and the real keys of the
    [B, n] token mask; a row with no key and masked rows are zero."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    allowed = allowed[None, None]
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
    out = weights @ v
    return out if mask is None else out * mask[:, None, :, None]
