"""A call under torch.profiler: its trace, and on a GPU the device time of each stage.

A backend marks each stage with a range named "backend.stage" while a profiler records
(`Backend.stage`). On the CPU stages are timed by `stageclock` instead, as the profiler
slows every op it records; on CUDA a stage's time is the device time of the kernels
launched inside its ranges, which only the profiler sees.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from attnbench.measure import is_cuda


def profiled(fn: Callable[[], object], device: str) -> tuple[profile, float]:
    """Run `fn` once under the profiler: the profile and the call's wall time in ms."""
    activities = [ProfilerActivity.CPU]
    if is_cuda(device):
        activities.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    prof = profile(activities=activities)
    with _quiet_stderr():
        prof.start()
    try:
        start = time.perf_counter_ns()
        fn()
        if is_cuda(device):
            torch.cuda.synchronize()
        wall_ms = (time.perf_counter_ns() - start) / 1e6
    finally:
        with _quiet_stderr():
            prof.stop()
    return prof, wall_ms


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The profiler's C++ side logs a line to the process's stderr at every start and stop;
    a progress bar and a user's terminal need neither, so file descriptor 2 points to
    /dev/null meanwhile."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def under_nvtx(fn: Callable[[], object], calls: int) -> None:
    """Run `fn` `calls` times with torch emitting an NVTX range for every op and every
    stage range, for a CUDA run under Nsight Systems (`nsys profile -t cuda,nvtx`)."""
    with torch.autograd.profiler.emit_nvtx():
        for _ in range(calls):
            fn()
    torch.cuda.synchronize()


def device_stage_ms(events, prefix: str) -> dict[str, float]:
    """On a GPU: each kernel's device time goes to the innermost stage range that encloses
    the host op that launched it, in time, on any thread. Autograd runs a CUDA backward on
    a thread of its own, so its ops sit inside the "backward" range in time but not in that
    thread's tree of ranges."""
    ranges = [(e, _stage(e, prefix)) for e in events if _stage(e, prefix) is not None]
    spent = {stage: 0.0 for _, stage in ranges}
    for event in events:
        device_us = float(getattr(event, "self_device_time_total", 0.0) or 0.0)
        if device_us <= 0:
            continue
        stage = _stage(event, prefix) or _innermost(event, ranges)
        if stage is not None:
            spent[stage] += device_us / 1e3
    return spent


def _innermost(event, ranges) -> str | None:
    """The stage of the latest-starting range whose interval holds `event`'s."""
    start, end = event.time_range.start, event.time_range.end
    best = None
    for outer, stage in ranges:
        r = outer.time_range
        if r.start <= start and end <= r.end and (best is None or r.start >= best[0]):
            best = (r.start, stage)
    return None if best is None else best[1]


def _stage(event, prefix: str) -> str | None:
    name = event.name
    return name[len(prefix) :] if name.startswith(prefix) else None


def export_trace(prof: profile, path: Path) -> None:
    """The profile as a Chrome/Perfetto trace at `path`, whole or not at all."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
