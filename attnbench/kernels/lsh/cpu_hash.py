"""YOSO's hashing on the CPU: numba `njit(parallel=True)` over blocks of rows.

Codes equal the CUDA kernels' and the torch reference's bit for bit (the same fp32
operations in the same order, no fastmath), so every target sees identical buckets.
All functions take C-contiguous numpy arrays (float32 / int32) and overwrite all of `out`.

The inner loops use explicit 8-lane float32 vectors (`kernels.simd`): one IEEE operation
per lane, exactly the scalar code's, with tiles of sums kept in registers and 8 x 8 blocks
transposed with shuffles, which numba's auto-vectoriser does not do. Indices into flattened
arrays are uint64: numba adds no negative-index wraparound to unsigned indices.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types, uint64
from numba.extending import intrinsic

from attnbench.kernels.jitcache import cached_njit
from attnbench.kernels.lsh.checks import check, require
from attnbench.kernels.simd import (
    _I32,
    _LANES,
    _V8,
    _lanes_at,
    _load,
    _splat,
    _store,
    _zeros,
)

# Rows hashed together by the fast hash, the contiguous axis of its [d_pad, rows] buffers
# (two of them: 2 * 64 * 64 floats = 32 KiB at d_pad = 64, one core's L1).
FAST_ROWS = 64
# Gaussian hash: a work unit's rows, and the register tile of the projection: _TILE rows
# x 16 columns (12 vector sums, with two projection vectors and a broadcast: all 16 AVX
# registers).
GAUSS_ROWS = 60
_TILE = 6
_PANEL = 16

__all__ = ["fast_codes", "gaussian_codes"]


@intrinsic
def _positive_bits(typingctx, v):
    """Bit l = [v[l] > 0] (an ordered compare, as numba's: NaN gives 0)."""

    def codegen(context, builder, sig, args):
        above = builder.fcmp_ordered(">", args[0], ir.Constant(_V8, [0.0] * _LANES))
        return builder.zext(builder.bitcast(above, ir.IntType(_LANES)), ir.IntType(64))

    return types.uint64(v), codegen


def _shuffle(builder, a, b, lanes):
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_I32, _LANES), lanes))


@intrinsic
def _transpose8(typingctx, src, s, ss, dst, o, os):
    """dst[o + k*os + i] = src[s + i*ss + k] for i, k < 8: an 8 x 8 block of 4-byte
    elements (float32 or int32: only moved, never computed on), 8 loads and 8 stores."""

    def codegen(context, builder, sig, args):
        src, s, ss, dst, o, os = args
        rows = [
            builder.load(
                _lanes_at(
                    context, builder, sig.args[0], src, builder.add(s, builder.mul(ss, ss.type(i)))
                ),
                align=4,
            )
            for i in range(_LANES)
        ]
        # Interleave lanes, then lane pairs, then halves: row i lane k ends in lane i of k.
        pairs = []
        for i in range(0, _LANES, 2):
            pairs.append(_shuffle(builder, rows[i], rows[i + 1], [0, 8, 1, 9, 4, 12, 5, 13]))
            pairs.append(_shuffle(builder, rows[i], rows[i + 1], [2, 10, 3, 11, 6, 14, 7, 15]))
        quads = []
        for i in (0, 4):
            for a, b in ((i, i + 2), (i + 1, i + 3)):
                quads.append(_shuffle(builder, pairs[a], pairs[b], [0, 1, 8, 9, 4, 5, 12, 13]))
                quads.append(_shuffle(builder, pairs[a], pairs[b], [2, 3, 10, 11, 6, 7, 14, 15]))
        for k in range(4):
            low = _shuffle(builder, quads[k], quads[k + 4], [0, 1, 2, 3, 8, 9, 10, 11])
            high = _shuffle(builder, quads[k], quads[k + 4], [4, 5, 6, 7, 12, 13, 14, 15])
            for lane, col in ((k, low), (k + 4, high)):
                at = builder.add(o, builder.mul(os, os.type(lane)))
                builder.store(col, _lanes_at(context, builder, sig.args[3], dst, at), align=4)
        return context.get_dummy_value()

    u = types.uint64
    return types.void(src, u, u, dst, u, u), codegen


@intrinsic
def _load_u64(typingctx, arr, idx):
    """Bytes arr[idx : idx + 8] of a uint8 array as one little-endian uint64."""

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        at = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(64).as_pointer())
        return builder.load(at, align=1)

    return types.uint64(arr, types.uint64), codegen


_U2, _U3, _U4, _U5, _U6, _U7, _U8 = (uint64(k) for k in range(2, 9))

# --- Gaussian hash -----------------------------------------------------------------------
#
# out[g, i, f] packs the signs of x[g, i] . proj[g, :, f*tau + t]. A work unit is GAUSS_ROWS
# rows of one group. Per panel of 16 projection columns and tile of _TILE rows, the 12 sums
# (one lane per column) stay in registers over the whole c loop: from 0, each adds
# x[i, c] * proj[c, col] in order c = 0 .. d-1, core.gaussian_code's sum. Their signs go to a
# bit string per row (bit col = f*tau + t), from which each code is one unaligned 8-byte read.


@njit(inline="always")
def _tile_bits(bits, r, o, rows, a0, a1):
    if r < rows:
        bits[r, o] = _positive_bits(a0)
        bits[r, o + 1] = _positive_bits(a1)


@njit(inline="always")
def _gaussian_tile(xf, x0, last, du, packed, p0, bits, r, o, rows):
    """Bytes o, o + 1 of the sign bits of rows r .. r + 5 (those < rows): 16 columns, the
    panel at packed[p0:]. Row r's x is xf[x0 : x0 + du], the next rows follow (those past
    the unit repeat its last row, xf[last:])."""
    x1 = min(x0 + du, last)
    x2 = min(x0 + _U2 * du, last)
    x3 = min(x0 + _U3 * du, last)
    x4 = min(x0 + _U4 * du, last)
    x5 = min(x0 + _U5 * du, last)
    a00, a01, a10, a11 = _zeros(), _zeros(), _zeros(), _zeros()
    a20, a21, a30, a31 = _zeros(), _zeros(), _zeros(), _zeros()
    a40, a41, a50, a51 = _zeros(), _zeros(), _zeros(), _zeros()
    for c in range(du):
        at = p0 + c * uint64(_PANEL)
        q0 = _load(packed, at)
        q1 = _load(packed, at + _U8)
        b = _splat(xf[x0 + c])
        a00 = a00 + b * q0
        a01 = a01 + b * q1
        b = _splat(xf[x1 + c])
        a10 = a10 + b * q0
        a11 = a11 + b * q1
        b = _splat(xf[x2 + c])
        a20 = a20 + b * q0
        a21 = a21 + b * q1
        b = _splat(xf[x3 + c])
        a30 = a30 + b * q0
        a31 = a31 + b * q1
        b = _splat(xf[x4 + c])
        a40 = a40 + b * q0
        a41 = a41 + b * q1
        b = _splat(xf[x5 + c])
        a50 = a50 + b * q0
        a51 = a51 + b * q1
    _tile_bits(bits, r, o, rows, a00, a01)
    _tile_bits(bits, r + 1, o, rows, a10, a11)
    _tile_bits(bits, r + 2, o, rows, a20, a21)
    _tile_bits(bits, r + 3, o, rows, a30, a31)
    _tile_bits(bits, r + 4, o, rows, a40, a41)
    _tile_bits(bits, r + 5, o, rows, a50, a51)


@njit
def _pack_panels(proj, g, packed):
    """packed = proj[g] [d, cols] as panels [cols / 16, d, 16] of 16 columns (the last
    zero-padded): each tile reads contiguous memory, always in bounds."""
    d, cols = proj.shape[1], proj.shape[2]
    for j in range((cols + _PANEL - 1) // _PANEL):
        for c in range(d):
            at = (j * d + c) * _PANEL
            for k in range(_PANEL):
                col = j * _PANEL + k
                packed[at + k] = proj[g, c, col] if col < cols else np.float32(0.0)


@njit
def _gaussian_unit(x, packed, tau, out, g, i0, bits):
    """Codes of rows i0 .. i0 + GAUSS_ROWS - 1 (those < n) of group g."""
    _, n, d = x.shape
    m = out.shape[2]
    panels = (m * tau + _PANEL - 1) // _PANEL
    rows = min(GAUSS_ROWS, n - i0)
    du = uint64(d)
    xf = x.reshape(x.size)
    of = out.reshape(out.size)
    last = uint64((g * n + i0 + rows - 1) * d)
    for j in range(panels):
        p0 = uint64(j * d * _PANEL)
        for r in range(0, rows, _TILE):
            x0 = uint64((g * n + i0 + r) * d)
            _gaussian_tile(xf, x0, last, du, packed, p0, bits, r, 2 * j, rows)
    mask = uint64((1 << tau) - 1)
    for r in range(rows):
        row = bits[r]
        at = uint64((g * n + i0 + r) * m)
        for f in range(m):
            s = f * tau
            word = _load_u64(row, uint64(s >> 3))
            of[at + uint64(f)] = (word >> uint64(s & 7)) & mask


@cached_njit(parallel=True)
def _gaussian_codes(x, proj, tau, out, workers):
    groups, n, d = x.shape
    panels = (out.shape[2] * tau + _PANEL - 1) // _PANEL
    blocks = (n + GAUSS_ROWS - 1) // GAUSS_ROWS
    units = groups * blocks
    for worker in prange(workers):
        # Group g's projections as panels, and the sign bits of the unit's rows (with 8
        # spare bytes for the 8-byte reads).
        packed = np.empty(panels * d * _PANEL, np.float32)
        bits = np.zeros((GAUSS_ROWS, 2 * panels + 8), np.uint8)
        g_packed = -1
        for unit in range(worker, units, workers):
            g = unit // blocks
            if g != g_packed:
                _pack_panels(proj, g, packed)
                g_packed = g
            _gaussian_unit(x, packed, tau, out, g, (unit % blocks) * GAUSS_ROWS, bits)


# --- fast hash -----------------------------------------------------------------------------
#
# A work unit is FAST_ROWS rows of one group, transposed to [coordinate, row] (flat, row
# stride FAST_ROWS) so that a vector holds one coordinate of 8 rows and the butterflies
# between coordinates are whole-vector adds. Each Hadamard is reference.hadamard's
# butterflies (spans 1, 2, 4, ...; (a, b) -> (a + b, a - b)), the same float operations on
# each row, grouped three spans per pass over the buffer (radix 8: eight vectors in
# registers), the first pass also applying the diagonal.

_RU = uint64(FAST_ROWS)


@njit
def _first_pass(buf, src, dst, diag, dp):
    """buf[dst:] = spans 1, 2, 4 of diag * buf[src:] (dp >= 8; src may be dst)."""
    for j in range(0, dp, 8):
        s = src + uint64(j) * _RU
        o = dst + uint64(j) * _RU
        for r in range(uint64(0), _RU, _U8):
            a0 = _load(buf, s + r) * _splat(diag[j])
            a1 = _load(buf, s + _RU + r) * _splat(diag[j + 1])
            a2 = _load(buf, s + _U2 * _RU + r) * _splat(diag[j + 2])
            a3 = _load(buf, s + _U3 * _RU + r) * _splat(diag[j + 3])
            a4 = _load(buf, s + _U4 * _RU + r) * _splat(diag[j + 4])
            a5 = _load(buf, s + _U5 * _RU + r) * _splat(diag[j + 5])
            a6 = _load(buf, s + _U6 * _RU + r) * _splat(diag[j + 6])
            a7 = _load(buf, s + _U7 * _RU + r) * _splat(diag[j + 7])
            _butterfly8(buf, o + r, _RU, a0, a1, a2, a3, a4, a5, a6, a7)


@njit(inline="always")
def _butterfly8(buf, o, s, a0, a1, a2, a3, a4, a5, a6, a7):
    """Spans h, 2h, 4h on the eight vectors j + k*h (k = 0..7), stored at o + k*s."""
    b0, b1, b2, b3 = a0 + a1, a0 - a1, a2 + a3, a2 - a3
    b4, b5, b6, b7 = a4 + a5, a4 - a5, a6 + a7, a6 - a7
    c0, c1, c2, c3 = b0 + b2, b1 + b3, b0 - b2, b1 - b3
    c4, c5, c6, c7 = b4 + b6, b5 + b7, b4 - b6, b5 - b7
    _store(buf, o, c0 + c4)
    _store(buf, o + s, c1 + c5)
    _store(buf, o + _U2 * s, c2 + c6)
    _store(buf, o + _U3 * s, c3 + c7)
    _store(buf, o + _U4 * s, c0 - c4)
    _store(buf, o + _U5 * s, c1 - c5)
    _store(buf, o + _U6 * s, c2 - c6)
    _store(buf, o + _U7 * s, c3 - c7)


@njit
def _radix8(buf, y, dp, h):
    s = uint64(h) * _RU
    for i in range(0, dp, 8 * h):
        for j in range(i, i + h):
            o = y + uint64(j) * _RU
            for r in range(uint64(0), _RU, _U8):
                a0, a1 = _load(buf, o + r), _load(buf, o + s + r)
                a2, a3 = _load(buf, o + _U2 * s + r), _load(buf, o + _U3 * s + r)
                a4, a5 = _load(buf, o + _U4 * s + r), _load(buf, o + _U5 * s + r)
                a6, a7 = _load(buf, o + _U6 * s + r), _load(buf, o + _U7 * s + r)
                _butterfly8(buf, o + r, s, a0, a1, a2, a3, a4, a5, a6, a7)


@njit
def _radix4(buf, y, dp, h):
    s = uint64(h) * _RU
    for i in range(0, dp, 4 * h):
        for j in range(i, i + h):
            o = y + uint64(j) * _RU
            for r in range(uint64(0), _RU, _U8):
                a0, a1 = _load(buf, o + r), _load(buf, o + s + r)
                a2, a3 = _load(buf, o + _U2 * s + r), _load(buf, o + _U3 * s + r)
                b0, b1, b2, b3 = a0 + a1, a0 - a1, a2 + a3, a2 - a3
                _store(buf, o + r, b0 + b2)
                _store(buf, o + s + r, b1 + b3)
                _store(buf, o + _U2 * s + r, b0 - b2)
                _store(buf, o + _U3 * s + r, b1 - b3)


@njit
def _radix2(buf, y, dp, h):
    s = uint64(h) * _RU
    for i in range(0, dp, 2 * h):
        for j in range(i, i + h):
            o = y + uint64(j) * _RU
            for r in range(uint64(0), _RU, _U8):
                a0, a1 = _load(buf, o + r), _load(buf, o + s + r)
                _store(buf, o + r, a0 + a1)
                _store(buf, o + s + r, a0 - a1)


@njit
def _hadamard(buf, src, y, diag, dp):
    """buf[y:] = H diag buf[src:], every column of the [dp, FAST_ROWS] blocks."""
    if dp >= 8:
        _first_pass(buf, src, y, diag, dp)
        h = 8
    else:
        for j in range(dp):
            dj = _splat(diag[j])
            at = uint64(j) * _RU
            for r in range(uint64(0), _RU, _U8):
                _store(buf, y + at + r, _load(buf, src + at + r) * dj)
        h = 1
    # Spans left: radix 8 while that leaves none or at least two; radix 4 or 2 at the end.
    while h < dp:
        left = dp // h
        if left == 2:
            _radix2(buf, y, dp, h)
            h *= 2
        elif left == 4 or left == 16:
            _radix4(buf, y, dp, h)
            h *= 4
        else:
            _radix8(buf, y, dp, h)
            h *= 8


@njit
def _fast_unit(x, diags, tau, out, g, i0, buf, codes):
    """Codes of rows i0 .. i0 + FAST_ROWS - 1 (those < n) of group g."""
    _, n, d = x.shape
    m = out.shape[2]
    parts, dp = diags.shape[1], diags.shape[3]
    per_part = dp // tau
    du, mu = uint64(d), uint64(m)
    d8, m8 = du & ~_U7, mu & ~_U7
    xf = x.reshape(x.size)
    of = out.reshape(out.size)
    xs = uint64(0)  # the block [dp, FAST_ROWS], zero-padded; then y [dp, FAST_ROWS]
    ys = uint64(dp * FAST_ROWS)
    rows = uint64(min(FAST_ROWS, n - i0))
    rows8 = rows & ~_U7
    if rows < _RU:
        buf[: dp * FAST_ROWS] = 0.0
    at = uint64((g * n + i0) * d)
    for r in range(uint64(0), rows8, _U8):
        for c in range(uint64(0), d8, _U8):
            _transpose8(xf, at + r * du + c, du, buf, c * _RU + r, _RU)
        for c in range(d8, du):
            for k in range(r, r + _U8):
                buf[c * _RU + k] = xf[at + k * du + c]
    for r in range(rows8, rows):
        for c in range(du):
            buf[c * _RU + r] = xf[at + r * du + c]
    for p in range(parts):
        # y = H D3 H D2 H D1 x, as in the reference.
        for step in range(3):
            _hadamard(buf, xs if step == 0 else ys, ys, diags[g, p, step], dp)
        # The sign code of every row, vectorised over the rows.
        for j in range(min(per_part, m - p * per_part)):
            code = uint64((p * per_part + j) * FAST_ROWS)
            for r in range(_RU):
                codes[code + r] = 0
            for t in range(tau):
                signs = ys + uint64((j * tau + t) * FAST_ROWS)
                bit = np.int32(1 << t)
                for r in range(_RU):
                    codes[code + r] |= bit if buf[signs + r] > 0 else np.int32(0)
    at = uint64((g * n + i0) * m)
    for r in range(uint64(0), rows8, _U8):
        for f in range(uint64(0), m8, _U8):
            _transpose8(codes, f * _RU + r, _RU, of, at + r * mu + f, mu)
        for f in range(m8, mu):
            for k in range(r, r + _U8):
                of[at + k * mu + f] = codes[f * _RU + k]
    for r in range(rows8, rows):
        for f in range(mu):
            of[at + r * mu + f] = codes[f * _RU + r]


@cached_njit(parallel=True)
def _fast_codes(x, diags, tau, out, workers):
    groups, n, _ = x.shape
    dp = diags.shape[3]
    blocks = (n + FAST_ROWS - 1) // FAST_ROWS
    units = groups * blocks
    for worker in prange(workers):
        buf = np.zeros(2 * dp * FAST_ROWS, np.float32)
        codes = np.empty(out.shape[2] * FAST_ROWS, np.int32)  # [m, FAST_ROWS]
        for unit in range(worker, units, workers):
            g = unit // blocks
            _fast_unit(x, diags, tau, out, g, (unit % blocks) * FAST_ROWS, buf, codes)


def _workers(units: int) -> int:
    """Workers for `units` work units: numba's threads, never more than there are units."""
    return max(1, min(numba.get_num_threads(), units))


def gaussian_codes(x: np.ndarray, proj: np.ndarray, tau: int, out: np.ndarray) -> None:
    """Codes out [G, n, m] of x [G, n, d] by projections proj [G, d, m*tau].

    out[g, i, f] = sum_t [x[g, i] . proj[g, :, f*tau + t] > 0] << t, equal to
    core.gaussian_code (fp32 dot products summed in order over d).
    """
    check(x, np.float32, 3)
    check(proj, np.float32, 3)
    check(out, np.int32, 3)
    require(1 <= tau <= 30, f"tau must be in 1..30, got {tau}")
    require(
        proj.shape[2] == out.shape[2] * tau and proj.shape[1] == x.shape[2],
        f"projections {proj.shape} do not fit x {x.shape}, codes {out.shape}, tau {tau}",
    )
    units = x.shape[0] * -(-x.shape[1] // GAUSS_ROWS)
    _gaussian_codes(x, proj, tau, out, _workers(units))


def fast_codes(x: np.ndarray, diags: np.ndarray, tau: int, out: np.ndarray) -> None:
    """Codes out [G, n, m] of x [G, n, d] by the fast hash, diags [G, P, 3, d_pad] of +-1.

    Transform p: y = H D3 H D2 H D1 x (x zero-padded to d_pad); its code j (index
    p*(d_pad // tau) + j, kept if < m) packs the signs of y[j*tau : j*tau + tau].
    Bit-equal to reference.fast_codes.
    """
    check(x, np.float32, 3)
    check(diags, np.float32, 4)
    check(out, np.int32, 3)
    require(1 <= tau <= 30, f"tau must be in 1..30, got {tau}")
    dp = diags.shape[3]
    require(
        dp & (dp - 1) == 0 and dp >= max(x.shape[2], tau),
        f"padded width {dp} is not a power of two >= d {x.shape[2]} and tau {tau}",
    )
    require(
        diags.shape[1] * (dp // tau) >= out.shape[2],
        f"{diags.shape[1]} transforms give fewer than the {out.shape[2]} codes asked for",
    )
    units = x.shape[0] * -(-x.shape[1] // FAST_ROWS)
    _fast_codes(x, diags, tau, out, _workers(units))
