"""Measuring this machine's ceilings, once per machine fingerprint.

GEMM peak: torch.mm of square matrices per dtype, growing the size while the next one still
fits the dtype's time budget (a CPU without bf16/fp16 units runs those dtypes a hundred
times slower), keeping the best rate. Bandwidth: copy (a = b) and triad (a = b + s c) at a
working set of half of each memory level, bytes counted as read + written (no
write-allocate) over GB = 1e9. Add peak (CPU): float32 8-lane vector adds in registers on
every thread (`kernels.adds`), the ceiling of work with no multiply to fuse. Every rate is
taken from the fastest sample: a ceiling is what the machine can do, and interference only
ever slows a sample down.

A level's `capacity` is what it holds for the run: a cache shared by `s` of the machine's
`p` CPUs has p / s instances, and the threads are taken to spread over them as the OS
places busy threads (a private L1 holds threads x its size, an L3 shared by all its size).
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from functools import partial

from attnbench.measure import is_cuda, sweep
from attnbench.measure.busy import describe, host_cpu, provenance, quiet_now
from attnbench.measure.ceilings import (
    LEVEL_SLACK,
    Ceilings,
    Level,
    cache_path,
    machine_fingerprint,
    read,
    save,
)
from attnbench.measure.conditions import snapshot
from attnbench.measure.cpuinfo import GIB, MIB, cpu_caches, model_name, this_cpu_peak
from attnbench.measure.gpuinfo import datasheet, nvml_clocks  # noqa: F401  (re-exported)

SCALE = 1.0  # shrinks sizes, bytes per call and time budgets (tests); 1 measures for real

GEMM_DTYPES = ("float32", "float64", "bfloat16", "float16")
CPU_GEMM_SIZES = (256, 512, 1024, 2048)
CUDA_GEMM_SIZES = (2048, 4096, 8192)
GEMM_BUDGET_S = 1.0  # seconds per dtype: a larger size is tried only if it fits
GROWTH = 8  # a doubled n costs this many times more
MIN_TIME_S = 0.05  # seconds of samples per timed kernel
TIMING = {"repeats": 3, "warmup": 2}
CALLS = 1 + TIMING["repeats"] + TIMING["warmup"]  # calls a timing makes of a slow call

DRAM_MIN_BYTES = 256 * MIB
DRAM_OVER_CACHE = 8  # the DRAM working set is at least this many times the last cache
DRAM_MEMORY_SHARE = 4  # and at most this fraction of the memory free
CPU_CALL_BYTES = 5e8  # bytes a bandwidth call moves: enough passes to dwarf its set-up
ELEMENT_BYTES = 8  # the CPU kernels stream float64
ADD_CALL = 2e9  # adds an add-peak call makes in all: enough to dwarf starting its threads

CUDA_HBM_MIN_BYTES = GIB
CUDA_PASSES = {"L2": 16, "HBM": 2}  # kernels per timed call: launches overlap, gaps vanish

Step = Callable[[str], None]


def load_or_measure(
    device: str = "cpu",
    threads: int | None = None,
    remeasure: bool = False,
    on_step: Step | None = None,
    notify: Step | None = None,
) -> Ceilings:
    """The ceilings of this machine fingerprint at `threads` (None: torch's current count):
    from the cache, else measured and saved. `remeasure` measures even when cached. A
    cached record that fails its check, or a provisional one while the host is quiet now,
    is measured again; `notify` (default: a line on stderr) is told why, and when measuring
    starts and ends, so no measurement is silent. A provisional record on a host still
    busy is used as it is, without a word here: the tables printed from it say so. A
    cache that cannot be written is no error: the ceilings still hold for this run."""
    from attnbench.measure.threads import set_threads

    say = notify or _stderr
    threads = set_threads(threads)
    fingerprint = _fingerprint(device, threads)
    if not remeasure:
        cached, why = read(fingerprint)
        if why is not None:
            say(f"ceilings cache {cache_path(fingerprint)}: {why}; measuring again")
        if cached is not None and not cached.provisional:
            return cached
        if cached is not None and busy_now() is not None:
            return cached  # provisional, and still busy: the tables say so (views.ceilings)
        if cached is not None:
            say("ceilings were provisional (measured on a busy host); the host is quiet now")
    ceilings = measure(device, threads, on_step, say)
    try:
        save(ceilings)
    except OSError:
        pass
    return ceilings


def measure(
    device: str, threads: int, on_step: Step | None = None, notify: Step | None = None
) -> Ceilings:
    """Measure now at the current thread count (`threads` is what it was set to), with
    the host's load and CPU wait meanwhile (`busy.provenance`)."""
    step, say = on_step or _quiet, notify or _quiet
    say(f"measuring this machine's ceilings ({device}, {threads} threads: GEMM per dtype, "
        "bandwidth per memory level; once per machine, then cached)")  # fmt: skip
    before, start = {**snapshot(device), "host": host_cpu()}, time.perf_counter()
    if is_cuda(device):
        gemm, sizes, levels, extra = _measure_cuda(device, step)
    else:
        gemm, sizes, levels, extra = _measure_cpu(threads, step)
    after = {**snapshot(device), "host": host_cpu()}
    record = provenance(before, after, time.perf_counter() - start)
    record.update(extra.pop("found", {}))
    say(f"measured the ceilings in {record['seconds']:.0f} s ({describe(record)})" + (
        f": provisional, the host was busy ({record['busy']}); they are measured again on "
        "the next quiet run" if record["provisional"] else ""))  # fmt: skip
    return Ceilings(
        device=device,
        device_name=device_name(device),
        threads=threads,
        fingerprint=_fingerprint(device, threads),
        measured_at=record["measured_at"],
        gemm_gflops=gemm,
        levels=levels,
        gemm_size=sizes,
        provenance=record,
        **extra,
    )


def _quiet(text: str) -> None:
    pass


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def busy_now() -> str | None:
    """Why the host is busy now, or None: `busy.quiet_now`, here so tests can pin it."""
    return quiet_now()


def _fingerprint(device: str, threads: int) -> str:
    import numba
    import torch

    versions = {
        "torch": torch.__version__,
        "numba": numba.__version__,
        "numba_threads": numba.get_num_threads(),
    }
    return machine_fingerprint(device, device_name(device), threads, versions)


def device_name(device: str) -> str:
    """The GPU's name, or the CPU's model name."""
    if is_cuda(device):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return model_name()


# ----------------------------------------------------------------------- GEMM


def _gemm_peak(dtype_name: str, device: str, sizes: tuple[int, ...], step: Step):
    """(best GFLOP/s, n it was reached at) over `sizes`, stopping before a size whose
    predicted timing (GROWTH times the last call, CALLS calls) would exceed the budget."""
    import torch

    dtype = getattr(torch, dtype_name)
    budget = GEMM_BUDGET_S * SCALE
    best, best_n, spent = 0.0, 0, 0.0
    for n in _scaled_sizes(sizes):
        step(f"GEMM {dtype_name} {n} x {n}")
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        out = torch.empty_like(a)
        rate, call_s, seconds = _rate(partial(torch.mm, a, b, out=out), device, 2 * n**3 / 1e9)
        if rate > best:
            best, best_n = rate, n
        spent += seconds
        if spent + max(MIN_TIME_S * SCALE, GROWTH * call_s * CALLS) > budget:
            break
    return best, best_n


def _scaled_sizes(sizes: tuple[int, ...]) -> list[int]:
    """`sizes` shrunk by SCALE in work (n^3), in multiples of 16."""
    factor = SCALE ** (1 / 3)
    return sorted({max(16, int(n * factor) // 16 * 16) for n in sizes})


def _rate(fn, device: str, units: float, flush_l2: bool = True) -> tuple[float, float, float]:
    """(`units` per second of `fn`'s fastest sample, its seconds, seconds the timing took)."""
    from attnbench.measure.timing import time_call

    start = time.perf_counter()
    timing = time_call(fn, device, min_time_s=MIN_TIME_S * SCALE, flush_l2=flush_l2, **TIMING)
    fastest_s = min(timing.samples_ms) / 1e3
    return units / fastest_s, fastest_s, time.perf_counter() - start


# ------------------------------------------------------------------------ CPU


def _measure_cpu(threads: int, step: Step):
    """GEMM per dtype, copy/triad per memory level on numba's threads (the levels the
    bandwidth sweep confirms, `sweep.levels`), the computed peak."""
    import numba

    from attnbench.measure.memory import available_bytes

    gemm, sizes = {}, {}
    for name in GEMM_DTYPES:
        gemm[name], sizes[name] = _gemm_peak(name, "cpu", CPU_GEMM_SIZES, step)
    parts = numba.get_num_threads()
    adds = {"float32": _add_peak(parts, step)}
    most = available_bytes("cpu") / DRAM_MEMORY_SHARE
    caches = cpu_caches()
    planned = cpu_levels(parts, caches, os.cpu_count(), most)
    points = sweep_points(parts, max((c for _, c, _ in planned[:-1]), default=MIB), step)
    found = sweep.levels(planned, points)
    found[-1] = ("DRAM", math.inf, dram_working_set(found[:-1], most))
    levels = faster_first([_cpu_level(*level, parts, step) for level in found])
    record = {"sysfs_caches": [list(c) for c in caches], "sweep": [list(p) for p in points]}
    record["swept_levels"] = [name for name, capacity, _ in found[:-1] if (name, capacity)
                              not in {(n, c) for n, c, _ in planned}]  # fmt: skip
    return gemm, sizes, levels, {
        "computed": this_cpu_peak(threads), "add_gflops": adds, "found": record,
    }  # fmt: skip


def sweep_points(parts: int, largest_cache: float, step: Step) -> list[tuple[float, float]]:
    """The bandwidth sweep (`sweep.sweep`) past `largest_cache`, at SCALE."""
    return sweep.sweep(sweep.sweep_sizes(largest_cache, SCALE), parts, SCALE, step)


def faster_first(levels: list[Level]) -> list[Level]:
    """The levels with each cache that is not faster than the level after it (within
    LEVEL_SLACK: noise) merged into that one, whose capacity then covers its working sets:
    a level no faster than the next bounds nothing the next does not."""
    kept: list[Level] = []
    for level in levels:
        while kept and level.gbs > kept[-1].gbs * LEVEL_SLACK:
            kept.pop()
        kept.append(level)
    return kept


def _add_peak(parts: int, step: Step) -> float:
    """G float32 adds per second of `parts` threads adding in registers."""
    from attnbench.kernels import adds

    step("vector adds float32")
    reps = max(1, int(ADD_CALL * SCALE / (parts * adds.ADDS_PER_REP)))
    fn = partial(adds.vector_adds, parts, reps)
    return _rate(fn, "cpu", parts * reps * adds.ADDS_PER_REP / 1e9, flush_l2=False)[0]


def cpu_levels(threads: int, caches, cpus: int | None, most: float = math.inf):
    """(name, capacity, working set) per level for a run on `threads`: each cache's size
    times the instances the threads spread over, working set half of that; then DRAM
    (`dram_working_set`)."""
    cpus = cpus or threads
    levels: list[tuple[str, float, float]] = []
    for level, size, sharing in caches:
        instances = max(1, min(threads, cpus // (sharing or cpus)))
        capacity = size * instances
        if levels and capacity <= levels[-1][1]:
            continue  # not a larger level for this run
        levels.append((f"L{level}", capacity, capacity / 2))
    levels.append(("DRAM", math.inf, dram_working_set(levels, most)))
    return levels


def dram_working_set(caches: list[tuple[str, float, float]], most: float = math.inf) -> float:
    """DRAM_OVER_CACHE times the last of `caches` (at least DRAM_MIN_BYTES, and twice its
    working set; at most `most`)."""
    last = caches[-1] if caches else ("", 0, 0)
    dram = max(DRAM_OVER_CACHE * last[1], DRAM_MIN_BYTES) * SCALE
    return min(max(dram, 2 * last[2]), most)


def _cpu_level(name: str, capacity: float, working_set: float, parts: int, step: Step):
    """copy and triad GB/s of `parts` threads over `working_set` bytes in all."""
    import numpy as np

    from attnbench.kernels import stream

    step(f"bandwidth {name}: {working_set / MIB:.3g} MiB")
    rates = []
    for kernel, count in ((stream.copy, 2), (stream.triad, 3)):
        n = max(int(working_set / count / ELEMENT_BYTES), stream.LINE_ELEMENTS * parts)
        arrays = [np.empty(n) for _ in range(count)]
        for i, array in enumerate(arrays):
            stream.fill(array, 1.0 + i, parts)
        pass_bytes = count * ELEMENT_BYTES * stream.touched(n, parts)
        reps = max(2, 2 * round(CPU_CALL_BYTES * SCALE / pass_bytes / 2))
        scalar = () if kernel is stream.copy else (0.5,)
        fn = partial(kernel, *arrays, *scalar, parts, reps)
        rates.append(_rate(fn, "cpu", pass_bytes * reps / 1e9)[0])
    return Level(name, capacity, working_set, *rates)


# ----------------------------------------------------------------------- CUDA


def _measure_cuda(device: str, step: Step):
    """GEMM per dtype, copy/triad at an L2-resident working set (no L2 flush between calls)
    and an HBM one, NVML clocks, and the datasheet peaks when the GPU is known."""
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    gemm, sizes = {}, {}
    for name in GEMM_DTYPES:
        gemm[name], sizes[name] = _gemm_peak(name, device, CUDA_GEMM_SIZES, step)
    l2 = getattr(props, "L2_cache_size", 0) or 0
    plan = [("L2", l2, l2 / 2)] if l2 else []
    plan.append(("HBM", math.inf, max(CUDA_HBM_MIN_BYTES * SCALE, DRAM_OVER_CACHE * l2)))
    levels = [_cuda_level(name, cap, ws, device, step) for name, cap, ws in plan]
    extra = {"clocks": nvml_clocks(props), "datasheet": datasheet(props.name) or {}}
    return gemm, sizes, levels, extra


def _cuda_level(name: str, capacity: float, working_set: float, device: str, step: Step):
    """copy and triad GB/s of float32 torch ops; several per call, alternating direction."""
    import torch

    step(f"bandwidth {name}: {working_set / MIB:.3g} MiB")
    passes, flush = CUDA_PASSES[name], name != "L2"
    rates = []
    for count in (2, 3):
        n = int(working_set / count / 4)
        arrays = [torch.full((n,), 1.0 + i, device=device) for i in range(count)]

        def run(arrays=arrays) -> None:
            a, b = arrays[:2]
            for r in range(passes):
                src, dst = (b, a) if r % 2 == 0 else (a, b)
                if len(arrays) == 2:
                    dst.copy_(src)
                else:
                    torch.add(src, arrays[2], alpha=0.5 if r % 2 == 0 else -0.5, out=dst)

        rates.append(_rate(run, device, count * 4 * n * passes / 1e9, flush)[0])
    return Level(name, capacity, working_set, *rates)
