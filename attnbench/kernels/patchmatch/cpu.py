"""SCRAM's PatchMatch and window softmax on the CPU: numba `njit(parallel=True)`. The
`prange` work units are one query (init), one grid row (propagation, window softmax) or a
block of `SEARCH_BLOCK` queries (random search).

The steps come from `core` and try the same keys in the same order per query, so matches
and scores equal the CUDA kernels' bit for bit for the same seed. A PatchMatch run is one
compiled call per pass (the init, each propagation pass, each random search), driven from
Python, so that a caller can mark every pass as a stage in a profiler trace (`stage`);
each pass is a parallel region of its own either way, so the work is the same as in one
compiled call.
A list being updated lives in a small scratch array allocated inside the kernel and is
copied to and from its field: the compiler must assume that the caller's arrays may
overlap, so a store into a field could change the query, the keys or the other field,
while a fresh array provably overlaps nothing, so nothing needs reloading after a store.
All functions take C-contiguous numpy arrays (float32 / int32) and overwrite their outputs.
The thread count is numba's (`numba.set_num_threads`).

Caution: `cache=True` keys the on-disk cache on this file only, not on `core`, whose
helpers are inlined here; after editing `core`, delete this package's `__pycache__/cpu.*.nb*`,
or a stale cache silently runs the old `core` code.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
from numba import njit, prange

from attnbench.kernels.jitcache import cached_njit
from attnbench.kernels.patchmatch import core

__all__ = ["STAGES", "no_stage", "patchmatch", "window_softmax"]


# The stages a run marks (`patchmatch`'s `stage`), in order.
STAGES = ("init", "propagation", "random_search")
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


@cached_njit(parallel=True)
def _init(q, k, kappa, mode, L, W, scale, seed, ids, sc, valid, masked):
    """Random initial lists in the fields [B*n, kappa] (row = list of query b * n + p)."""
    B, n = q.shape[0], q.shape[1]
    for unit in prange(B * n):
        b, p = unit // n, unit % n
        core.init_query(ids, sc, unit, q, k, b, p, kappa, mode, L, W, scale, seed, valid, masked)


@cached_njit(parallel=True)
def _propagate(
    q, k, kappa, mode, L, H, W, jump, scale, since, now, cur_ids, cur_sc, nxt_ids, nxt_sc,
    changed, cur, valid, masked,
):  # fmt: skip
    """One propagation pass (pass number `now`) at distance `jump`: reads the lists
    (cur_ids, cur_sc) and changed[cur], writes every list into (nxt_ids, nxt_sc) and
    changed[1 - cur] (the last pass that changed it), so no row reads what another writes."""
    B, n = q.shape[0], q.shape[1]
    for grid_row in prange(B * H):
        b, y = grid_row // H, grid_row % H
        lid = np.empty((1, kappa), np.int32)  # the new list (see the module doc)
        lsc = np.empty((1, kappa), np.float32)
        cand = np.empty(8 * kappa, np.int32)  # a query's proposals and their scores
        cand_sc = np.empty(8 * kappa, np.float32)
        for x in range(W):
            unit = b * n + y * W + x
            if core.propagate_query(
                cur_ids, cur_sc, changed, cur, lid, lsc, 0, cand, cand_sc, True, q, k, b, y, x,
                kappa, jump, mode, L, H, W, scale, since, valid, masked,
            ):  # fmt: skip
                changed[1 - cur, unit] = now
            else:
                changed[1 - cur, unit] = changed[cur, unit]
            core.copy_list(lid, lsc, 0, nxt_ids, nxt_sc, unit, kappa)


@cached_njit(parallel=True)
def _random_search(
    q, k, kappa, mode, L, H, W, scale, seed, t, now, ids, sc, changed, cur, valid, masked
):
    """The random search of iteration t (pass number `now`) on the lists (ids, sc), in
    place, stamping changed[cur] of the lists it changes."""
    B, n = q.shape[0], q.shape[1]
    blocks = (n + SEARCH_BLOCK - 1) // SEARCH_BLOCK
    for unit in prange(B * blocks):
        b, p0 = unit // blocks, (unit % blocks) * SEARCH_BLOCK
        _random_search_block(
            ids, sc, changed, cur, now, q, k, b, p0, min(SEARCH_BLOCK, n - p0), kappa, mode, L,
            H, W, scale, seed, t, valid, masked,
        )  # fmt: skip


@cached_njit(parallel=True)
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


@cached_njit()
def _all_passes(
    q, k, kappa, mode, L, H, W, T, jumps, scale, seed, ids, sc, ids2, sc2, changed, prune,
    valid, masked,
):  # fmt: skip
    """Every pass of a run in one compiled call, the same kernels in the same order as the
    marked loop in `patchmatch`: between passes no Python runs, so the worker threads stay
    awake. The result is in (ids, sc), or in (ids2, sc2) after an odd number of passes."""
    _init(q, k, kappa, mode, L, W, scale, seed, ids, sc, valid, masked)
    J = len(jumps)
    cur = 0
    for t in range(T):
        for i in range(J):
            since = core.skip_since(t, i, J, mode or not prune)
            _propagate(
                q, k, kappa, mode, L, H, W, jumps[i], scale, since, core.pass_number(t, i, J),
                ids, sc, ids2, sc2, changed, cur, valid, masked,
            )  # fmt: skip
            ids, sc, ids2, sc2 = ids2, sc2, ids, sc
            cur = 1 - cur
        _random_search(
            q, k, kappa, mode, L, H, W, scale, seed, t, core.pass_number(t, J, J), ids, sc,
            changed, cur, valid, masked,
        )  # fmt: skip


def no_stage(name: str):
    """The default marker: marks nothing."""
    return nullcontext()


def patchmatch(
    q, k, H, W, kappa, variant, L, T, jumps, seed, matches, scores, tmp_ids, tmp_sc, changed,
    valid=None, prune=True, stage=None,
):  # fmt: skip
    """Top-kappa matches int32 [B, n, kappa] (best first, -1 = none) and their float32
    scores of queries q against keys k, both [B, H*W, d], written into matches / scores;
    tmp_ids / tmp_sc (same shapes) are the second buffer of the propagation passes and
    changed int32 [2, B*n], zeroed, the pass that last changed each list. valid: None or
    uint8 [B, n], 0 for keys no query may match. prune=False retries every neighbour, to
    check that skipping changes nothing. stage: None, or a callable giving a context
    manager for a stage name of `STAGES`, entered around each pass (and the final copy of
    an odd number of propagation passes, their double-buffering's last step)."""
    mode = core.check_patchmatch(q, k, H, W, kappa, variant, L, T, jumps)
    mark = no_stage if stage is None else stage
    scale = np.float32(1.0 / np.sqrt(q.shape[2]))
    rows = q.shape[0] * q.shape[1]
    ids, sc, ids2, sc2 = (a.reshape(rows, kappa) for a in (matches, scores, tmp_ids, tmp_sc))
    valid, masked = core.key_validity(valid, q)
    J = len(jumps)
    if stage is None:
        args = (q, k, kappa, mode, L, H, W, T, np.asarray(jumps, dtype=np.int64), scale, seed)
        _all_passes(*args, ids, sc, ids2, sc2, changed, prune, valid, masked)
    else:
        _marked_passes(
            q, k, kappa, mode, L, H, W, T, jumps, scale, seed, ids, sc, ids2, sc2, changed,
            prune, valid, masked, stage,
        )  # fmt: skip
    if (T * J) % 2 == 1:
        with mark("propagation"):
            matches[...] = tmp_ids
            scores[...] = tmp_sc


def _marked_passes(
    q, k, kappa, mode, L, H, W, T, jumps, scale, seed, ids, sc, ids2, sc2, changed, prune,
    valid, masked, mark,
):  # fmt: skip
    """`_all_passes` from Python, each pass inside `mark(stage)`."""
    J = len(jumps)
    pass_number, skip_since = core.pass_number.py_func, core.skip_since.py_func
    with mark("init"):
        _init(q, k, kappa, mode, L, W, scale, seed, ids, sc, valid, masked)
    cur = 0
    for t in range(T):
        for i, jump in enumerate(jumps):
            since = skip_since(t, i, J, mode or not prune)
            with mark("propagation"):
                _propagate(
                    q, k, kappa, mode, L, H, W, int(jump), scale, since, pass_number(t, i, J),
                    ids, sc, ids2, sc2, changed, cur, valid, masked,
                )  # fmt: skip
            ids, sc, ids2, sc2 = ids2, sc2, ids, sc
            cur = 1 - cur
        with mark("random_search"):
            _random_search(
                q, k, kappa, mode, L, H, W, scale, seed, t, pass_number(t, J, J), ids, sc,
                changed, cur, valid, masked,
            )  # fmt: skip


def window_softmax(q, k, v, matches, H, W, b, out, counts, valid=None):
    """out [B, n, dv] = softmax attention of each query over the union of the (2b+1)^2
    windows around its matches, without the keys that `valid` (uint8 [B, n]) marks 0;
    counts [B, n] = the number of distinct keys used."""
    core.check_window(q, k, v, matches, H, W, b)
    scale = np.float32(1.0 / np.sqrt(q.shape[2]))
    valid, masked = core.key_validity(valid, q)
    _window_softmax(q, k, v, matches, H, W, b, scale, out, counts, valid, masked)
