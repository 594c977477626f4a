"""YOSO's kernels on the CPU: numba `njit(parallel=True)` over `prange` work units.

Hashing lives in `cpu_hash` (re-exported here, so this module and `cuda` offer the same
kernels to `dispatch`). `cumulation` fills
hash tables per worker, a chunk of hashes at a time (`core.hash_chunk`), so its memory is
O(workers * chunk * 2^tau * width) however large m or d_v are. `weighted_cumulation`
(and `cumulation` when tau is large for n) sorts the rows by code instead and handles one
bucket at a time: no 2^tau tables at all, O(n) memory per worker.

All functions take C-contiguous numpy arrays (float32 / int32) and overwrite all of `out`.
The thread count is numba's (`numba.set_num_threads`).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import float32, njit, prange, uint64

from attnbench.kernels.jitcache import cached_njit
from attnbench.kernels.lsh.checks import check, check_codes, check_pairs, require
from attnbench.kernels.lsh.core import (
    LONG_ROWS_BUDGET,
    ROWS_IN_L3,
    TABLE_BUDGET,
    bound_stride,
    hash_chunk,
    star_ratio,
)
from attnbench.kernels.lsh.cpu_hash import fast_codes, gaussian_codes
from attnbench.kernels.simd import _load, _splat, _store, _zeros

# Widest block of value columns one cumulation work unit owns.
MAX_WIDTH = 64
# Most floats of the one dense bucket table of weighted_cumulation (16 KiB: stays in L1).
BUCKET_FLOATS = 4096
# cumulation sorts rows by code (as weighted_cumulation does) rather than filling tables
# when there are more than this many buckets per write row.
SPARSE_BUCKETS = 4
# Bits per pass of the radix sort of codes.
RADIX_BITS = 10

__all__ = [
    "cumulation",
    "fast_codes",
    "gaussian_codes",
    "normalise_rows",
    "off_the_row",
    "pair_cumulation",
    "scaled_cumulation",
    "weighted_cumulation",
]

# A work unit is (group, block of output columns): it owns out[g, :, c0:c1], so units never
# race, and each worker allocates its buffers once for all its units.
#
# cumulation's tables: per chunk of hashes, write rows add their values into their bucket
# of each hash's table, then read rows add up their buckets. Instead of zeroing 2^tau
# buckets per chunk, a bucket is live only while its stamp equals the chunk's epoch: the
# first write row to reach it overwrites it, later ones add, and read rows take the spare
# all-zero bucket 2^tau instead of a dead one. So time is O(n m width), never O(2^tau m).
#
# Tables are flat and indexed by unsigned offsets (`_bucket`): with signed indices numba
# adds a negative-index wraparound to every access, which stops the column loops from
# vectorising. Codes are masked to tau bits, so bad codes cannot write out of bounds.


@njit(inline="always")
def _bucket(h, code, buckets, size):
    """Offset of bucket `code` of table h in a flat array of `buckets` buckets per table."""
    return (uint64(h) * uint64(buckets) + uint64(code)) * uint64(size)


# Columns of the register block a scatter or gather moves per hash: four 8-lane vectors,
# held in registers across the chunk's hashes (with more, they spill).
BLOCK = 32


@njit(inline="always")
def _scatter_block(tables, offs, fresh, svals, hashes, row, k, scaled):
    """tables[offs[h] + k : + BLOCK] = (fresh[h]) or += svals[h] * row[k : k + BLOCK] for each
    hash h; the row's block stays in registers, and unscaled rows are added as they are."""
    kk = uint64(k)
    r0, r1 = _load(row, kk), _load(row, kk + uint64(8))
    r2, r3 = _load(row, kk + uint64(16)), _load(row, kk + uint64(24))
    for h in range(hashes):
        at = offs[h] + kk
        x0, x1, x2, x3 = r0, r1, r2, r3
        if scaled:
            s = _splat(svals[h])
            x0, x1, x2, x3 = s * r0, s * r1, s * r2, s * r3
        if not fresh[h]:
            x0 = x0 + _load(tables, at)
            x1 = x1 + _load(tables, at + uint64(8))
            x2 = x2 + _load(tables, at + uint64(16))
            x3 = x3 + _load(tables, at + uint64(24))
        _store(tables, at, x0)
        _store(tables, at + uint64(8), x1)
        _store(tables, at + uint64(16), x2)
        _store(tables, at + uint64(24), x3)


@njit(inline="always")
def _gather_block(tables, offs, svals, hashes, row, k, scaled):
    """row[k : k + BLOCK] += sum over hashes h of svals[h] * tables[offs[h] + k : + BLOCK],
    summed in registers and added to the row once."""
    kk = uint64(k)
    a0, a1, a2, a3 = _zeros(), _zeros(), _zeros(), _zeros()
    for h in range(hashes):
        at = offs[h] + kk
        t0, t1 = _load(tables, at), _load(tables, at + uint64(8))
        t2, t3 = _load(tables, at + uint64(16)), _load(tables, at + uint64(24))
        if scaled:
            s = _splat(svals[h])
            t0, t1, t2, t3 = s * t0, s * t1, s * t2, s * t3
        a0, a1, a2, a3 = a0 + t0, a1 + t1, a2 + t2, a3 + t3
    _store(row, kk, _load(row, kk) + a0)
    _store(row, kk + uint64(8), _load(row, kk + uint64(8)) + a1)
    _store(row, kk + uint64(16), _load(row, kk + uint64(16)) + a2)
    _store(row, kk + uint64(24), _load(row, kk + uint64(24)) + a3)


@cached_njit(parallel=True)
def _cumulation(
    read_codes,
    write_codes,
    values,
    write_scale,
    read_scale,
    scaled,
    tau,
    width,
    chunk,
    workers,
    out,
):
    groups, n_w, m = write_codes.shape
    n_r = read_codes.shape[1]
    dv = values.shape[2]
    blocks = (dv + width - 1) // width
    units = groups * blocks
    top = (1 << tau) - 1
    buckets = top + 2  # bucket top + 1 stays zero
    scale = float32(1.0) / float32(m)
    one = float32(1.0)
    for worker in prange(workers):
        tables = np.empty(chunk * buckets * width, np.float32)
        stamps = np.zeros(chunk * buckets, np.int32)
        offs = np.empty(chunk, np.uint64)  # a row's bucket offset in each hash's table
        fresh = np.empty(chunk, np.bool_)  # ... whether it is the bucket's first write
        svals = np.empty(chunk, np.float32)  # ... and its scale
        for h in range(chunk):
            start = _bucket(h, top + 1, buckets, width)
            tables[start : start + width] = 0.0
        epoch = 0
        for unit in range(worker, units, workers):
            g = unit // blocks
            c0 = (unit % blocks) * width
            cols = min(width, dv - c0)
            full = cols - cols % BLOCK
            for r in range(n_r):
                out[g, r, c0 : c0 + cols] = 0.0
            for f0 in range(0, m, chunk):
                hashes = min(chunk, m - f0)
                epoch += 1
                for w in range(n_w):
                    codes = write_codes[g, w, f0 : f0 + hashes]
                    for h in range(hashes):
                        b = _bucket(h, codes[h] & top, buckets, 1)
                        fresh[h] = stamps[b] != epoch
                        stamps[b] = epoch
                        offs[h] = b * uint64(width)
                        svals[h] = write_scale[g, w, f0 + h] if scaled else one
                    row = values[g, w, c0 : c0 + cols]
                    for k in range(0, full, BLOCK):
                        _scatter_block(tables, offs, fresh, svals, hashes, row, k, scaled)
                    for h in range(hashes):  # the columns after the last whole block
                        at, s = offs[h], svals[h]
                        for k in range(full, cols):
                            x = s * row[k] if scaled else row[k]
                            i = at + uint64(k)
                            tables[i] = x if fresh[h] else tables[i] + x
                for r in range(n_r):
                    codes = read_codes[g, r, f0 : f0 + hashes]
                    for h in range(hashes):
                        code = codes[h] & top
                        if stamps[_bucket(h, code, buckets, 1)] != epoch:
                            code = top + 1
                        offs[h] = _bucket(h, code, buckets, width)
                        svals[h] = read_scale[g, r, f0 + h] if scaled else one
                    row = out[g, r, c0 : c0 + cols]
                    for k in range(0, full, BLOCK):
                        _gather_block(tables, offs, svals, hashes, row, k, scaled)
                    for h in range(hashes):
                        at, s = offs[h], svals[h]
                        for k in range(full, cols):
                            i = at + uint64(k)
                            row[k] += s * tables[i] if scaled else tables[i]
            for r in range(n_r):
                row = out[g, r, c0 : c0 + cols]
                for k in range(cols):
                    row[k] *= scale


@njit
def _sort_by_code(codes, tau, order, keys, spare_order, spare_keys, counts):
    """Rows 0 .. n-1 sorted by code (stable LSD radix sort, RADIX_BITS per pass).

    Returns (rows, their codes), each one of the two buffers passed in. Time is
    O(n + 2^RADIX_BITS) per pass, so tau = 20 costs no 2^tau pass.
    """
    n = codes.shape[0]
    top = (1 << tau) - 1
    for i in range(n):
        order[i] = i
        keys[i] = codes[i] & top
    shift = 0
    while shift < tau:
        bits = min(RADIX_BITS, tau - shift)
        mask = (1 << bits) - 1
        counts[: mask + 2] = 0
        for i in range(n):
            counts[((keys[i] >> shift) & mask) + 1] += 1
        for b in range(mask + 1):
            counts[b + 1] += counts[b]
        for i in range(n):
            b = (keys[i] >> shift) & mask
            spare_order[counts[b]] = order[i]
            spare_keys[counts[b]] = keys[i]
            counts[b] += 1
        order, spare_order = spare_order, order
        keys, spare_keys = spare_keys, keys
        shift += bits
    return order, keys


@cached_njit(parallel=True)
def _weighted_cumulation(
    read_codes, write_codes, weights, vectors, read_weights, tau, width, span, workers, out
):
    groups, n_w, m = write_codes.shape
    n_r = read_codes.shape[1]
    n_a, dv = weights.shape[2], vectors.shape[2]
    blocks = (dv + width - 1) // width
    units = groups * blocks
    n = max(n_w, n_r)
    scale = float32(1.0) / float32(m)
    for worker in prange(workers):
        buffers = np.empty((4, n), np.int32)
        read_buffers = np.empty((4, n), np.int32)
        counts = np.empty((1 << RADIX_BITS) + 1, np.int32)
        # The one bucket being processed: table[a * wd + k] = sum_w weights[w, a0 + a] *
        # vectors[w, c0 + k] over the write rows w in the bucket.
        table = np.empty(span * width, np.float32)
        for unit in range(worker, units, workers):
            g = unit // blocks
            c0 = (unit % blocks) * width
            wd = min(width, dv - c0)
            for r in range(n_r):
                out[g, r, c0 : c0 + wd] = 0.0
            for f in range(m):
                w_rows, w_codes = _sort_by_code(
                    write_codes[g, :, f],
                    tau,
                    buffers[0],
                    buffers[1],
                    buffers[2],
                    buffers[3],
                    counts,
                )
                r_rows, r_codes = _sort_by_code(
                    read_codes[g, :, f],
                    tau,
                    read_buffers[0],
                    read_buffers[1],
                    read_buffers[2],
                    read_buffers[3],
                    counts,
                )
                # Walk both sorted lists; each bucket holding write and read rows is one
                # small dense product, its table hot in L1.
                i = 0
                j = 0
                while i < n_w and j < n_r:
                    code = w_codes[i]
                    i1 = i
                    while i1 < n_w and w_codes[i1] == code:
                        i1 += 1
                    while j < n_r and r_codes[j] < code:
                        j += 1
                    j1 = j
                    while j1 < n_r and r_codes[j1] == code:
                        j1 += 1
                    if j1 > j:
                        for a0 in range(0, n_a, span):
                            sa = min(span, n_a - a0)
                            table[: sa * wd] = 0.0
                            for w in w_rows[i:i1]:
                                _add_products(
                                    table, weights[g, w, a0 : a0 + sa], vectors[g, w, c0 : c0 + wd]
                                )
                            for r in r_rows[j:j1]:
                                _add_weighted(
                                    out[g, r, c0 : c0 + wd],
                                    read_weights[g, r, a0 : a0 + sa],
                                    table,
                                )
                    i = i1
                    j = j1
            for r in range(n_r):
                row = out[g, r, c0 : c0 + wd]
                for k in range(wd):
                    row[k] *= scale


@njit
def _add_products(table, wts, row):
    """table[a * wd + k] += wts[a] * row[k]: four columns a per pass over row."""
    cols = uint64(row.shape[0])
    a = 0
    while a + 4 <= wts.shape[0]:
        w0, w1, w2, w3 = wts[a], wts[a + 1], wts[a + 2], wts[a + 3]
        o0 = uint64(a) * cols
        o1 = o0 + cols
        o2 = o1 + cols
        o3 = o2 + cols
        for k in range(cols):
            x = row[k]
            table[o0 + k] += w0 * x
            table[o1 + k] += w1 * x
            table[o2 + k] += w2 * x
            table[o3 + k] += w3 * x
        a += 4
    while a < wts.shape[0]:
        w0 = wts[a]
        o0 = uint64(a) * cols
        for k in range(cols):
            table[o0 + k] += w0 * row[k]
        a += 1


@njit
def _add_weighted(row, wts, table):
    """row[k] += sum_a wts[a] * table[a * wd + k]: four columns a per pass over row."""
    cols = uint64(row.shape[0])
    a = 0
    while a + 4 <= wts.shape[0]:
        w0, w1, w2, w3 = wts[a], wts[a + 1], wts[a + 2], wts[a + 3]
        o0 = uint64(a) * cols
        o1 = o0 + cols
        o2 = o1 + cols
        o3 = o2 + cols
        for k in range(cols):
            row[k] += (w0 * table[o0 + k] + w1 * table[o1 + k]) + (
                w2 * table[o2 + k] + w3 * table[o3 + k]
            )
        a += 4
    while a < wts.shape[0]:
        w0 = wts[a]
        o0 = uint64(a) * cols
        for k in range(cols):
            row[k] += w0 * table[o0 + k]
        a += 1


def cumulation(
    read_codes: np.ndarray,
    write_codes: np.ndarray,
    values: np.ndarray,
    tau: int,
    out: np.ndarray,
) -> None:
    """out [G, n_r, dv] = (1/m) sum_f sum_w [read_codes[g, r, f] == write_codes[g, w, f]]
    values[g, w], with codes [G, n, m] in 0 .. 2^tau - 1 and values [G, n_w, dv]."""
    _check_cumulation(read_codes, write_codes, values, out, tau)
    groups, n_w, m = write_codes.shape
    if _sparse(tau, n_w):
        # Sparse tables (large tau, few rows): most buckets are empty and touching fresh
        # table pages would dominate, so sort by code instead; weights of 1 are exact.
        ones_w = np.ones((groups, n_w, 1), np.float32)
        ones_r = np.ones((groups, read_codes.shape[1], 1), np.float32)
        weighted_cumulation(read_codes, write_codes, ones_w, values, ones_r, tau, out)
        return
    unscaled = np.empty((1, 1, 1), np.float32)
    _tables(read_codes, write_codes, values, unscaled, unscaled, False, tau, out)


def scaled_cumulation(
    read_codes: np.ndarray,
    write_codes: np.ndarray,
    values: np.ndarray,
    write_scale: np.ndarray,
    read_scale: np.ndarray,
    tau: int,
    out: np.ndarray,
) -> None:
    """out [G, n_r, D] = (1/m) sum_f read_scale[g, r, f] sum_w [match] write_scale[g, w, f]
    values[g, w]; scales [G, n, m]. `cumulation` with a weight per row and hash: the
    random-projection backward, O(n m D)."""
    _check_cumulation(read_codes, write_codes, values, out, tau)
    groups, n_w, m = write_codes.shape
    for scale, codes in ((write_scale, write_codes), (read_scale, read_codes)):
        check(scale, np.float32, 3)
        require(scale.shape == codes.shape, f"scales {scale.shape} do not match codes")
    if not _sparse(tau, n_w):
        _tables(read_codes, write_codes, values, write_scale, read_scale, True, tau, out)
        return
    # Sparse tables: hash by hash, each a sort-based weighted cumulation of one column.
    out[:] = 0.0
    part = np.empty_like(out)
    for f in range(m):
        one = slice(f, f + 1)
        weighted_cumulation(
            np.ascontiguousarray(read_codes[:, :, one]),
            np.ascontiguousarray(write_codes[:, :, one]),
            np.ascontiguousarray(write_scale[:, :, one]),
            values,
            np.ascontiguousarray(read_scale[:, :, one]),
            tau,
            part,
        )
        out += part
    out /= np.float32(m)


@cached_njit(parallel=True, fastmath={"reassoc"})
def normalise_rows(y, eps, norms):
    """y [R, D] /= its rows' l2 norms in place, norms [R] = max(|y_r|, eps) (as F.normalize):
    one pass over each row while it sits in L1, where torch takes one for the norms and
    another for the division. The sum of squares may be reassociated, so it is summed in
    SIMD lanes rather than one dependent chain of adds."""
    rows, cols = y.shape
    for r in prange(rows):
        row = y[r]
        total = float32(0.0)
        for k in range(cols):
            total += row[k] * row[k]
        norm = max(float32(np.sqrt(total)), float32(eps))
        norms[r] = norm
        for k in range(cols):
            row[k] /= norm


@cached_njit(parallel=True, fastmath={"reassoc"})
def off_the_row(g, x, x_norms, divisors, out):
    """out[r] = (g[r] - x[r] <x[r], g[r]> / x_norms[r]^2) / divisors[r] for rows [R, D]:
    g less its component along x, the derivative of x / |x| applied to g (times |x|),
    in one pass over each row while it sits in L1, where torch takes one for <x, g> and
    another for the update. Empty `x_norms` mean unit rows x, empty `divisors` divide by
    1; `out` may be g. The dot product may be reassociated (summed in SIMD lanes)."""
    rows, cols = g.shape
    unit, whole = x_norms.shape[0] == 0, divisors.shape[0] == 0
    for r in prange(rows):
        gr, xr, o = g[r], x[r], out[r]
        dot = float32(0.0)
        for k in range(cols):
            dot += xr[k] * gr[k]
        along = dot if unit else dot / (x_norms[r] * x_norms[r])
        inv = float32(1.0) if whole else float32(1.0) / divisors[r]
        for k in range(cols):
            o[k] = (gr[k] - along * xr[k]) * inv


def _sparse(tau: int, n_w: int) -> bool:
    """More than SPARSE_BUCKETS buckets per write row: sort by code rather than fill tables."""
    return 1 << tau > SPARSE_BUCKETS * n_w


def table_chunk(n_w: int, n_r: int, m: int, tau: int, width: int) -> int:
    """Hashes whose tables a worker fills at once (core.TABLE_BUDGET, or LONG_ROWS_BUDGET
    when a unit's rows outgrow its share of L3)."""
    rows = 4 * width * (n_w + n_r)
    budget = TABLE_BUDGET if rows <= ROWS_IN_L3 else LONG_ROWS_BUDGET
    return hash_chunk(m, tau, width, budget)


def _tables(read_codes, write_codes, values, write_scale, read_scale, scaled, tau, out):
    width, workers = _column_blocks(write_codes.shape[0], values.shape[2])
    n_w, m = write_codes.shape[1:]
    chunk = table_chunk(n_w, read_codes.shape[1], m, tau, width)
    _cumulation(
        read_codes,
        write_codes,
        values,
        write_scale,
        read_scale,
        scaled,
        tau,
        width,
        chunk,
        workers,
        out,
    )


def _check_cumulation(read_codes, write_codes, values, out, tau: int) -> None:
    check_codes(read_codes, write_codes, tau)
    check(values, np.float32, 3)
    check(out, np.float32, 3)
    groups, n_w, _ = write_codes.shape
    require(values.shape[:2] == (groups, n_w), f"values {values.shape} do not match codes")
    want = (groups, read_codes.shape[1], values.shape[2])
    require(out.shape == want, f"out is {out.shape}, expected {want}")


def weighted_cumulation(
    read_codes: np.ndarray,
    write_codes: np.ndarray,
    weights: np.ndarray,
    vectors: np.ndarray,
    read_weights: np.ndarray,
    tau: int,
    out: np.ndarray,
) -> None:
    """out [G, n_r, D] = (1/m) sum_f sum_w [match] <read_weights[g, r], weights[g, w]>
    vectors[g, w]; weights [G, n_w, A], vectors [G, n_w, D], read_weights [G, n_r, A].

    YOSO's lower-bound backward (dQ, dK) in O(n m A D) time. Per hash, rows are sorted by
    code; each bucket is then a small dense product: its table sum_w weights[w]^T vectors[w]
    (A x D floats, in L1) is built from its write rows and applied to its read rows.
    """
    check_codes(read_codes, write_codes, tau)
    for array in (weights, vectors, read_weights, out):
        check(array, np.float32, 3)
    groups, n_w, m = write_codes.shape
    n_r, n_a = read_codes.shape[1], weights.shape[2]
    require(
        weights.shape[:2] == vectors.shape[:2] == (groups, n_w),
        f"weights {weights.shape} and vectors {vectors.shape} do not match the write codes",
    )
    require(
        read_weights.shape == (groups, n_r, n_a),
        f"read_weights {read_weights.shape} do not match the read codes and weights",
    )
    want = (groups, n_r, vectors.shape[2])
    require(out.shape == want, f"out is {out.shape}, expected {want}")
    width, workers = _column_blocks(groups, vectors.shape[2])
    span = max(1, min(n_a, BUCKET_FLOATS // width))
    _weighted_cumulation(
        read_codes, write_codes, weights, vectors, read_weights, tau, width, span, workers, out
    )


def _column_blocks(groups: int, dv: int) -> tuple[int, int]:
    """Column width of a work unit, and how many workers share the units.

    Units are (group, column block); with few groups the columns are split finer so that
    every thread gets a unit (G = 1 still uses all cores when d_v allows).
    """
    threads = numba.get_num_threads()
    blocks = min(dv, max(-(-dv // MAX_WIDTH), -(-threads // groups)))
    width = -(-dv // blocks)
    units = groups * -(-dv // width)
    return width, min(threads, units)


# --- pair cumulation -----------------------------------------------------------------
#
# Per read row and hash, the write rows in its bucket are a contiguous span of that hash's
# rows sorted by code; each picked pair costs O(d): one or two dot products and one axpy.
# A work unit is one read row, which owns out[g, r]: no races, no tables.


@njit(inline="always")
def _span(keys, code):
    """[lo, hi) of `code` in the ascending keys (two binary searches)."""
    lo, hi = 0, keys.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if keys[mid] < code:
            lo = mid + 1
        else:
            hi = mid
    end = keys.shape[0]
    top = lo
    while top < end:
        mid = (top + end) // 2
        if keys[mid] <= code:
            top = mid + 1
        else:
            end = mid
    return lo, top


@njit(inline="always")
def _dot(a, b):
    acc = float32(0.0)
    for c in range(a.shape[0]):
        acc += a[c] * b[c]
    return acc


@cached_njit(parallel=True)
def _pair_cumulation(
    read_codes,
    sorted_codes,
    order,
    read_unit,
    write_unit,
    read_a,
    write_a,
    tau,
    weight,
    bound,
    out,
):
    groups, n_r, m = read_codes.shape
    d = write_unit.shape[2]
    top = (1 << tau) - 1
    half = float32(tau / 2)
    for unit in prange(groups * n_r):
        g = unit // n_r
        r = unit % n_r
        acc = out[g, r]
        acc[:] = 0.0
        ru, ra = read_unit[g, r], read_a[g, r]
        for f in range(m):
            lo, hi = _span(sorted_codes[g, f], read_codes[g, r, f] & top)
            if hi == lo:
                continue
            offset, stride, scale = bound_stride(hi - lo, bound, r, f)
            for pos in range(lo + offset, hi, stride):
                w = order[g, f, pos]
                wu = write_unit[g, w]
                phi = float32(star_ratio(_dot(ru, wu), tau)) if weight == 1 else half
                coef = scale * phi * _dot(ra, write_a[g, w])
                for c in range(d):
                    acc[c] += coef * wu[c]
        inv = float32(1.0) / float32(m)
        for c in range(d):
            acc[c] *= inv


def pair_cumulation(
    read_codes: np.ndarray,
    sorted_codes: np.ndarray,
    order: np.ndarray,
    read_unit: np.ndarray,
    write_unit: np.ndarray,
    read_a: np.ndarray,
    write_a: np.ndarray,
    tau: int,
    weight: int,
    bound: int,
    out: np.ndarray,
) -> None:
    """out [G, n_r, d] = (1/m) sum_f sum_{w in B_f(r)} s phi(<read_unit_r, write_unit_w>)
    <read_a_r, write_a_w> write_unit_w (reference.pair_cumulation): phi = tau/2 (weight 0,
    eq. 4) or core.star_ratio (weight 1, *YOSO, eq. 3). sorted_codes and order [G, m, n_w]:
    each hash's write codes ascending and the write row of each (a stable sort)."""
    check(read_codes, np.int32, 3)
    check(sorted_codes, np.int32, 3)
    check(order, np.int32, 3)
    for array in (read_unit, write_unit, read_a, write_a, out):
        check(array, np.float32, 3)
    require(1 <= tau <= 30, f"tau must be in 1..30, got {tau}")
    check_pairs(
        read_codes,
        sorted_codes,
        order,
        read_unit,
        write_unit,
        read_a,
        write_a,
        weight,
        bound,
        out,
    )
    _pair_cumulation(
        read_codes,
        sorted_codes,
        order,
        read_unit,
        write_unit,
        read_a,
        write_a,
        tau,
        weight,
        bound,
        out,
    )
