"""YOSO-E: the expectation of YOSO over hash functions, l2(E V) with
E = (1 - arccos(Q^ K^T) / pi)^tau (YOSO seed, Sec. 3.1). Dense, O(n^2): a reference.

`backward=lower` (default) replaces dE/dcos by the paper's lower bound (tau/2) E (eq. 4),
as YOSO is trained in the paper and its reference code. It is what YOSO-m's backward
estimates, so YOSO-E is YOSO-m's m -> infinity limit in both passes, and it is finite at
q = k. `backward=exact` differentiates E itself (arccos kept off +-1). Both compute in at
least fp32.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnbench.backends.masking import key_mask, zero_masked_rows
from attnbench.backends.registry import Backend, Param, register, resolve_tau, tau_param

# Keeps arccos off +-1, where its derivative is infinite, so backward stays finite.
_CLIP = 1.0 - 1e-6
BACKWARDS = ("lower", "exact")


def _backward_param(text: str) -> str:
    if text not in BACKWARDS:
        raise ValueError(f"one of {', '.join(BACKWARDS)}")
    return text


class _LowerBound(torch.autograd.Function):
    """E = (1 - arccos(cos)/pi)^tau forward; backward dE/dcos := (tau/2) E (seed eq. 4)."""

    @staticmethod
    def forward(ctx, cos, tau):
        e = (1.0 - torch.arccos(cos.clamp(-1.0, 1.0)) / math.pi) ** tau
        ctx.save_for_backward(e)
        ctx.tau = tau
        return e

    @staticmethod
    def backward(ctx, grad):
        (e,) = ctx.saved_tensors
        return grad * (ctx.tau / 2) * e, None


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 stays float64; everything else (bf16, fp16, fp32) computes in fp32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def collision_probability(
    q: torch.Tensor, k: torch.Tensor, tau: int, mask=None, backward: str = "exact"
) -> torch.Tensor:
    """(1 - theta/pi)^tau for every query/key pair of unit-normalised q and k, in at least
    fp32; `backward` picks the gradient (module docstring)."""
    dtype = compute_dtype(q)
    cos = F.normalize(q.to(dtype), dim=-1) @ F.normalize(k.to(dtype), dim=-1).transpose(-1, -2)
    if backward == "lower":
        e = _LowerBound.apply(cos, tau)
    else:
        e = (1.0 - torch.arccos(cos.clamp(-_CLIP, _CLIP)) / math.pi) ** tau
    if mask is not None:
        e = e.masked_fill(~key_mask(mask), 0.0)
    return e


@register
class YOSOE(Backend):
    name = "yoso-e"
    map_in_blocks = True  # a map row depends on its query alone
    params = {
        "tau": tau_param(8),
        "backward": Param(
            "lower", _backward_param, "lower: eq. 4 bound (tau/2) E, as YOSO trains; exact"
        ),
    }
    complexity = "O(n^2 d) time, O(n^2) memory"
    summary = "YOSO expectation (m -> infinity), dense"

    def forward(self, q, k, v, mask=None):
        tau = resolve_tau(self.values["tau"], k.shape[-2])
        e = collision_probability(q, k, tau, mask, self.values["backward"])
        out = F.normalize(e @ v.to(e.dtype), dim=-1)
        return zero_masked_rows(out.to(v.dtype), mask)

    def attention_map(self, q, k, mask=None):
        tau = resolve_tau(self.values["tau"], k.shape[-2])
        return collision_probability(q, k, tau, mask, self.values["backward"])

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        return 3 * batch * heads * n * n * max(itemsize, 4)  # cosines, arccos, E in fp32+
