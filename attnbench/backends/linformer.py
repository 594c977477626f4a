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

from attnbench.backends.cost import Cost, Shape, autograd_backward, matmul
from attnbench.backends.masking import token_mask, zero_masked_rows
from attnbench.backends.registry import MAX_SEED_PARAM, Backend, choice_param, int_param, register
from attnbench.backends.softmax import softmax_cost

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


def masked_keys_values(k, v, mask=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values with the masked tokens' rows zeroed: nothing of them is projected."""
    if mask is None:
        return k, v
    keep = token_mask(mask)
    return k * keep.to(k.dtype), v * keep.to(v.dtype)


def linformer_scores(q: torch.Tensor, k_proj: torch.Tensor) -> torch.Tensor:
    """Q (E K)^T / sqrt(d), [B, H, n, k]: scaled in place (the product's backward needs its
    operands, not its output)."""
    return (q @ k_proj.transpose(-1, -2)).div_(math.sqrt(q.shape[-1]))


def linformer_weights(q: torch.Tensor, k_proj: torch.Tensor) -> torch.Tensor:
    """softmax(Q (E K)^T / sqrt(d)), [B, H, n, k]: a distribution over the projected keys."""
    return torch.softmax(linformer_scores(q, k_proj), -1)


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
    stages = ("project", "scores", "softmax", "weighted_sum")

    def __init__(self, **values):
        super().__init__(**values)
        self._projections: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def validate(self, case) -> None:
        """k <= n (projecting to more rows than tokens adds none), or the default's k."""
        limit = max(case.n, self.params["k"].default)
        self.check_at_most(
            "k", limit, f"max(n, its default) at n = {case.n}: rows past n project nothing more"
        )

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
        """softmax(Q (E K)^T / sqrt(d)) (F V), masked keys and values zeroed before projecting
        and masked query rows zero."""
        with self.stage("project"):
            e, f = self.projections(k.shape[-2], q.shape[1], q.device, q.dtype)
            k, v = masked_keys_values(k, v, mask)
            k_proj, v_proj = project(e, k), project(f, v)
        with self.stage("scores"):
            scores = linformer_scores(q, k_proj)
        with self.stage("softmax"):
            weights = torch.softmax(scores, -1)
        with self.stage("weighted_sum"):
            return zero_masked_rows(weights @ v_proj, mask)

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """With P = B H and k projected rows: project, E K and F V, 2 P k n (d + dv) matmul,
        k, v and E, F (one matrix for share=kv, H of each for share=none) read, E K and F V
        written; scores, 2 P n k d matmul and P n k scalings; softmax, 5 P n k; weighted_sum,
        2 P n k dv matmul. Backward: `autograd_backward` of all four, E and F constant (one
        gradient product each for E K and F V). The mask's zeroing is not counted."""
        n, d, dv, size = shape.n, shape.dim, shape.dv, shape.itemsize
        rows = int(self.values["k"])
        share = self.values["share"]
        matrices = {"heads": 2, "kv": 1, "none": 2 * shape.heads}[share] * rows * n
        project_flops = matmul(shape.planes, rows, n, d) + matmul(shape.planes, rows, n, dv)
        forward = {
            "project": Cost(
                project_flops,
                0.0,
                shape.bytes(n * (d + dv) + rows * (d + dv)) + matrices * size,
            ),
            "scores": Cost(
                matmul(shape.planes, n, d, rows),
                shape.elements(n, rows),
                shape.bytes(n * d + rows * d + n * rows),
            ),
            "softmax": softmax_cost(shape.elements(n, rows), size),
            "weighted_sum": Cost(
                matmul(shape.planes, n, rows, dv), 0.0, shape.bytes(n * rows + rows * dv + n * dv)
            ),
        }
        costs = dict(forward) if shape.forward else {}
        if shape.backward:
            costs["backward"] = autograd_backward(forward.values(), project_flops)
        return costs

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
