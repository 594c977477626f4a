"""The machine's rate of float32 vector adds: the ceiling of work that has no multiply to
pair with its adds (a Hadamard butterfly, a table cumulation), which can never use the
fused multiply-adds that a GEMM's peak counts twice.

Each thread keeps CHAINS independent 8-lane sums in registers and adds then subtracts a
small step to each in turn, `reps` times: no product to fuse, no reassociation allowed (no
fast-math), so LLVM keeps every operation, and the chains outnumber the add units times
their latency, so the units never wait. Every lane of every chain is read back into the
returned check sum, so no add is dead code.
"""

from __future__ import annotations

import numpy as np
from numba import float32, njit, prange, uint64

from attnbench.kernels.jitcache import cached_njit
from attnbench.kernels.simd import _LANES, _splat, _store, _zeros

CHAINS = 12  # independent sums per thread: 12 of the 16 AVX registers
ADDS_PER_REP = 2 * CHAINS * _LANES  # one add and one subtract per chain and lane


@njit(inline="always")
def _horizontal(v):
    """The sum of v's lanes (stored, then read back)."""
    lanes = np.empty(_LANES, np.float32)
    _store(lanes, uint64(0), v)
    return lanes.sum()


@cached_njit(parallel=True)
def vector_adds(parts, reps):
    """`reps` x ADDS_PER_REP float32 adds on each of `parts` threads; a check sum."""
    check = 0.0
    for p in prange(parts):
        step = _splat(float32(1e-7) * float32(p + 1))
        a0, a1, a2, a3 = _zeros(), _zeros(), _zeros(), _zeros()
        a4, a5, a6, a7 = _zeros(), _zeros(), _zeros(), _zeros()
        a8, a9, a10, a11 = _zeros(), _zeros(), _zeros(), _zeros()
        for _ in range(reps):
            a0, a1, a2, a3 = a0 + step, a1 + step, a2 + step, a3 + step
            a4, a5, a6, a7 = a4 + step, a5 + step, a6 + step, a7 + step
            a8, a9, a10, a11 = a8 + step, a9 + step, a10 + step, a11 + step
            a0, a1, a2, a3 = a0 - step, a1 - step, a2 - step, a3 - step
            a4, a5, a6, a7 = a4 - step, a5 - step, a6 - step, a7 - step
            a8, a9, a10, a11 = a8 - step, a9 - step, a10 - step, a11 - step
        total = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11))
        check += _horizontal(total)
    return check
