"""Steady CPU allocation for timing: keep freed heap memory for reuse.

With glibc's defaults, a freed multi-MiB tensor goes back to the OS and the next one is
faulted in page by page; whether that happens drifts from process to process, so the same
call times differently in two processes, and every tensor above 32 MiB (glibc's largest
mmap threshold) pays the faults on every call. Serving every block from the heap and
trimming only above 1 GiB keeps freed blocks for reuse, so timings measure the attention
call, not the page faults, for every backend alike. Peak memory is unaffected: it trims and
reads the high-water mark.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest allowed value on 64-bit
TRIM_THRESHOLD = 2**30

_setting: str | None = None


def steady_allocator() -> str:
    """Apply the thresholds once; return what was set, for the environment record."""
    global _setting
    if _setting is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            ok = all(
                libc.mallopt(option, value)
                for option, value in (
                    (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                    (M_MMAP_MAX, 0),  # no block is mmapped: all come from the heap
                    (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
                )
            )
        except (OSError, AttributeError):
            ok = False
        _setting = (
            "glibc malloc: no mmap (threshold 32 MiB, max 0), trim threshold 1 GiB"
            if ok
            else "system default (mallopt unavailable)"
        )
    return _setting


def allocator_setting() -> str:
    """What `steady_allocator` set in this process, or the default if it was not called."""
    return _setting or "system default"
