"""STREAM-style bandwidth kernels on the CPU: numba `njit(parallel=True)` over one slice
per thread.

Each thread goes over its own contiguous slice `reps` times inside one call, so a cache-sized
working set is timed without the fixed cost of starting a parallel region per pass. A pass
reads what the previous pass wrote (copy swaps source and destination; triad adds s c, then
subtracts it), so no pass is a repeat of an identical store that the compiler could drop,
and the returned check sum reads the result back so no pass is dead code. The inner loops
index slice views from 0, so numba knows the index is never negative and LLVM vectorizes
them.
"""

from __future__ import annotations

from numba import njit, prange

from attnbench.kernels.jitcache import cached_njit

LINE_ELEMENTS = 8  # float64 values per 64-byte cache line: slices are whole lines


@njit(inline="always")
def _chunk(size, parts):
    return (size // parts) // LINE_ELEMENTS * LINE_ELEMENTS


@cached_njit(parallel=True)
def fill(a, value, parts):
    """a[:] = value, each slice by the thread that later works on it (first touch places
    its pages near that thread)."""
    chunk = _chunk(a.size, parts)
    for p in prange(parts):
        x = a[p * chunk : p * chunk + chunk]
        for i in range(chunk):
            x[i] = value
    return a[0]


@cached_njit(parallel=True)
def copy(a, b, parts, reps):
    """`reps` passes of a = b and b = a in turn over each thread's slice; a check sum."""
    chunk = _chunk(a.size, parts)
    check = 0.0
    for p in prange(parts):
        x = a[p * chunk : p * chunk + chunk]
        y = b[p * chunk : p * chunk + chunk]
        for r in range(reps):
            if r % 2 == 0:
                for i in range(chunk):
                    x[i] = y[i]
            else:
                for i in range(chunk):
                    y[i] = x[i]
        check += x[0] + y[chunk - 1]
    return check


@cached_njit(parallel=True)
def triad(a, b, c, s, parts, reps):
    """`reps` passes of a = b + s c and b = a - s c in turn over each thread's slice (the
    values stay bounded however many passes run); a check sum."""
    chunk = _chunk(a.size, parts)
    check = 0.0
    for p in prange(parts):
        x = a[p * chunk : p * chunk + chunk]
        y = b[p * chunk : p * chunk + chunk]
        z = c[p * chunk : p * chunk + chunk]
        for r in range(reps):
            if r % 2 == 0:
                for i in range(chunk):
                    x[i] = y[i] + s * z[i]
            else:
                for i in range(chunk):
                    y[i] = x[i] - s * z[i]
        check += x[0] + y[chunk - 1]
    return check


def touched(size: int, parts: int) -> int:
    """Elements each kernel touches per pass: `parts` slices of whole lines (a remainder
    of fewer than `parts` lines is left out)."""
    return (size // parts) // LINE_ELEMENTS * LINE_ELEMENTS * parts
