"""Scalar math of SCRAM's PatchMatch and window softmax, shared by the CPU and CUDA kernels.

Every function here uses no `cuda.*` call, so `cpu` (njit prange) and `cuda` (cuda.jit)
inline the same operations in the same order. Together with a counter-based RNG (a pure
function of (seed, batch, query, stream, counter), no state shared between queries), the
CPU kernels and the simulated CUDA kernels return bit-identical matches and scores for the
same seed. A real GPU may fuse a score's multiply-adds (FMA), so near-ties can differ there.

A match list is row r of a 2-D pair (ids int32 [rows, >= kappa], sc float32): kappa key
indices with their scores, best first; an empty slot holds index -1 (the mode variant may
find fewer than kappa modes). Lists are addressed by row rather than passed as 1-D views
so that CPU `prange` bodies make no array views (each one updates the parent array's shared,
atomic reference count); CUDA threads pass a (1, MAX_KAPPA) local array and r = 0.
Indices are int32, so H * W < 2^31.
Hot indices computed from data (a key read from a list, a row, a proposal count) are cast
to uint64 (`at`) before indexing: numba wraps a negative signed index around the axis, a
compare and add per access that the compiler cannot drop for a value it cannot prove
non-negative; an unsigned one needs none. Every such index is non-negative by construction.

Masks: `valid` uint8 [B, n] marks the keys that may be attended (the backend's token mask,
repeated over heads); with `masked` False it is never read, so unmasked runs pay one
predictable branch per proposal and nothing else.
"""

from __future__ import annotations

import math

import numpy as np
from numba import float32, int32, int64, njit, uint64

from attnbench.kernels.compiling import report_compiles

report_compiles()  # before any kernel of this package can compile: say when one does

# Longest match list: CUDA threads keep theirs in local arrays of this size.
MAX_KAPPA = 32
MASK32 = 0xFFFFFFFF
# RNG streams: 0 draws the initial lists, 1 + t the random search of iteration t.
INIT_STREAM = 0


# --- counter-based RNG ---------------------------------------------------------------
# 32-bit integer hashing written with 64-bit integers whose products stay below 2^63, so
# numba (int64, wrapping) and plain Python (the simulator: unbounded ints) agree exactly.


@njit(inline="always")
def mul32(x, c):
    """(x * c) mod 2^32 for 0 <= x, c < 2^32. The product is taken in uint64, where it
    cannot overflow (< 2^64) and numba marks no signed-overflow (`nsw`) that an int64
    product would carry; plain Python (the simulator) gets the same low 32 bits."""
    return int64((uint64(x) * uint64(c)) & uint64(MASK32))


@njit(inline="always")
def mix32(x):
    """A bijective 32-bit avalanche hash (xorshift-multiply, 'lowbias32' constants)."""
    x &= MASK32
    x ^= x >> 16
    x = mul32(x, 0x7FEB352D)
    x ^= x >> 15
    x = mul32(x, 0x846CA68B)
    x ^= x >> 16
    return x


@njit(inline="always")
def rng_key(seed, batch, query, stream):
    """The RNG key of one query's draws in one pass: a hash of all four coordinates."""
    h = mix32(seed & MASK32)
    h = mix32(h ^ ((seed >> 32) & MASK32))
    h = mix32(h ^ batch)
    h = mix32(h ^ query)
    return mix32(h ^ stream)


@njit(inline="always")
def rand_below(key, counter, m):
    """The counter-th draw of stream `key`: an int uniform in [0, m) for 1 <= m < 2^31
    (multiply-shift, no division; bias < m / 2^32). int64(m): under the simulator m may be
    a numpy int32, too narrow for the products."""
    return (mix32(key + counter * 0x9E3779B9) * int64(m)) >> 32


@njit(inline="always")
def rand_pair(key, counter, m1, m2):
    """The counter-th draw of stream `key` as two ints uniform in [0, m1) x [0, m2), for
    1 <= m1, m2 < 2^31, from one 32-bit hash: u * m1 = (first) * 2^32 + f, and the fraction
    f is again (nearly) uniform, so f * m2 >> 32 gives the second. Bias < m1 * m2 / 2^32."""
    t = mix32(key + counter * 0x9E3779B9) * int64(m1)
    return t >> 32, ((t & MASK32) * int64(m2)) >> 32


# --- scores and match lists ----------------------------------------------------------


@njit(inline="always")
def at(i):
    """Index i (>= 0) as uint64, so that numba indexes without wrapping negatives around."""
    return uint64(i)


@njit(inline="always")
def score(q, k, b, p, j, scale):
    """s(p, j) = <q_p, k_j> * scale, summed in fp32 over c = 0 .. d-1 in order. d = 3 (the
    seed's image setting, the hot case) is spelled out: the same sums, without a loop whose
    trip count the compiler does not know."""
    if q.shape[2] == 3:
        return score3(q[b, p, 0], q[b, p, 1], q[b, p, 2], k, b, j, scale)
    acc = float32(0.0)
    for c in range(q.shape[2]):
        acc += q[b, p, c] * k[b, j, c]
    return acc * scale


@njit(inline="always")
def score3(q0, q1, q2, k, b, j, scale):
    """`score` at d = 3 for a query whose components the caller has read once (q0, q1, q2):
    the compiler cannot keep them in registers itself across stores it cannot prove leave
    q alone."""
    u = at(j)
    acc = float32(0.0)
    acc += q0 * k[b, u, 0]
    acc += q1 * k[b, u, 1]
    acc += q2 * k[b, u, 2]
    return acc * scale


@njit(inline="always")
def query3(q, b, p):
    """Query p's components at d = 3 (zeros otherwise), read once for `score_of`."""
    if q.shape[2] == 3:
        u = at(p)
        return q[b, u, 0], q[b, u, 1], q[b, u, 2]
    return float32(0.0), float32(0.0), float32(0.0)


@njit(inline="always")
def score_of(q, k, b, p, j, scale, q0, q1, q2):
    """`score`, at d = 3 from query p's components q0, q1, q2 (`query3`)."""
    if q.shape[2] == 3:
        return score3(q0, q1, q2, k, b, j, scale)
    return score(q, k, b, p, j, scale)


@njit(inline="always")
def chebyshev(a, c, W):
    """Chebyshev distance between pixels a and c (linear indices) of a W-wide grid."""
    return max(abs(a // W - c // W), abs(a % W - c % W))


@njit(inline="always")
def near(a, c, L, W):
    """chebyshev(a, c, W) < L. Pixels that close have |a - c| <= (L - 1)(W + 1): testing
    that first spares most pairs the integer divisions, the costly part of the test."""
    if abs(a - c) > (L - 1) * (W + 1):
        return False
    return chebyshev(a, c, W) < L


@njit(inline="always")
def contains(ids, r, kappa, j):
    found = False
    for i in range(kappa):
        found |= ids[r, i] == j
    return found


@njit(inline="always")
def copy_list(src_ids, src_sc, src_row, dst_ids, dst_sc, dst_row, kappa):
    """Copy list src_row of (src_ids, src_sc) into list dst_row of (dst_ids, dst_sc)."""
    src, dst = at(src_row), at(dst_row)
    for i in range(kappa):
        dst_ids[dst, i] = src_ids[src, i]
        dst_sc[dst, i] = src_sc[src, i]


@njit(inline="always")
def sorted_insert(ids, sc, r, kappa, j, s):
    """Put (j, s) in list r if there is room or it beats the worst entry; True if put."""
    if ids[r, kappa - 1] >= 0 and not s > sc[r, kappa - 1]:
        return False
    pos = kappa - 1
    while pos > 0 and (ids[r, pos - 1] < 0 or s > sc[r, pos - 1]):
        ids[r, pos] = ids[r, pos - 1]
        sc[r, pos] = sc[r, pos - 1]
        pos -= 1
    ids[r, pos] = j
    sc[r, pos] = s
    return True


@njit(inline="always")
def drop_near(ids, sc, r, kappa, j, L, W):
    """Remove the entries within Chebyshev distance < L of j, keeping the others' order."""
    kept = 0
    for i in range(kappa):
        if ids[r, i] >= 0 and not near(ids[r, i], j, L, W):
            ids[r, kept] = ids[r, i]
            sc[r, kept] = sc[r, i]
            kept += 1
    for i in range(kept, kappa):
        ids[r, i] = -1
        sc[r, i] = -math.inf


@njit(inline="always")
def insert_new(ids, sc, r, kappa, j, s, mode, L, W):
    """`consider`'s rule for a key j known not to be in list r; True if the list changed."""
    if ids[r, kappa - 1] >= 0 and not s > sc[r, kappa - 1]:
        # Full and no better than the worst: rejected by both rules (in mode, every entry
        # scores >= s, so one near j vetoes it, and with none near, max rejects it), and
        # checked first because it is by far the commonest case and needs no divisions.
        return False
    if mode:
        for i in range(kappa):
            if ids[r, i] >= 0 and sc[r, i] >= s and near(ids[r, i], j, L, W):
                return False
        drop_near(ids, sc, r, kappa, j, L, W)
    return sorted_insert(ids, sc, r, kappa, j, s)


@njit(inline="always")
def consider(ids, sc, r, kappa, j, q, k, b, p, scale, mode, L, W, valid, masked):
    """The insertion rule (`is_index_valid` of Algorithm 1) for key j of query p on list r;
    True if the list changed.

    max: skip j if listed; fill up to kappa, else replace the worst entry if s beats it.
    mode: online non-maximum suppression - if an entry within Chebyshev distance < L of j
    scores >= s, skip (a listed j is such an entry); else drop all such entries and insert
    j as in max. A masked-out key (`masked` and valid[b, j] == 0) is never taken. The test
    against the worst entry comes before the duplicate scan: it rejects most proposals,
    and on its own (a branch that rarely changes outcome) is cheaper than the scan."""
    if masked and valid[b, j] == 0:
        return False
    return consider_scored(ids, sc, r, kappa, j, score(q, k, b, p, j, scale), mode, L, W)


@njit(inline="always")
def consider_scored(ids, sc, r, kappa, j, s, mode, L, W):
    """`consider` for an allowed key j whose score s is already known."""
    if ids[r, kappa - 1] >= 0 and not s > sc[r, kappa - 1]:
        return False
    if contains(ids, r, kappa, j):
        return False
    return insert_new(ids, sc, r, kappa, j, s, mode, L, W)


# --- the three per-query steps of PatchMatch -----------------------------------------


@njit(inline="always")
def init_query(ids, sc, r, q, k, b, p, kappa, mode, L, W, scale, seed, valid, masked):
    """Random initial list r: kappa random keys (max: distinct, the next free index on a
    repeat; mode: inserted by the NMS rule, so fewer may survive). Needs kappa <= n."""
    n = k.shape[1]
    for i in range(kappa):
        ids[r, i] = -1
        sc[r, i] = -math.inf
    key = rng_key(seed, b, p, INIT_STREAM)
    for i in range(kappa):
        j = rand_below(key, i, n)
        if not mode:
            while contains(ids, r, kappa, j):
                j = (j + 1) % n
        consider(ids, sc, r, kappa, j, q, k, b, p, scale, mode, L, W, valid, masked)


@njit(inline="always")
def propagate_query(
    old_ids, old_sc, changed_at, old, ids, sc, r, cand, cand_sc, batched, q, k, b, y, x, kappa,
    jump, mode, L, H, W, scale, since, valid, masked,
):  # fmt: skip
    """One jump-flood propagation step of query p = (y, x) into list r (the caller has the
    pixel's coordinates, so the CPU kernel walks rows without dividing): start from its old list
    (row b * n + p of the old field); for each of the 4 neighbours p + delta at distance
    `jump` in the grid, try every entry j' of the neighbour's old list shifted back by
    delta (coherent shift, if in the grid) and j' itself. True if list r changed.

    batched (the CPU): the proposals are listed in `cand` (>= 8 kappa long) and all scored
    into `cand_sc` before any is tried, so the key gathers overlap instead of each waiting
    behind the previous proposal's test; the list's worst score is then kept in a local,
    reread only after an insertion, and a proposal is compared with it before anything else,
    which rejects most proposals without touching the list. A GPU thread tries each as it
    comes (`cand` unused): there the proposal list would sit in slow local memory.

    changed_at[old, row] is the last pass that changed a list. A neighbour whose list has not
    changed since pass `since` (this pass one iteration earlier) offers exactly what p
    tried then, and in the max variant retrying is a no-op: a full list's worst score
    only rises, so a key tried once is either still listed or still no better than the
    worst. Such neighbours are skipped; `since` = 0 skips none (the mode variant, whose
    suppression can later re-admit a key, and the first iteration)."""
    n = q.shape[1]
    p = y * W + x
    copy_list(old_ids, old_sc, b * n + p, ids, sc, r, kappa)
    count = 0
    changed = False
    for direction in range(4):
        dy = 0
        dx = 0
        if direction == 0:
            dy = -jump
        elif direction == 1:
            dy = jump
        elif direction == 2:
            dx = -jump
        else:
            dx = jump
        ny = y + dy
        nx = x + dx
        if ny < 0 or ny >= H or nx < 0 or nx >= W:
            continue
        neighbour = at(b * n + ny * W + nx)
        if changed_at[old, neighbour] < since:
            continue
        for i in range(kappa):
            jn = old_ids[neighbour, i]
            if jn < 0:
                break
            # The shift back by delta, if it stays in the grid: a row shift is a linear
            # shift by dy * W (no division), a column shift needs the column of jn.
            shifted = jn - dy * W - dx
            if (dx == 0 and 0 <= shifted < n) or (dx != 0 and 0 <= jn % W - dx < W):
                count, hit = propose(ids, sc, r, cand, count, batched, shifted, q, k, b, p, kappa,
                                     mode, L, W, scale, valid, masked)  # fmt: skip
                changed |= hit
            count, hit = propose(ids, sc, r, cand, count, batched, jn, q, k, b, p, kappa, mode, L,
                                 W, scale, valid, masked)  # fmt: skip
            changed |= hit
    if batched:
        score_keys(q, k, b, p, cand, cand_sc, count, scale)
        full = ids[r, kappa - 1] >= 0
        worst = sc[r, kappa - 1]
        for e in range(count):
            s = cand_sc[e]
            if full and not s > worst:
                continue
            if masked and valid[b, cand[e]] == 0:
                continue
            if consider_scored(ids, sc, r, kappa, cand[e], s, mode, L, W):
                changed = True
                full = ids[r, kappa - 1] >= 0
                worst = sc[r, kappa - 1]
    return changed


@njit(inline="always")
def propose(ids, sc, r, cand, count, batched, j, q, k, b, p, kappa, mode, L, W, scale, valid,
            masked):  # fmt: skip
    """Propagation's proposal j: appended to cand (batched; returns (count + 1, False)) or
    tried on list r now (returns (count, whether the list changed))."""
    if batched:
        cand[at(count)] = j
        return count + 1, False
    return count, consider(ids, sc, r, kappa, j, q, k, b, p, scale, mode, L, W, valid, masked)


@njit(inline="always")
def score_keys(q, k, b, p, cand, cand_sc, count, scale):
    """cand_sc[e] = score(q, k, b, p, cand[e], scale) for e < count (at d = 3 reading query
    p once)."""
    q0, q1, q2 = query3(q, b, p)
    for e in range(count):
        cand_sc[e] = score_of(q, k, b, p, cand[e], scale, q0, q1, q2)


@njit(inline="always")
def random_search_query(
    ids, sc, r, q, k, b, p, kappa, mode, L, H, W, scale, seed, t, valid, masked
):
    """Random search of iteration t on list r: around each entry, a radius from max(H, W)
    halved down to 1, try one uniformly random key of the window entry +- radius clipped
    to the grid. True if list r changed."""
    key = rng_key(seed, b, p, INIT_STREAM + 1 + t)
    counter = 0
    changed = False
    for i in range(kappa):
        centre = ids[r, i]
        if centre < 0:
            continue
        u = centre // W
        v = centre % W
        radius = max(H, W)
        while radius >= 1:
            j = search_candidate(key, counter, u, v, radius, H, W)
            counter += 1
            changed |= consider(ids, sc, r, kappa, j, q, k, b, p, scale, mode, L, W, valid, masked)
            radius //= 2
    return changed


@njit(inline="always")
def search_candidate(key, counter, u, v, radius, H, W):
    """The counter-th draw of stream `key` as a random-search proposal: a uniformly random
    pixel of the window (u, v) +- radius clipped to the grid, as a linear index. It reads
    no list, so the CPU kernel draws many queries' proposals in one vectorised loop."""
    y0 = max(u - radius, 0)
    x0 = max(v - radius, 0)
    dy, dx = rand_pair(
        key, counter, min(u + radius, H - 1) - y0 + 1, min(v + radius, W - 1) - x0 + 1
    )
    return (y0 + dy) * W + x0 + dx


@njit(inline="always")
def pass_number(t, i, jumps_per_iteration):
    """Passes are numbered 0 (init), then per iteration t the propagation passes
    i = 0 .. len(jumps) - 1 and the random search (i = len(jumps))."""
    return 1 + t * (jumps_per_iteration + 1) + i


@njit(inline="always")
def skip_since(t, i, jumps_per_iteration, mode):
    """`since` of propagation pass i of iteration t: the same pass one iteration back, or 0
    (skip nothing) in the first iteration and in the mode variant."""
    if t == 0 or mode:
        return 0
    return pass_number(t - 1, i, jumps_per_iteration)


# --- neighbourhood expansion + sparse softmax (Algorithm 2) --------------------------


@njit(inline="always")
def counted_here(matches, my, mx, r, b, p, e, y, x, W, radius, valid, masked):
    """True if key (y, x) of the e-th match's window enters the softmax there: it is not
    masked out, and no earlier match's window holds it (it would be counted twice)."""
    if masked and valid[b, y * W + x] == 0:
        return False
    for f in range(e):
        if matches[b, p, f] >= 0 and abs(my[r, f] - y) <= radius and abs(mx[r, f] - x) <= radius:
            return False
    return True


@njit(inline="always")
def window_softmax_query(
    q, k, v, matches, my, mx, r, b, p, H, W, radius, scale, out, valid, masked, keys, key_sc,
    buffered, exp_bits, exp_scale,
):  # fmt: skip
    """out[b, p] = softmax-weighted mean of v over the union of the (2 radius + 1)^2
    windows around p's matches (clipped, each key once, masked-out keys left out); returns
    the number of keys used (0: out[b, p] = 0).

    my, mx: scratch rows (row r, >= kappa wide) for the matches' pixel coordinates, found
    once here, so the duplicate test, which runs for every key of every window, divides
    nothing. Two passes over the candidates: the max score, then exp(s - max) sums (fp32).
    At d = 3 the query, and at dv = 3 the sums, stay in local variables rather than being
    read and written through the arrays for every key, which the compiler cannot do itself:
    it cannot prove that the arrays do not overlap.

    buffered (the CPU): the first pass lists the keys and their scores in row r of keys /
    key_sc (>= kappa (2 radius + 1)^2 wide) and the second reads them back, rather than
    walking the windows and scoring again, and takes their exponentials in one vectorised
    loop (`exp_shifted`, scratch rows exp_bits and exp_scale, its int32 and float32 views;
    within a few float32 ulps of `math.exp`, not bit for bit). A GPU thread walks the
    windows twice and calls `math.exp` (the five scratch arguments after `masked` unused):
    it has no room for a list that long.
    """
    kappa = matches.shape[2]
    for e in range(kappa):
        m = max(matches[b, p, e], 0)
        my[r, e] = m // W
        mx[r, e] = m % W
    q0, q1, q2 = query3(q, b, p)
    best = float32(-math.inf)
    count = 0
    for e in range(kappa):
        if matches[b, p, e] < 0:
            continue
        for y in range(max(my[r, e] - radius, 0), min(my[r, e] + radius, H - 1) + 1):
            for x in range(max(mx[r, e] - radius, 0), min(mx[r, e] + radius, W - 1) + 1):
                j = y * W + x
                if counted_here(matches, my, mx, r, b, p, e, y, x, W, radius, valid, masked):
                    s = score_of(q, k, b, p, j, scale, q0, q1, q2)
                    if buffered:
                        keys[r, count] = j
                        key_sc[r, count] = s
                    best = max(best, s)
                    count += 1
    for c in range(v.shape[2]):
        out[b, p, c] = 0.0
    if count == 0:
        return 0
    total = float32(0.0)
    o = (float32(0.0), float32(0.0), float32(0.0))  # out[b, p] when dv = 3
    if buffered:
        exp_shifted(key_sc, exp_bits, exp_scale, r, count, best)
        for c in range(count):
            total, o = add_weighted(v, out, b, p, keys[r, c], key_sc[r, c], total, o)
    else:
        for e in range(kappa):
            if matches[b, p, e] < 0:
                continue
            for y in range(max(my[r, e] - radius, 0), min(my[r, e] + radius, H - 1) + 1):
                for x in range(max(mx[r, e] - radius, 0), min(mx[r, e] + radius, W - 1) + 1):
                    j = y * W + x
                    if counted_here(matches, my, mx, r, b, p, e, y, x, W, radius, valid, masked):
                        s = score_of(q, k, b, p, j, scale, q0, q1, q2)
                        w = float32(math.exp(s - best))
                        total, o = add_weighted(v, out, b, p, j, w, total, o)
    if v.shape[2] == 3:
        out[b, p, 0] = o[0] / total
        out[b, p, 1] = o[1] / total
        out[b, p, 2] = o[2] / total
    else:
        for c in range(v.shape[2]):
            out[b, p, c] /= total
    return count


@njit(inline="always")
def add_weighted(v, out, b, p, j, w, total, o):
    """Add key j's weight w to the softmax's total and w * v_j to query p's
    sum: o (three locals) when dv = 3, out[b, p] otherwise. Returns (total, o)."""
    if v.shape[2] == 3:
        u = at(j)
        o = (o[0] + w * v[b, u, 0], o[1] + w * v[b, u, 1], o[2] + w * v[b, u, 2])
    else:
        for c in range(v.shape[2]):
            out[b, p, c] += w * v[b, j, c]
    return total + w, o


# exp on the CPU: x = m ln 2 + f, m an integer, |f| <= ln(2) / 2
ROUND = float32(12582912.0)  # 1.5 * 2^23: (y + ROUND) - ROUND rounds y to an integer
LOG2E = float32(1.4426950408889634)
LN2_HI = float32(0.693145751953125)  # ln 2 = LN2_HI + LN2_LO; m * LN2_HI is exact
LN2_LO = float32(1.4286068203094172e-06)
EXP_FLOOR = float32(-87.0)  # exp(-87) ~ 1.6e-38, the smallest normal float32 is 1.2e-38
INV_FACT = tuple(float32(1.0 / math.factorial(i)) for i in range(8))


@njit(inline="always")
def exp_shifted(key_sc, bits, scale, r, count, best):
    """key_sc[r, c] = exp(key_sc[r, c] - best) for c < count (each key_sc[r, c] <= best),
    in two loops without calls, which the compiler vectorises: numba's exp is one libm call
    per key. exp(f) by its Taylor series to f^7 (truncation error below 1e-8, rounding a
    few float32 ulps), times 2^m made by writing m + 127 into the exponent field of
    bits[r, c], of which scale is the float32 view. Arguments below -87 count as -87: their
    weights, under 2e-38, are lost against the best key's weight of 1 either way."""
    for c in range(count):
        x = max(key_sc[r, c] - best, EXP_FLOOR)
        m = (x * LOG2E + ROUND) - ROUND
        f = (x - m * LN2_HI) - m * LN2_LO
        e = INV_FACT[7]
        for i in range(6, -1, -1):
            e = e * f + INV_FACT[i]
        key_sc[r, c] = e
        bits[r, c] = (int32(m) + int32(127)) << int32(23)
    for c in range(count):
        key_sc[r, c] *= scale[r, c]


# --- argument checks shared by the CPU and CUDA entry points -------------------------


def check_grid(q, k, H: int, W: int) -> None:
    """q, k [B, H*W, d] with the same B and d."""
    if len(q.shape) != 3 or len(k.shape) != 3:
        raise ValueError(f"q and k must be [B, n, d], got {tuple(q.shape)} and {tuple(k.shape)}")
    if H < 1 or W < 1 or q.shape[1] != H * W or tuple(k.shape) != tuple(q.shape):
        raise ValueError(
            f"q {tuple(q.shape)} and k {tuple(k.shape)} must both be [B, H*W, d], H={H} W={W}"
        )


def check_patchmatch(q, k, H, W, kappa, variant, L, T, jumps) -> bool:
    """Validate PatchMatch arguments; returns True for the mode variant."""
    check_grid(q, k, H, W)
    if not 1 <= kappa <= min(MAX_KAPPA, H * W):
        raise ValueError(f"kappa={kappa} must be in [1, min(MAX_KAPPA={MAX_KAPPA}, n={H * W})]")
    if variant not in ("max", "mode"):
        raise ValueError(f"variant must be 'max' or 'mode', got {variant!r}")
    if L < 1 or T < 0 or any(jump < 1 for jump in jumps):
        raise ValueError(f"need L >= 1, T >= 0 and jumps >= 1; got L={L} T={T} jumps={jumps}")
    return variant == "mode"


def key_validity(valid, q):
    """(valid, masked) for the kernels: a uint8 [B, n] array and True, or, for no mask, a
    1 x 1 placeholder that is never read and False."""
    if valid is None:
        return np.ones((1, 1), np.uint8), False
    if tuple(valid.shape) != tuple(q.shape[:2]) or valid.dtype != np.uint8:
        raise ValueError(f"valid must be uint8 [B, n] like q {tuple(q.shape)}")
    return valid, True


def check_window(q, k, v, matches, H, W, b) -> None:
    check_grid(q, k, H, W)
    if len(v.shape) != 3 or tuple(v.shape[:2]) != tuple(q.shape[:2]):
        raise ValueError(f"v must be [B, n, dv] like q {tuple(q.shape)}, got {tuple(v.shape)}")
    if len(matches.shape) != 3 or tuple(matches.shape[:2]) != tuple(q.shape[:2]):
        raise ValueError(f"matches must be [B, n, kappa], got {tuple(matches.shape)}")
    if not 1 <= matches.shape[2] <= MAX_KAPPA or b < 0:
        raise ValueError(
            f"need 1 <= kappa <= {MAX_KAPPA} and b >= 0, got {matches.shape[2]} and b={b}"
        )
