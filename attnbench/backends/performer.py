"""Performer's FAVOR+ (Choromanski et al. 2021, "Rethinking Attention with Performers").

Positive orthogonal random features estimate the softmax kernel exp(q.k / sqrt(d)):
with x scaled by d^(-1/4) (so q'.k' = q.k / sqrt(d)) and r random rows w_1..w_r,

    phi(x) = exp(W x - |x|^2 / 2) / sqrt(r),    E[phi(q') . phi(k')] = exp(q'.k'),

and attention is computed without the n x n matrix, in O(n r d):

    out = phi(Q') (phi(K')^T V) / phi(Q') (phi(K')^T 1).

W is drawn as blocks of d orthogonal Gaussian rows (QR of a Gaussian matrix), each row
rescaled by a norm drawn from the chi distribution with d degrees of freedom (the norm of
a d-dimensional Gaussian vector), so every row is marginally N(0, I) as the paper's
unbiasedness needs. One W serves every batch entry and head of a call (the reference
implementation draws one matrix per attention layer). It is drawn on the inputs' device
from the seed (reproducible on one device, not across devices): `resample=call` draws a
new W on every forward call (call 0 from the seed, call c from a seed derived from
(seed, c), as YOSO does), `resample=fixed` keeps call 0's.

Numerical stabilisation, as the reference implementation does: inside the exp, the
queries' features subtract their row's maximum exponent, the keys' features one maximum
over every (unmasked) key and feature of the batch entry and head. Each is a constant
factor of a query row or of all keys, so it cancels in the ratio above: the output and
the normalised map are unchanged. `favor_features(..., stabilise=None)` gives the raw
features whose products estimate the kernel itself.

Masks: masked keys' features are zero (they add nothing to either sum); masked query
rows output zero.
"""

from __future__ import annotations

import math

import torch

from attnbench.backends.cost import Cost, Shape, autograd_backward, matmul
from attnbench.backends.masking import token_mask, zero_masked_rows
from attnbench.backends.registry import MAX_SEED_PARAM, Backend, int_param, register
from attnbench.backends.resampling import Resampling, resample_param


def orthogonal_gaussian(
    features: int, d: int, seed: int, scale: bool = True, device="cpu"
) -> torch.Tensor:
    """[features, d] float64 rows: blocks of d mutually orthogonal rows (the last block
    truncated), each block the Q of a Gaussian matrix's QR; with `scale`, every row's
    length is then drawn from the chi(d) distribution (norm of a fresh Gaussian d-vector),
    else rows have unit length. Drawn on `device` from `seed` (no host copy on a GPU;
    reproducible on one device, not across devices)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    blocks = []
    for _ in range(-(-features // d)):
        gaussian = torch.randn(d, d, generator=gen, dtype=torch.float64, device=device)
        q, r = torch.linalg.qr(gaussian)
        q = q * torch.sign(torch.diagonal(r))  # signs fixed so the block is Haar-distributed
        blocks.append(q.T)  # rows orthonormal
    w = torch.cat(blocks).narrow(0, 0, features)  # the last block truncated
    if scale:
        gaussian = torch.randn(features, d, generator=gen, dtype=torch.float64, device=device)
        norms = gaussian.norm(dim=-1)
        w = w * norms[:, None]
    return w


def favor_features(
    x: torch.Tensor,
    w: torch.Tensor,
    stabilise: str | None = None,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """phi(x) = exp(w.x - |x|^2/2) / sqrt(r) of rows x [B, H, n, d] (already scaled by
    d^(-1/4)) for the rows w [r, d]: [B, H, n, r].

    stabilise: None (the raw features), "query" (subtract each row's max exponent) or
    "key" (subtract one max over all valid rows and features of each batch entry and head).
    `valid` [B, n] marks the rows that count for the key max and keeps the rest's
    features at zero."""
    proj = x @ w.to(x.dtype).T  # [B, H, n, r]
    # in place, one shift per row inside the exp: |x|^2/2, the stabiliser, log sqrt(r)
    log_sqrt_r = 0.5 * math.log(w.shape[0])
    if stabilise == "query":  # the row's max exponent is its max of proj, less |x|^2/2
        shift = proj.detach().amax(-1, keepdim=True) + log_sqrt_r
    else:
        proj = proj.sub_((x * x).sum(-1, keepdim=True) / 2)
        shift = log_sqrt_r
        if stabilise == "key":
            with torch.no_grad():
                expo = proj if valid is None else proj.masked_fill(~token_mask(valid), -math.inf)
                top = expo.amax((-2, -1), keepdim=True)
            shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top)) + log_sqrt_r
    phi = proj.sub_(shift).exp_()
    if valid is not None:
        phi = phi * token_mask(valid).to(phi.dtype)
    return phi


@register
class Performer(Resampling, Backend):
    """FAVOR+: positive orthogonal random features; the output is an unbiased-feature ratio
    estimate of softmax attention whose kernel estimate phi(q).phi(k) has expectation
    exp(q.k / sqrt(d)) for every pair."""

    name = "performer"
    map_in_blocks = True  # a map row needs its query and all keys, nothing of other queries
    params = {
        "features": int_param(256, 1, 1 << 20, "random features r"),
        "seed": int_param(0, 0, MAX_SEED_PARAM, "seed of the random features"),
        "resample": resample_param("features"),
    }
    shorthand = "features"
    complexity = "O(n r d) time, O(n r + r d) memory"
    stochastic = True
    summary = "Performer FAVOR+: positive orthogonal random features, linear in n"
    stages = ("features", "kv", "output")

    def projection(self, d: int, device, dtype, call: int = 0) -> torch.Tensor:
        """W [r, d] of draw `call`, kept for the latest call per shape."""
        features = self.values["features"]
        return self._drawn(
            (d, str(device), dtype),
            call,
            lambda seed: orthogonal_gaussian(features, d, seed, device=device).to(dtype),
        )

    def _features(self, q, k, mask, call):
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        d = q.shape[-1]
        scale = d**-0.25
        w = self.projection(d, q.device, dtype, call)
        phi_q = favor_features(q.to(dtype) * scale, w, "query")
        phi_k = favor_features(k.to(dtype) * scale, w, "key", mask)
        return phi_q, phi_k

    def forward(self, q, k, v, mask=None):
        with self.stage("features"):
            phi_q, phi_k = self._features(q, k, mask, self._call(advance=True))
        with self.stage("kv"):
            kv = phi_k.transpose(-1, -2) @ v.to(phi_k.dtype)  # [B, H, r, dv]
            k_sum = phi_k.sum(-2).unsqueeze(-1)  # [B, H, r, 1]
        with self.stage("output"):
            num = phi_q @ kv
            den = phi_q @ k_sum  # [B, H, n, 1]
            out = num / den.clamp_min(torch.finfo(den.dtype).tiny)
            return zero_masked_rows(out.to(v.dtype), mask)

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """With P = B H and r features, features in float32 at least: features, Q W^T and
        K W^T, 4 P n d r matmul, P (4 n d + 7 n r + 2 n) other (the d^(-1/4) scalings, |k|^2/2,
        the stabilisers' maxima, the shifts, exp), q, k and W read, phi(Q), phi(K) written;
        kv, phi(K)^T V, 2 P r n dv matmul, and the normaliser's sum phi(K)^T 1, P n r; output,
        phi(Q) (phi(K)^T V) and phi(Q) (phi(K)^T 1), 2 P n r (dv + 1) matmul, P n (dv + 1)
        other (the clamp and the division). Backward: `autograd_backward` of all three, W
        constant. The mask's work is not counted."""
        n, d, dv, r = shape.n, shape.dim, shape.dv, int(self.values["features"])
        work = 8 if shape.itemsize == 8 else 4
        planes = shape.planes
        features = 2 * matmul(planes, n, d, r)
        forward = {
            "features": Cost(
                features,
                shape.elements(4 * n * d + 7 * n * r + 2 * n),
                shape.bytes(2 * n * d) + shape.bytes(2 * n * r, itemsize=work) + r * d * work,
            ),
            "kv": Cost(
                matmul(planes, r, n, dv),
                shape.elements(n, r),
                shape.bytes(n * r + r * dv + r, itemsize=work) + shape.bytes(n * dv),
            ),
            "output": Cost(
                matmul(planes, n, r, dv) + matmul(planes, n, r, 1),
                shape.elements(n * (dv + 1)),
                shape.bytes(n * r + r * dv + r, itemsize=work) + shape.bytes(n * dv),
            ),
        }
        costs = dict(forward) if shape.forward else {}
        if shape.backward:
            costs["backward"] = autograd_backward(forward.values(), features)
        return costs

    def attention_map(self, q, k, mask=None):
        """The dense normalised kernel estimate phi(q_i).phi(k_j) / sum_j (small n), from
        the last forward's draw (call 0's before any), so it explains that output."""
        phi_q, phi_k = self._features(q, k, mask, self._call(advance=False))
        kernel = phi_q @ phi_k.transpose(-1, -2)
        den = kernel.sum(-1, keepdim=True).clamp_min(torch.finfo(kernel.dtype).tiny)
        return (kernel / den).to(q.dtype)

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        r = self.values["features"]
        return batch * heads * n * (3 * r + 2 * d) * 4
