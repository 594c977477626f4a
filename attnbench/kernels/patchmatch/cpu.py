"""SCRAM's PatchMatch and window softmax on the CPU: numba `njit(parallel=True)`, one
`prange` work unit per (batch, query).

The per-query steps come from `core`, so matches and scores equal the CUDA kernels' bit
for bit for the same seed. A whole PatchMatch run (init, T iterations of propagation
passes and a random search) is one compiled call, so there is no per-pass Python overhead.
All functions take C-contiguous numpy arrays (float32 / int32) and overwrite their outputs.
The thread count is numba's (`numba.set_num_threads`).

Caution: `cache=True` keys the on-disk cache on this file only, not on `core`, whose
helpers are inlined here; after editing `core`, delete this package's `__pycache__/cpu.*.nb*`
(a stale cache once hid a 3x speed-up of the mode variant).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from attnbench.kernels.patchmatch import core

__all__ = ["patchmatch", "window_softmax"]


@njit(parallel=True, cache=True)
def _patchmatch(q, k, kappa, mode, L, H, W, T, jumps, scale, seed, ids, sc, ids2, sc2):
    """Run PatchMatch on fields [B*n, kappa] (row = list of query b * n + p); the result
    is in (ids, sc) or, after an odd number of propagation passes, in (ids2, sc2)."""
    B, n = q.shape[0], q.shape[1]
    for unit in prange(B * n):
        b, p = unit // n, unit % n
        core.init_query(ids, sc, unit, q, k, b, p, kappa, mode, L, W, scale, seed)
    cur_ids, cur_sc, nxt_ids, nxt_sc = ids, sc, ids2, sc2
    for t in range(T):
        for jump in jumps:
            for unit in prange(B * n):
                b, p = unit // n, unit % n
                core.propagate_query(
                    cur_ids, cur_sc, nxt_ids, nxt_sc, unit, q, k, b, p,
                    kappa, jump, mode, L, H, W, scale,
                )  # fmt: skip
            cur_ids, cur_sc, nxt_ids, nxt_sc = nxt_ids, nxt_sc, cur_ids, cur_sc
        for unit in prange(B * n):
            b, p = unit // n, unit % n
            core.random_search_query(
                cur_ids, cur_sc, unit, q, k, b, p, kappa, mode, L, H, W, scale, seed, t
            )


@njit(parallel=True, cache=True)
def _window_softmax(q, k, v, matches, H, W, radius, scale, out, counts):
    B, n = q.shape[0], q.shape[1]
    for unit in prange(B * n):
        b, p = unit // n, unit % n
        counts[b, p] = core.window_softmax_query(q, k, v, matches, b, p, H, W, radius, scale, out)


def patchmatch(q, k, H, W, kappa, variant, L, T, jumps, seed, matches, scores, tmp_ids, tmp_sc):
    """Top-kappa matches int32 [B, n, kappa] (best first, -1 = none) and their float32
    scores of queries q against keys k, both [B, H*W, d], written into matches / scores;
    tmp_ids / tmp_sc (same shapes) are the second buffer of the propagation passes."""
    mode = core.check_patchmatch(q, k, H, W, kappa, variant, L, T, jumps)
    jumps = np.asarray(jumps, dtype=np.int64)
    scale = np.float32(1.0 / np.sqrt(q.shape[2]))
    rows = q.shape[0] * q.shape[1]
    fields = [a.reshape(rows, kappa) for a in (matches, scores, tmp_ids, tmp_sc)]
    _patchmatch(q, k, kappa, mode, L, H, W, T, jumps, scale, seed, *fields)
    if (T * len(jumps)) % 2 == 1:
        matches[...] = tmp_ids
        scores[...] = tmp_sc


def window_softmax(q, k, v, matches, H, W, b, out, counts):
    """out [B, n, dv] = softmax attention of each query over the union of the (2b+1)^2
    windows around its matches; counts [B, n] = the number of distinct candidate keys."""
    core.check_window(q, k, v, matches, H, W, b)
    scale = np.float32(1.0 / np.sqrt(q.shape[2]))
    _window_softmax(q, k, v, matches, H, W, b, scale, out, counts)
