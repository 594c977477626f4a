"""Timing a zero-argument call the same way for every backend.

The first call is reported on its own because it includes compilation and lazy set-up.
Warm-up then runs until two consecutive times agree, so samples measure the steady state.
Calls shorter than a sample's minimum are timed in back-to-back blocks, since a single call
would be dominated by timer resolution and call overhead. Samples are then taken until both
`repeats` samples and `min_time_s` of measured time are reached, so fast calls get many
samples and slow ones at least `repeats` (as torch.utils.benchmark's blocked_autorange).
The verdict on noise comes from the spread of those samples: IQR over median. A `Timer`
takes the samples in rounds, so that several calls can take turns (`time --rounds`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from attnbench.measure import DEFAULT_MAX_SPREAD, DEFAULT_MIN_TIME_S, is_cuda
from attnbench.measure.rounds import split

CPU_TIMER = "perf_counter_ns"
CUDA_TIMER = "cuda-event"

MAX_SAMPLES = 1000  # more samples than this are only taken when `repeats` asks for them
SETTLE_TOLERANCE = 0.10  # last two warm-up times must agree within this, relative to their min
MIN_SAMPLE_MS = 1.0  # shorter calls are repeated back-to-back within one sample
L2_FALLBACK_BYTES = 256 * 1024 * 1024


@dataclass
class Timing:
    """Every kept sample plus what is needed to judge them (first call, warm-up, blocking).

    Statistics are computed from `samples_ms` only: warm-up and the first call never count.
    """

    samples_ms: list[float]  # every timed sample after warm-up, ms per call
    first_call_ms: float  # the very first call (includes JIT compile, lazy init)
    warmup_calls: int  # warm-up calls made after the first call
    loops: int  # calls per sample (>1 only for short calls, blocked timing)
    settled: bool  # whether warm-up reached a steady time before hitting its cap
    timer: str  # "perf_counter_ns" or "cuda-event"
    max_spread: float = DEFAULT_MAX_SPREAD  # the threshold `stable` is judged against
    round_sizes: list[int] = field(default_factory=list)  # samples per round, when in rounds
    extra_calls: int = 0  # untimed calls before rounds

    @property
    def median(self) -> float:
        return float(np.median(self.samples_ms))

    @property
    def p10(self) -> float:
        return float(np.percentile(self.samples_ms, 10))

    @property
    def p90(self) -> float:
        return float(np.percentile(self.samples_ms, 90))

    @property
    def iqr(self) -> float:
        q25, q75 = np.percentile(self.samples_ms, [25, 75])
        return float(q75 - q25)

    @property
    def spread(self) -> float:
        """IQR / median: robust to a few outliers, unlike the standard deviation. In rounds,
        the median of each round's own (rounds of one sample have none): a drift between
        rounds is what pairing the rounds removes from speed-ups, so the verdict judges the
        noise within them."""
        rounds = [r for r in split(self.samples_ms, self.round_sizes) if len(r) > 1]
        if len(self.round_sizes) > 1 and rounds:
            return float(np.median([sample_spread(r) for r in rounds]))
        return sample_spread(self.samples_ms)  # no rounds, or none with two samples to compare

    @property
    def stable(self) -> bool:
        return self.spread <= self.max_spread

    @property
    def calls(self) -> int:
        """Every call `time_call` made, for dividing a counter read around it (energy)."""
        return 1 + self.warmup_calls + self.extra_calls + len(self.samples_ms) * self.loops


def sample_spread(samples: list[float]) -> float:
    """IQR / median of `samples`: 0 for identical ones, inf for a spread around a zero median."""
    q25, median, q75 = np.percentile(samples, [25, 50, 75])
    if median > 0:
        return float((q75 - q25) / median)
    return 0.0 if q75 == q25 else math.inf


def timer_name(device: str) -> str:
    """The timer `time_call` uses on this device, for the environment record."""
    return CUDA_TIMER if is_cuda(device) else CPU_TIMER


def time_call(
    fn: Callable[[], object],
    device: str,
    repeats: int = 10,
    warmup: int = 10,
    min_time_s: float = DEFAULT_MIN_TIME_S,
    max_spread: float = DEFAULT_MAX_SPREAD,
    flush_l2: bool = True,
) -> Timing:
    """Time `fn` (inputs already built by the caller): first call, warm-up, then samples.

    `repeats` is a floor on the sample count; sampling goes on until `min_time_s` seconds of
    measured time are also reached, or MAX_SAMPLES samples (whichever of that and `repeats`
    is larger) are taken. Samples are blocked so that MAX_SAMPLES of them reach `min_time_s`.
    `warmup` caps the warm-up calls after the first call; 0 means none, and then `settled`
    is False because a steady time was never observed. On CUDA the L2 cache is flushed
    before every timed call, outside the timed region, so no call reads data that the
    previous one left in cache.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    timer = Timer(fn, device, warmup, min_time_s, max_spread, flush_l2)
    timer.sample(repeats, min_time_s)
    return timer.timing()


class Timer:
    """One call timed in parts, so that several calls can take turns (`time --rounds`):
    built, it has made the first call and the warm-up; each `sample(repeats, min_time_s)`
    then keeps a round of samples, and `timing()` holds them all with each round's size."""

    def __init__(
        self,
        fn: Callable[[], object],
        device: str,
        warmup: int = 10,
        min_time_s: float = DEFAULT_MIN_TIME_S,
        max_spread: float = DEFAULT_MAX_SPREAD,
        flush_l2: bool = True,
    ):
        if warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {warmup}")
        if min_time_s < 0:
            raise ValueError(f"min_time_s must be >= 0, got {min_time_s}")
        if max_spread < 0:
            raise ValueError(f"max_spread must be >= 0, got {max_spread}")
        self.max_spread = max_spread
        if is_cuda(device):
            dev = torch.device(device)
            with torch.cuda.device(dev):
                flush = _l2_flusher(dev) if flush_l2 else _no_flush
            self.timer = CUDA_TIMER
            self.measure = partial(_in_device, dev, partial(_time_cuda, fn, flush=flush))
        else:
            self.timer = CPU_TIMER
            self.measure = partial(_time_cpu, fn)
        self.first_ms = self.measure(1)
        warm: list[float] = []
        self.settled = False
        while len(warm) < warmup:
            warm.append(self.measure(1))
            if len(warm) >= 2 and _agree(warm[-2], warm[-1]):
                self.settled = True
                break
        self.warmup_calls = len(warm)
        call_ms = warm[-1] if warm else self.first_ms
        sample_ms = max(MIN_SAMPLE_MS, 1000 * min_time_s / MAX_SAMPLES)
        self.loops = math.ceil(sample_ms / max(call_ms, 1e-6)) if call_ms < sample_ms else 1
        self.samples: list[float] = []
        self.round_sizes: list[int] = []
        self.extra_calls = 0  # untimed calls between rounds (`rewarm`)

    def rewarm(self) -> None:
        """One untimed call before a round, so the round starts from this call's own caches
        rather than those of whatever ran before it."""
        self.measure(1)
        self.extra_calls += 1

    def sample(self, repeats: int, min_time_s: float) -> list[float]:
        """Keep samples until `repeats` of them and `min_time_s` of measured time (or the
        sample cap) are reached; the round's samples."""
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        min_time_ms = 1000 * min_time_s
        cap = max(repeats, MAX_SAMPLES)
        taken: list[float] = []
        measured_ms = 0.0
        while len(taken) < repeats or (measured_ms < min_time_ms and len(taken) < cap):
            taken.append(self.measure(self.loops))
            measured_ms += taken[-1] * self.loops
        self.samples += taken
        self.round_sizes.append(len(taken))
        return taken

    def timing(self) -> Timing:
        rounds = self.round_sizes if len(self.round_sizes) > 1 else []
        return Timing(
            self.samples, self.first_ms, self.warmup_calls, self.loops, self.settled,
            self.timer, self.max_spread, rounds, self.extra_calls,
        )  # fmt: skip


def _in_device(dev: torch.device, measure: Callable[[int], float], loops: int) -> float:
    with torch.cuda.device(dev):
        return measure(loops)


def _agree(a: float, b: float) -> bool:
    return abs(a - b) <= SETTLE_TOLERANCE * min(a, b)


def _time_cpu(fn: Callable[[], object], loops: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(loops):
        fn()
    end = time.perf_counter_ns()
    return (end - start) / 1e6 / loops


def _time_cuda(fn: Callable[[], object], loops: int, flush: Callable[[], None]) -> float:
    """Each call has its own pair of events; the flush before it is queued outside them.

    The first synchronize makes earlier work finish before the block; the flush is queued
    on the same stream before `start`, so it never counts, and while the GPU runs it the
    CPU queues the call, so launch latency does not count either.
    """
    torch.cuda.synchronize()
    events = []
    for _ in range(loops):
        flush()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return sum(start.elapsed_time(end) for start, end in events) / loops


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
