"""Where this CPU's bandwidth drops: the memory levels a run really has, found by measuring.

sysfs reports caches as the hypervisor describes them: a VM with 2 vCPUs may list a 300 MiB
L3 it cannot use as one, and bandwidth measured at half of it is DRAM's. So the copy kernel
is timed at working sets doubling from SWEEP_FROM up to past the largest cache sysfs lists
(`sweep`), and a level ends where the rate falls below DROP of the best rate since the last
edge and stays there (`edges`). `levels` keeps the sysfs caches the sweep confirms, each at
the capacity the sweep found, and drops those it does not see: their working sets are then
judged against the slower level they really run at.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from attnbench.kernels.caches import KIB, MIB

SWEEP_FROM = 16 * KIB  # the first working set (all threads together)
SWEEP_PAST = 4  # sweep to this many times the largest sysfs cache
SWEEP_MIN, SWEEP_MAX = 64 * MIB, 512 * MIB  # ... but at least / at most this
SWEEP_BYTES = 6.4e7  # bytes a sample moves (whole passes, at least one)
SWEEP_SAMPLES = 3  # samples per size: the fastest is kept (interference only slows)
DROP = 0.7  # a rate below DROP x the best since the last edge is a slower level
MATCH = 4.0  # a found edge is named after the sysfs cache within this factor of it
COVER = 1.5  # a sweep reaching this many times a cache's capacity would have seen its edge

Point = tuple[float, float]  # (working set bytes, GB/s)


def sweep_sizes(largest_cache: float, scale: float = 1.0) -> list[float]:
    """Working sets doubling from SWEEP_FROM to SWEEP_PAST x `largest_cache`, clamped to
    SWEEP_MIN..SWEEP_MAX and shrunk by `scale` (tests)."""
    top = min(max(SWEEP_PAST * largest_cache, SWEEP_MIN), SWEEP_MAX) * scale
    sizes, size = [], float(SWEEP_FROM)
    while size <= max(top, SWEEP_FROM):
        sizes.append(size)
        size *= 2
    return sizes


def sweep(
    sizes: list[float], parts: int, scale: float = 1.0, step: Callable[[str], None] | None = None
) -> list[Point]:
    """(working set, copy GB/s) at each size on `parts` threads: the fastest of
    SWEEP_SAMPLES samples, each whole passes moving about SWEEP_BYTES x `scale`."""
    import numpy as np

    from attnbench.kernels import stream

    if step is not None:
        step(f"bandwidth sweep: {sizes[0] / KIB:.0f} KiB to {sizes[-1] / MIB:.0f} MiB")
    points = []
    for size in sizes:
        n = max(int(size / 2 / 8), stream.LINE_ELEMENTS * parts)
        a, b = np.empty(n), np.empty(n)
        stream.fill(a, 1.0, parts)
        stream.fill(b, 2.0, parts)
        pass_bytes = 2 * 8 * stream.touched(n, parts)
        reps = max(2, 2 * round(SWEEP_BYTES * scale / pass_bytes / 2))
        stream.copy(a, b, parts, 2)  # warm: pages placed, code compiled
        best = math.inf
        for _ in range(SWEEP_SAMPLES):
            start = time.perf_counter()
            stream.copy(a, b, parts, reps)
            best = min(best, time.perf_counter() - start)
        points.append((2.0 * 8 * n, pass_bytes * reps / max(best, 1e-9) / 1e9))
    return points


def edges(points: list[Point]) -> list[float]:
    """Capacities where the rate drops: a size whose rate, and the next size's too, are
    below DROP x the level's rate (the second fastest of its sizes, so one lucky sample
    sets nothing) ends the level. Its capacity is halfway, on a log scale, between the
    last size at the level's rate and the first below it; the next level starts after
    the size of the drop, which is partly in each."""
    found: list[float] = []
    plateau: list[float] = []
    index = 0
    while index < len(points):
        size, gbs = points[index]
        rate = sorted(plateau)[-2] if len(plateau) > 1 else (plateau or [0.0])[0]
        after = points[index + 1][1] if index + 1 < len(points) else gbs
        if plateau and gbs < DROP * rate and after < DROP * rate:
            found.append(math.sqrt(points[index - 1][0] * size))
            plateau = []
        else:
            plateau.append(gbs)
        index += 1
    return found


def levels(planned: list[tuple[str, float, float]], points: list[Point]):
    """The levels of `planned` ((name, capacity, working set) from sysfs, DRAM last) as
    the sweep's `points` find them: each edge takes the name of the unclaimed sysfs cache
    nearest it (within MATCH; else the next level number) and its measured capacity; a
    sysfs cache the sweep covers (it reached COVER x its capacity) with no edge near it is
    left out, unless it is below the first edge (the smallest sets are the ones a busy
    host slows most, which can hide L1: its own bandwidth then decides, `faster_first`);
    one the sweep does not cover is kept as sysfs says. No edge at all: `planned`. DRAM
    is returned as planned, for the caller to size against the last cache kept."""
    caches, last = planned[:-1], planned[-1]
    if not edges(points):
        return list(planned)
    reached = points[-1][0]
    found: list[tuple[str, float, float]] = []
    unclaimed = list(caches)
    for edge in edges(points):
        near = [c for c in unclaimed if abs(math.log(c[1] / edge)) <= math.log(MATCH)]
        if near:
            cache = min(near, key=lambda c: abs(math.log(c[1] / edge)))
            unclaimed.remove(cache)
            name = cache[0]
        else:
            number = int(found[-1][0][1:]) + 1 if found and found[-1][0][1:].isdigit() else 1
            name = f"L{number}"
        found.append((name, edge, edge / 2))
    first = found[0][1] if found else math.inf
    found += [c for c in unclaimed if COVER * c[1] > reached or c[1] < first]
    kept: list[tuple[str, float, float]] = []
    for level in sorted(found, key=lambda c: c[1]):
        if not kept or (level[1] > kept[-1][1] and level[0] != kept[-1][0]):
            kept.append(level)
    return [*kept, last]
