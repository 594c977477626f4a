"""Peak extra memory of one call, above a baseline that already holds the call's inputs.

On CUDA the caching allocator keeps exact statistics. On Linux CPU the kernel's high-water
mark (VmHWM) is reset through /proc/self/clear_refs just before the call, so the peak is
exact rather than sampled. Elsewhere RSS is sampled in a background thread, which can miss
short spikes and so gives a lower bound.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import resource
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from attnbench.measure import is_cuda
from attnbench.measure.allocator import exact_peaks

CLEAR_REFS = Path("/proc/self/clear_refs")
PROC_STATUS = Path("/proc/self/status")
PROC_STATM = Path("/proc/self/statm")
SAMPLE_INTERVAL_S = 0.001


@dataclass
class PeakMemory:
    """Peak extra bytes during a call and how they were obtained."""

    bytes: int  # peak extra memory during the call, above the baseline
    method: str  # "cuda-allocator" | "vmhwm" | "rss-sampled"


def peak_memory(fn: Callable[[], object], device: str) -> PeakMemory:
    """Call `fn` once and report the most memory it held beyond what existed before it.

    No garbage collection runs during the call: one there could free an earlier case's
    garbage for the call to reuse, hiding its allocations (or shrink the baseline under it)."""
    with _collection_paused():
        if is_cuda(device):
            return _cuda_peak(fn, torch.device(device))
        _release_free_heap()
        with exact_peaks():
            if _reset_high_water_mark():
                return _vmhwm_peak(fn)
            return _sampled_peak(fn)


@contextmanager
def _collection_paused() -> Iterator[None]:
    """Automatic garbage collection off inside, as it was after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def available_bytes(device: str) -> int:
    """Memory a new case could still use, to skip cases that cannot fit before running them:
    on the CPU the least of the free memory, the container's (cgroup) headroom and the
    address space left under this process's limit (ulimit -v), which fails allocations long
    before memory runs out."""
    if is_cuda(device):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    free = _meminfo_available()
    if free is None:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    headrooms = (_cgroup_headroom(), _address_space_headroom())
    return min([free, *(h for h in headrooms if h is not None)])


def _cuda_peak(fn: Callable[[], object], dev: torch.device) -> PeakMemory:
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    baseline = torch.cuda.memory_allocated(dev)
    result = fn()
    torch.cuda.synchronize(dev)
    peak = torch.cuda.max_memory_allocated(dev) - baseline
    del result  # kept alive until read, so memory the call returns counts
    return PeakMemory(int(peak), "cuda-allocator")


def _vmhwm_peak(fn: Callable[[], object]) -> PeakMemory:
    baseline = _status_kib("VmRSS")
    result = fn()
    peak = _status_kib("VmHWM") - baseline
    del result
    return PeakMemory(max(peak, 0) * 1024, "vmhwm")


def _sampled_peak(fn: Callable[[], object]) -> PeakMemory:
    baseline = _rss_bytes()
    highest = baseline
    done = threading.Event()

    def sample() -> None:
        nonlocal highest
        while not done.is_set():
            highest = max(highest, _rss_bytes())
            done.wait(SAMPLE_INTERVAL_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = fn()
        highest = max(highest, _rss_bytes())
    finally:
        done.set()
        sampler.join()
    del result
    return PeakMemory(max(highest - baseline, 0), "rss-sampled")


def _release_free_heap() -> None:
    """Free memory kept in the heap by earlier calls would be reused without RSS growth,
    hiding the next call's allocations, so hand free pages back first. Only the youngest
    generation is collected: a full collection costs a tenth of a second or more once torch
    is loaded, on every case, and is not needed, as garbage left uncollected stays allocated
    (the call cannot reuse it) while no collection runs during the call."""
    gc.collect(0)
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to trim with


def _reset_high_water_mark() -> bool:
    """Writing 5 to clear_refs sets VmHWM to the current RSS (Linux only, may be forbidden)."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return _status_kib("VmHWM") >= 0


def _status_kib(field: str) -> int:
    for line in PROC_STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def _rss_bytes() -> int:
    try:
        resident_pages = int(PROC_STATM.read_text().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        # No /proc: only the lifetime maximum is known, so growth of it is what we can see.
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return maxrss if sys.platform == "darwin" else maxrss * 1024


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _address_space_headroom() -> int | None:
    """RLIMIT_AS minus the address space already mapped (VmSize), None without a limit."""
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit == resource.RLIM_INFINITY:
        return None
    try:
        used = max(_status_kib("VmSize"), 0) * 1024
    except OSError:  # no /proc: the limit is all that is known
        used = 0
    return max(limit - used, 0)


def _cgroup_headroom() -> int | None:
    """A container's memory limit can be far below what the host reports as available."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
    except OSError:
        return None
    if limit == "max":
        return None
    return max(int(limit) - int(used), 0)
