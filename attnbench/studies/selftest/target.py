"""What selftest checks, and where: one `Check` row per check, and the `Target` device,
kernels, shapes and float types the checks run on."""

from __future__ import annotations

from dataclasses import dataclass

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
