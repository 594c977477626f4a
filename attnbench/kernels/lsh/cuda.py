"""YOSO's hashing and cumulation as numba.cuda kernels.

The hash math comes from `core`, so codes match the CPU kernels and the torch oracle
(`reference`); see `core` for the one exception (Gaussian codes under FMA). All device
memory is allocated by the caller through torch (`table` is scratch), so torch's
peak-memory counters see everything these kernels use.
Arrays are numba device arrays on a GPU and plain numpy arrays under the CUDA simulator.

Every kernel uses a flat 1-D grid with the last array axis varying fastest across threads
(columns, for coalescing) and bounds-checks its index, so any shape works.
"""

from __future__ import annotations

from numba import boolean, cuda, float32, int32, int64

from attnbench.kernels.lsh import core
from attnbench.kernels.lsh.core import MAX_PADDED_DIM
from attnbench.kernels.target import (  # noqa: F401  (block sizes: read by the tests)
    GPU_THREADS_PER_BLOCK,
    SIM_THREADS_PER_BLOCK,
    kernel_helpers,
    threads_per_block,
)

THREADS_PER_BLOCK = threads_per_block()

_helpers = kernel_helpers(core)
gaussian_code = _helpers["gaussian_code"]
hadamard_inplace = _helpers["hadamard_inplace"]
sign_code = _helpers["sign_code"]
bucket_sum = _helpers["bucket_sum"]


# --- hashing -------------------------------------------------------------------------


@cuda.jit
def _gaussian_codes_kernel(x, proj, tau, out):
    """One thread per (g, i, f): code of hash f of row x[g, i]."""
    k = cuda.grid(1)
    groups, n, m = out.shape
    if k < groups * n * m:
        f = k % m
        i = (k // m) % n
        g = k // (m * n)
        out[g, i, f] = gaussian_code(x[g, i], proj[g], f, tau)


@cuda.jit
def _fast_codes_kernel(x, diags, tau, out):
    """One thread per (g, i, p): y = H D3 H D2 H D1 x in a local buffer, then its codes."""
    k = cuda.grid(1)
    groups, n, m = out.shape
    parts, dp = diags.shape[1], diags.shape[3]
    if k < groups * n * parts:
        p = k % parts
        i = (k // parts) % n
        g = k // (parts * n)
        d = x.shape[2]
        y = cuda.local.array(MAX_PADDED_DIM, float32)
        for c in range(dp):
            y[c] = x[g, i, c] if c < d else float32(0.0)
        for step in range(3):
            for c in range(dp):
                y[c] *= diags[g, p, step, c]
            hadamard_inplace(y, dp)
        per_part = dp // tau
        for j in range(per_part):
            f = p * per_part + j
            if f < m:
                out[g, i, f] = sign_code(y, j * tau, tau)


# --- cumulation ----------------------------------------------------------------------


@cuda.jit
def _zero_tables(table, count):
    """table[:, :count] = 0: one thread per (g, hash in chunk, bucket, column)."""
    k = cuda.grid(1)
    groups, _, buckets, width = table.shape
    if k < groups * count * buckets * width:
        col = k % width
        k //= width
        b = k % buckets
        k //= buckets
        h = k % count
        g = k // count
        table[g, h, b, col] = float32(0.0)


@cuda.jit(device=True)
def _scatter_thread(k, n_w, count, width):
    """(g, w, h, column) of scatter thread k; the column varies fastest (coalescing)."""
    col = k % width
    k //= width
    h = k % count
    k //= count
    return k // n_w, k % n_w, h, col


@cuda.jit
def _scatter_values(write_codes, values, start, count, table):
    """Write row w adds values[g, w] to its bucket of hash start + h, for h < count.

    One thread per (g, w, h, column); rows sharing a bucket meet in atomic adds.
    """
    k = cuda.grid(1)
    groups, n_w, width = values.shape
    if k < groups * n_w * count * width:
        g, w, h, col = _scatter_thread(k, n_w, count, width)
        code = write_codes[g, w, start + h]
        cuda.atomic.add(table, (g, h, code, col), values[g, w, col])


@cuda.jit
def _scatter_weighted(write_codes, weights, vectors, a, start, count, table):
    """As `_scatter_values` with the row weights[g, w, a] * vectors[g, w]."""
    k = cuda.grid(1)
    groups, n_w, width = vectors.shape
    if k < groups * n_w * count * width:
        g, w, h, col = _scatter_thread(k, n_w, count, width)
        code = write_codes[g, w, start + h]
        cuda.atomic.add(table, (g, h, code, col), weights[g, w, a] * vectors[g, w, col])


@cuda.jit(device=True)
def _gather_thread(k, n_r, width):
    """(g, r, column) of gather thread k; the column varies fastest (coalescing)."""
    col = k % width
    k //= width
    return k // n_r, k % n_r, col


@cuda.jit(device=True)
def _accumulate(out, g, r, col, acc, first):
    """The first chunk overwrites out (never assumed zeroed), later chunks add."""
    if first:
        out[g, r, col] = acc
    else:
        out[g, r, col] += acc


@cuda.jit
def _gather(read_codes, table, start, count, m, first, out):
    """out[g, r] (+)= bucket sums / m: one thread per (g, r, column); `first` overwrites."""
    k = cuda.grid(1)
    groups, n_r, width = out.shape
    if k < groups * n_r * width:
        g, r, col = _gather_thread(k, n_r, width)
        acc = bucket_sum(table, read_codes, g, r, col, start, count) / float32(m)
        _accumulate(out, g, r, col, acc, first)


@cuda.jit
def _gather_weighted(read_codes, read_weights, table, a, start, count, m, first, out):
    """As `_gather`, the bucket sums scaled by read_weights[g, r, a]."""
    k = cuda.grid(1)
    groups, n_r, width = out.shape
    if k < groups * n_r * width:
        g, r, col = _gather_thread(k, n_r, width)
        acc = bucket_sum(table, read_codes, g, r, col, start, count) / float32(m)
        _accumulate(out, g, r, col, acc * read_weights[g, r, a], first)


_F3, _F4, _I3 = float32[:, :, ::1], float32[:, :, :, ::1], int32[:, :, ::1]

# Every kernel with the argument types the wrappers pass (C-contiguous arrays, int64 and
# bool scalars); tests/test_ptx.py compiles each to PTX.
KERNELS = {
    "gaussian_codes": (_gaussian_codes_kernel, (_F3, _F3, int64, _I3)),
    "fast_codes": (_fast_codes_kernel, (_F3, _F4, int64, _I3)),
    "zero_tables": (_zero_tables, (_F4, int64)),
    "scatter_values": (_scatter_values, (_I3, _F3, int64, int64, _F4)),
    "scatter_weighted": (_scatter_weighted, (_I3, _F3, _F3, int64, int64, int64, _F4)),
    "gather": (_gather, (_I3, _F4, int64, int64, int64, boolean, _F3)),
    "gather_weighted": (
        _gather_weighted,
        (_I3, _F3, _F4, int64, int64, int64, int64, boolean, _F3),
    ),
}


# --- launch wrappers -----------------------------------------------------------------


def _launch(kernel, threads: int, *args) -> None:
    """Run `kernel` on at least `threads` threads (a flat grid); nothing to do for 0."""
    if threads > 0:
        blocks = (threads + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
        kernel[blocks, THREADS_PER_BLOCK](*args)


def gaussian_codes(x, proj, tau: int, out) -> None:
    """out[g, i, f] = code of hash f of x[g, i] under projections proj [G, d, m*tau]."""
    groups, n, m = out.shape
    if proj.shape[2] < m * tau:
        raise ValueError(f"proj has {proj.shape[2]} columns, {m} codes of tau={tau} need {m * tau}")
    _launch(_gaussian_codes_kernel, groups * n * m, x, proj, int(tau), out)


def fast_codes(x, diags, tau: int, out) -> None:
    """out [G, n, m] = the first m fast-hash codes of x; diags [G, P, 3, d_pad] of +-1."""
    groups, n, m = out.shape
    parts, dp = diags.shape[1], diags.shape[3]
    if dp & (dp - 1) or not max(x.shape[2], tau) <= dp <= MAX_PADDED_DIM:
        raise ValueError(f"d_pad={dp} must be a power of two in [max(d, tau), {MAX_PADDED_DIM}]")
    if parts * (dp // tau) < m:
        raise ValueError(f"{parts} transforms give {parts * (dp // tau)} codes, {m} asked")
    _launch(_fast_codes_kernel, groups * n * parts, x, diags, int(tau), out)


def table_shape(groups: int, m: int, tau: int, width: int, chunk: int) -> tuple:
    """Shape of the float32 scratch `table` for up to `chunk` hashes at a time (1..m):
    [G, chunk, 2^tau, width], width = d_v for `cumulation`, D for `weighted_cumulation`."""
    return (groups, max(1, min(chunk, m)), 1 << tau, width)


def _check_table(table, groups: int, tau: int, width: int) -> None:
    expected = (groups, table.shape[1], 1 << tau, width)
    if tuple(table.shape) != expected or table.shape[1] < 1:
        raise ValueError(f"table has shape {tuple(table.shape)}, want {expected} (chunk >= 1)")


def cumulation(read_codes, write_codes, values, tau: int, out, table) -> None:
    """out_r = (1/m) sum_f sum_w [read code f of r == write code f of w] values_w.

    Hashes go in chunks of table.shape[1]: zero the tables, scatter the write rows into
    their buckets, gather each read row's buckets into out.
    """
    groups, n_r, m = read_codes.shape
    n_w, width = values.shape[1], values.shape[2]
    if m < 1:
        raise ValueError("need at least one hash")
    _check_table(table, groups, tau, width)
    chunk = table.shape[1]
    for start in range(0, m, chunk):
        count = min(chunk, m - start)
        _launch(_zero_tables, groups * count * (1 << tau) * width, table, count)
        _launch(
            _scatter_values, groups * n_w * count * width, write_codes, values, start, count, table
        )
        _launch(_gather, groups * n_r * width, read_codes, table, start, count, m, start == 0, out)


def weighted_cumulation(
    read_codes, write_codes, weights, vectors, read_weights, tau: int, out, table
) -> None:
    """out_r = (1/m) sum_f sum_w [match] <read_weights_r, weights_w> vectors_w.

    YOSO's lower-bound backward, factorised over the column a of the weights: one
    cumulation of weights[:, a] * vectors per a, added to out scaled by read_weights[:, a].
    """
    groups, n_r, m = read_codes.shape
    n_w, columns = weights.shape[1], weights.shape[2]
    width = vectors.shape[2]
    if m < 1 or columns < 1:
        raise ValueError("need at least one hash and one weight column")
    _check_table(table, groups, tau, width)
    chunk = table.shape[1]
    for a in range(columns):
        for start in range(0, m, chunk):
            count = min(chunk, m - start)
            _launch(_zero_tables, groups * count * (1 << tau) * width, table, count)
            _launch(
                _scatter_weighted,
                groups * n_w * count * width,
                write_codes,
                weights,
                vectors,
                a,
                start,
                count,
                table,
            )
            _launch(
                _gather_weighted,
                groups * n_r * width,
                read_codes,
                read_weights,
                table,
                a,
                start,
                count,
                m,
                a == 0 and start == 0,
                out,
            )
