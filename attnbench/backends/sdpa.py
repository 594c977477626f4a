"""PyTorch's fused scaled_dot_product_attention: the strongest exact baseline."""

from __future__ import annotations

import torch.nn.functional as F

from attnbench.backends.masking import key_mask, zero_masked_rows
from attnbench.backends.registry import Backend, register
from attnbench.backends.softmax import softmax_weights


@register
class SDPA(Backend):
    name = "sdpa"
    map_in_blocks = True  # a map row depends on its query alone
    complexity = "O(n^2 d) time, O(n) memory when a fused kernel is picked"
    summary = "torch.nn.functional.scaled_dot_product_attention"

    def forward(self, q, k, v, mask=None):
        attn_mask = None if mask is None else key_mask(mask)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return zero_masked_rows(out, mask)

    def attention_map(self, q, k, mask=None):
        return softmax_weights(q, k, mask)  # sdpa computes exactly these weights

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        return 0  # fused kernels keep O(n) memory; an unfused fallback is caught as OOM
