"""YOSO-C-m (YOSO seed, Sec. 5): YOSO-m plus a depthwise convolution of V over the sequence.

The seed adds "a depthwise convolution, inspired by Nystromformer" without giving its width
or where it joins; this follows the YOSO authors' released attention module: per head, one
kernel of `conv` taps (no bias) slides over the token axis of V, shared by the feature
columns (Nystromformer's convolution: a grouped Conv2d with a (conv, 1) kernel, one group
per head), V's masked tokens are zeroed before it, and its output is added AFTER YOSO's
output normalisation:

    out = normalize(YOSO-m(Q, K, V)) + conv_h(V)

Zero padding keeps length n: conv // 2 taps before, (conv - 1) // 2 after (symmetric for
the odd widths used; the default 33 is Nystromformer's, which the seed's baselines use).
The weights are drawn from `seed` (kaiming-uniform as torch's Conv2d initialises them,
bound 1/sqrt(conv)) and fixed, not trained; gradients flow to V through them. The hash
kernels, draws and call counting are YOSO's own, so with the same seed and calls the
invariant is: yoso-c(Q, K, V) == yoso(Q, K, V) + conv(V), masked rows zero.
`attention_map` stays YOSO's collision frequency: the convolution mixes values by
position, not by attention, so it has no row in that map.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnbench.backends.cost import Cost, Shape
from attnbench.backends.masking import token_mask, zero_masked_rows
from attnbench.backends.registry import int_param, register
from attnbench.backends.yoso import YOSO

# A fixed offset so the convolution's weights are not drawn from the same stream as the
# hash projections of the same seed.
CONV_SEED_OFFSET = 0x5EED_C0


def conv_weights(heads: int, width: int, seed: int) -> torch.Tensor:
    """Per-head kernels [heads, width], kaiming-uniform as torch's Conv2d initialises them."""
    gen = torch.Generator().manual_seed((seed + CONV_SEED_OFFSET) % 2**63)
    bound = 1.0 / math.sqrt(width)
    return (torch.rand(heads, width, generator=gen, dtype=torch.float64) * 2 - 1) * bound


def depthwise_conv(v: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Convolve v [B, H, n, dv] along n with head h's kernel weight[h], the same for every
    feature column; zero padding keeps length n (width // 2 taps before)."""
    b, h, n, dv = v.shape
    width = weight.shape[-1]
    x = v.transpose(-1, -2).reshape(b, h * dv, n)
    x = F.pad(x, (width // 2, (width - 1) // 2))
    kernel = weight.to(v.dtype).repeat_interleave(dv, 0)[:, None, :]  # [H*dv, 1, width]
    return F.conv1d(x, kernel, groups=h * dv).view(b, h, dv, n).transpose(-1, -2)


@register
class YOSOC(YOSO):
    name = "yoso-c"
    params = {
        **YOSO.params,
        "conv": int_param(33, 1, 4096, "depthwise convolution width over the sequence"),
    }
    complexity = YOSO.complexity + " + O(n conv d) convolution"
    summary = "YOSO-C-m: YOSO-m plus a depthwise convolution of V (added after normalising)"
    unit_rows = False  # the convolution's term has a magnitude
    stages = (*YOSO.stages, "conv")

    def __init__(self, **values):
        super().__init__(**values)
        self._weights: dict[tuple, torch.Tensor] = {}

    def validate(self, case) -> None:
        """conv <= 2n - 1, the widest kernel that meets a token, or the default's."""
        super().validate(case)
        limit = max(2 * case.n - 1, self.params["conv"].default)
        self.check_at_most(
            "conv", limit, f"max(2n - 1, its default) at n = {case.n}: wider taps meet no token"
        )

    def conv_weight(self, heads: int, device) -> torch.Tensor:
        key = (heads, str(device))
        if key not in self._weights:
            weight = conv_weights(heads, int(self.values["conv"]), int(self.values["seed"]))
            self._weights[key] = weight.float().to(device)
        return self._weights[key]

    def forward(self, q, k, v, mask=None):
        out = super().forward(q, k, v, mask)
        with self.stage("conv"):
            v_in = v if mask is None else v * token_mask(mask).to(v.dtype)
            conv = depthwise_conv(v_in, self.conv_weight(v.shape[1], v.device))
            return zero_masked_rows(out + conv.to(out.dtype), mask)

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """YOSO's stages, plus conv: G = B H planes, width c = `conv`, w bytes an element.
        The convolution runs over the zero-padded sequence, so every output takes c taps:
        matmul 2 G n d_v c (as torch counts a convolution); the sum with YOSO's output
        G n d_v. Bytes w G d_v (10 n + 2 (c - 1)): V read, its transposed copy and its
        padded copy written and read, the convolution written, then read with YOSO's output
        and the sum written. Its backward (to V only: the weights are fixed) adds the same
        2 G n d_v c to the generic backward, with bytes w G d_v (5 n + 2 (c - 1))."""
        costs = super().cost(shape)
        g, n, dv, w, c = shape.planes, shape.n, shape.dv, shape.itemsize, int(self.values["conv"])
        taps = 2.0 * g * n * dv * c
        if shape.forward:
            costs["conv"] = Cost(
                matmul_flops=taps,
                other_flops=1.0 * g * n * dv,
                bytes=w * g * dv * (10.0 * n + 2 * (c - 1)),
            )
        if shape.backward:
            costs["backward"] += Cost(matmul_flops=taps, bytes=w * g * dv * (5.0 * n + 2 * (c - 1)))
        return costs

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        return super().predicted_bytes(batch, heads, n, d, itemsize) + 2 * batch * heads * n * d * 4
