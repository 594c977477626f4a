"""SCRAM's PatchMatch and window softmax as numba.cuda kernels: a thread per query (the
window softmax) or a grid-stride walk over the queries (PatchMatch, one cooperative launch).

The per-query steps come from `core`, so a simulated run returns exactly the CPU kernels'
matches and scores for the same seed. Each thread keeps its match list in local arrays of
`core.MAX_KAPPA`. Arrays are numba device arrays on a GPU and plain numpy arrays under the
simulator.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import boolean, cuda, float32, int32, int64, uint8

from attnbench.kernels.patchmatch import core
from attnbench.kernels.patchmatch.core import MAX_KAPPA
from attnbench.kernels.target import (  # noqa: F401  (block sizes: read by the tests)
    GPU_THREADS_PER_BLOCK,
    SIM_THREADS_PER_BLOCK,
    kernel_helpers,
    simulator_enabled,
    threads_per_block,
)

THREADS_PER_BLOCK = threads_per_block()

_helpers = kernel_helpers(core)
copy_list = _helpers["copy_list"]
init_query = _helpers["init_query"]
pass_number = _helpers["pass_number"]
propagate_query = _helpers["propagate_query"]
random_search_query = _helpers["random_search_query"]
skip_since = _helpers["skip_since"]
window_softmax_query = _helpers["window_softmax_query"]


# At most 128 registers a thread for the fused kernel, which would take more (it holds the
# init, propagation and search code): fewer registers let more blocks fit per SM, and a
# cooperative grid is only as large as what fits at once. The simulator takes no such
# option.
_REGISTER_CAP = {} if simulator_enabled() else {"max_registers": 128}


@cuda.jit(**_REGISTER_CAP)
def _patchmatch_kernel(
    q, k, kappa, mode, L, H, W, T, jumps, J, scale, seed, ids, sc, ids2, sc2, changed, valid,
    masked,
):  # fmt: skip
    """The whole PatchMatch in one cooperative launch: init, then T x (a propagation pass per
    jump, a random search), with a grid-wide barrier after each pass. One launch instead of
    one per pass: a launch from Python costs the host more than a pass takes on the GPU.
    Each thread walks the queries with a grid stride, since a cooperative grid must fit on
    the device at once.

    Propagation is double-buffered: a pass reads one field pair and `changed[cur]`, writes
    the other pair and `changed[1 - cur]`, so no thread reads what another writes in the
    pass; the random search updates each list in place. Fields are [B*n, kappa]; the result
    is in (ids, sc) or, after an odd number of propagation passes, in (ids2, sc2)."""
    grid = cuda.cg.this_grid()
    B, n = q.shape[0], q.shape[1]
    first, stride = cuda.grid(1), cuda.gridsize(1)
    list_ids = cuda.local.array((1, MAX_KAPPA), int32)
    list_sc = cuda.local.array((1, MAX_KAPPA), float32)
    unused = cuda.local.array(1, int32)  # proposals are tried one by one (not batched)
    unused_sc = cuda.local.array(1, float32)
    for unit in range(first, B * n, stride):
        b, p = unit // n, unit % n
        init_query(list_ids, list_sc, 0, q, k, b, p, kappa, mode, L, W, scale, seed, valid, masked)
        copy_list(list_ids, list_sc, 0, ids, sc, unit, kappa)
    grid.sync()
    cur_ids, cur_sc, nxt_ids, nxt_sc = ids, sc, ids2, sc2
    cur = 0
    for t in range(T):
        for i in range(J):
            since = skip_since(t, i, J, mode)
            now = pass_number(t, i, J)
            for unit in range(first, B * n, stride):
                b, p = unit // n, unit % n
                if propagate_query(
                    cur_ids, cur_sc, changed, cur, list_ids, list_sc, 0, unused, unused_sc,
                    False, q, k, b, p // W, p % W, kappa, jumps[i], mode, L, H, W, scale, since,
                    valid, masked,
                ):  # fmt: skip
                    changed[1 - cur, unit] = now
                else:
                    changed[1 - cur, unit] = changed[cur, unit]
                copy_list(list_ids, list_sc, 0, nxt_ids, nxt_sc, unit, kappa)
            grid.sync()
            cur_ids, cur_sc, nxt_ids, nxt_sc = nxt_ids, nxt_sc, cur_ids, cur_sc
            cur = 1 - cur
        now = pass_number(t, J, J)
        for unit in range(first, B * n, stride):
            b, p = unit // n, unit % n
            copy_list(cur_ids, cur_sc, unit, list_ids, list_sc, 0, kappa)
            if random_search_query(
                list_ids, list_sc, 0, q, k, b, p, kappa, mode, L, H, W, scale, seed, t, valid,
                masked,
            ):  # fmt: skip
                changed[cur, unit] = now
            copy_list(list_ids, list_sc, 0, cur_ids, cur_sc, unit, kappa)
        grid.sync()


@cuda.jit
def _window_softmax_kernel(q, k, v, matches, H, W, radius, scale, out, counts, valid, masked):
    """Softmax over the union of the windows around each query's matches."""
    unit = cuda.grid(1)
    B, n = q.shape[0], q.shape[1]
    if unit < B * n:
        b, p = unit // n, unit % n
        my = cuda.local.array((1, MAX_KAPPA), int32)
        mx = cuda.local.array((1, MAX_KAPPA), int32)
        counts[b, p] = window_softmax_query(
            q, k, v, matches, my, mx, 0, b, p, H, W, radius, scale, out, valid, masked, my,
            out[b], False, my, out[b],
        )  # fmt: skip


_F3, _I3 = float32[:, :, ::1], int32[:, :, ::1]
_F2, _I2, _U2 = float32[:, ::1], int32[:, ::1], uint8[:, ::1]

# Every kernel with the argument types the launchers pass (C-contiguous arrays, int64,
# bool and float32 scalars); tests/test_ptx.py compiles each to PTX.
# fmt: off
KERNELS = {
    "patchmatch": (
        _patchmatch_kernel,
        (_F3, _F3, int64, boolean, int64, int64, int64, int64, int64[::1], int64, float32, int64,
         _I2, _F2, _I2, _F2, _I2, _U2, boolean),
    ),
    "window_softmax": (
        _window_softmax_kernel,
        (_F3, _F3, _F3, _I3, int64, int64, int64, float32, _F3, _I2, _U2, boolean),
    ),
}
# fmt: on


def _launch(kernel, threads: int, *args) -> None:
    if threads > 0:
        blocks = (threads + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
        kernel[blocks, THREADS_PER_BLOCK](*args)


def _copy(src, dst) -> None:
    if hasattr(dst, "copy_to_device"):
        dst.copy_to_device(src)
    else:
        dst[...] = src


def _key_validity(valid, q):
    """`core.key_validity`, with the no-mask placeholder on the GPU (not copied per launch)."""
    valid, masked = core.key_validity(valid, q)
    if not masked and not simulator_enabled():
        valid = cuda.to_device(valid)
    return valid, masked


def _cooperative_blocks(units: int) -> int:
    """Blocks for `_patchmatch_kernel`: one per THREADS_PER_BLOCK queries, at most as many
    as fit on the device at once (a cooperative launch needs them all resident). The
    simulator syncs a grid only within one block, so it gets one."""
    if simulator_enabled():
        return 1
    fit = _resident_blocks(cuda.get_current_device().id)
    return max(1, min((units + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, fit))


@functools.cache
def _resident_blocks(device_id: int) -> int:
    """How many blocks of `_patchmatch_kernel` one device runs at once (asked once)."""
    kernel = _patchmatch_kernel.compile(KERNELS["patchmatch"][1])
    return kernel.max_cooperative_grid_blocks(THREADS_PER_BLOCK)


def patchmatch(
    q, k, H, W, kappa, variant, L, T, jumps, seed, matches, scores, tmp_ids, tmp_sc, changed,
    valid=None,
):  # fmt: skip
    """As `cpu.patchmatch`: init, then T x (a propagation pass per jump, a random search)."""
    mode = core.check_patchmatch(q, k, H, W, kappa, variant, L, T, jumps)
    valid, masked = _key_validity(valid, q)
    units = q.shape[0] * q.shape[1]
    scale = np.float32(1.0 / np.sqrt(q.shape[2]))
    # Fields as [B*n, kappa]: row b * n + p is the list of query p of batch b.
    matches, scores, tmp_ids, tmp_sc = (
        a.reshape(units, kappa) for a in (matches, scores, tmp_ids, tmp_sc)
    )
    jump_sizes = np.array(list(jumps) or [1], np.int64)  # never empty: J says how many count
    if not simulator_enabled():
        jump_sizes = cuda.to_device(jump_sizes)
    if units > 0:
        _patchmatch_kernel[_cooperative_blocks(units), THREADS_PER_BLOCK](
            q, k, int(kappa), mode, int(L), int(H), int(W), int(T), jump_sizes, len(jumps),
            scale, int(seed), matches, scores, tmp_ids, tmp_sc, changed, valid, masked,
        )  # fmt: skip
    if (T * len(jumps)) % 2 == 1:
        _copy(tmp_ids, matches)
        _copy(tmp_sc, scores)


def window_softmax(q, k, v, matches, H, W, b, out, counts, valid=None):
    """As `cpu.window_softmax`."""
    core.check_window(q, k, v, matches, H, W, b)
    scale = np.float32(1.0 / np.sqrt(q.shape[2]))
    valid, masked = _key_validity(valid, q)
    args = (q, k, v, matches, int(H), int(W), int(b), scale, out, counts, valid, masked)
    _launch(_window_softmax_kernel, q.shape[0] * q.shape[1], *args)
