"""SCRAM's PatchMatch and window softmax as numba.cuda kernels: one thread per query.

The per-query steps come from `core`, so a simulated run returns exactly the CPU kernels'
matches and scores for the same seed. Each thread keeps its match list in local arrays of
`core.MAX_KAPPA`. Propagation is double-buffered: a pass reads one field and writes the
other, then the launcher swaps them, so no thread reads what another writes in the pass.
Arrays are numba device arrays on a GPU and plain numpy arrays under the simulator.
"""

from __future__ import annotations

import types

import numpy as np
from numba import boolean, cuda, float32, int32, int64, uint8
from numba.core.dispatcher import Dispatcher

from attnbench.kernels.patchmatch import core
from attnbench.kernels.patchmatch.core import MAX_KAPPA
from attnbench.kernels.target import simulator_enabled

GPU_THREADS_PER_BLOCK = 128
# The simulator runs one OS thread per CUDA thread: small blocks waste fewer of them.
SIM_THREADS_PER_BLOCK = 32
THREADS_PER_BLOCK = SIM_THREADS_PER_BLOCK if simulator_enabled() else GPU_THREADS_PER_BLOCK


def _python_twins(module) -> dict:
    """Plain-Python copies of a module's njit helpers whose calls to each other also go to
    the copies: the simulator's array views cannot enter CPU-compiled code, and `.py_func`
    alone would still call the compiled versions of nested helpers."""
    namespace = dict(vars(module))
    for name, value in vars(module).items():
        if isinstance(value, Dispatcher):
            f = value.py_func
            namespace[name] = types.FunctionType(
                f.__code__, namespace, name, f.__defaults__, f.__closure__
            )
    return namespace


_helpers = _python_twins(core) if simulator_enabled() else vars(core)
copy_list = _helpers["copy_list"]
init_query = _helpers["init_query"]
propagate_query = _helpers["propagate_query"]
random_search_query = _helpers["random_search_query"]
window_softmax_query = _helpers["window_softmax_query"]


@cuda.jit
def _init_kernel(q, k, kappa, mode, L, W, scale, seed, ids, sc, valid, masked):
    """Random initial list of each query."""
    unit = cuda.grid(1)
    B, n = q.shape[0], q.shape[1]
    if unit < B * n:
        b, p = unit // n, unit % n
        list_ids = cuda.local.array((1, MAX_KAPPA), int32)
        list_sc = cuda.local.array((1, MAX_KAPPA), float32)
        init_query(list_ids, list_sc, 0, q, k, b, p, kappa, mode, L, W, scale, seed, valid, masked)
        copy_list(list_ids, list_sc, 0, ids, sc, unit, kappa)


@cuda.jit
def _propagate_kernel(
    q, k, old_ids, old_sc, changed, old, kappa, jump, mode, L, H, W, scale, since, now, ids, sc,
    valid, masked,
):  # fmt: skip
    """One propagation pass: read (old_ids, old_sc) and changed[old], write (ids, sc) and
    changed[1 - old]; fields [B*n, kappa], changed [2, B*n] (see `core.propagate_query`)."""
    unit = cuda.grid(1)
    B, n = q.shape[0], q.shape[1]
    if unit < B * n:
        b, p = unit // n, unit % n
        list_ids = cuda.local.array((1, MAX_KAPPA), int32)
        list_sc = cuda.local.array((1, MAX_KAPPA), float32)
        if propagate_query(
            old_ids, old_sc, changed, old, list_ids, list_sc, 0, q, k, b, p // W, p % W, kappa,
            jump, mode, L, H, W, scale, since, valid, masked,
        ):  # fmt: skip
            changed[1 - old, unit] = now
        else:
            changed[1 - old, unit] = changed[old, unit]
        copy_list(list_ids, list_sc, 0, ids, sc, unit, kappa)


@cuda.jit
def _random_search_kernel(
    q, k, kappa, mode, L, H, W, scale, seed, t, ids, sc, changed, cur, now, valid, masked
):
    """Random search of iteration t, in place: each thread touches only its own list (and
    its own entry of changed[cur])."""
    unit = cuda.grid(1)
    B, n = q.shape[0], q.shape[1]
    if unit < B * n:
        b, p = unit // n, unit % n
        list_ids = cuda.local.array((1, MAX_KAPPA), int32)
        list_sc = cuda.local.array((1, MAX_KAPPA), float32)
        copy_list(ids, sc, unit, list_ids, list_sc, 0, kappa)
        if random_search_query(
            list_ids, list_sc, 0, q, k, b, p, kappa, mode, L, H, W, scale, seed, t, valid, masked
        ):
            changed[cur, unit] = now
        copy_list(list_ids, list_sc, 0, ids, sc, unit, kappa)


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
            q, k, v, matches, my, mx, 0, b, p, H, W, radius, scale, out, valid, masked
        )


_F3, _I3 = float32[:, :, ::1], int32[:, :, ::1]
_F2, _I2, _U2 = float32[:, ::1], int32[:, ::1], uint8[:, ::1]

# Every kernel with the argument types the launchers pass (C-contiguous arrays, int64,
# bool and float32 scalars); tests/test_ptx.py compiles each to PTX.
# fmt: off
KERNELS = {
    "init": (
        _init_kernel,
        (_F3, _F3, int64, boolean, int64, int64, float32, int64, _I2, _F2, _U2, boolean),
    ),
    "propagate": (
        _propagate_kernel,
        (_F3, _F3, _I2, _F2, _I2, int64, int64, int64, boolean, int64, int64, int64, float32,
         int64, int64, _I2, _F2, _U2, boolean),
    ),
    "random_search": (
        _random_search_kernel,
        (_F3, _F3, int64, boolean, int64, int64, int64, float32, int64, int64, _I2, _F2, _I2,
         int64, int64, _U2, boolean),
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


def patchmatch(
    q, k, H, W, kappa, variant, L, T, jumps, seed, matches, scores, tmp_ids, tmp_sc, changed,
    valid=None,
):  # fmt: skip
    """As `cpu.patchmatch`: init, then T x (a propagation pass per jump, a random search)."""
    mode = core.check_patchmatch(q, k, H, W, kappa, variant, L, T, jumps)
    valid, masked = _key_validity(valid, q)
    threads = q.shape[0] * q.shape[1]
    scale = np.float32(1.0 / np.sqrt(q.shape[2]))
    kappa, L, H, W, seed = int(kappa), int(L), int(H), int(W), int(seed)
    # Fields as [B*n, kappa]: row b * n + p is the list of query p of batch b.
    matches, scores, tmp_ids, tmp_sc = (
        a.reshape(threads, kappa) for a in (matches, scores, tmp_ids, tmp_sc)
    )
    _launch(
        _init_kernel, threads, q, k, kappa, mode, L, W, scale, seed, matches, scores, valid, masked
    )
    cur, nxt, old = (matches, scores), (tmp_ids, tmp_sc), 0
    J = len(jumps)
    for t in range(T):
        for i, jump in enumerate(jumps):
            since = core.skip_since(t, i, J, mode)
            args = (kappa, int(jump), mode, L, H, W, scale, since, core.pass_number(t, i, J))
            _launch(
                _propagate_kernel, threads, q, k, *cur, changed, old, *args, *nxt, valid, masked
            )
            cur, nxt, old = nxt, cur, 1 - old
        args = (kappa, mode, L, H, W, scale, seed, t, *cur, changed, old)
        now = core.pass_number(t, J, J)
        _launch(_random_search_kernel, threads, q, k, *args, now, valid, masked)
    if cur[0] is not matches:
        _copy(cur[0], matches)
        _copy(cur[1], scores)


def window_softmax(q, k, v, matches, H, W, b, out, counts, valid=None):
    """As `cpu.window_softmax`."""
    core.check_window(q, k, v, matches, H, W, b)
    scale = np.float32(1.0 / np.sqrt(q.shape[2]))
    valid, masked = _key_validity(valid, q)
    args = (q, k, v, matches, int(H), int(W), int(b), scale, out, counts, valid, masked)
    _launch(_window_softmax_kernel, q.shape[0] * q.shape[1], *args)
