"""SCRAM's PatchMatch and window softmax on the CPU: numba `njit(parallel=True)`. The
`prange` work units are one query (init), one grid row (propagation, window softmax) or a
block of `SEARCH_BLOCK` queries (random search).

The steps come from `core` and try the same keys in the same order per query, so matches
and scores equal the CUDA kernels' bit for bit for the same seed. A whole PatchMatch run
(init, T iterations of propagation passes and a random search) is one compiled call, so
there is no per-pass Python overhead.
A list being updated lives in a small scratch array allocated inside the kernel and is
copied to and from its field: the compiler must assume that the caller's arrays may
overlap, so a store into a field could change the query, the keys or the other field,
while a fresh array provably overlaps nothing, so nothing needs reloading after a store.
All functions take C-contiguous numpy arrays (float32 / int32) and overwrite their outputs.
The thread count is numba's (`numba.set_num_threads`).
Given a `clock` array, a run stamps the time after every pass (`pass_times`): timing the
stages of one real run, rather than runs with a stage left out, whose lists and so whose
work differ.

Caution: `cache=True` keys the on-disk cache on this file only, not on `core`, whose
helpers are inlined here; after editing `core`, delete this package's `__pycache__/cpu.*.nb*`,
or a stale cache silently runs the old `core` code.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit, objmode, prange

from attnbench.kernels.patchmatch import core

__all__ = ["pass_times", "patchmatch", "window_softmax"]


# Queries whose random-search proposals are drawn and scored together (`_random_search_block`).
SEARCH_BLOCK = 64


@njit(inline="always")
def _search_levels(H, W):
    """How many radii the random search tries: max(H, W), halved down to 1."""
    levels = 0
    radius = max(H, W)
    while radius >= 1:
        levels += 1
        radius //= 2
    return levels


@njit(inline="always")
def _random_search_block(
    ids, sc, changed, cur, now, q, k, b, p0, m, kappa, mode, L, H, W, scale, seed, t, valid,
    masked,
):  # fmt: skip
    """`core.random_search_query` for queries p0 .. p0 + m - 1 of batch b, with the same
    proposals tried in the same order on each list, so the result is bit-identical.

    Per list entry i: read every query's centre, draw all their proposals in one loop over
    the queries (integer hashing, vectorised), score them in another (gathers of keys, which
    would keep the first loop scalar), then try them on each list in order, skipping the
    lists that none of them can change: none beats a full max list's worst entry except keys
    already listed. That test runs in vectorised loops over the queries, one per list entry:
    on a smooth image the small radii often draw listed neighbours of the centre, which beat
    the worst entry yet change nothing, and trying those lists one by one would take much of
    the random search. A query's proposals around entry i depend only on that centre, read
    before any of them is tried, as in the per-query version. Entries are only empty (-1) at
    a list's tail, so a nonempty entry i has counter i * levels + level there too."""
    n = q.shape[1]
    levels = _search_levels(H, W)
    row0 = b * n + p0
    inv_w = 1.0 / W
    keys = np.empty(m, np.int64)
    u = np.empty(m, np.int64)
    v = np.empty(m, np.int64)
    worst = np.empty(m, np.float32)
    maybe = np.empty(m, np.bool_)
    cand = np.empty((levels, m), np.int32)
    s = np.empty((levels, m), np.float32)
    fresh = np.empty((levels, m), np.bool_)
    listed = np.empty(m, np.int32)
    lid = np.empty((1, kappa), np.int32)  # the list being searched (see the module doc)
    lsc = np.empty((1, kappa), np.float32)
    for j in range(m):
        keys[j] = core.rng_key(seed, b, p0 + j, core.INIT_STREAM + 1 + t)
    for i in range(kappa):
        for j in range(m):
            row = core.at(row0 + j)
            centre = ids[row, i]
            # Only a proposal beating the list's worst entry can change a full max list;
            # other lists (mode, not full) try every proposal. Empty entries try none.
            worst[j] = sc[row, kappa - 1] if centre >= 0 else np.inf
            maybe[j] = centre >= 0 and (mode or ids[row, kappa - 1] < 0)
            centre = max(centre, 0)
            # centre // W without an integer division (exact while H * W < 2^51)
            u[j] = np.int64((centre + 0.5) * inv_w)
            v[j] = centre - u[j] * W
        radius = max(H, W)
        for level in range(levels):
            counter = i * levels + level
            for j in range(m):
                cand[level, j] = core.search_candidate(keys[j], counter, u[j], v[j], radius, H, W)
            radius //= 2
        for j in range(m):  # query by query, so that at d = 3 each is read once
            q0, q1, q2 = core.query3(q, b, p0 + j)
            for level in range(levels):
                s[level, j] = core.score_of(q, k, b, p0 + j, cand[level, j], scale, q0, q1, q2)
        # fresh: the proposal beats the worst entry and is not listed (listed keys
        # never change a max list); a list is tried if any of its proposals is fresh.
        for level in range(levels):
            for j in range(m):
                fresh[level, j] = s[level, j] > worst[j]
        for e in range(kappa):
            for j in range(m):
                listed[j] = ids[core.at(row0 + j), e]
            for level in range(levels):
                for j in range(m):
                    fresh[level, j] &= cand[level, j] != listed[j]
        for level in range(levels):
            for j in range(m):
                maybe[j] |= fresh[level, j]
        for j in range(m):
            if not maybe[j]:
                continue
            core.copy_list(ids, sc, row0 + j, lid, lsc, 0, kappa)
            hit = False
            for level in range(levels):
                key = cand[level, j]
                if not masked or valid[b, key] != 0:
                    hit |= core.consider_scored(lid, lsc, 0, kappa, key, s[level, j], mode, L, W)
            if hit:
                changed[cur, row0 + j] = now
                core.copy_list(lid, lsc, 0, ids, sc, row0 + j, kappa)


@njit
def _stamp(clock, i):
    """clock[i] = time.perf_counter() if clock is not empty (a benchmark's pass timing)."""
    if clock.shape[0] > 0:
        with objmode(now="float64"):
            now = time.perf_counter()
        clock[i] = now


@njit(parallel=True, cache=True)
def _patchmatch(
    q, k, kappa, mode, L, H, W, T, jumps, scale, seed, ids, sc, ids2, sc2, changed, prune,
    valid, masked, clock,
):  # fmt: skip
    """Run PatchMatch on fields [B*n, kappa] (row = list of query b * n + p); the result
    is in (ids, sc) or, after an odd number of propagation passes, in (ids2, sc2).
    changed [2, B*n]: the last pass that changed each list, double-buffered with them;
    prune: skip neighbours that offer nothing new (`core.propagate_query`); clock: empty,
    or float64 [2 + T * (len(jumps) + 1)] for the start and the end of every pass."""
    B, n = q.shape[0], q.shape[1]
    J = len(jumps)
    _stamp(clock, 0)
    for unit in prange(B * n):
        b, p = unit // n, unit % n
        core.init_query(ids, sc, unit, q, k, b, p, kappa, mode, L, W, scale, seed, valid, masked)
    _stamp(clock, 1)
    cur_ids, cur_sc, nxt_ids, nxt_sc = ids, sc, ids2, sc2
    cur = 0
    for t in range(T):
        for i in range(J):
            now = core.pass_number(t, i, J)
            since = core.skip_since(t, i, J, mode or not prune)
            for grid_row in prange(B * H):
                b, y = grid_row // H, grid_row % H
                lid = np.empty((1, kappa), np.int32)  # the new list (see the module doc)
                lsc = np.empty((1, kappa), np.float32)
                cand = np.empty(8 * kappa, np.int32)  # a query's proposals and their scores
                cand_sc = np.empty(8 * kappa, np.float32)
                for x in range(W):
                    unit = b * n + y * W + x
                    if core.propagate_query(
                        cur_ids, cur_sc, changed, cur, lid, lsc, 0, cand, cand_sc, True, q, k,
                        b, y, x, kappa, jumps[i], mode, L, H, W, scale, since, valid, masked,
                    ):  # fmt: skip
                        changed[1 - cur, unit] = now
                    else:
                        changed[1 - cur, unit] = changed[cur, unit]
                    core.copy_list(lid, lsc, 0, nxt_ids, nxt_sc, unit, kappa)
            cur_ids, cur_sc, nxt_ids, nxt_sc = nxt_ids, nxt_sc, cur_ids, cur_sc
            cur = 1 - cur
            _stamp(clock, now + 1)
        now = core.pass_number(t, J, J)
        blocks = (n + SEARCH_BLOCK - 1) // SEARCH_BLOCK
        for unit in prange(B * blocks):
            b, p0 = unit // blocks, (unit % blocks) * SEARCH_BLOCK
            _random_search_block(
                cur_ids, cur_sc, changed, cur, now, q, k, b, p0, min(SEARCH_BLOCK, n - p0),
                kappa, mode, L, H, W, scale, seed, t, valid, masked,
            )  # fmt: skip
        _stamp(clock, now + 1)


@njit(parallel=True, cache=True)
def _window_softmax(q, k, v, matches, H, W, radius, scale, out, counts, valid, masked):
    """One work unit per grid row of a batch entry, with its own scratch: the matches'
    coordinates, and the keys of one query's windows with their scores and exponentials."""
    B, kappa = q.shape[0], matches.shape[2]
    for unit in prange(B * H):
        b, y = unit // H, unit % H
        my = np.empty((1, kappa), np.int32)
        mx = np.empty((1, kappa), np.int32)
        most = kappa * (2 * radius + 1) ** 2  # keys in one query's windows
        keys = np.empty((1, most), np.int32)
        key_sc = np.empty((1, most), np.float32)
        exp_bits = np.empty((1, most), np.int32)
        exp_scale = exp_bits.view(np.float32)
        for p in range(y * W, (y + 1) * W):
            counts[b, p] = core.window_softmax_query(
                q, k, v, matches, my, mx, 0, b, p, H, W, radius, scale, out, valid, masked,
                keys, key_sc, True, exp_bits, exp_scale,
            )  # fmt: skip


def patchmatch(
    q, k, H, W, kappa, variant, L, T, jumps, seed, matches, scores, tmp_ids, tmp_sc, changed,
    valid=None, prune=True, clock=None,
):  # fmt: skip
    """Top-kappa matches int32 [B, n, kappa] (best first, -1 = none) and their float32
    scores of queries q against keys k, both [B, H*W, d], written into matches / scores;
    tmp_ids / tmp_sc (same shapes) are the second buffer of the propagation passes and
    changed int32 [2, B*n], zeroed, the pass that last changed each list. valid: None or
    uint8 [B, n], 0 for keys no query may match. prune=False retries every neighbour, to
    check that skipping changes nothing. clock: None, or float64 [2 + T * (len(jumps) + 1)],
    filled with `time.perf_counter()` at the start and after each pass (`pass_times`)."""
    mode = core.check_patchmatch(q, k, H, W, kappa, variant, L, T, jumps)
    jumps = np.asarray(jumps, dtype=np.int64)
    scale = np.float32(1.0 / np.sqrt(q.shape[2]))
    rows = q.shape[0] * q.shape[1]
    fields = [a.reshape(rows, kappa) for a in (matches, scores, tmp_ids, tmp_sc)]
    valid, masked = core.key_validity(valid, q)
    passes = 2 + T * (len(jumps) + 1)
    if clock is None:
        clock = np.empty(0, np.float64)
    elif clock.shape != (passes,) or clock.dtype != np.float64:
        raise ValueError(f"clock must be float64 [{passes}], got {clock.dtype} {clock.shape}")
    _patchmatch(
        q, k, kappa, mode, L, H, W, T, jumps, scale, seed, *fields, changed, prune, valid, masked,
        clock,
    )  # fmt: skip
    if (T * len(jumps)) % 2 == 1:
        matches[...] = tmp_ids
        scores[...] = tmp_sc


def pass_times(clock, T: int, J: int) -> dict[str, float]:
    """Seconds that a run stamped into `clock` (T iterations of J propagation passes) spent
    in its init, its propagation passes and its random searches."""
    spent = np.diff(clock)  # spent[p]: pass p, numbered as in `core.pass_number`
    search = [core.pass_number(t, J, J) for t in range(T)]
    init = float(spent[0])
    random_search = float(spent[search].sum())
    return {
        "init": init,
        "propagation": float(spent.sum()) - init - random_search,
        "random search": random_search,
    }


def window_softmax(q, k, v, matches, H, W, b, out, counts, valid=None):
    """out [B, n, dv] = softmax attention of each query over the union of the (2b+1)^2
    windows around its matches, without the keys that `valid` (uint8 [B, n]) marks 0;
    counts [B, n] = the number of distinct keys used."""
    core.check_window(q, k, v, matches, H, W, b)
    scale = np.float32(1.0 / np.sqrt(q.shape[2]))
    valid, masked = core.key_validity(valid, q)
    _window_softmax(q, k, v, matches, H, W, b, scale, out, counts, valid, masked)
