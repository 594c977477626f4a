"""Scalar math of YOSO's kernels, shared by the CPU (njit prange) and CUDA (cuda.jit) code.

These functions use no `cuda.*` calls, so both targets inline the same float operations
in the same order. Gaussian codes agree on the CPU and in the simulator; a real GPU fuses
the projection's multiply-adds (FMA), so a code whose dot product lies within rounding of
zero may differ there. (Fast-hash codes agree bit for bit everywhere: every target does
`reference.hadamard`'s butterflies, and the only products are by +-1, which are exact.)
"""

from __future__ import annotations

import math

from numba import float32, njit

from attnbench.kernels.caches import core_cache
from attnbench.kernels.compiling import report_compiles

report_compiles()  # before any kernel of this package can compile: say when one does

# Longest fast-hash transform a CUDA block keeps per row in shared memory (d <= 1024).
MAX_PADDED_DIM = 1024
# Bytes of hash tables one CPU worker keeps hot at once: half its core's L2 (the rows it
# streams through share the other half)...
TABLE_BUDGET = core_cache(2) // 2
# ... while its rows (values read, outputs updated once per chunk of hashes) stay in its
# share of L3. Longer rows come from memory on every pass, so fewer, larger chunks win:
# tables of up to LONG_ROWS_BUDGET, spilling from L2 to L3.
ROWS_IN_L3 = core_cache(3) // 4
LONG_ROWS_BUDGET = 4 * core_cache(2)


@njit(inline="always")
def gaussian_code(x, proj, f, tau):
    """Code of hash f for one row x [d]: bit t = [x . proj[:, f*tau + t] > 0].

    The dot product is summed in fp32 over c = 0 .. d-1 in order.
    """
    code = 0
    for t in range(tau):
        col = f * tau + t
        acc = float32(0.0)
        for c in range(x.shape[0]):
            acc += x[c] * proj[c, col]
        if acc > 0:
            code |= 1 << t
    return code


def hash_chunk(m: int, tau: int, width: int, budget: int = TABLE_BUDGET) -> int:
    """How many hashes' tables (2^tau buckets x width float32) fit in `budget` bytes, 1..m."""
    per_table = (1 << tau) * width * 4
    return max(1, min(m, budget // per_table))


# *YOSO's cosine clamp: the true derivative of the collision probability grows like
# 1 / sqrt(1 - x^2) near x = +-1, so a near-identical query and key would dominate the
# gradient; clamped, the weight `star_ratio` stays below about 7.1 tau.
STAR_CLIP = 0.999


@njit(inline="always")
def star_ratio(x, tau):
    """dE/dx / E for E = (1 - arccos(x)/pi)^tau, x clamped to [-STAR_CLIP, STAR_CLIP]:
    tau / ((pi - theta) sqrt(1 - x^2)). Weighting a collision (probability E) by it gives
    eq. (3)'s derivative dE/dx in expectation. In fp32 (on a GPU too)."""
    clip = float32(STAR_CLIP)
    x = min(max(float32(x), -clip), clip)
    return float32(tau) / ((float32(math.pi) - math.acos(x)) * math.sqrt(float32(1.0) - x * x))


@njit(inline="always")
def bound_stride(size, bound, r, f):
    """How read row r samples a bucket of `size` write rows in hash f under `bound`:
    (offset, stride, scale). Within the bound every row counts once (0, 1, 1); above it,
    every stride-th row from a row-and-hash-dependent offset, scaled by size / taken, so
    the bucket's total weight is kept."""
    if size <= bound:
        return 0, 1, float32(1.0)
    stride = (size + bound - 1) // bound
    offset = (r + f) % stride
    taken = (size - offset + stride - 1) // stride
    return offset, stride, float32(size) / float32(taken)
