"""Timing a zero-argument call the same way for every backend.

The first call is reported on its own because it includes compilation and lazy set-up.
Warm-up then runs until two consecutive times agree, so samples measure the steady state.
Calls shorter than 1 ms are timed in back-to-back blocks, since a single call would be
dominated by timer resolution and call overhead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from attnbench.measure import is_cuda

CPU_TIMER = "perf_counter_ns"
CUDA_TIMER = "cuda-event"

STABLE_TOLERANCE = 0.10  # last two warm-up times must agree within this, relative to their min
MIN_SAMPLE_MS = 1.0  # shorter calls are repeated back-to-back within one sample
L2_FALLBACK_BYTES = 256 * 1024 * 1024


@dataclass
class Timing:
    """Every timed sample plus what is needed to judge them (first call, warm-up, blocking)."""

    samples_ms: list[float]  # every timed sample, ms per call
    first_call_ms: float  # the very first call (includes JIT compile, lazy init)
    warmup_calls: int  # warm-up calls made after the first call
    loops: int  # calls per sample (>1 only for very short calls, blocked timing)
    stable: bool  # whether warm-up reached a stable time before hitting the cap
    timer: str  # "perf_counter_ns" or "cuda-event"

    @property
    def median(self) -> float:
        return float(np.percentile(self.samples_ms, 50))

    @property
    def p10(self) -> float:
        return float(np.percentile(self.samples_ms, 10))

    @property
    def p90(self) -> float:
        return float(np.percentile(self.samples_ms, 90))


def timer_name(device: str) -> str:
    """The timer `time_call` uses on this device, for the environment record."""
    return CUDA_TIMER if is_cuda(device) else CPU_TIMER


def time_call(
    fn: Callable[[], object],
    device: str,
    repeats: int = 10,
    warmup: int = 10,
    flush_l2: bool = True,
) -> Timing:
    """Time `fn` (inputs already built by the caller): first call, warm-up, then `repeats` samples.

    `warmup` caps the warm-up calls after the first call; 0 means none, and then `stable` is
    False because stability was never observed. On CUDA the L2 cache is flushed before each
    timed call, so samples do not benefit from data left in cache by the previous call.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")

    if is_cuda(device):
        dev = torch.device(device)
        with torch.cuda.device(dev):
            flush = _l2_flusher(dev) if flush_l2 else _no_flush
            return _run(partial(_time_cuda, fn, flush=flush), warmup, repeats, CUDA_TIMER)
    return _run(partial(_time_cpu, fn), warmup, repeats, CPU_TIMER)


def _run(
    measure: Callable[[int], float],
    warmup: int,
    repeats: int,
    timer: str,
) -> Timing:
    """The device-independent schedule; `measure(loops)` returns ms per call."""
    first_ms = measure(1)

    warm: list[float] = []
    stable = False
    while len(warm) < warmup:
        warm.append(measure(1))
        if len(warm) >= 2 and _agree(warm[-2], warm[-1]):
            stable = True
            break

    call_ms = warm[-1] if warm else first_ms
    loops = 1
    if call_ms < MIN_SAMPLE_MS:
        loops = math.ceil(MIN_SAMPLE_MS / max(call_ms, 1e-6))

    samples = [measure(loops) for _ in range(repeats)]
    return Timing(samples, first_ms, len(warm), loops, stable, timer)


def _agree(a: float, b: float) -> bool:
    return abs(a - b) <= STABLE_TOLERANCE * min(a, b)


def _time_cpu(fn: Callable[[], object], loops: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(loops):
        fn()
    end = time.perf_counter_ns()
    return (end - start) / 1e6 / loops


def _time_cuda(fn: Callable[[], object], loops: int, flush: Callable[[], None]) -> float:
    """Events bracket only the calls: the flush and earlier work finish before `start`."""
    flush()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(loops):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / loops


def _l2_flusher(dev: torch.device) -> Callable[[], None]:
    """Allocate one L2-sized buffer per `time_call`; zeroing it evicts the previous call's data."""
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    size = getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0) or L2_FALLBACK_BYTES
    buffer = torch.empty(size, dtype=torch.uint8, device=dev)

    def flush() -> None:
        buffer.zero_()

    return flush


def _no_flush() -> None:
    pass
