"""Steady CPU allocation for timing: keep freed heap memory for reuse.

With glibc's defaults, a freed multi-MiB tensor goes back to the OS and the next one is
faulted in page by page; whether that happens drifts from process to process, so the same
call times differently in two processes, and every tensor above 32 MiB (glibc's largest
mmap threshold) pays the faults on every call. Serving every block from the heap and
trimming only above 1 GiB keeps freed blocks for reuse, so timings measure the attention
call, not the page faults, for every backend alike. A peak is read under `exact_peaks`,
which restores per-block mappings for the measured call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest allowed value on 64-bit
TRIM_THRESHOLD = 2**30
# While a peak is measured (`exact_peaks`), blocks from 1 MiB up are mapped apiece and
# unmapped when freed, up to glibc's default count of mappings.
EXACT_MMAP_THRESHOLD = 2**20
DEFAULT_MMAP_MAX = 65536

_setting: str | None = None


@cache
def _libc():
    """The C library, loaded once (finding it can start a subprocess); None if it cannot be."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def _mallopt(settings: tuple[tuple[int, int], ...]) -> bool:
    try:
        return all(_libc().mallopt(option, value) for option, value in settings)
    except AttributeError:  # no C library, or not one with mallopt
        return False


STEADY = (
    (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
    (M_MMAP_MAX, 0),  # no block is mmapped: all come from the heap
    (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
)


def steady_allocator() -> str:
    """Apply the thresholds once; return what was set, for the environment record."""
    global _setting
    if _setting is None:
        ok = _mallopt(STEADY)
        _setting = (
            "glibc malloc: no mmap (threshold 32 MiB, max 0), trim threshold 1 GiB"
            if ok
            else "system default (mallopt unavailable)"
        )
    return _setting


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


@cache
def _glibc():
    """libc with the signatures used here, or None where it is not glibc >= 2.33."""
    libc = _libc()
    try:
        libc.mallinfo2.restype = _MallInfo2
    except AttributeError:
        return None
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def _hold_free_chunks(libc) -> list[int]:
    """Allocate, without touching, every free heap chunk of EXACT_MMAP_THRESHOLD or more
    (largest first, halving the request while none fits), so that no block of the measured
    call can land in one; a request the heap cannot serve was mapped apart and is freed."""
    held = []
    size = libc.mallinfo2().fordblks
    while size >= EXACT_MMAP_THRESHOLD:
        before = libc.mallinfo2()
        block = libc.malloc(size)
        after = libc.mallinfo2()
        if block and after.hblkhd == before.hblkhd and after.fordblks < before.fordblks:
            held.append(block)
            size = min(size, after.fordblks)
        else:
            if block:
                libc.free(block)
            size //= 2
    return held


@contextmanager
def exact_peaks() -> Iterator[None]:
    """Inside, the high-water mark follows the live blocks, as with glibc's defaults: the
    steady heap keeps freed blocks resident and hands them out again, so a call's peak would
    count what the calls before it left free (and grow call by call). So large blocks are
    mapped and unmapped apiece, and the heap's free chunks are held until the end."""
    libc = _glibc() if (_setting or "").startswith("glibc") else None
    if libc is None:
        yield
        return
    _mallopt(
        (
            (M_MMAP_MAX, DEFAULT_MMAP_MAX),
            (M_MMAP_THRESHOLD, EXACT_MMAP_THRESHOLD),
            (M_TRIM_THRESHOLD, EXACT_MMAP_THRESHOLD),
        )
    )
    held = _hold_free_chunks(libc)
    try:
        yield
    finally:
        for block in held:
            libc.free(block)
        _mallopt(STEADY)


def allocator_setting() -> str:
    """What `steady_allocator` set in this process, or the default if it was not called."""
    return _setting or "system default"
