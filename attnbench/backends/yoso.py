"""YOSO-m (YOSO seed, Sec. 3): LSH-based Bernoulli sampling attention in linear cost.

Queries and keys are l2-normalised and hashed m times with tau-bit codes (Gaussian
hyperplanes, or the fast Hadamard hash of Andoni et al.); per hash, keys add their value
rows to a 2^tau-bucket table and queries read their bucket. The mean over hashes
estimates E V of YOSO-E, and the output is l2-normalised (N-YOSO). `impl=numba` runs the
kernels (CPU or CUDA by the tensors' device); `impl=torch` is the readable reference.

Hash draws are new on every forward call (`resample=call`, as the paper samples hash
functions per pass), derived from the seed and the instance's call count, so the same seed
and the same sequence of calls give the same outputs; `resample=fixed` reuses one draw.
`hash=auto` picks the Gaussian hash below FAST_MIN_DIM, where the fast hash is biased.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnbench.backends.masking import token_mask, zero_masked_rows
from attnbench.backends.registry import (
    MAX_SEED_PARAM,
    Backend,
    choice_param,
    int_param,
    register,
    resolve_tau,
    tau_param,
)
from attnbench.backends.resampling import Resampling, resample_param
from attnbench.kernels.lsh import dispatch, reference
from attnbench.kernels.lsh.autograd import BACKWARDS, LSHCumulation
from attnbench.kernels.lsh.core import MAX_PADDED_DIM
from attnbench.kernels.target import device_target
from attnbench.measure import is_cuda
from attnbench.measure.memory import available_bytes

HASHES = ("auto", "fast", "gaussian")
IMPLS = ("numba", "torch")
# hash=auto uses the fast hash from this head dim up, the Gaussian hash below it: the fast
# hash's directions are orthogonal, not independent, so its collision rate falls short of
# (1 - theta/pi)^tau by an amount that shrinks as d grows (docs/perf-log.md, 2026-11-24).
FAST_MIN_DIM = 64


def hash_kind(kind: str, d: int) -> str:
    """The hash that runs at head dim d: `kind`, or for auto the unbiased choice at d."""
    if kind != "auto":
        return kind
    return "fast" if d >= FAST_MIN_DIM else "gaussian"


@register
class YOSO(Resampling, Backend):
    name = "yoso"
    map_in_blocks = True  # a map row depends on its query alone
    params = {
        "m": int_param(32, 1, 4096, "number of hashes"),
        "tau": tau_param(8),
        "seed": int_param(0, 0, MAX_SEED_PARAM, "seed of the random projections"),
        "hash": choice_param(
            "auto",
            HASHES,
            f"fast (Hadamard), gaussian (projection), or auto = gaussian for d < "
            f"{FAST_MIN_DIM}, fast from there",
        ),
        "resample": resample_param("hash draws"),
        "impl": choice_param("numba", IMPLS, "numba kernels or the torch reference"),
        "backward": choice_param("lsh", BACKWARDS, "lsh (linear), dense or expected (n^2)"),
    }
    shorthand = "m"
    complexity = "O(n m tau log d + n m d) time, O(chunk 2^tau d) tables"
    stochastic = True
    summary = "YOSO-m: m LSH hashes, Bernoulli sampling, lower-bound backward"

    def impl(self, device: str) -> str:
        if self.values["impl"] == "torch":
            return "torch"
        return "numba-" + device_target(device)

    def unsupported(self, case) -> list[str]:
        reasons = super().unsupported(case)
        v = self.values
        kind = hash_kind(v["hash"], case.dim)
        if v["impl"] == "numba" and kind == "fast" and is_cuda(case.device):
            padded = reference.padded_dim(case.dim, resolve_tau(v["tau"], case.n))
            if padded > MAX_PADDED_DIM:
                reasons.append(
                    f"hash=fast on CUDA supports d <= {MAX_PADDED_DIM}; use hash=gaussian"
                )
        return reasons

    def draws(self, groups: int, d: int, tau: int, device, call: int = 0) -> torch.Tensor:
        """The random projections or diagonals of draw `call`, drawn on the CPU from the
        seed (so every device sees the same draws), kept for the latest call per shape."""
        m, fast = self.values["m"], hash_kind(self.values["hash"], d) == "fast"
        draw = reference.fast_diagonals if fast else reference.gaussian_projections
        return self._drawn(
            (groups, d, tau, str(device)),
            call,
            lambda seed: draw(groups, d, m, tau, seed).to(device),
        )

    def hash(self, x: torch.Tensor, tau: int, call: int = 0) -> torch.Tensor:
        """int32 codes [G, n, m] of unit rows x [G, n, d] under draw `call`."""
        kind, m = hash_kind(self.values["hash"], x.shape[-1]), self.values["m"]
        draws = self.draws(x.shape[0], x.shape[-1], tau, x.device, call)
        if self.values["impl"] == "numba":
            return dispatch.hash_codes(x, draws, kind, tau, m)
        if kind == "fast":
            return reference.fast_codes(x, draws, tau, m)
        return reference.gaussian_codes(x, draws, tau)

    def codes(self, q, k, mask=None):
        """Hash codes of normalised queries and keys, [B*H, n, m] each, from the draws of the
        last forward (call 0's before any): the codes that forward used."""
        b, h, _, d = k.shape
        tau = resolve_tau(self.values["tau"], k.shape[-2])
        call = self._call(advance=False)
        qn, kn = (F.normalize(x.float(), dim=-1).reshape(b * h, -1, d) for x in (q, k))
        return self.hash(qn, tau, call), self.hash(kn, tau, call), tau

    def forward(self, q, k, v, mask=None):
        b, h, n_q, d = q.shape
        n_k, d_v = k.shape[-2], v.shape[-1]
        tau = resolve_tau(self.values["tau"], n_k)
        if mask is not None:
            v = v * token_mask(mask).to(v.dtype)  # masked keys add nothing to the tables
        qn = F.normalize(q.float(), dim=-1).reshape(b * h, n_q, d)
        kn = F.normalize(k.float(), dim=-1).reshape(b * h, n_k, d)
        call = self._call(advance=True)
        with torch.no_grad():
            q_codes, k_codes = self.hash(qn, tau, call), self.hash(kn, tau, call)
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
        """Empirical collision frequency: fraction of the m hashes where q_i and k_j collide,
        under the last forward's draws (see `codes`), so the map explains that output."""
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
