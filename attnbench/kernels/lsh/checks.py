"""Preconditions of the CPU kernels, checked in Python before the compiled loops run."""

from __future__ import annotations

import numpy as np


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
