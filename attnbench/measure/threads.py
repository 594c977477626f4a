"""One CPU thread count for torch and the numba kernels, so comparisons are like for like."""

from __future__ import annotations


def set_threads(threads: int | None) -> int:
    """Use `threads` (None: torch's current count) in torch and numba; returns the count.
    numba's pool was sized at start-up, so it gets at most that many."""
    import numba
    import torch

    # numba's OpenMP pool resets OpenMP's thread count, torch's too, when it starts: start it
    # before setting torch's count
    numba.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    numba.set_num_threads(min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    return torch.get_num_threads()
