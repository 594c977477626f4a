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

import math
from functools import partial

import torch

from attnbench.backends.cost import Cost, Shape, matmul
from attnbench.backends.lsh_cost import sorted_weighted
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
from attnbench.kernels.lsh.autograd import (
    BACKWARDS,
    DENSE_STAGE,
    LINEAR,
    LSH_STAGES,
    Gradient,
    NormalisedLSH,
)
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
FLOAT = 4  # bytes of the fp32 that hashing and the cumulations compute in
# Default of `bound`: far above the mean bucket at the default tau (n / 2^8 rows at n = 64k),
# so it only thins the buckets of clustered inputs.
BOUND = 256


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
        "backward": choice_param(
            "proj",
            BACKWARDS,
            "proj (eq. 4, random projections), pairs (eq. 4) or star (*YOSO, eq. 3) over "
            "colliding pairs, lsh (eq. 4, O(n m d^2)); dense or expected (n^2)",
        ),
        "bound": int_param(
            BOUND, 1, 2**31 - 1, "most bucket rows a row visits per hash (pairs, star)"
        ),
    }
    shorthand = "m"
    complexity = "O(n m tau log d + n m d) time, O(chunk 2^tau d) tables"
    stochastic = True
    summary = "YOSO-m: m LSH hashes, Bernoulli sampling, lower-bound backward"
    unit_rows = True
    stages = ("normalise", "hash", "cumulation", "output_normalise")
    # backward=lsh marks dV, dQ, dK; backward=dense|expected the one dense backward (__init__)
    backward_stages = ("backward", *LSH_STAGES)

    def __init__(self, **values):
        super().__init__(**values)
        if self.values["backward"] not in LINEAR:
            self.backward_stages = ("backward", DENSE_STAGE)

    def validate(self, case) -> None:
        """bound <= n, the most rows a bucket can hold, or the default's bound."""
        limit = max(case.n, self.params["bound"].default)
        self.check_at_most(
            "bound", limit, f"max(n, its default) at n = {case.n}: a bucket holds n rows at most"
        )

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
        """The random projections or diagonals of draw `call`, drawn on `device` from the
        seed (a GPU call copies nothing from the host; the same seed and call give the same
        draws on one device), kept for the latest call per shape."""
        m, fast = self.values["m"], hash_kind(self.values["hash"], d) == "fast"
        draw = reference.fast_diagonals if fast else reference.gaussian_projections

        def drawn(seed: int) -> torch.Tensor:
            return draw(groups, d, m, tau, seed, device=device)

        return self._drawn((groups, d, tau, str(device)), call, drawn)

    def signs(self, groups: int, d_v: int, device, call: int) -> torch.Tensor:
        """backward=proj's +-1 sign vectors [G, d_v, m] of draw `call`, drawn on `device`
        (no host copy on a GPU) from a stream apart from the hash draws: the same seed and
        calls give the same signs on one device."""
        draw = partial(reference.backward_signs, groups, d_v, self.values["m"], device=device)
        return self._drawn(("signs", groups, d_v, str(device)), call, draw)

    def gradient(self, groups: int, d_v: int, device, call: int) -> Gradient:
        """How this call's backward runs; signs are drawn only if a backward asks."""
        v = self.values
        return Gradient(v["backward"], v["bound"], lambda: self.signs(groups, d_v, device, call))

    def hash(self, x: torch.Tensor, tau: int, call: int = 0) -> torch.Tensor:
        """int32 codes [G, n, m] of rows x [G, n, d] (unit or not: signs of projections do
        not depend on a row's length) under draw `call`."""
        kind, m = hash_kind(self.values["hash"], x.shape[-1]), self.values["m"]
        draws = self.draws(x.shape[0], x.shape[-1], tau, x.device, call)
        if self.values["impl"] == "numba":
            return dispatch.hash_codes(x, draws, kind, tau, m)
        if kind == "fast":
            return reference.fast_codes(x, draws, tau, m)
        return reference.gaussian_codes(x, draws, tau)

    def codes(self, q, k, mask=None):
        """Hash codes of queries and keys, [B*H, n, m] each, from the draws of the last
        forward (call 0's before any): the codes that forward used."""
        b, h, _, d = k.shape
        tau = resolve_tau(self.values["tau"], k.shape[-2])
        call = self._call(advance=False)
        qf, kf = (x.float().reshape(b * h, -1, d) for x in (q, k))  # as the forward
        return self.hash(qf, tau, call), self.hash(kf, tau, call), tau

    def forward(self, q, k, v, mask=None):
        b, h, n_q, d = q.shape
        n_k, d_v = k.shape[-2], v.shape[-1]
        tau = resolve_tau(self.values["tau"], n_k)
        with self.stage("normalise"):  # fp32 rows as they come: no unit rows (NormalisedLSH)
            if mask is not None:
                v = v * token_mask(mask).to(v.dtype)  # masked keys add nothing to the tables
            vf = v.float().reshape(b * h, n_k, d_v)
            qf = q.float().reshape(b * h, n_q, d)
            kf = k.float().reshape(b * h, n_k, d)
        call = self._call(advance=True)
        with self.stage("hash"), torch.no_grad():
            q_codes, k_codes = self.hash(qf, tau, call), self.hash(kf, tau, call)
        if self.values["impl"] == "numba":  # hash tables are checked against free memory
            ops = dispatch.Kernels(free_bytes=available_bytes)
        else:
            ops = reference
        with self.stage("cumulation"):  # output_normalise is marked inside
            how = self.gradient(b * h, d_v, vf.device, call)
            out = NormalisedLSH.apply(qf, kf, vf, q_codes, k_codes, tau, ops, how, self.stage)
        with self.stage("output_normalise"):
            return zero_masked_rows(out.view(b, h, n_q, d_v).to(v.dtype), mask)

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
        """Two code arrays and four row-sized fp32 buffers (the output; in training dY, dQ
        and dK beside it); tables are small next to these."""
        m = self.values["m"]
        return batch * heads * n * (2 * m * 4 + 4 * d * 4)

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """Work per stage; G = B H planes, n rows, d, d_v, w bytes an element, tau resolved
        at n, 4-byte fp32 inside. One flop per elementwise op; an l2 normalisation is 3 per
        element (square, add, divide). Masks are not counted (Shape has none).

        normalise: no unit rows (NormalisedLSH), just the fp32 casts where w != 4,
          (w + 4) G n (2d + d_v) bytes.
        hash (Q and K): gaussian: matmul 2 * 2 G n d m tau; fast: P = ceil(m / (p // tau))
          transforms of the padded length p, each 3 Hadamards and 3 sign flips:
          2 G n P 3 (p log2 p + p). Both: 2 per code bit (compare, pack) 2 * 2 G n m tau,
          and with resample=call one per drawn number. Bytes: rows in, codes out
          4 * 2 G n (d + m), the draws read (and written when drawn).
        cumulation, backward_dv: `_cumulation`. backward_dq, backward_dk: lsh: with numba
          on the CPU, `lsh_cost.sorted_weighted` (its kernel sorts rows by code, no
          tables); elsewhere `_cumulation` weighted by d_v columns of vectors of width d,
          then the tau/2 scale; proj: a scaled `_cumulation` of width d, and in
          backward_dq the sign projections dY S and V S, matmul 2 * 2 G n d_v m, with
          1/|q|, 1/|k| folded in, 2 G n m and 16 G n m bytes; pairs, star: `_pairs`.
        output_normalise: 3 G n d_v; bytes 8 G n d_v (+ (4 + w) G n d_v for the cast).
        backward_dense (dense|expected): matmul 4 G n^2 (d + d_v) (+ 2 G n^2 d for the
          cosines of expected); other G n^2 (2m + 3) (dense: m compares and adds, 1/m,
          tau/2, times C) or 7 G n^2 (expected: clamp, arccos, /pi, 1-, power, tau/2, times
          E); bytes one write and read of each n x n pass, as `_dense_backward`.
        backward (the rest): the derivatives of the three l2 normalisations
          (`off_the_row`): per row <x, g>, matmul 2 G n (2d + d_v) (FMAs), g - x <x, g>
          2 G n (2d + d_v), Y's division by its norm G n d_v, the norms of Q and K
          2 G n 2d. Bytes with numba on the CPU (one pass a row): 12 G n d_v (g and out
          read, dY written) and 16 G n 2d (rows read for the norms, then gradient and rows
          read, gradient written); elsewhere (torch: a product, then an update) 28 G n d_v
          (g and out read twice, dY written, read and written) and 24 G n 2d (gradient and
          rows read twice). The pair and dense kinds also form unit rows and divide
          dQ_unit, dK_unit by the norms: 2 G n 2d, 16 G n 2d bytes."""
        v = self.values
        g, n, d, dv, w = shape.planes, shape.n, shape.dim, shape.dv, shape.itemsize
        tau = resolve_tau(v["tau"], n)
        cast = (w + FLOAT) if w != FLOAT else 0
        costs = {}
        if shape.forward:
            costs["normalise"] = Cost(bytes=cast * g * n * (2 * d + dv))  # fp32 casts only
            costs["hash"] = self._hash_cost(shape, tau)
            costs["cumulation"] = self._cumulation(shape, tau, dv)
            costs["output_normalise"] = Cost(
                other_flops=3.0 * g * n * dv, bytes=(2 * FLOAT + cast) * g * n * dv
            )
        if shape.backward:
            kind = v["backward"]
            rows, rows_qk = g * n * (2 * d + dv), g * n * 2 * d
            unit = kind != "proj"  # unit rows formed, dQ_unit and dK_unit divided
            one_pass = v["impl"] == "numba" and device_target(shape.device) == "cpu"
            dy_bytes, dx_bytes = (3.0, 4.0) if one_pass else (7.0, 6.0)
            costs["backward"] = Cost(
                matmul_flops=2.0 * rows,
                other_flops=2.0 * rows + g * n * dv + (4.0 if unit else 2.0) * rows_qk,
                bytes=FLOAT * (dy_bytes * g * n * dv + (dx_bytes + 4.0 * unit) * rows_qk),
            )
            if kind in LINEAR:
                dv_stage, dq_stage, dk_stage = LSH_STAGES
                costs[dv_stage] = self._cumulation(shape, tau, dv)
                if kind == "lsh" and one_pass:  # the sorting CPU kernel: `lsh_cost`
                    weighted = sorted_weighted(shape, v["m"], tau)
                    costs[dq_stage] = costs[dk_stage] = weighted
                elif kind == "lsh":
                    weighted = self._cumulation(shape, tau, d, weights=dv)
                    costs[dq_stage] = costs[dk_stage] = weighted
                elif kind == "proj":
                    scaled = self._cumulation(shape, tau, d, scaled=True)
                    m = v["m"]
                    signs = Cost(
                        matmul_flops=2 * matmul(g, n, dv, m),
                        other_flops=2.0 * g * n * m,
                        bytes=FLOAT * (2.0 * g * n * dv + g * dv * m + 6.0 * g * n * m),
                    )
                    costs[dq_stage], costs[dk_stage] = signs + scaled, scaled
                else:
                    costs[dq_stage] = costs[dk_stage] = self._pairs(shape, tau)
            else:
                costs[DENSE_STAGE] = self._dense_backward(shape)
        return costs

    def _hash_cost(self, shape: Shape, tau: int) -> Cost:
        g, n, d, m = shape.planes, shape.n, shape.dim, self.values["m"]
        if hash_kind(self.values["hash"], d) == "fast":
            p = reference.padded_dim(d, tau)
            drawn = g * reference.fast_transforms(m, tau, d) * 3 * p
            mm, transforms = 0.0, 2.0 * n * drawn * (math.log2(p) + 1)
        else:
            drawn = g * d * m * tau
            mm, transforms = 2 * matmul(g, n, d, m * tau), 0.0
        fresh = self.values["resample"] == "call"
        return Cost(
            matmul_flops=mm,
            other_flops=transforms + 2.0 * 2 * g * n * m * tau + (drawn if fresh else 0),
            bytes=FLOAT * (2.0 * g * n * (d + m) + drawn * (2 if fresh else 1)),
        )

    def _pairs(self, shape: Shape, tau: int) -> Cost:
        """One side (dQ or dK) of backward=pairs|star. Collisions depend on the data; this
        assumes codes spread evenly over the 2^tau buckets (random inputs: n / 2^tau rows a
        bucket, at most `bound`), so clustered inputs cost more than it says. Per visited
        pair: <a_r, a_w> 2 d_v, the axpy 2 d, 3 for the weight (star: the cosine 2 d and 12
        for clamp, arccos, sqrt and the ratio); bytes: the write rows' unit and a vectors
        4 (d + d_v) and their index 4. The sort of each hash's codes: G m n log2 n compares,
        codes and order 16 G m n bytes; rows read and written 4 G n (2 d + 2 d_v)."""
        g, n, d, dv, m = shape.planes, shape.n, shape.dim, shape.dv, self.values["m"]
        per_bucket = min(float(self.values["bound"]), n / (1 << tau))
        visits = g * n * m * per_bucket
        star = self.values["backward"] == "star"
        per_pair = 2 * dv + 2 * d + 3 + ((2 * d + 12) if star else 0)
        sort = g * m * n * max(1.0, math.log2(n))
        return Cost(
            other_flops=visits * per_pair + sort,
            bytes=visits * FLOAT * (d + dv + 1)
            + 16.0 * g * m * n
            + FLOAT * g * n * (2 * d + 2 * dv),
            working_set=FLOAT * g * n * (d + dv),
        )

    def _cumulation(
        self, shape: Shape, tau: int, width: int, weights: int = 0, scaled: bool = False
    ) -> Cost:
        """One cumulation of `width` columns through 2^tau-bucket tables, m hashes, n write
        and n read rows: 2 G n m width adds (scatter, gather) and the 1/m scale G n width.
        Weighted (`weights` = A columns, the dQ/dK form): factorised over the A columns, so
        A cumulations, plus G n A width products weights x vectors, 2 G n A width to apply
        the read weights, and 2 G n width for 1/m and tau/2. Scaled (backward=proj): a
        product per row, hash and column on each side, 4 G n m width, and 1/m and tau/2.

        Bytes: the codes 8 G n m (scaled: and the scales, 8 G n m more), inputs and output
        4 G n (2 width [+ 2 A]), and the tables' traffic 4 (A or 1) G m width 3n (each
        scatter a read-modify-write, each gather a read), plus their zeroing 4 (A or 1) G m
        2^tau width where the tables are zeroed per hash (impl=torch, CUDA; the numba CPU
        kernel stamps buckets instead). Working set:
        the tables (or sort buffers) the implementation keeps at once, `dispatch.
        resident_bytes`, or for impl=torch its chunk of tables and rows."""
        g, n, m = shape.planes, shape.n, self.values["m"]
        passes = max(1, weights)
        target = device_target(shape.device)
        torch_impl = self.values["impl"] == "torch"
        adds = passes * 2.0 * g * n * m * width
        if weights:
            other = adds + 3.0 * g * n * weights * width + 2.0 * g * n * width
        elif scaled:  # a product per row, hash and column on each side, then 1/m and tau/2
            other = 2 * adds + 2.0 * g * n * width
        else:
            other = adds + 1.0 * g * n * width
        zeroed = torch_impl or target != "cpu"
        traffic = passes * g * m * width * (3.0 * n + ((1 << tau) if zeroed else 0))
        if torch_impl:
            chunk = min(m, reference.HASH_CHUNK)
            resident = g * chunk * ((1 << tau) + 2 * n) * width * FLOAT
        else:
            resident = dispatch.resident_bytes(target, g, n, m, tau, width, bool(weights))
        return Cost(
            other_flops=other,
            bytes=FLOAT
            * (
                2.0 * g * n * m * (2 if scaled else 1) + g * n * (2 * width + 2 * weights) + traffic
            ),
            working_set=float(resident),
        )

    def _dense_backward(self, shape: Shape) -> Cost:
        """The n x n lower-bound backward (see `cost`). Bytes: Q, K, V, dY read and the
        three gradients written, plus 4 G n^2 per n x n pass: dense, 2.5 m + 12 (C built by
        m compare-and-add passes, then 1/m, then the products); expected, 20 (cosines,
        five elementwise passes, the products)."""
        g, n, d, dv, m = shape.planes, shape.n, shape.dim, shape.dv, self.values["m"]
        mm = 2 * matmul(g, n, n, dv) + 2 * matmul(g, n, n, d)
        if self.values["backward"] == "dense":
            other, passes = (2.0 * m + 3) * g * n * n, 2.5 * m + 12
        else:
            mm += matmul(g, n, d, n)
            other, passes = 7.0 * g * n * n, 20.0
        vectors = g * n * (2 * d + 2 * dv) + g * n * (2 * d + dv)
        return Cost(
            matmul_flops=mm, other_flops=other, bytes=FLOAT * (vectors + passes * g * n * n)
        )
