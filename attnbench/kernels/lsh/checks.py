"""Preconditions of the kernels, checked in Python once per launch, before the compiled
loops run: a broken one is one clear ValueError, never a wrong read inside a kernel."""

from __future__ import annotations

import numpy as np

UINT32_LIMIT = 2**32  # flat indices below this fit 32-bit kernels


def require(condition: bool, message: str) -> None:
    """A kernel precondition: an explicit check, so it holds under `python -O` too (the
    compiled loops read out of bounds instead of failing when it is broken)."""
    if not condition:
        raise ValueError(message)


def check(array: np.ndarray, dtype, ndim: int) -> None:
    """C-contiguous, of `dtype` and rank `ndim` (the message is built only on failure: this
    runs on every kernel call)."""
    if not (array.dtype == dtype and array.ndim == ndim and array.flags.c_contiguous):
        raise ValueError(
            f"expected a C-contiguous {np.dtype(dtype)} array of rank {ndim}, got "
            f"{array.dtype} {array.shape}"
        )


def check_codes(read_codes: np.ndarray, write_codes: np.ndarray, tau: int) -> None:
    check(read_codes, np.int32, 3)
    check(write_codes, np.int32, 3)
    require(1 <= tau <= 30, f"tau must be in 1..30, got {tau}")
    g, _, m = write_codes.shape
    require(
        read_codes.shape[0] == g and read_codes.shape[2] == m,
        f"read codes {read_codes.shape} and write codes {write_codes.shape} do not match",
    )


def check_pairs(
    read_codes, sorted_codes, order, read_unit, write_unit, read_a, write_a, weight, bound, out
) -> None:
    """pair_cumulation's arguments (CPU and CUDA alike): a weight and bound it knows, and
    shapes that agree (codes [G, n_r, m], sorted codes and order [G, m, n_w], rows)."""
    groups, n_r, m = read_codes.shape
    n_w, d = write_unit.shape[1], write_unit.shape[2]
    require(m >= 1, "need at least one hash")
    require(bound >= 1, f"bound must be >= 1, got {bound}")
    require(weight in (0, 1), f"weight must be 0 (lower) or 1 (exact), got {weight}")
    for name, array, want in (
        ("sorted_codes", sorted_codes, (groups, m, n_w)),
        ("order", order, (groups, m, n_w)),
        ("read_unit", read_unit, (groups, n_r, d)),
        ("write_a", write_a, (groups, n_w, read_a.shape[2])),
        ("read_a", read_a, (groups, n_r, write_a.shape[2])),
        ("out", out, (groups, n_r, d)),
    ):
        shape = tuple(array.shape)
        require(shape == want, f"{name} has shape {shape}, want {want}")


def index_bits(largest: int) -> int:
    """32 when every flat index of a launch (all below `largest`, its elements plus a
    block's threads of overshoot) fits an unsigned 32-bit integer, else 64."""
    return 32 if largest < UINT32_LIMIT else 64


def check_devices(device, **tensors) -> None:
    """Every tensor a launch is handed is on `device`, the kernel's: on a GPU a host tensor
    would be copied by numba inside the call, and a tensor of another GPU read wrongly."""
    for name, tensor in tensors.items():
        require(
            tensor.device == device,
            f"{name} is on {tensor.device}, the kernel runs on {device}: move it there first",
        )
