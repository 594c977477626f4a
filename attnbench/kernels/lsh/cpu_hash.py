"""YOSO's hashing on the CPU: numba `njit(parallel=True)` over blocks of rows.

Codes equal the CUDA kernels' and the torch reference's bit for bit (the same fp32
operations in the same order, no fastmath), so every target sees identical buckets.
All functions take C-contiguous numpy arrays (float32 / int32) and overwrite all of `out`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from attnbench.kernels.lsh.checks import check, require
from attnbench.kernels.lsh.core import sign_code

# Rows hashed together by the fast hash, the contiguous axis of its [d_pad, rows] buffer.
# 64 = four AVX-512 vectors; at 16, LLVM unrolls the row loop and, unable to prove rows j
# and j + h apart, leaves it scalar.
FAST_ROWS = 64
# Rows a Gaussian-hash work unit projects at once (shares each projection row's loads).
GAUSS_ROWS = 8

__all__ = ["fast_codes", "gaussian_codes"]


@njit(parallel=True, cache=True)
def _gaussian_codes(x, proj, tau, out):
    groups, n, d = x.shape
    m = out.shape[2]
    cols = m * tau
    blocks = (n + GAUSS_ROWS - 1) // GAUSS_ROWS
    for unit in prange(groups * blocks):
        g = unit // blocks
        i0 = (unit % blocks) * GAUSS_ROWS
        rows = min(GAUSS_ROWS, n - i0)
        # All m*tau dot products of a row at once, c outer, so the loop over columns is
        # contiguous and vectorises. Each sum is still core.gaussian_code's: fp32, in order
        # c = 0 .. d-1 (four c per pass over acc only saves its loads and stores).
        acc = np.zeros((GAUSS_ROWS, cols), np.float32)
        c = 0
        while c + 4 <= d:
            p0, p1, p2, p3 = proj[g, c], proj[g, c + 1], proj[g, c + 2], proj[g, c + 3]
            for r in range(rows):
                x0, x1, x2, x3 = x[g, i0 + r, c : c + 4]
                a = acc[r]
                for k in range(cols):
                    a[k] = (((a[k] + x0 * p0[k]) + x1 * p1[k]) + x2 * p2[k]) + x3 * p3[k]
            c += 4
        while c < d:
            p0 = proj[g, c]
            for r in range(rows):
                x0 = x[g, i0 + r, c]
                a = acc[r]
                for k in range(cols):
                    a[k] += x0 * p0[k]
            c += 1
        for r in range(rows):
            for f in range(m):
                out[g, i0 + r, f] = sign_code(acc[r], f * tau, tau)


@njit(inline="always")
def _hadamard_block(src, diag, y, dp):
    """y = H (diag * src) for every column of src [dp, FAST_ROWS] (y may be src).

    core.hadamard_inplace's butterflies (spans 1, 2, 4, ...; (a, b) -> (a + b, a - b)),
    the same float operations on each row, but laid out for speed:
    - the innermost loop runs over the block's rows, so even spans 1, 2, 4 work on whole
      contiguous vectors (per row, they do not vectorise);
    - two spans h, 2h per pass over y (radix 4): each group of four values is loaded once,
      and the first pass also applies the diagonal.
    """
    if dp >= 4:
        for j in range(0, dp, 4):
            d0, d1, d2, d3 = diag[j], diag[j + 1], diag[j + 2], diag[j + 3]
            a, b, c, e = src[j], src[j + 1], src[j + 2], src[j + 3]
            ya, yb, yc, ye = y[j], y[j + 1], y[j + 2], y[j + 3]
            for r in range(FAST_ROWS):
                a0 = a[r] * d0
                b0 = b[r] * d1
                c0 = c[r] * d2
                e0 = e[r] * d3
                a1, b1, c1, e1 = a0 + b0, a0 - b0, c0 + e0, c0 - e0
                ya[r], yb[r], yc[r], ye[r] = a1 + c1, b1 + e1, a1 - c1, b1 - e1
        h = 4
    else:
        for j in range(dp):
            for r in range(FAST_ROWS):
                y[j, r] = src[j, r] * diag[j]
        h = 1
    while 2 * h < dp:
        for i in range(0, dp, 4 * h):
            for j in range(i, i + h):
                ya, yb, yc, ye = y[j], y[j + h], y[j + 2 * h], y[j + 3 * h]
                for r in range(FAST_ROWS):
                    a1, b1 = ya[r] + yb[r], ya[r] - yb[r]
                    c1, e1 = yc[r] + ye[r], yc[r] - ye[r]
                    ya[r], yb[r], yc[r], ye[r] = a1 + c1, b1 + e1, a1 - c1, b1 - e1
        h *= 4
    if h < dp:
        for j in range(h):
            ya, yb = y[j], y[j + h]
            for r in range(FAST_ROWS):
                ya[r], yb[r] = ya[r] + yb[r], ya[r] - yb[r]


@njit(parallel=True, cache=True)
def _fast_codes(x, diags, tau, out):
    groups, n, d = x.shape
    m = out.shape[2]
    parts, dp = diags.shape[1], diags.shape[3]
    per_part = dp // tau
    blocks = (n + FAST_ROWS - 1) // FAST_ROWS
    for unit in prange(groups * blocks):
        g = unit // blocks
        i0 = (unit % blocks) * FAST_ROWS
        rows = min(FAST_ROWS, n - i0)
        # The block transposed to [coordinate, row] and zero-padded (missing rows too).
        xt = np.zeros((dp, FAST_ROWS), np.float32)
        for r in range(rows):
            for c in range(d):
                xt[c, r] = x[g, i0 + r, c]
        y = np.empty((dp, FAST_ROWS), np.float32)
        codes = np.empty(FAST_ROWS, np.int32)
        for p in range(parts):
            # y = H D3 H D2 H D1 x, as in the reference.
            _hadamard_block(xt, diags[g, p, 0], y, dp)
            _hadamard_block(y, diags[g, p, 1], y, dp)
            _hadamard_block(y, diags[g, p, 2], y, dp)
            # core.sign_code of every row, vectorised over the rows.
            for j in range(min(per_part, m - p * per_part)):
                codes[:] = 0
                for t in range(tau):
                    signs = y[j * tau + t]
                    for r in range(FAST_ROWS):
                        if signs[r] > 0:
                            codes[r] |= 1 << t
                for r in range(rows):
                    out[g, i0 + r, p * per_part + j] = codes[r]


def gaussian_codes(x: np.ndarray, proj: np.ndarray, tau: int, out: np.ndarray) -> None:
    """Codes out [G, n, m] of x [G, n, d] by projections proj [G, d, m*tau].

    out[g, i, f] = sum_t [x[g, i] . proj[g, :, f*tau + t] > 0] << t, equal to
    core.gaussian_code (fp32 dot products summed in order over d).
    """
    check(x, np.float32, 3)
    check(proj, np.float32, 3)
    check(out, np.int32, 3)
    require(
        proj.shape[2] == out.shape[2] * tau and proj.shape[1] == x.shape[2],
        f"projections {proj.shape} do not fit x {x.shape}, codes {out.shape}, tau {tau}",
    )
    _gaussian_codes(x, proj, tau, out)


def fast_codes(x: np.ndarray, diags: np.ndarray, tau: int, out: np.ndarray) -> None:
    """Codes out [G, n, m] of x [G, n, d] by the fast hash, diags [G, P, 3, d_pad] of +-1.

    Transform p: y = H D3 H D2 H D1 x (x zero-padded to d_pad); its code j (index
    p*(d_pad // tau) + j, kept if < m) packs the signs of y[j*tau : j*tau + tau].
    Bit-equal to reference.fast_codes.
    """
    check(x, np.float32, 3)
    check(diags, np.float32, 4)
    check(out, np.int32, 3)
    dp = diags.shape[3]
    require(
        dp & (dp - 1) == 0 and dp >= max(x.shape[2], tau),
        f"padded width {dp} is not a power of two >= d {x.shape[2]} and tau {tau}",
    )
    require(
        diags.shape[1] * (dp // tau) >= out.shape[2],
        f"{diags.shape[1]} transforms give fewer than the {out.shape[2]} codes asked for",
    )
    _fast_codes(x, diags, tau, out)
