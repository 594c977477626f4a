"""Whether the host is quiet enough for its ceilings to be final, and what it was doing.

A ceiling is the fastest the machine goes; other processes only ever slow a measurement
down, so ceilings measured beside them read low, and every % of bound set against them reads
high (a fp32 GEMM peak read at a fifth of its value puts a matrix product at 300 % of it).
The host counts as busy when, during the measurement, other processes used more than
BUSY_OTHERS of the machine's CPU time (from /proc/stat, less this process's own), or when our
threads waited for a CPU more than BUSY_CPU_WAIT of the time they were ready to run. The
1-minute load average is no judge where /proc/stat can be read: it lags by a minute and
counts this very user's previous command (a `pip install`, the last run), so it called a
quiet host busy. Where /proc/stat cannot be read, a load average per CPU of BUSY_LOAD or
more counts as busy. Ceilings measured on a busy host are provisional.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

from attnbench.measure.conditions import case_conditions, snapshot

BUSY_LOAD = 0.5  # 1-minute load average per CPU (where /proc/stat cannot be read)
BUSY_OTHERS = 0.25  # share of the machine's CPU time other processes used
BUSY_CPU_WAIT = 0.2  # share of runnable time our threads waited for a CPU
QUIET_PROBE_S = 0.5  # how long `quiet_now` watches the other processes


def cpus() -> int:
    return os.cpu_count() or 1


def busy_load(load: float | None) -> str | None:
    """Why the host is busy by its load average, or None (unknown counts as quiet)."""
    if load is None or load < BUSY_LOAD * cpus():
        return None
    return f"load average {load:.2f} on {cpus()} CPUs"


def host_cpu() -> tuple[float, float, float] | None:
    """(wall seconds, CPU seconds every process used, CPU seconds this process used) now,
    or None where /proc/stat cannot be read."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
        ticks = [int(f) for f in fields[1:]]
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    if fields[0] != "cpu" or len(ticks) < 5 or hz <= 0:
        return None
    used = sum(ticks[:8]) - ticks[3] - ticks[4]  # all but idle and iowait (guests are in user)
    own = os.times()
    return time.monotonic(), used / hz, own.user + own.system


def others_share(before, after) -> float | None:
    """The share of the machine's CPU time that processes other than this one used between
    two `host_cpu` readings; None when either is missing or no time passed."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    others = (after[1] - before[1]) - (after[2] - before[2])
    return min(max(others / ((after[0] - before[0]) * cpus()), 0.0), 1.0)


def busy_others(share: float | None) -> str | None:
    if share is None or share <= BUSY_OTHERS:
        return None
    return f"other processes used {share:.0%} of the {cpus()} CPUs"


def quiet_now() -> str | None:
    """None when the host is quiet now, else why it is not: the other processes watched
    for QUIET_PROBE_S, or the load average where /proc/stat cannot be read."""
    before = host_cpu()
    if before is None:
        return busy_load(snapshot("cpu")["load"])
    time.sleep(QUIET_PROBE_S)
    return busy_others(others_share(before, host_cpu()))


def provenance(before: dict, after: dict, seconds: float) -> dict:
    """The record of a measurement between the `snapshot`s `before` and `after`: when,
    the load and CPU count, the CPU wait, and whether it is provisional and why."""
    around = case_conditions(before, after)
    wait = around["cpu_wait"]
    others = others_share(before.get("host"), after.get("host"))
    others = None if others is None else round(others, 3)  # as recorded, so as said
    reasons = [busy_load(before["load"]) if others is None else busy_others(others)]
    if wait is not None and wait > BUSY_CPU_WAIT:
        reasons.append(f"threads waited for a CPU {wait:.0%} of the time")
    why = "; ".join(r for r in reasons if r)
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(seconds, 1),
        "cpus": cpus(),
        "load_before": before["load"],
        "load_after": after["load"],
        "cpu_wait": wait,
        "others_share": others,
        "provisional": bool(why),
        "busy": why,
    }


def describe(record: dict) -> str:
    """One phrase: "load 3.10 -> 2.90 on 2 CPUs, CPU wait 35%"."""
    load = record.get("load_before")
    text = "load unknown" if load is None else f"load {load:.2f}"
    if record.get("load_after") is not None and load is not None:
        text += f" -> {record['load_after']:.2f}"
    text += f" on {record.get('cpus', '?')} CPUs"
    if record.get("cpu_wait") is not None:
        text += f", CPU wait {record['cpu_wait']:.0%}"
    if record.get("others_share") is not None:
        text += f", other processes {record['others_share']:.0%} of the CPUs"
    return text
