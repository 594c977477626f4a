"""numba's on-disk cache of compiled kernels where it can be written, none where it cannot.

Kernels compile with `cache=True`, so later runs skip their compilation. numba looks for a
writable cache folder when a kernel is decorated, at import (NUMBA_CACHE_DIR, the source's
__pycache__, the user's cache folder), and raises when it finds none, as in a read-only
install with no writable home: every command died importing the kernels. `cached_njit` is
`numba.njit(cache=True)` with that one failure turned into compiling without a cache, said
once on stderr, as the kernels compute the same either way.
"""

from __future__ import annotations

import sys

import numba

_told = False


def cached_njit(**options):
    """`numba.njit(cache=True, **options)`, or without the cache when no cache folder can
    be written (module doc)."""

    def decorate(func):
        try:
            return numba.njit(cache=True, **options)(func)
        except RuntimeError as exc:
            if "cannot cache" not in str(exc):
                raise
            _tell()
            return numba.njit(cache=False, **options)(func)

    return decorate


def _tell() -> None:
    global _told
    if not _told:
        _told = True
        print(
            "attnbench: numba can write no cache folder, so kernels compile on every run; "
            "set NUMBA_CACHE_DIR to a writable folder to keep them",
            file=sys.stderr,
        )
