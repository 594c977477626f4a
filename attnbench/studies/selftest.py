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

STATUSES = ("pass", "fail", "skipped")


@dataclass
class Check:
    """One row: what was checked, its status, the measured error against its tolerance
    (None where the check is not a number) and what it compared or why it was skipped."""

    name: str
    status: str
    error: float | None = None
    tolerance: float | None = None
    detail: str = ""


def measured(name: str, error: float, tolerance: float, detail: str = "") -> Check:
    """A numeric check: passes when the error is within the tolerance (a NaN never is)."""
    return Check(name, "pass" if error <= tolerance else "fail", error, tolerance, detail)


def skipped(name: str, reason: str) -> Check:
    return Check(name, "skipped", detail=reason)


@dataclass(frozen=True)
class Sizes:
    """Shapes of the checks: B, H, n = height x width tokens, head dims d and d_v, YOSO's
    m and tau, and the bound of its pair backwards."""

    batch: int
    heads: int
    height: int
    width: int
    d: int
    dv: int
    m: int
    tau: int
    bound: int

    @property
    def n(self) -> int:
        return self.height * self.width


FULL = Sizes(batch=1, heads=2, height=8, width=8, d=16, dv=16, m=8, tau=4, bound=2)
QUICK = Sizes(batch=1, heads=2, height=4, width=4, d=8, dv=8, m=4, tau=3, bound=2)
# The simulator runs one OS thread per CUDA thread: a handful of rows, hashes and bits.
SIMULATED = Sizes(batch=1, heads=1, height=2, width=3, d=4, dv=3, m=2, tau=2, bound=2)


@dataclass(frozen=True)
class Target:
    """Where the checks run: `device` holds the tensors ("cpu" or "cuda"), `kernels` is
    where numba runs ("cpu", "cuda" or "cuda-sim"), `dtypes` the float types checked."""

    device: str
    kernels: str
    sizes: Sizes
    dtypes: tuple[str, ...]

    @property
    def simulated(self) -> bool:
        return self.kernels == "cuda-sim"

    @property
    def gpu(self) -> bool:
        return self.kernels == "cuda"


def target(device: str, quick: bool) -> Target:
    """The target of `device` ("cpu", "cuda" or "cuda-sim", already resolved)."""
    import torch

    if device == "cuda-sim":
        return Target("cpu", "cuda-sim", SIMULATED, ("float32",))
    sizes = QUICK if quick else FULL
    if device == "cuda":
        halves = ("float16", "bfloat16") if torch.cuda.is_bf16_supported() else ("float16",)
        return Target("cuda", "cuda", sizes, ("float32", *halves))
    return Target("cpu", "cpu", sizes, ("float32", "bfloat16", "float16"))


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


def run(target: Target, on_check: Callable[[str], None] | None = None) -> Report:
    """Every check on `target`, in order; `on_check(name)` before each group."""
    from attnbench.studies import selftest_machine, selftest_numeric

    report = Report(target, selftest_machine.environment(target))
    step = on_check or (lambda name: None)
    step("numba compile")
    report.compile_s = selftest_numeric.warm_up(target)
    start = time.perf_counter()
    with _simulating(target):
        for name, group in (*selftest_numeric.groups(target), *selftest_machine.groups(target)):
            step(name)
            report.checks += guarded(name, group)
    report.checks_s = time.perf_counter() - start
    return report


def _simulating(target: Target):
    """The simulator's guard (`kernels.simulator`) where kernels are simulated."""
    if not target.simulated:
        return contextlib.nullcontext()
    from attnbench.kernels.simulator import simulating

    return simulating()
