"""Linformer (Wang et al. 2020, "Linformer: Self-Attention with Linear Complexity"):
softmax attention over k projections of the keys and values along the sequence.

    out = softmax(Q (E K)^T / sqrt(d)) (F V),   E, F in R^{k x n}

E and F are built for the case's n from `seed`, with i.i.d. N(0, 1/k) entries: the random
projection R of the paper's Theorems 1-2 (which take E = delta R, F = exp(-delta) R; delta = 1
here). In the paper they are then learnt; here they stay the seeded draw. `share` picks the
paper's parameter sharing: `heads` (one E and one F for all heads, the default), `kv` (one
matrix E = F for all heads, key-value sharing) or `none` (an E and an F per head). The
invariant: with k = n and E = F = I the output is exact softmax attention.

Masks (the shared rule as Linformer applies it): masked keys' and values' columns are zeroed
before projecting, so no projected key or value holds anything of a masked token, and the
output of unmasked tokens does not depend on masked tokens; masked query rows are zero. (The
k projected slots all stay in the softmax: with identity projections a masked key acts as a
zero key with a zero value, not as an absent one.)

No `attention_map`: the softmax runs over the k projected keys, so there is no n x n
distribution over keys. `effective_map` gives the n x n matrix the output applies to V,
softmax(Q (E K)^T / sqrt(d)) F (masked columns of F zeroed; forward = effective_map @ V), but
it is signed (F is) with row sums near zero, so the error study's row-normalised map metrics
(captured mass, TV) would be meaningless on it; the study reports output errors only.
"""

from __future__ import annotations

import math

import torch

from attnbench.backends.masking import token_mask, zero_masked_rows
from attnbench.backends.registry import MAX_SEED_PARAM, Backend, choice_param, int_param, register

SHARES = ("heads", "kv", "none")


def random_projections(k: int, n: int, heads: int, share: str, seed: int):
    """E, F: [k, n] (share=heads, kv) or [heads, k, n] (share=none), float64 on the CPU,
    i.i.d. N(0, 1/k) from `seed`; with share=kv, F is E."""
    gen = torch.Generator().manual_seed(seed)
    shape = (k, n) if share != "none" else (heads, k, n)
    e = torch.randn(shape, generator=gen, dtype=torch.float64) / math.sqrt(k)
    f = e if share == "kv" else torch.randn(shape, generator=gen, dtype=torch.float64)
    if share != "kv":
        f = f / math.sqrt(k)
    return e, f


def project(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """P x along the sequence: p [k, n] or [H, k, n], x [B, H, n, c] -> [B, H, k, c]."""
    if p.dim() == 2:
        return torch.einsum("kn,bhnc->bhkc", p, x)
    return torch.einsum("hkn,bhnc->bhkc", p, x)


def linformer_attention(q, k, v, e, f, mask=None) -> torch.Tensor:
    """softmax(Q (E K)^T / sqrt(d)) (F V) with masked keys and values zeroed before projecting
    and masked query rows zero. e, f: [k_proj, n] or [H, k_proj, n] in q's dtype."""
    if mask is not None:
        keep = token_mask(mask)
        k = k * keep.to(k.dtype)
        v = v * keep.to(v.dtype)
    weights = linformer_weights(q, project(e, k))
    return zero_masked_rows(weights @ project(f, v), mask)


def linformer_weights(q: torch.Tensor, k_proj: torch.Tensor) -> torch.Tensor:
    """softmax(Q (E K)^T / sqrt(d)), [B, H, n, k]: a distribution over the projected keys."""
    scores = (q @ k_proj.transpose(-1, -2)).div_(math.sqrt(q.shape[-1]))
    return torch.softmax(scores, -1)


@register
class Linformer(Backend):
    """Linformer (Wang et al. 2020): keys and values projected to k along the sequence by
    seeded random E, F. See the module docstring for the exact rules."""

    name = "linformer"
    params = {
        "k": int_param(256, 1, None, "projected length (rows of E and F)"),
        "share": choice_param("heads", SHARES, "heads: one E, F for all heads; kv: E = F; none"),
        "seed": int_param(0, 0, MAX_SEED_PARAM, "seed of the projections"),
    }
    complexity = "O(n k d) time, O(n k) memory"
    stochastic = True  # the projections are a random draw (from seed)
    summary = "Linformer: keys and values projected to k along the sequence"

    def __init__(self, **values):
        super().__init__(**values)
        self._projections: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def projections(self, n: int, heads: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """E, F for sequence length n (drawn on the CPU, so every device sees the same), kept
        per (n, heads, device, dtype)."""
        share = self.values["share"]
        key = (n, heads if share == "none" else 0, str(device), dtype)
        if key not in self._projections:
            e, f = random_projections(
                int(self.values["k"]), n, heads, share, int(self.values["seed"])
            )
            self._projections[key] = (e.to(device, dtype), f.to(device, dtype))
        return self._projections[key]

    def forward(self, q, k, v, mask=None):
        e, f = self.projections(k.shape[-2], q.shape[1], q.device, q.dtype)
        return linformer_attention(q, k, v, e, f, mask)

    def effective_map(self, q, k, mask=None):
        """softmax(Q (E K)^T / sqrt(d)) F, [B, H, n, n]: the signed matrix the output applies
        to V (not an attention map: see the module docstring)."""
        e, f = self.projections(k.shape[-2], q.shape[1], q.device, q.dtype)
        if mask is not None:
            k = k * token_mask(mask).to(k.dtype)
        weights = linformer_weights(q, project(e, k))
        f = f if f.dim() == 3 else f[None]  # [1 or H, k, n]
        if mask is not None:
            f = f[None] * mask[:, None, None, :].to(f.dtype)  # [B, 1 or H, k, n]
        return weights @ f

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        k = int(self.values["k"])
        return 2 * batch * heads * n * k * itemsize + 2 * k * n * itemsize  # scores, E and F
