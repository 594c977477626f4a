"""This CPU's data caches as sysfs lists them: what the kernels size their working sets by
(and what `attnbench machine` measures bandwidth at). Best effort: no sysfs, fallbacks."""

from __future__ import annotations

import re
from pathlib import Path

KIB, MIB, GIB = 2**10, 2**20, 2**30
CACHE_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")
# (level, bytes, CPUs sharing it; 0: all of them) when sysfs lists no cache
FALLBACK_CACHES = ((1, 32 * KIB, 1), (2, 1 * MIB, 1), (3, 32 * MIB, 0))


def cpu_caches(root: Path = CACHE_ROOT) -> list[tuple[int, int, int]]:
    """(level, bytes, CPUs sharing it) of cpu0's data and unified caches, by level;
    FALLBACK_CACHES when sysfs has none."""
    found = {}
    for index in sorted(root.glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text())
            size = _size_bytes((index / "size").read_text())
            sharing = _cpu_count((index / "shared_cpu_list").read_text())
        except (OSError, ValueError):
            continue
        found[level] = (level, size, sharing)
    return [found[level] for level in sorted(found)] or list(FALLBACK_CACHES)


def _size_bytes(text: str) -> int:
    """sysfs sizes: "32K", "1M", "32768K"."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"cache size {text!r}")
    return int(match.group(1)) * {"": 1, "K": KIB, "M": MIB, "G": GIB}[match.group(2).upper()]


def _cpu_count(text: str) -> int:
    """CPUs in a list such as "0-3,8-11"."""
    count = 0
    for item in text.strip().split(","):
        first, _, last = item.partition("-")
        count += int(last or first) - int(first) + 1
    return count


def core_cache(level: int, root: Path = CACHE_ROOT) -> int:
    """Bytes of the level-`level` cache per CPU sharing it (its fallback if sysfs has none)."""
    for found, size, sharing in cpu_caches(root):
        if found == level:
            return size // max(1, sharing)
    return next(size for found, size, _ in FALLBACK_CACHES if found == level)
