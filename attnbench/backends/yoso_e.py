"""YOSO-E: the expectation of YOSO over hash functions, l2(E V) with
E = (1 - arccos(Q^ K^T) / pi)^tau (YOSO seed, Sec. 3.1). Dense, O(n^2): a reference."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnbench.backends.masking import key_mask, zero_masked_rows
from attnbench.backends.registry import Backend, register, resolve_tau, tau_param

# Keeps arccos off +-1, where its derivative is infinite, so backward stays finite.
_CLIP = 1.0 - 1e-6


def collision_probability(q: torch.Tensor, k: torch.Tensor, tau: int, mask=None) -> torch.Tensor:
    """(1 - theta/pi)^tau for every query/key pair of unit-normalised q and k."""
    cos = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-1, -2)
    e = (1.0 - torch.arccos(cos.clamp(-_CLIP, _CLIP)) / math.pi) ** tau
    if mask is not None:
        e = e.masked_fill(~key_mask(mask), 0.0)
    return e


@register
class YOSOE(Backend):
    name = "yoso-e"
    map_in_blocks = True  # a map row depends on its query alone
    params = {"tau": tau_param(8)}
    complexity = "O(n^2 d) time, O(n^2) memory"
    summary = "YOSO expectation (m -> infinity), dense"

    def forward(self, q, k, v, mask=None):
        tau = resolve_tau(self.values["tau"], k.shape[-2])
        out = F.normalize(collision_probability(q, k, tau, mask) @ v, dim=-1)
        return zero_masked_rows(out, mask)

    def attention_map(self, q, k, mask=None):
        return collision_probability(q, k, resolve_tau(self.values["tau"], k.shape[-2]), mask)

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        return 3 * batch * heads * n * n * itemsize  # cosines, arccos, E
