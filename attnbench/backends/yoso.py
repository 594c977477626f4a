"""YOSO-m in plain torch (YOSO seed, Sec. 3.2): LSH-based Bernoulli sampling attention.

Per hash f: a table of 2^tau buckets; every key adds its value row to bucket code_f(k_j);
every query reads bucket code_f(q_i). Averaging m hashes estimates E V of YOSO-E, and the
output is l2-normalised (N-YOSO). This is the readable reference the kernels are tested
against; it reuses table memory across chunks of hashes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnbench.backends.masking import token_mask, zero_masked_rows
from attnbench.backends.registry import Backend, Param, int_param, register, resolve_tau, tau_param

HASH_CHUNK = 8  # hashes whose tables live in memory at once


def gaussian_projections(groups: int, d: int, m: int, tau: int, seed: int) -> torch.Tensor:
    """R ~ N(0, 1) of shape [groups, d, m*tau], one per batch*head, shared by Q and K.

    Drawn on the CPU from a seeded generator, so every device sees the same draws.
    """
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(groups, d, m * tau, generator=gen)


def hash_codes(x: torch.Tensor, proj: torch.Tensor, tau: int) -> torch.Tensor:
    """Codes [groups, n, m] of x [groups, n, d]: code_f = sum_i [x . R[:, f*tau+i] > 0] 2^i."""
    groups, n, _ = x.shape
    bits = (x @ proj.to(x.dtype)) > 0
    bits = bits.view(groups, n, -1, tau).to(torch.int64)
    powers = 2 ** torch.arange(tau, device=x.device, dtype=torch.int64)
    return (bits * powers).sum(-1)


def lsh_cumulation(q_codes, k_codes, v, tau: int) -> torch.Tensor:
    """Mean over hashes of sum_j [code_f(q_i) == code_f(k_j)] v_j, in O(n m d_v)."""
    groups, n_k, m = k_codes.shape
    n_q, d_v = q_codes.shape[1], v.shape[-1]
    buckets = 2**tau
    out = torch.zeros(groups, n_q, d_v, dtype=v.dtype, device=v.device)
    for start in range(0, m, HASH_CHUNK):
        kc, qc = k_codes[..., start : start + HASH_CHUNK], q_codes[..., start : start + HASH_CHUNK]
        c = kc.shape[-1]
        table_of = torch.arange(groups * c, device=v.device).view(groups, 1, c) * buckets
        table = torch.zeros(groups * c * buckets, d_v, dtype=v.dtype, device=v.device)
        table.index_add_(
            0, (kc + table_of).reshape(-1), v[:, :, None, :].expand(-1, -1, c, -1).reshape(-1, d_v)
        )
        out += table[(qc + table_of).reshape(-1)].view(groups, n_q, c, d_v).sum(2)
    return out / m


@register
class YOSO(Backend):
    name = "yoso"
    params = {
        "m": int_param(32, 1, 4096, "number of hashes"),
        "tau": tau_param(8),
        "seed": int_param(0, 0, None, "seed of the random projections"),
        "hash": Param("gaussian", lambda s: _choice(s, ("gaussian",)), "hash family"),
    }
    shorthand = "m"
    complexity = "O(n m tau d + n m d) time, O(m 2^tau d) memory"
    backward = False  # the trainable lower-bound backward comes with the kernels
    stochastic = True
    summary = "YOSO-m: m LSH hashes, Bernoulli sampling, reference in torch"

    def codes(self, q, k, mask=None):
        """Hash codes of normalised queries and keys, [B*H, n, m] each, from shared draws."""
        b, h, n, d = k.shape
        tau = resolve_tau(self.values["tau"], n)
        proj = gaussian_projections(b * h, d, self.values["m"], tau, self.values["seed"])
        proj = proj.to(k.device)
        qn = F.normalize(q, dim=-1).reshape(b * h, -1, d)
        kn = F.normalize(k, dim=-1).reshape(b * h, n, d)
        return hash_codes(qn, proj, tau), hash_codes(kn, proj, tau), tau

    def forward(self, q, k, v, mask=None):
        b, h, n_q, _ = q.shape
        if mask is not None:
            v = v * token_mask(mask).to(v.dtype)  # masked keys add nothing to the tables
        q_codes, k_codes, tau = self.codes(q, k)
        y = lsh_cumulation(q_codes, k_codes, v.reshape(b * h, -1, v.shape[-1]), tau)
        out = F.normalize(y.view(b, h, n_q, -1), dim=-1)
        return zero_masked_rows(out, mask)

    def attention_map(self, q, k, mask=None):
        """Empirical collision frequency: fraction of the m hashes where q_i and k_j collide."""
        b, h, n_q, _ = q.shape
        q_codes, k_codes, _ = self.codes(q, k)
        freq = torch.zeros(b * h, n_q, k.shape[-2], dtype=torch.float32, device=q.device)
        for f in range(q_codes.shape[-1]):
            freq += q_codes[:, :, f, None] == k_codes[:, None, :, f]
        freq = (freq / q_codes.shape[-1]).view(b, h, n_q, -1)
        if mask is not None:
            freq = freq * mask[:, None, None, :]
        return freq

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        chunk = min(HASH_CHUNK, self.values["m"])
        return 3 * batch * heads * n * chunk * d * itemsize


def _choice(text: str, options: tuple[str, ...]) -> str:
    if text not in options:
        raise ValueError(f"one of {', '.join(options)}")
    return text
