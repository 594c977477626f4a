"""Whether the host is quiet enough for its ceilings to be final, and what it was doing.

A ceiling is the fastest the machine goes; other processes only ever slow a measurement
down, so ceilings measured beside them read low, and every % of bound set against them reads
high (a fp32 GEMM peak read at a fifth of its value puts a matrix product at 300 % of it).
The host counts as busy when, just before measuring, the 1-minute load average per CPU is
at least BUSY_LOAD (other processes then hold half the CPUs on average, and a measurement
on all of them shares its CPUs), or when during the measurement our threads waited for a
CPU more than BUSY_CPU_WAIT of the time they were ready to run (the direct sign, which the
load average shows only a minute late). Ceilings measured on a busy host are provisional.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

from attnbench.measure.conditions import case_conditions, snapshot

BUSY_LOAD = 0.5  # 1-minute load average per CPU
BUSY_CPU_WAIT = 0.2  # share of runnable time our threads waited for a CPU


def cpus() -> int:
    return os.cpu_count() or 1


def busy_load(load: float | None) -> str | None:
    """Why the host is busy by its load average, or None (unknown counts as quiet)."""
    if load is None or load < BUSY_LOAD * cpus():
        return None
    return f"load average {load:.2f} on {cpus()} CPUs"


def quiet_now() -> str | None:
    """None when the host is quiet now, else why it is not."""
    return busy_load(snapshot("cpu")["load"])


def provenance(before: dict, after: dict, seconds: float) -> dict:
    """The record of a measurement between the `snapshot`s `before` and `after`: when,
    the load and CPU count, the CPU wait, and whether it is provisional and why."""
    around = case_conditions(before, after)
    wait = around["cpu_wait"]
    reasons = [busy_load(before["load"])]
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
    return text
