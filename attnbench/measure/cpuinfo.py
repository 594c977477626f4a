"""What the kernel tells about this CPU: its caches (sysfs), SIMD flags, core count and
clocks (/proc/cpuinfo, cpufreq), and the theoretical fp32 peak they give.

Every reader is best effort: a file that is absent or unreadable (a container, another OS)
gives the stated fallback, never an error, since the numbers only annotate measurements.
"""

from __future__ import annotations

import math
import os
import platform
import re
from pathlib import Path

from attnbench.kernels.caches import (  # noqa: F401  (re-exported: the measure's view of them)
    CACHE_ROOT,
    FALLBACK_CACHES,
    GIB,
    KIB,
    MIB,
    cpu_caches,
)

CPUINFO = Path("/proc/cpuinfo")
CPUFREQ_MAX = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
# fp32 lanes of the widest vector unit a flag announces, widest first
SIMD_LANES = (("avx512f", 16), ("avx2", 8), ("avx", 8), ("asimd", 4), ("sse2", 4), ("sse", 4))


def read_text(path: Path) -> str:
    """The file's text; "" when it cannot be read."""
    try:
        return path.read_text()
    except OSError:
        return ""


def cpuinfo_fields(text: str) -> dict:
    """The first value of every /proc/cpuinfo key; "cpu MHz" the highest over all CPUs
    (a float); "cores" the distinct (physical id, core id) pairs, else the processor
    entries, else None."""
    fields: dict = {}
    mhz, cores, processors, package = [], set(), 0, ""
    for line in text.splitlines():
        key, sep, value = (part.strip() for part in line.partition(":"))
        if not sep:
            continue
        fields.setdefault(key, value)
        if key == "cpu MHz" and re.fullmatch(r"\d+(\.\d*)?", value):
            mhz.append(float(value))
        elif key == "processor":
            processors += 1
        elif key == "physical id":
            package = value
        elif key == "core id":
            cores.add((package, value))
    fields.pop("cpu MHz", None)
    if mhz:
        fields["cpu MHz"] = max(mhz)
    fields["cores"] = len(cores) or processors or None
    return fields


def model_name() -> str:
    """The CPU's model name; the architecture when /proc/cpuinfo has none."""
    name = cpuinfo_fields(read_text(CPUINFO)).get("model name")
    return name or platform.processor() or platform.machine() or "cpu"


def this_cpu_peak(threads: int) -> dict:
    """`cpu_peak` of this machine's /proc/cpuinfo and cpufreq maximum."""
    max_khz = read_text(CPUFREQ_MAX).strip()
    return cpu_peak(read_text(CPUINFO), threads, float(max_khz) if max_khz.isdigit() else None)


def cpu_peak(cpuinfo: str, threads: int, max_khz: float | None = None) -> dict:
    """The theoretical fp32 peak with every input stored: cores used x fp32 SIMD lanes x 2
    (flops per FMA) x FMA units x clock GHz. Lanes from the flags (SIMD_LANES); FMA units
    are assumed: 2 with FMA, 1 without (an add pipe and a multiply pipe do the same
    work); the clock is the highest of cpufreq's maximum (`max_khz`), cpu MHz and the GHz
    in the model name. `gflops_fp32` is None when no clock is known."""
    fields = cpuinfo_fields(cpuinfo)
    flags = set(str(fields.get("flags") or fields.get("Features") or "").split())
    simd, lanes = next(((flag, n) for flag, n in SIMD_LANES if flag in flags), ("scalar", 1))
    found = re.search(r"(\d+(?:\.\d+)?)\s*GHz", str(fields.get("model name", "")), re.I)
    clocks = {
        "cpufreq_max": max_khz / 1e6 if max_khz else None,
        "cpu_mhz": fields["cpu MHz"] / 1e3 if "cpu MHz" in fields else None,
        "model_name": float(found.group(1)) if found else None,
    }
    known = [ghz for ghz in clocks.values() if ghz]
    cores = fields["cores"] or os.cpu_count() or threads
    peak = {
        "cores": cores,
        "cores_used": min(threads, cores),
        "simd": simd,
        "fp32_lanes": lanes,
        "flops_per_fma": 2,
        "fma_units": 2 if {"fma", "asimd"} & flags else 1,
        "fma_units_assumed": True,
        "clock_ghz": max(known) if known else None,
        "clock_sources_ghz": clocks,
    }
    per_clock = math.prod(
        peak[k] for k in ("cores_used", "fp32_lanes", "flops_per_fma", "fma_units")
    )
    peak["gflops_fp32"] = per_clock * peak["clock_ghz"] if known else None
    return peak
