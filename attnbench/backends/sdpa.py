"""PyTorch's fused scaled_dot_product_attention: the strongest exact baseline."""

from __future__ import annotations

import torch.nn.functional as F

from attnbench.backends.cost import Cost, Shape, matmul
from attnbench.backends.masking import key_mask, zero_masked_rows
from attnbench.backends.registry import Backend, register
from attnbench.backends.softmax import SOFTMAX_FLOPS, softmax_weights


@register
class SDPA(Backend):
    name = "sdpa"
    map_in_blocks = True  # a map row depends on its query alone
    complexity = "O(n^2 d) time, O(n) memory when a fused kernel is picked"
    summary = "torch.nn.functional.scaled_dot_product_attention"
    stages = ("sdpa",)  # one fused call; the mask's view and the zeroed rows inside it

    def forward(self, q, k, v, mask=None):
        with self.stage("sdpa"):
            attn_mask = None if mask is None else key_mask(mask)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
            return zero_masked_rows(out, mask)

    def attention_map(self, q, k, mask=None):
        return softmax_weights(q, k, mask)  # sdpa computes exactly these weights

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """The fused kernel's algorithmic work, whatever kernel torch picks (a flop counter
        sees none of it on the CPU). sdpa: Q K^T and P V, 2 P n^2 (d + dv) matmul (P = B H),
        6 P n^2 other (scaling, softmax); q, k, v read and the output written, the n x n
        matrix never leaving the kernel. backward: the fused backward recomputes Q K^T, then
        dV, dP, dQ, dK: 2 P n^2 (3 d + 2 dv) matmul (2.5x the forward at d = dv, the
        convention of `dense_equivalent`); 6 P n^2 + 2 P n dv other (P recomputed from the
        row log-sum-exps: scale, subtract, exp; dS = P (dP - D) scaled; D = rowsum(dO O));
        q, k, v, out, dO and the log-sum-exps read, dq, dk, dv written."""
        n, d, dv, planes = shape.n, shape.dim, shape.dv, shape.planes
        scores = shape.elements(n, n)
        costs = {}
        if shape.forward:
            costs["sdpa"] = Cost(
                matmul(planes, n, d, n) + matmul(planes, n, n, dv),
                (1 + SOFTMAX_FLOPS) * scores,
                shape.bytes(2 * n * d + 2 * n * dv),
            )
        if shape.backward:
            costs["backward"] = Cost(
                3 * matmul(planes, n, d, n) + 2 * matmul(planes, n, n, dv),
                6.0 * scores + 2.0 * shape.elements(n, dv),
                shape.bytes(4 * n * d + 4 * n * dv + n),
            )
        return costs

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        return 0  # fused kernels keep O(n) memory; an unfused fallback is caught as OOM
