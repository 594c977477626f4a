"""YOSO-m (YOSO seed, Sec. 3): LSH-based Bernoulli sampling attention in linear cost.

Queries and keys are l2-normalised and hashed m times with tau-bit codes (Gaussian
hyperplanes, or the fast Hadamard hash of Andoni et al.); per hash, keys add their value
rows to a 2^tau-bucket table and queries read their bucket. The mean over hashes
estimates E V of YOSO-E, and the output is l2-normalised (N-YOSO). `impl=numba` runs the
kernels (CPU or CUDA by the tensors' device); `impl=torch` is the readable reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnbench.backends.masking import token_mask, zero_masked_rows
from attnbench.backends.registry import (
    MAX_SEED_PARAM,
    Backend,
    Param,
    int_param,
    register,
    resolve_tau,
    tau_param,
)
from attnbench.kernels.lsh import dispatch, reference
from attnbench.kernels.lsh.autograd import BACKWARDS, LSHCumulation
from attnbench.kernels.lsh.core import MAX_PADDED_DIM
from attnbench.kernels.target import device_target
from attnbench.measure import is_cuda
from attnbench.measure.memory import available_bytes

HASHES = ("fast", "gaussian")
IMPLS = ("numba", "torch")


def _choice(options: tuple[str, ...]):
    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(f"one of {', '.join(options)}")
        return text

    return parse


@register
class YOSO(Backend):
    name = "yoso"
    map_in_blocks = True  # a map row depends on its query alone
    params = {
        "m": int_param(32, 1, 4096, "number of hashes"),
        "tau": tau_param(8),
        "seed": int_param(0, 0, MAX_SEED_PARAM, "seed of the random projections"),
        "hash": Param("fast", _choice(HASHES), "fast (Hadamard) or gaussian (projection)"),
        "impl": Param("numba", _choice(IMPLS), "numba kernels or the torch reference"),
        "backward": Param("lsh", _choice(BACKWARDS), "lsh (linear), dense or expected (n^2)"),
    }
    shorthand = "m"
    complexity = "O(n m tau log d + n m d) time, O(chunk 2^tau d) tables"
    stochastic = True
    summary = "YOSO-m: m LSH hashes, Bernoulli sampling, lower-bound backward"

    def __init__(self, **values):
        super().__init__(**values)
        self._draws: dict[tuple, torch.Tensor] = {}

    def impl(self, device: str) -> str:
        if self.values["impl"] == "torch":
            return "torch"
        return "numba-" + device_target(device)

    def unsupported(self, case) -> list[str]:
        reasons = super().unsupported(case)
        v = self.values
        if v["impl"] == "numba" and v["hash"] == "fast" and is_cuda(case.device):
            padded = reference.padded_dim(case.dim, resolve_tau(v["tau"], case.n))
            if padded > MAX_PADDED_DIM:
                reasons.append(
                    f"hash=fast on CUDA supports d <= {MAX_PADDED_DIM}; use hash=gaussian"
                )
        return reasons

    def draws(self, groups: int, d: int, tau: int, device) -> torch.Tensor:
        """The random projections or diagonals, drawn on the CPU from the seed, kept per shape."""
        key = (groups, d, tau, str(device))
        if key not in self._draws:
            m, seed = self.values["m"], self.values["seed"]
            if self.values["hash"] == "fast":
                draws = reference.fast_diagonals(groups, d, m, tau, seed)
            else:
                draws = reference.gaussian_projections(groups, d, m, tau, seed)
            self._draws[key] = draws.to(device)
        return self._draws[key]

    def hash(self, x: torch.Tensor, tau: int) -> torch.Tensor:
        """int32 codes [G, n, m] of unit rows x [G, n, d]."""
        kind, m = self.values["hash"], self.values["m"]
        draws = self.draws(x.shape[0], x.shape[-1], tau, x.device)
        if self.values["impl"] == "numba":
            return dispatch.hash_codes(x, draws, kind, tau, m)
        if kind == "fast":
            return reference.fast_codes(x, draws, tau, m)
        return reference.gaussian_codes(x, draws, tau)

    def codes(self, q, k, mask=None):
        """Hash codes of normalised queries and keys, [B*H, n, m] each, from shared draws."""
        b, h, _, d = k.shape
        tau = resolve_tau(self.values["tau"], k.shape[-2])
        qn, kn = (F.normalize(x.float(), dim=-1).reshape(b * h, -1, d) for x in (q, k))
        return self.hash(qn, tau), self.hash(kn, tau), tau

    def forward(self, q, k, v, mask=None):
        b, h, n_q, d = q.shape
        n_k, d_v = k.shape[-2], v.shape[-1]
        tau = resolve_tau(self.values["tau"], n_k)
        if mask is not None:
            v = v * token_mask(mask).to(v.dtype)  # masked keys add nothing to the tables
        qn = F.normalize(q.float(), dim=-1).reshape(b * h, n_q, d)
        kn = F.normalize(k.float(), dim=-1).reshape(b * h, n_k, d)
        with torch.no_grad():
            q_codes, k_codes = self.hash(qn, tau), self.hash(kn, tau)
        if self.values["impl"] == "numba":  # hash tables are checked against free memory
            ops = dispatch.Kernels(free_bytes=available_bytes)
        else:
            ops = reference
        y = LSHCumulation.apply(
            qn,
            kn,
            v.float().reshape(b * h, n_k, d_v),
            q_codes,
            k_codes,
            tau,
            ops,
            self.values["backward"],
        ).view(b, h, n_q, d_v)
        if torch.is_grad_enabled() and y.requires_grad:
            out = F.normalize(y, dim=-1)
        else:  # inference: normalise in place, one output-sized buffer less
            out = y.div_(y.norm(dim=-1, keepdim=True).clamp_min_(1e-12))
        return zero_masked_rows(out.to(v.dtype), mask)

    def attention_map(self, q, k, mask=None):
        """Empirical collision frequency: fraction of the m hashes where q_i and k_j collide."""
        b, h, n_q, _ = q.shape
        q_codes, k_codes, _ = self.codes(q, k)
        freq = reference.collision_frequency(q_codes, k_codes).view(b, h, n_q, -1)
        if mask is not None:
            freq = freq * mask[:, None, None, :]
        return freq

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        """Normalised Q and K, two code arrays, the output; tables are small next to these."""
        m = self.values["m"]
        return batch * heads * n * (2 * d * 4 + 2 * m * 4 + 2 * d * 4)
