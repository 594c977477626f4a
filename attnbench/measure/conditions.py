"""The host's conditions around a case: CPU wait, 1-minute load average, CPU frequency.

Read before and after each case, they explain an unstable case afterwards. The CPU wait is
the direct sign of competition: the share of the time our threads were ready to run that
they spent waiting in the scheduler's run queue for a CPU (Linux schedstat). Other processes
competing for the CPUs also raise the load average above the CPU count, but that is a
1-minute moving average, so competition that began seconds before shows only in part; a
governor or a thermal limit changing the clock shows as a frequency change.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

CPU_DIR = Path("/sys/devices/system/cpu")  # cpuN/cpufreq/scaling_cur_freq holds kHz
TASKS = Path("/proc/self/task")  # TID/schedstat: ns on a CPU, ns waiting for one, slices
CPUINFO = Path("/proc/cpuinfo")  # "cpu MHz : 2400.000" per CPU where cpufreq is absent
FREQ_CHANGE = 0.05  # relative change of CPU frequency worth naming as a cause
# Share of runnable time spent waiting for a CPU above which a case counts as contended: an
# idle host keeps it near zero, while one busy process per CPU pushes it towards a half.
MAX_CPU_WAIT = 0.05
UNKNOWN = "unknown (no load or frequency change seen)"


def snapshot(device: str) -> dict:
    """{"load": 1-min load average, "cpu_mhz": mean current frequency, "sched": (ns run,
    ns waited) summed over this process's threads}; None where unreadable.

    The host is read on every device, since the CPU also launches GPU work.
    """
    return {"load": _load_average(), "cpu_mhz": _cpu_mhz(), "sched": _sched_ns()}


def case_conditions(before: dict, after: dict) -> dict:
    """One case's conditions from snapshots taken just before and just after it."""
    return {
        "cpu_wait": _wait_share(before.get("sched"), after.get("sched")),
        "load_before": before["load"],
        "load_after": after["load"],
        "cpu_mhz_before": before["cpu_mhz"],
        "cpu_mhz_after": after["cpu_mhz"],
    }


def contended(conditions: dict) -> bool:
    """Our threads waited for a CPU for more than MAX_CPU_WAIT of their runnable time: the
    samples are slowed by other processes however steady they look."""
    wait = conditions.get("cpu_wait")
    return wait is not None and wait > MAX_CPU_WAIT


def likely_cause(conditions: list[dict], cpus: int | None = None) -> str:
    """One short phrase naming what most likely disturbed the cases with these conditions.

    A CPU wait above MAX_CPU_WAIT, or a load average above the CPU count, means runnable
    threads waited for a CPU; a frequency reading far from the first one means the clock
    changed during the run.
    """
    cpus = cpus or os.cpu_count() or 1
    causes = []
    waits = _readings(conditions, "cpu_wait")
    if waits and max(waits) > MAX_CPU_WAIT:
        causes.append(
            f"the benchmark's threads waited for a CPU up to {max(waits):.0%} of the time"
        )
    loads = _readings(conditions, "load_before", "load_after")
    if loads and max(loads) > cpus:
        causes.append(f"load average {max(loads):.1f} on {cpus} CPUs (other processes competing)")
    freqs = _readings(conditions, "cpu_mhz_before", "cpu_mhz_after")
    if freqs:
        first = freqs[0]
        farthest = max(freqs, key=lambda f: abs(f - first))
        if abs(farthest - first) > FREQ_CHANGE * max(first, farthest):
            causes.append(f"CPU frequency changed {first:.0f} -> {farthest:.0f} MHz")
    return "; ".join(causes) or UNKNOWN


def _readings(conditions: list[dict], *keys: str) -> list[float]:
    """The readings under `keys` in run order, missing ones left out."""
    return [c[key] for c in conditions for key in keys if c.get(key) is not None]


def _sched_ns() -> tuple[int, int] | None:
    """(ns on a CPU, ns waiting for one) summed over this process's live threads."""
    run = wait = 0
    try:
        tasks = list(TASKS.iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            fields = (task / "schedstat").read_text().split()
            run, wait = run + int(fields[0]), wait + int(fields[1])
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return (run, wait) if run else None


def _wait_share(before, after) -> float | None:
    """Waited / (ran + waited) between two `_sched_ns` readings."""
    if before is None or after is None:
        return None
    ran, waited = after[0] - before[0], after[1] - before[1]
    if ran <= 0 or waited < 0:  # threads ended between the readings: no honest share
        return None
    return round(waited / (ran + waited), 4)


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not on every platform
        return None


def _cpu_mhz() -> float | None:
    """Mean over CPUs of the current frequency: cpufreq in sysfs, else /proc/cpuinfo."""
    khz = [_read_number(path) for path in CPU_DIR.glob("cpu[0-9]*/cpufreq/scaling_cur_freq")]
    khz = [value for value in khz if value is not None]
    if khz:
        return round(sum(khz) / len(khz) / 1000, 1)
    try:
        text = CPUINFO.read_text()
    except OSError:
        return None
    mhz = [float(value) for value in re.findall(r"^cpu MHz\s*:\s*([0-9.]+)", text, re.MULTILINE)]
    return round(sum(mhz) / len(mhz), 1) if mhz else None


def _read_number(path: Path) -> float | None:
    try:
        return float(path.read_text().strip())
    except (OSError, ValueError):
        return None
