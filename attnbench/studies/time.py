"""The efficiency study (YOSO Fig. 7, SCRAM Fig. 4): runtime and peak memory vs length.

One case is one backend at one length. The runner builds the inputs once per length, outside
every timed region, and shares them between the backends; the `baseline` backend runs first
at each length so every later row can carry its speed-up against it.
Most backends take the same time on any inputs; a searching one (scram) does not, since
PatchMatch stops retrying lists that have settled, which happens early on a coherent image
and late on random vectors: `inputs` picks what to time on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import torch

from attnbench.backends import Backend
from attnbench.backends.cost import Shape, dense_equivalent
from attnbench.inputs import Inputs, Source
from attnbench.measure import conditions
from attnbench.measure.ceilings import Ceilings
from attnbench.measure.memory import peak_memory
from attnbench.measure.roofline import call_throughput
from attnbench.measure.telemetry import GpuTelemetry
from attnbench.measure.timing import DEFAULT_MAX_SPREAD, DEFAULT_MIN_TIME_S, time_call
from attnbench.results.schema import Row
from attnbench.run.case import MODES, Case
from attnbench.run.executors import CaseInputs
from attnbench.run.study import Measure, Study, case_row

__all__ = ["MODES", "TimeSpec", "measure"]
MIB = 1024 * 1024


@dataclass
class TimeSpec(Study):
    """The study: every backend at every length; rows get their speed-up in `finish`."""

    steady: ClassVar[bool] = True  # timed calls reuse freed blocks; isolated workers do too
    name: ClassVar[str] = "time"  # the rows' study

    seqs: list[int]
    backends: list[Backend]
    batch: int = 1
    heads: int = 4
    dim: int = 64
    dtype: torch.dtype = torch.float32
    device: str = "cpu"
    mode: str = "fwd"
    repeats: int = 10
    warmup: int = 10
    seed: int = 0
    grids: list[tuple[int, int]] | None = None  # images H x W instead of 1-D sequences
    inputs: Source | None = None  # None: random; a file's shape sets batch, heads and dim
    baseline: Backend | None = None  # speed-ups are against this backend, when it runs
    min_time: float = DEFAULT_MIN_TIME_S  # seconds of samples per case, at least
    max_spread: float = DEFAULT_MAX_SPREAD  # IQR / median above this marks a case unstable
    ceilings: Ceilings | None = None  # this machine's limits: rows get % of their roofline bound

    def __post_init__(self):
        if self.grids:
            self.seqs = [h * w for h, w in self.grids]
        if self.inputs is None:
            self.inputs = Inputs("random", self.batch, self.heads, self.dim)
        elif self.inputs.fixed_shape:
            self.batch, self.heads, self.dim = self.inputs.batch, self.inputs.heads, self.inputs.dim
        self._speedups = Speedups(self.baseline)

    def layouts(self) -> list[tuple[int, tuple[int, int] | None]]:
        """(n, grid) of every length: grid None for a 1-D sequence."""
        return list(zip(self.seqs, self.grids or [None] * len(self.seqs), strict=True))

    def settings(self) -> dict:
        """The options that shape every case's measurement (part of its `case_id`)."""
        return {
            "repeats": self.repeats,
            "warmup": self.warmup,
            "min_time": self.min_time,
            "max_spread": self.max_spread,
        }

    @property
    def cases(self) -> list[Case]:
        """Every backend at every length, the baseline first at each length; an image is
        repeated over batch and heads."""
        base = self.baseline.spec if self.baseline else None
        backends = sorted(self.backends, key=lambda b: b.spec != base)
        settings = self.settings()
        dtype = str(self.dtype).removeprefix("torch.")
        shared = dict(
            study=self.name, inputs=self.inputs, batch=self.batch, heads=self.heads,
            dim=self.dim, dtype=dtype, device=self.device, mode=self.mode, seed=self.seed,
            settings=settings,
        )  # fmt: skip
        return [
            Case(backend=backend, n=n, grid=grid, **shared)
            for n, grid in self.layouts()
            for backend in backends
        ]

    @property
    def measure(self) -> Measure:
        return Measure(partial(measure, ceilings=self.ceilings), "time_ms", "ms")

    def finish(self, case: Case, rows: list[Row]) -> list[Row]:
        return self._speedups(case, rows)


def measure(case: Case, inputs: CaseInputs, ceilings: Ceilings | None = None) -> list[Row]:
    """Median time of the call (every sample kept) with its stability verdict and the host's
    (and GPU's) conditions around it, its throughput (`case_throughput`), its first call,
    and its peak memory. A case is stable when its samples are steady and its threads did
    not wait for a CPU: steady samples taken while other processes held the CPUs are
    steadily slow."""
    call = timed_call(case, inputs())
    settings = case.settings
    telemetry = GpuTelemetry(case.device)
    before = conditions.snapshot(case.device)
    telemetry.start()
    timing = time_call(
        call, case.device, settings["repeats"], settings["warmup"],
        min_time_s=settings["min_time"], max_spread=settings["max_spread"],
    )  # fmt: skip
    gpu = telemetry.stop(timing.calls)
    around = conditions.case_conditions(before, conditions.snapshot(case.device)) | gpu
    memory = peak_memory(call, case.device)
    return [
        case_row(
            case,
            "time_ms",
            value=timing.median,
            unit="ms",
            p10=timing.p10,
            p90=timing.p90,
            count=len(timing.samples_ms),
            samples=list(timing.samples_ms),
            method=timing.timer if timing.loops == 1 else f"{timing.timer} x{timing.loops}",
            reason="" if timing.settled else "warm-up did not settle within the cap",
            stable=timing.stable and not conditions.contended(around),
            spread=timing.spread,
            conditions=around,
            **case_throughput(case, timing.median, ceilings),
        ),
        case_row(case, "first_call_ms", value=timing.first_call_ms, unit="ms", count=1),
        case_row(
            case,
            "peak_mib",
            value=memory.bytes / MIB,
            unit="MiB",
            count=1,
            method=memory.method,
        ),
    ]


def case_throughput(case: Case, ms: float, ceilings: Ceilings | None) -> dict:
    """Row fields of a whole call taking `ms`: rates by the backend's algorithmic count
    (the sum of its stages) and by the dense-equivalent count, and how close the call
    comes to its stages' roofline bounds (`call_throughput`)."""
    shape = Shape.of(case)
    stages = [(c.flops, c.bytes, c.footprint) for c in case.backend.cost(shape).values()]
    return call_throughput(ms, stages, dense_equivalent(shape), ceilings, case.dtype)


class Speedups:
    """`finish` hook: each ok time row gets the baseline's median / its own at that length
    (the baseline runs first at each length, so its median is known by then)."""

    def __init__(self, baseline: Backend | None):
        self.baseline = baseline.spec if baseline else None
        self.medians: dict[tuple, float] = {}

    def __call__(self, case: Case, rows: list[Row]) -> list[Row]:
        time = next((r for r in rows if r.metric == "time_ms" and r.status == "ok"), None)
        if self.baseline is None or time is None:
            return rows
        where = (case.n, case.grid)
        if case.backend.spec == self.baseline:
            self.medians[where] = time.value
        if where in self.medians:
            time.speedup = self.medians[where] / time.value
            time.baseline = self.baseline
        return rows


def timed_call(case: Case, qkv: list[torch.Tensor]) -> Callable[[], object]:
    """The zero-argument call of `case` to time; anything it needs is prepared here,
    untimed. A backward pass runs inside the backend's "backward" stage."""
    marker = partial(case.backend.stage, "backward")
    return _timed_call(partial(case.backend, grid=case.grid), qkv, case.mode, marker)


def _timed_call(
    backend: Callable, qkv: list[torch.Tensor], mode: str, marker
) -> Callable[[], object]:
    if mode == "fwd":

        def forward():
            with torch.no_grad():
                return backend(*qkv)

        return forward

    leaves = [t.detach().requires_grad_(True) for t in qkv]
    shape = backend(*leaves).shape
    grad_out = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(qkv[0])

    def clear_grads():
        """At the end of each call, so no call starts with the last one's gradients: its
        peak is measured above what exists before it, and gradients it frees on entry
        would hide as much of its own."""
        for t in leaves:
            t.grad = None

    if mode == "bwd":
        out = backend(*leaves)

        def backward():
            with marker():
                out.backward(grad_out, retain_graph=True)
            clear_grads()

        return backward

    def forward_backward():
        out = backend(*leaves)
        with marker():
            out.backward(grad_out)
        clear_grads()

    return forward_backward
