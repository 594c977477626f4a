"""`attnbench selftest`: can this machine be trusted? Every backend and kernel path against
its plain-torch reference on one device, hash codes against the CPU's, the timer, NVML and
the machine ceilings: one `Check` row each, pass, fail or skipped with the reason.

A check that raises is a failed row naming the exception, never a crash, so one broken
kernel cannot hide the others. Under numba's CUDA simulator the CUDA kernels run thread by
thread on the CPU: shapes are tiny there, and checks that need a real GPU are skipped.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from attnbench.studies.selftest.target import (  # noqa: F401 (used as selftest.*)
    Check,
    Target,
    measured,
    skipped,
    target,
)


@dataclass
class Report:
    """The rows of one selftest, the seconds numba took to compile (or load) the kernels
    before them, and the seconds of the checks themselves."""

    target: Target
    environment: dict
    checks: list[Check] = field(default_factory=list)
    compile_s: float | None = None
    checks_s: float = 0.0

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if c.status == "fail"]

    def as_dict(self) -> dict:
        return {
            "device": self.target.device,
            "kernels": self.target.kernels,
            "environment": self.environment,
            "compile_s": self.compile_s,
            "checks_s": self.checks_s,
            "failed": self.failed,
            "checks": [asdict(c) for c in self.checks],
        }


def guarded(name: str, check: Callable[[], list[Check]]) -> list[Check]:
    """The rows of `check`, or one failed row naming what it raised."""
    try:
        return check()
    except Exception as exc:  # noqa: BLE001 - a broken path is a failed row, not a crash
        return [Check(name, "fail", detail=f"{type(exc).__name__}: {exc}")]


def run(where: Target, on_check: Callable[[str], None] | None = None) -> Report:
    """Every check on `where`, in order; `on_check(name)` before each group."""
    from attnbench.studies.selftest import machine as selftest_machine
    from attnbench.studies.selftest import numeric as selftest_numeric

    report = Report(where, selftest_machine.environment(where))
    step = on_check or (lambda name: None)
    step("numba compile")
    report.compile_s = selftest_numeric.warm_up(where)
    start = time.perf_counter()
    with _simulating(where):
        for name, group in (*selftest_numeric.groups(where), *selftest_machine.groups(where)):
            step(name)
            report.checks += guarded(name, group)
    report.checks_s = time.perf_counter() - start
    return report


def _simulating(where: Target):
    """The simulator's guard (`kernels.simulator`) where kernels are simulated."""
    if not where.simulated:
        return contextlib.nullcontext()
    from attnbench.kernels.simulator import simulating

    return simulating()
