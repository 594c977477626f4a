"""The efficiency study (YOSO Fig. 7, SCRAM Fig. 4): runtime and peak memory vs length.

One case is one backend at one length. The runner builds the inputs once per length, outside
every timed region, and shares them between the backends; the `baseline` backend runs first
at each length so every later row can carry its speed-up against it. With `rounds` > 1 the
backends of a length take turns instead: each is warmed up, then each round visits them in a
new random order and each keeps its round of samples, so drift common to a round cancels in
the paired per-round speed-ups (`measure.rounds`).
Most backends take the same time on any inputs; a searching one (scram) does not, since
PatchMatch stops retrying lists that have settled, which happens early on a coherent image
and late on random vectors: `inputs` picks what to time on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import numpy as np
import torch

from attnbench.backends import Backend
from attnbench.backends.cost import Shape, dense_equivalent
from attnbench.case import MODES, Case, CaseInputs
from attnbench.inputs import Inputs, Source
from attnbench.measure import conditions
from attnbench.measure.ceilings import Ceilings
from attnbench.measure.memory import peak_memory
from attnbench.measure.roofline import call_throughput
from attnbench.measure.rounds import paired_speedup, round_medians
from attnbench.measure.telemetry import GpuTelemetry
from attnbench.measure.timing import DEFAULT_MAX_SPREAD, DEFAULT_MIN_TIME_S, Timer, Timing
from attnbench.results.schema import Row
from attnbench.run.study import Measure, Study, case_row
from attnbench.run.worker import classify, release_memory

__all__ = ["MODES", "TimeStudy", "measure"]
MIB = 1024 * 1024


@dataclass
class TimeStudy(Study):
    """The study: every backend at every length; rows get their speed-up in `finish`."""

    steady: ClassVar[bool] = True  # timed calls reuse freed blocks; isolated workers do too
    uses_ceilings: ClassVar[bool] = True
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
    rounds: int = 1  # > 1: the backends of a length take turns in this many rounds

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
        """The options that shape every case's measurement (part of its `case_id`; `rounds`
        only when above 1, so that the ids of runs without rounds stay as they were)."""
        settings = {
            "repeats": self.repeats,
            "warmup": self.warmup,
            "min_time": self.min_time,
            "max_spread": self.max_spread,
        }
        return settings | ({"rounds": self.rounds} if self.rounds > 1 else {})

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
        base = self.baseline.spec if self.baseline else None
        group = partial(measure_rounds, ceilings=self.ceilings, baseline=base)
        return Measure(partial(measure, ceilings=self.ceilings), "time_ms", "ms", group=group)

    def group_key(self, case: Case) -> object | None:
        """The backends of one length take turns when run in rounds."""
        return (case.n, case.grid) if self.rounds > 1 else None

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
    timer = _timer(case, call)
    timer.sample(settings["repeats"], settings["min_time"])
    timing = timer.timing()
    gpu = telemetry.stop(timing.calls)
    around = conditions.case_conditions(before, conditions.snapshot(case.device)) | gpu
    return _rows(case, call, timing, around, ceilings)


def measure_rounds(
    cases: list[Case],
    inputs: CaseInputs,
    ceilings: Ceilings | None = None,
    baseline: str | None = None,
) -> list[list[Row]]:
    """The rows of each case of one length, measured in `rounds` (the cases' setting):
    each case is warmed up, then every round visits the cases still running in a new
    random order (seeded), each visit an untimed call and then ceil(repeats / rounds)
    samples and `min_time` of them. A case that fails gets its status row and leaves the
    rounds. The conditions are read around the whole group (its cases share one process),
    and a GPU's energy per call is not attributed, as its counter spans every case.
    Rows of the `baseline` (a spec) and each case get the paired per-round speed-up."""
    settings = cases[0].settings
    rounds = settings["rounds"]
    per_round = -(-settings["repeats"] // rounds)
    rows: dict[int, list[Row]] = {}
    live: dict[int, tuple[Callable, Timer]] = {}
    telemetry = GpuTelemetry(cases[0].device)
    before = conditions.snapshot(cases[0].device)
    telemetry.start()
    for i, case in enumerate(cases):
        try:
            call = timed_call(case, inputs.bind(case)())
            live[i] = call, _timer(case, call)
        except Exception as exc:  # noqa: BLE001 - a failure is the case's row
            rows[i] = _failed(case, exc)
    order = np.random.default_rng([cases[0].seed, cases[0].n]).permutation
    for _ in range(rounds):
        for i in map(int, order(sorted(live))):
            try:
                live[i][1].rewarm()
                live[i][1].sample(per_round, settings["min_time"])
            except Exception as exc:  # noqa: BLE001
                del live[i]
                rows[i] = _failed(cases[i], exc)
    gpu = telemetry.stop(1)
    if gpu:
        gpu["energy_mj_per_call"] = None
    around = conditions.case_conditions(before, conditions.snapshot(cases[0].device)) | gpu
    for i, (call, timer) in live.items():
        try:
            rows[i] = _rows(cases[i], call, timer.timing(), around, ceilings)
        except Exception as exc:  # noqa: BLE001
            rows[i] = _failed(cases[i], exc)
    _paired_speedups(cases, rows, baseline)
    return [rows[i] for i in range(len(cases))]


def _timer(case: Case, call: Callable[[], object]) -> Timer:
    """The case's call, first called and warmed up."""
    settings = case.settings
    return Timer(
        call, case.device, settings["warmup"], settings["min_time"], settings["max_spread"]
    )


def _failed(case: Case, exc: Exception) -> list[Row]:
    """The status row of a case that failed in the rounds (as `executors.run_case` gives)."""
    release_memory(case.device)
    status, reason = classify(exc)
    return [case_row(case, "time_ms", unit="ms", status=status, reason=reason)]


def _rows(
    case: Case, call: Callable, timing: Timing, around: dict, ceilings: Ceilings | None
) -> list[Row]:
    """The time, first-call and peak-memory rows of a timed case."""
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
            round_sizes=list(timing.round_sizes),
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


def _paired_speedups(cases: list[Case], rows: dict[int, list[Row]], baseline: str | None):
    """Each ok time row's speed-up against the baseline's, round by round, when the
    baseline ran in the same rounds."""
    times = {
        cases[i].backend.spec: r for i, case_rows in rows.items() for r in case_rows
        if r.metric == "time_ms" and r.status == "ok" and r.round_sizes
    }  # fmt: skip
    base = times.get(baseline)
    if base is None:
        return
    base_medians = round_medians(base.samples, base.round_sizes)
    for row in times.values():
        own = round_medians(row.samples, row.round_sizes)
        row.speedup, row.speedup_low, row.speedup_high = paired_speedup(base_medians, own)
        row.baseline = baseline


def case_throughput(case: Case, ms: float, ceilings: Ceilings | None) -> dict:
    """Row fields of a whole call taking `ms`: rates by the backend's algorithmic count
    (the sum of its stages) and by the dense-equivalent count, and how close the call
    comes to its stages' roofline bounds (`call_throughput`)."""
    shape = Shape.of(case)
    stages = [part for c in case.backend.cost(shape).values() for part in c.roofline_parts()]
    return call_throughput(ms, stages, dense_equivalent(shape), ceilings, case.dtype)


class Speedups:
    """`finish` hook: each ok time row gets the baseline's median / its own at that length
    (the baseline runs first at each length, so its median is known by then), unless its
    rounds already paired it with the baseline's."""

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
        if where in self.medians and time.speedup is None:  # not paired by rounds
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
