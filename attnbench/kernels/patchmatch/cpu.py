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
def _patchmatch(
    q, k, kappa, mode, L, H, W, T, jumps, scale, seed, ids, sc, ids2, sc2, changed, prune,
    valid, masked,
):
    """Run PatchMatch on fields [B*n, kappa] (row = list of query b * n + p); the result
    is in (ids, sc) or, after an odd number of propagation passes, in (ids2, sc2).
    changed [2, B*n]: the last pass that changed each list, double-buffered with them;
    prune: skip neighbours that offer nothing new (`core.propagate_query`)."""
    B, n = q.shape[0], q.shape[1]
    J = len(jumps)
    for unit in prange(B * n):
        b, p = unit // n, unit % n
        core.init_query(ids, sc, unit, q, k, b, p, kappa, mode, L, W, scale, seed, valid, masked)
    cur_ids, cur_sc, nxt_ids, nxt_sc = ids, sc, ids2, sc2
    cur = 0
    for t in range(T):
        for i in range(J):
            now = core.pass_number(t, i, J)
            since = core.skip_since(t, i, J, mode or not prune)
            for unit in prange(B * n):
                b, p = unit // n, unit % n
                if core.propagate_query(
                    cur_ids, cur_sc, changed, cur, nxt_ids, nxt_sc, unit, q, k, b, p,
                    kappa, jumps[i], mode, L, H, W, scale, since, valid, masked,
                ):  # fmt: skip
                    changed[1 - cur, unit] = now
                else:
                    changed[1 - cur, unit] = changed[cur, unit]
            cur_ids, cur_sc, nxt_ids, nxt_sc = nxt_ids, nxt_sc, cur_ids, cur_sc
            cur = 1 - cur
        now = core.pass_number(t, J, J)
        for unit in prange(B * n):
            b, p = unit // n, unit % n
            if core.random_search_query(
                cur_ids, cur_sc, unit, q, k, b, p, kappa, mode, L, H, W, scale, seed, t, valid,
                masked,
            ):
                changed[cur, unit] = now


@njit(parallel=True, cache=True)
def _window_softmax(q, k, v, matches, H, W, radius, scale, out, counts, valid, masked):
    B, n = q.shape[0], q.shape[1]
    for unit in prange(B * n):
        b, p = unit // n, unit % n
        counts[b, p] = core.window_softmax_query(
            q, k, v, matches, b, p, H, W, radius, scale, out, valid, masked
        )


def patchmatch(
    q, k, H, W, kappa, variant, L, T, jumps, seed, matches, scores, tmp_ids, tmp_sc, changed,
    valid=None, prune=True,
):
    """Top-kappa matches int32 [B, n, kappa] (best first, -1 = none) and their float32
    scores of queries q against keys k, both [B, H*W, d], written into matches / scores;
    tmp_ids / tmp_sc (same shapes) are the second buffer of the propagation passes and
    changed int32 [2, B*n], zeroed, the pass that last changed each list. valid: None or
    uint8 [B, n], 0 for keys no query may match. prune=False retries every neighbour, to
    check that skipping changes nothing."""
    mode = core.check_patchmatch(q, k, H, W, kappa, variant, L, T, jumps)
    jumps = np.asarray(jumps, dtype=np.int64)
    scale = np.float32(1.0 / np.sqrt(q.shape[2]))
    rows = q.shape[0] * q.shape[1]
    fields = [a.reshape(rows, kappa) for a in (matches, scores, tmp_ids, tmp_sc)]
    valid, masked = core.key_validity(valid, q)
    _patchmatch(
        q, k, kappa, mode, L, H, W, T, jumps, scale, seed, *fields, changed, prune, valid, masked
    )
    if (T * len(jumps)) % 2 == 1:
        matches[...] = tmp_ids
        scores[...] = tmp_sc


def window_softmax(q, k, v, matches, H, W, b, out, counts, valid=None):
    """out [B, n, dv] = softmax attention of each query over the union of the (2b+1)^2
    windows around its matches, without the keys that `valid` (uint8 [B, n]) marks 0;
    counts [B, n] = the number of distinct keys used."""
    core.check_window(q, k, v, matches, H, W, b)
    scale = np.float32(1.0 / np.sqrt(q.shape[2]))
    valid, masked = core.key_validity(valid, q)
    _window_softmax(q, k, v, matches, H, W, b, scale, out, counts, valid, masked)
