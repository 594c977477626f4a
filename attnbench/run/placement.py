"""Where a case ran, recorded on each of its rows: the host, the process, the hardware, and
how many of the run's workers shared the host at once.

Every executor stamps its rows the same way, so a local run and a cluster run write the same
columns: a row names the process that measured its case or, for a case no process measured
(skipped by the runner, or crashed with its isolated process), the process that wrote it.
The process is named by its executor's name (`executors.EXECUTORS`): `in-process/PID` for
the run's own process, `isolated/PID`, `ray-N/PID` for Ray worker N. Older files name the
run's own process `local/PID`; the column is text, and they read as they are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

from attnbench.results.schema import Row


@dataclass(frozen=True)
class Placement:
    """`worker` is how and which process measured: "in-process/PID", "isolated/PID" or
    "ray-N/PID". `device_name` and `threads`, where set, are the measuring process's own (a
    remote worker's machine is not the one the run's environment record describes)."""

    node: str
    worker: str
    hardware: str
    co_tenancy: int = 1
    device_name: str = ""
    threads: int | None = None

    def stamp(self, rows: list[Row], co_tenancy: int | None = None) -> list[Row]:
        """Fill in where the rows ran; rows already stamped (by their worker) keep theirs."""
        for row in rows:
            if not row.worker:
                row.node, row.worker, row.hardware = self.node, self.worker, self.hardware
                row.device_name = row.device_name or self.device_name
                row.threads = row.threads if row.threads is not None else self.threads
            row.co_tenancy = co_tenancy or row.co_tenancy or self.co_tenancy
        return rows


def spread(rows: list[Row]) -> list[Row]:
    """Rows a study's `finish` added to a case (a fitted slope) ran where the case ran."""
    source = next((row for row in rows if row.worker), None)
    if source is not None:
        fields = dict(
            node=source.node, worker=source.worker, hardware=source.hardware,
            device_name=source.device_name, threads=source.threads,
        )  # fmt: skip
        Placement(**fields).stamp(rows, source.co_tenancy)
    return rows


def here(kind: str, device: str, **fields) -> Placement:
    """This process, as `kind` ("in-process", "isolated", "ray-N"), measuring on `device`."""
    return Placement(_node(), f"{kind}/{os.getpid()}", _hardware(device), **fields)


@cache
def _node() -> str:
    from attnbench.measure.hardware import node_name

    return node_name()


@cache
def _hardware(device: str) -> str:
    from attnbench.measure.hardware import hardware

    return hardware(device)
