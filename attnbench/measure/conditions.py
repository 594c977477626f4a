"""The host's conditions around a case: 1-minute load average and mean CPU frequency.

Read before and after each case, they explain an unstable case afterwards: other processes
competing for the CPUs raise the load average above the CPU count, and a governor or a
thermal limit changing the clock shows as a frequency change. The load average is a
1-minute moving average, so competition that began seconds before shows only in part.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

CPU_DIR = Path("/sys/devices/system/cpu")  # cpuN/cpufreq/scaling_cur_freq holds kHz
CPUINFO = Path("/proc/cpuinfo")  # "cpu MHz : 2400.000" per CPU where cpufreq is absent
FREQ_CHANGE = 0.05  # relative change of CPU frequency worth naming as a cause
UNKNOWN = "unknown (no load or frequency change seen)"


def snapshot(device: str) -> dict:
    """{"load": 1-min load average, "cpu_mhz": mean current frequency}; None where unreadable.

    The host is read on every device, since the CPU also launches GPU work.
    """
    return {"load": _load_average(), "cpu_mhz": _cpu_mhz()}


def case_conditions(before: dict, after: dict) -> dict:
    """One case's conditions from snapshots taken just before and just after it."""
    return {
        "load_before": before["load"],
        "load_after": after["load"],
        "cpu_mhz_before": before["cpu_mhz"],
        "cpu_mhz_after": after["cpu_mhz"],
    }


def likely_cause(conditions: list[dict], cpus: int | None = None) -> str:
    """One short phrase naming what most likely disturbed the cases with these conditions.

    A load average above the CPU count means runnable processes waited for a CPU; a frequency
    reading far from the first one means the clock changed during the run.
    """
    cpus = cpus or os.cpu_count() or 1
    causes = []
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
