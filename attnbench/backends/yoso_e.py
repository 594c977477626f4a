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

from attnbench.backends.cost import Cost, Shape, matmul
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
    unit_rows = True
    stages = ("collision_probability", "weighted_sum")

    def forward(self, q, k, v, mask=None):
        with self.stage("collision_probability"):
            tau = resolve_tau(self.values["tau"], k.shape[-2])
            e = collision_probability(q, k, tau, mask, self.values["backward"])
        with self.stage("weighted_sum"):
            out = F.normalize(e @ v.to(e.dtype), dim=-1)
            return zero_masked_rows(out.to(v.dtype), mask)

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """G = B H planes; w bytes an element, c = 8 for float64 else 4 (the compute dtype).
        One flop per elementwise op; an l2 normalisation 3 per element. Masks not counted.

        collision_probability: matmul 2 G n^2 d (cosines); other 6 G n d (normalising Q,
          K) + 5 G n^2 (clamp, arccos, /pi, 1 -, power); bytes Q, K read (w), their unit
          copies written and read (2c), then c G n^2 (cosines written, read and written by
          each of the five elementwise passes: 11).
        weighted_sum: matmul 2 G n^2 d_v (E V); other 3 G n d_v; bytes E read c G n^2, V
          read, E V written and read back by the normalisation, output written.
        backward (autograd): matmul 4 G n^2 (d + d_v) (dE = dY V^T, dV = E^T dY,
          dQ = dcos K, dK = dcos^T Q); other 2 G n^2 (lower: (tau/2) E times the gradient)
          or 10 G n^2 (exact: the backward of the power, division, subtraction, arccos and
          clamp), plus 7 G n (2d + d_v) for the normalisations (as YOSO's); bytes
          c G n^2 per pass (7 for lower: dE written, read; E read twice; dcos written,
          read twice; 22 for exact, which reads and writes each saved elementwise
          intermediate) and 3c G n (2d + d_v) for the rows."""
        g, n, d, dv, w = shape.planes, shape.n, shape.dim, shape.dv, shape.itemsize
        c = 8 if w == 8 else 4
        costs = {}
        if shape.forward:
            costs["collision_probability"] = Cost(
                matmul_flops=matmul(g, n, d, n),
                other_flops=6.0 * g * n * d + 5.0 * g * n * n,
                bytes=(w + 2 * c) * 2.0 * g * n * d + 11.0 * c * g * n * n,
            )
            costs["weighted_sum"] = Cost(
                matmul_flops=matmul(g, n, n, dv),
                other_flops=3.0 * g * n * dv,
                bytes=c * g * n * n + (2 * w + 2 * c) * g * n * dv,
            )
        if shape.backward:
            lower = self.values["backward"] == "lower"
            rows = g * n * (2 * d + dv)
            costs["backward"] = Cost(
                matmul_flops=2 * matmul(g, n, n, dv) + 2 * matmul(g, n, n, d),
                other_flops=(2.0 if lower else 10.0) * g * n * n + 7.0 * rows,
                bytes=(7.0 if lower else 22.0) * c * g * n * n + 3.0 * c * rows,
            )
        return costs

    def attention_map(self, q, k, mask=None):
        tau = resolve_tau(self.values["tau"], k.shape[-2])
        return collision_probability(q, k, tau, mask, self.values["backward"])

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        return 3 * batch * heads * n * n * max(itemsize, 4)  # cosines, arccos, E in fp32+
