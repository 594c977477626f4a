"""YOSO's hashing and cumulation as numba.cuda kernels.

The hash math comes from `core`, so codes match the CPU kernels and the torch oracle
(`reference`); see `core` for the one exception (Gaussian codes under FMA). All device
memory is allocated by the caller through torch (`table` is scratch), so torch's
peak-memory counters see everything these kernels use.
Arrays are numba device arrays on a GPU and plain numpy arrays under the CUDA simulator.

Row kernels (the fast hash, scatters, gathers) give each row to ROW_LANES threads that walk
its columns together (coalesced); the others use a flat 1-D grid with the last array axis
varying fastest. Every kernel bounds-checks its indices, so any shape works.
"""

from __future__ import annotations

from numba import boolean, cuda, float32, int32, int64, uint32, uint64

from attnbench.kernels.lsh import core
from attnbench.kernels.lsh.checks import check_pairs, index_bits
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
star_ratio = _helpers["star_ratio"]
bound_stride = _helpers["bound_stride"]


# --- hashing -------------------------------------------------------------------------


# Flat-grid kernels come in two index widths, chosen per launch (`index_bits`): 32-bit
# indices where every flat index fits, as a GPU divides them several times faster, 64-bit
# where one does not (G n m codes or a group's tables past 2^32 elements).


def _flat_kernels(index):
    """The flat-grid kernels with `index` (uint32 or uint64) flat indices."""

    @cuda.jit
    def gaussian_codes(x, proj, tau, out):
        """One thread per (g, i, f): code of hash f of row x[g, i]."""
        k = index(cuda.blockIdx.x) * index(cuda.blockDim.x) + index(cuda.threadIdx.x)
        groups, n, m = index(out.shape[0]), index(out.shape[1]), index(out.shape[2])
        if k < groups * n * m:
            f = k % m
            i = (k // m) % n
            g = k // (m * n)
            out[g, i, f] = gaussian_code(x[g, i], proj[g], f, tau)

    @cuda.jit
    def zero_tables(flat, size):
        """flat[g, :size] = 0 for the tables [G, chunk * 2^tau * width] viewed flat per group."""
        k = index(cuda.blockIdx.x) * index(cuda.blockDim.x) + index(cuda.threadIdx.x)
        size = index(size)
        if k < index(flat.shape[0]) * size:
            flat[k // size, k % size] = float32(0.0)

    return gaussian_codes, zero_tables


_GAUSSIAN_CODES, _ZERO_TABLES = {}, {}
for _bits, _index in ((32, uint32), (64, uint64)):
    _GAUSSIAN_CODES[_bits], _ZERO_TABLES[_bits] = _flat_kernels(_index)


# Threads that work on one row together: a warp on a GPU, the whole (smaller) block under
# the simulator. A block holds ROWS_PER_BLOCK such rows.
ROW_LANES = min(32, THREADS_PER_BLOCK)
ROWS_PER_BLOCK = THREADS_PER_BLOCK // ROW_LANES
_LANES = uint64(ROW_LANES)
_ONE = uint64(1)

# The row kernels index with unsigned integers and loop with `while`: numba then emits no
# negative-index wraparound and no range-iterator bookkeeping in the inner loops, which
# otherwise cost more instructions than the loads they address.


@cuda.jit(device=True)
def _row_lane(rows):
    """(g, row, lane) of this thread, unsigned: each group's `rows` rows go ROWS_PER_BLOCK to
    a block, ROW_LANES threads to a row."""
    tid = cuda.threadIdx.x
    per_group = (rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
    block = cuda.blockIdx.x
    row = (block % per_group) * ROWS_PER_BLOCK + tid // ROW_LANES
    return uint64(block // per_group), uint64(row), uint64(tid % ROW_LANES)


@cuda.jit(device=True)
def _sign_code(y, start, tau):
    """`core.sign_code` with unsigned indices: bit t = [y[start + t] > 0]."""
    code = 0
    t = uint64(0)
    while t < tau:
        if y[start + t] > 0:
            code |= 1 << t
        t += _ONE
    return code


@cuda.jit
def _fast_codes_kernel(x, diags, tau, out):
    """ROW_LANES threads per (g, i, p): y = H D3 H D2 H D1 x in shared memory, then its codes.

    Each butterfly stage pairs (j, j + h) as `reference.hadamard` does, one pair per thread
    at a time, with a block barrier between stages, so every code equals the CPU's. Rows
    past the end run the same loops (the barriers need the whole block) on zeros.
    """
    buffer = cuda.shared.array((ROWS_PER_BLOCK, MAX_PADDED_DIM), float32)
    groups, n, m = uint64(out.shape[0]), uint64(out.shape[1]), uint64(out.shape[2])
    parts, dp = uint64(diags.shape[1]), uint64(diags.shape[3])
    d, tau = uint64(x.shape[2]), uint64(tau)
    g, item, lane = _row_lane(out.shape[1] * diags.shape[1])
    live = g < groups and item < n * parts
    i = item // parts
    p = item % parts
    y = buffer[cuda.threadIdx.x // ROW_LANES]
    c = lane
    while c < dp:
        y[c] = x[g, i, c] if live and c < d else float32(0.0)
        c += _LANES
    half = dp // uint64(2)
    for step in range(3):
        if live:
            c = lane
            while c < dp:
                y[c] *= diags[g, p, uint64(step), c]
                c += _LANES
        cuda.syncthreads()
        h = _ONE
        shift = uint64(0)
        while h < dp:
            pair = lane
            while pair < half:
                j = ((pair >> shift) << (shift + _ONE)) | (pair & (h - _ONE))
                a = y[j]
                b = y[j + h]
                y[j] = a + b
                y[j + h] = a - b
                pair += _LANES
            cuda.syncthreads()
            h += h
            shift += _ONE
    if live:
        per_part = dp // tau
        j = lane
        while j < per_part:
            f = p * per_part + j
            if f < m:
                out[g, i, f] = _sign_code(y, j * tau, tau)
            j += _LANES


# --- cumulation ----------------------------------------------------------------------
#
# The scatters and gathers give each row to ROW_LANES threads, which walk its columns in
# steps of ROW_LANES (coalesced) and, per column, every hash of the chunk: one value load
# serves `count` atomic adds, and a warp's adds of one hash land in one table row.


@cuda.jit(device=True)
def _add_to_buckets(table, write_codes, g, w, col, start, count, v):
    """Add v at column col to row w's bucket of every hash start + h, h < count; rows
    sharing a bucket meet in atomic adds."""
    h = uint64(0)
    while h < count:
        cuda.atomic.add(table, (g, h, uint64(write_codes[g, w, start + h]), col), v)
        h += _ONE


@cuda.jit
def _scatter_values(write_codes, values, start, count, table):
    """Write row w adds values[g, w] to its bucket of hash start + h, for h < count."""
    g, w, lane = _row_lane(values.shape[1])
    width, start, count = uint64(values.shape[2]), uint64(start), uint64(count)
    if g < uint64(values.shape[0]) and w < uint64(values.shape[1]):
        col = lane
        while col < width:
            _add_to_buckets(table, write_codes, g, w, col, start, count, values[g, w, col])
            col += _LANES


@cuda.jit
def _scatter_weighted(write_codes, weights, vectors, a, start, count, table):
    """As `_scatter_values` with the row weights[g, w, a] * vectors[g, w]."""
    g, w, lane = _row_lane(vectors.shape[1])
    width, start, count = uint64(vectors.shape[2]), uint64(start), uint64(count)
    if g < uint64(vectors.shape[0]) and w < uint64(vectors.shape[1]):
        weight = weights[g, w, uint64(a)]
        col = lane
        while col < width:
            v = weight * vectors[g, w, col]
            _add_to_buckets(table, write_codes, g, w, col, start, count, v)
            col += _LANES


@cuda.jit
def _scatter_scaled(write_codes, write_scale, values, start, count, table):
    """As `_scatter_values` with the row write_scale[g, w, start + h] * values[g, w]."""
    g, w, lane = _row_lane(values.shape[1])
    width, start, count = uint64(values.shape[2]), uint64(start), uint64(count)
    if g < uint64(values.shape[0]) and w < uint64(values.shape[1]):
        col = lane
        while col < width:
            v = values[g, w, col]
            h = uint64(0)
            while h < count:
                f = start + h
                code = uint64(write_codes[g, w, f])
                cuda.atomic.add(table, (g, h, code, col), write_scale[g, w, f] * v)
                h += _ONE
            col += _LANES


@cuda.jit(device=True)
def _bucket_sum(table, read_codes, g, r, col, start, count):
    """Sum over the chunk's hashes of the bucket read row r falls in, at one column."""
    acc = float32(0.0)
    h = uint64(0)
    while h < count:
        acc += table[g, h, uint64(read_codes[g, r, start + h]), col]
        h += _ONE
    return acc


@cuda.jit(device=True)
def _accumulate(out, g, r, col, acc, first):
    """The first chunk overwrites out (never assumed zeroed), later chunks add."""
    if first:
        out[g, r, col] = acc
    else:
        out[g, r, col] += acc


@cuda.jit
def _gather(read_codes, table, start, count, m, first, out):
    """out[g, r] (+)= bucket sums / m; `first` overwrites."""
    g, r, lane = _row_lane(out.shape[1])
    width, start, count = uint64(out.shape[2]), uint64(start), uint64(count)
    if g < uint64(out.shape[0]) and r < uint64(out.shape[1]):
        col = lane
        while col < width:
            acc = _bucket_sum(table, read_codes, g, r, col, start, count) / float32(m)
            _accumulate(out, g, r, col, acc, first)
            col += _LANES


@cuda.jit
def _gather_weighted(read_codes, read_weights, table, a, start, count, m, first, out):
    """As `_gather`, the bucket sums scaled by read_weights[g, r, a]."""
    g, r, lane = _row_lane(out.shape[1])
    width, start, count = uint64(out.shape[2]), uint64(start), uint64(count)
    if g < uint64(out.shape[0]) and r < uint64(out.shape[1]):
        weight = read_weights[g, r, uint64(a)]
        col = lane
        while col < width:
            acc = _bucket_sum(table, read_codes, g, r, col, start, count) / float32(m)
            _accumulate(out, g, r, col, acc * weight, first)
            col += _LANES


@cuda.jit
def _gather_scaled(read_codes, read_scale, table, start, count, m, first, out):
    """As `_gather`, each hash's bucket sum scaled by read_scale[g, r, start + h]."""
    g, r, lane = _row_lane(out.shape[1])
    width, start, count = uint64(out.shape[2]), uint64(start), uint64(count)
    if g < uint64(out.shape[0]) and r < uint64(out.shape[1]):
        col = lane
        while col < width:
            acc = float32(0.0)
            h = uint64(0)
            while h < count:
                f = start + h
                acc += read_scale[g, r, f] * table[g, h, uint64(read_codes[g, r, f]), col]
                h += _ONE
            _accumulate(out, g, r, col, acc / float32(m), first)
            col += _LANES


# --- pair cumulation -----------------------------------------------------------------

# Shared-memory slots of a pair-cumulation block: one per thread, so blocks have at most
# this many threads.
PAIR_SLOTS = GPU_THREADS_PER_BLOCK
# Lanes that share one pair's dot products in a pair-cumulation block (a power of two).
MAX_PAIR_LANES = 32


@cuda.jit(device=True)
def _first_at_least(sorted_codes, g, f, key):
    """Smallest i with sorted_codes[g, f, i] >= key (n_w if none): binary search."""
    lo = 0
    hi = sorted_codes.shape[2]
    while lo < hi:
        mid = (lo + hi) // 2
        if sorted_codes[g, f, mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


@cuda.jit
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
    lanes,
    out,
):
    """out[g, r] = (1/m) sum_f sum_{w in B_f(r)} s_rf phi(x_rw) <read_a_r, write_a_w> write_unit_w.

    One block per (g, r), so every loop below has the same trip count in all its threads
    and the barriers inside them are safe. Per hash, each thread finds r's bucket
    [lo, hi) in sorted_codes[g, f] and the rows `bound_stride` picks from it. The picked
    rows go in tiles of blockDim / lanes pairs: thread (pair p, lane) sums columns lane,
    lane + lanes, ... of both dot products (coalesced within the pair's row), a shared-
    memory tree adds the lanes, lane 0 turns the sums into the pair's coefficient, then
    thread t adds the tile's coefficient-weighted write_unit rows to its own columns
    t, t + blockDim, ... of out[g, r], which no other block writes.
    """
    threads = cuda.blockDim.x
    tid = cuda.threadIdx.x
    block = cuda.blockIdx.x
    groups, n_r, m = read_codes.shape
    if block >= groups * n_r:
        return
    g = block // n_r
    r = block % n_r
    d = write_unit.shape[2]
    d_a = write_a.shape[2]
    tile = threads // lanes
    p = tid // lanes
    lane = tid % lanes
    dots = cuda.shared.array(PAIR_SLOTS, float32)
    coefs = cuda.shared.array(PAIR_SLOTS, float32)
    cosines = cuda.shared.array(PAIR_SLOTS, float32)
    rows = cuda.shared.array(PAIR_SLOTS, int32)
    half_tau = float32(tau) * float32(0.5)

    for col in range(tid, d, threads):
        out[g, r, col] = float32(0.0)
    for f in range(m):
        code = read_codes[g, r, f]
        lo = _first_at_least(sorted_codes, g, f, code)
        hi = _first_at_least(sorted_codes, g, f, code + 1)
        if hi > lo:
            offset, stride, scale = bound_stride(hi - lo, bound, r, f)
            taken = (hi - lo - offset + stride - 1) // stride
            for first in range(0, taken, tile):
                j = first + p
                dot_a = float32(0.0)
                cos = float32(0.0)
                if p < tile and j < taken:
                    w = order[g, f, lo + offset + j * stride]
                    for c in range(lane, d_a, lanes):
                        dot_a += read_a[g, r, c] * write_a[g, w, c]
                    if weight:
                        for c in range(lane, d, lanes):
                            cos += read_unit[g, r, c] * write_unit[g, w, c]
                    if lane == 0:
                        rows[p] = w
                dots[tid] = dot_a
                cosines[tid] = cos
                cuda.syncthreads()
                step = lanes // 2
                while step > 0:
                    if lane < step:
                        dots[tid] += dots[tid + step]
                        cosines[tid] += cosines[tid + step]
                    cuda.syncthreads()
                    step //= 2
                if lane == 0 and p < tile and j < taken:
                    phi = float32(star_ratio(cosines[tid], tau)) if weight else half_tau
                    coefs[p] = scale * phi * dots[tid]
                cuda.syncthreads()
                pairs = min(tile, taken - first)
                for col in range(tid, d, threads):
                    acc = float32(0.0)
                    for q in range(pairs):
                        acc += coefs[q] * write_unit[g, rows[q], col]
                    out[g, r, col] += acc
                cuda.syncthreads()
    for col in range(tid, d, threads):
        out[g, r, col] /= float32(m)


_F2, _F3, _F4 = float32[:, ::1], float32[:, :, ::1], float32[:, :, :, ::1]
_I3 = int32[:, :, ::1]

# Every kernel with the argument types the wrappers pass (C-contiguous arrays, int64 and
# bool scalars); tests/test_ptx.py compiles each to PTX.
KERNELS = {
    **{f"gaussian_codes_{b}": (k, (_F3, _F3, int64, _I3)) for b, k in _GAUSSIAN_CODES.items()},
    "fast_codes": (_fast_codes_kernel, (_F3, _F4, int64, _I3)),
    **{f"zero_tables_{b}": (k, (_F2, int64)) for b, k in _ZERO_TABLES.items()},
    "scatter_values": (_scatter_values, (_I3, _F3, int64, int64, _F4)),
    "scatter_weighted": (_scatter_weighted, (_I3, _F3, _F3, int64, int64, int64, _F4)),
    "gather": (_gather, (_I3, _F4, int64, int64, int64, boolean, _F3)),
    "gather_weighted": (
        _gather_weighted,
        (_I3, _F3, _F4, int64, int64, int64, int64, boolean, _F3),
    ),
    "scatter_scaled": (_scatter_scaled, (_I3, _F3, _F3, int64, int64, _F4)),
    "gather_scaled": (_gather_scaled, (_I3, _F3, _F4, int64, int64, int64, boolean, _F3)),
    "pair_cumulation": (
        _pair_cumulation,
        (_I3, _I3, _I3, _F3, _F3, _F3, _F3, int64, int64, int64, int64, _F3),
    ),
}


# --- launch wrappers -----------------------------------------------------------------


def _launch(kernel, threads: int, *args) -> None:
    """Run `kernel` on at least `threads` threads (a flat grid); nothing to do for 0."""
    if threads > 0:
        blocks = (threads + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
        kernel[blocks, THREADS_PER_BLOCK](*args)


def _launch_rows(kernel, groups: int, rows: int, *args) -> None:
    """Run `kernel` with ROW_LANES threads for each of `rows` rows of each group (`_row_lane`)."""
    if groups * rows > 0:
        per_group = (rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
        kernel[groups * per_group, THREADS_PER_BLOCK](*args)


def _zero(table, count: int) -> None:
    """Zero the first `count` hashes' tables of every group (contiguous within a group)."""
    groups = table.shape[0]
    size = count * table.shape[2] * table.shape[3]
    kernel = _ZERO_TABLES[index_bits(groups * size + THREADS_PER_BLOCK)]
    _launch(kernel, groups * size, table.reshape(groups, -1), size)


def gaussian_codes(x, proj, tau: int, out) -> None:
    """out[g, i, f] = code of hash f of x[g, i] under projections proj [G, d, m*tau]."""
    groups, n, m = out.shape
    if proj.shape[2] < m * tau:
        raise ValueError(f"proj has {proj.shape[2]} columns, {m} codes of tau={tau} need {m * tau}")
    kernel = _GAUSSIAN_CODES[index_bits(groups * n * m + THREADS_PER_BLOCK)]
    _launch(kernel, groups * n * m, x, proj, int(tau), out)


def fast_codes(x, diags, tau: int, out) -> None:
    """out [G, n, m] = the first m fast-hash codes of x; diags [G, P, 3, d_pad] of +-1."""
    groups, n, m = out.shape
    parts, dp = diags.shape[1], diags.shape[3]
    if dp & (dp - 1) or not max(x.shape[2], tau) <= dp <= MAX_PADDED_DIM:
        raise ValueError(f"d_pad={dp} must be a power of two in [max(d, tau), {MAX_PADDED_DIM}]")
    if parts * (dp // tau) < m:
        raise ValueError(f"{parts} transforms give {parts * (dp // tau)} codes, {m} asked")
    _launch_rows(_fast_codes_kernel, groups, n * parts, x, diags, int(tau), out)


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
        _zero(table, count)
        _launch_rows(_scatter_values, groups, n_w, write_codes, values, start, count, table)
        _launch_rows(_gather, groups, n_r, read_codes, table, start, count, m, start == 0, out)


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
            _zero(table, count)
            scatter = (write_codes, weights, vectors, a, start, count, table)
            _launch_rows(_scatter_weighted, groups, n_w, *scatter)
            first = a == 0 and start == 0
            gather = (read_codes, read_weights, table, a, start, count, m, first, out)
            _launch_rows(_gather_weighted, groups, n_r, *gather)


def _check_shape(name: str, array, expected: tuple) -> None:
    if tuple(array.shape) != tuple(expected):
        raise ValueError(f"{name} has shape {tuple(array.shape)}, want {tuple(expected)}")


def scaled_cumulation(
    read_codes, write_codes, values, write_scale, read_scale, tau: int, out, table
) -> None:
    """out_r = (1/m) sum_f read_scale_rf sum_w [match in hash f] write_scale_wf values_w.

    `cumulation` with per-row, per-hash scales on both sides (all ones give `cumulation`):
    the write side scales what it scatters, the read side what it gathers.
    """
    groups, n_r, m = read_codes.shape
    n_w, width = values.shape[1], values.shape[2]
    if m < 1:
        raise ValueError("need at least one hash")
    _check_shape("write_scale", write_scale, (groups, n_w, m))
    _check_shape("read_scale", read_scale, (groups, n_r, m))
    _check_table(table, groups, tau, width)
    chunk = table.shape[1]
    for start in range(0, m, chunk):
        count = min(chunk, m - start)
        _zero(table, count)
        scatter = (write_codes, write_scale, values, start, count, table)
        _launch_rows(_scatter_scaled, groups, n_w, *scatter)
        gather = (read_codes, read_scale, table, start, count, m, start == 0, out)
        _launch_rows(_gather_scaled, groups, n_r, *gather)


def pair_lanes(threads: int, d: int, d_a: int) -> int:
    """Lanes per pair in `_pair_cumulation`: enough for the wider dot product, a power of
    two, at most MAX_PAIR_LANES and the block size, so a block takes several pairs at once."""
    cap = min(MAX_PAIR_LANES, threads)
    lanes = 1
    while lanes < max(d, d_a) and 2 * lanes <= cap:
        lanes *= 2
    return lanes


def pair_cumulation(
    read_codes,
    sorted_codes,
    order,
    read_unit,
    write_unit,
    read_a,
    write_a,
    tau: int,
    weight: int,
    bound: int,
    out,
) -> None:
    """out_r = (1/m) sum_f sum_{w in B_f(r)} s_rf phi(x_rw) <read_a_r, write_a_w> write_unit_w.

    x_rw = <read_unit_r, write_unit_w>; phi = core.star_ratio(x, tau) for weight 1 (eq. 3),
    tau/2 for weight 0 (eq. 4). B_f(r): the write rows of r's bucket in hash f, found in
    sorted_codes [G, m, n_w] (each hash's write codes ascending, order [G, m, n_w] their
    rows), sampled under `bound` as core.bound_stride says, with scale s_rf.
    """
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
    groups, n_r = read_codes.shape[:2]
    d = write_unit.shape[2]
    threads = THREADS_PER_BLOCK
    if threads > PAIR_SLOTS:
        raise ValueError(f"pair cumulation blocks hold at most {PAIR_SLOTS} threads")
    if groups * n_r > 0:
        _pair_cumulation[groups * n_r, threads](
            read_codes,
            sorted_codes,
            order,
            read_unit,
            write_unit,
            read_a,
            write_a,
            int(tau),
            int(weight),
            int(bound),
            pair_lanes(threads, d, write_a.shape[2]),
            out,
        )
