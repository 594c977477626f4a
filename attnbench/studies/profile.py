"""The profile study: where a backend's time goes, stage by stage, against this machine's limits.

A case is a backend at a length, as in the time study, and its first rows are the time
study's: the whole call, timed as `time` times it. Then the call runs `calls` more times
with its stages timed (on the CPU by the stage clock, `measure.stageclock`; on a GPU by
the device time of each stage's kernels under torch.profiler), and each stage the backend
marks gets a row: the median of its self time over those calls, its share of their
median time (the same calls, so shares do not mix two moments of a drifting machine),
and its throughput by the stage's cost model (`Backend.cost`) under the machine's
roofline (a stage summed from several pieces of work, each piece under its own bound).
The stage "other" is each of those calls less its stages: time no stage accounts for.
`trace_dir` gets one more call under torch.profiler, exported for Perfetto.
"""

from __future__ import annotations

import fnmatch
import re
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from attnbench.backends.cost import Cost, Shape
from attnbench.case import Case, CaseInputs
from attnbench.errors import UsageError
from attnbench.measure import is_cuda
from attnbench.measure.ceilings import Ceilings
from attnbench.measure.profiling import device_stage_ms, export_trace, profiled, under_nvtx
from attnbench.measure.roofline import call_throughput
from attnbench.measure.stageclock import clocked
from attnbench.results.schema import Row
from attnbench.run.study import Measure, case_row
from attnbench.studies import time as time_study

OTHER = "other"  # the stage row of the time no marked stage covers
# the row of unmarked calls, each just before a profiled one: the same moments of a
# drifting machine, so it shows what marking the stages costs, unlike `time`'s median
UNMARKED = "unmarked_ms"
UNMARKED_METHOD = "unmarked calls, each just before a profiled one"


@dataclass
class ProfileStudy(time_study.TimeStudy):
    """The time study's cases, measured stage by stage; `stage_filter` (names or globs)
    picks the stage rows kept, `trace_dir` receives one trace per case."""

    name: ClassVar[str] = "profile"

    stage_filter: list[str] | None = None
    trace_dir: Path | None = None
    calls: int = 10  # profiled calls per case
    nvtx: bool = False  # then as many calls with NVTX ranges, for nsys (CUDA only)

    def settings(self) -> dict:
        return {**super().settings(), "calls": self.calls}

    def validate(self, cases: list[Case]) -> None:
        super().validate(cases)
        self.check_stage_filter()

    def check_stage_filter(self) -> None:
        """UsageError for a pattern that names no stage of any backend in this mode."""
        if not self.stage_filter:
            return
        stages = {OTHER, *(s for b in self.backends for s in b.stages_in(self.mode, self.device))}
        for pattern in self.stage_filter:
            if not any(fnmatch.fnmatchcase(s, pattern) for s in stages):
                raise UsageError(
                    f"--stages: {pattern!r} names no stage of these backends in mode "
                    f"{self.mode}; their stages: {', '.join(sorted(stages))}"
                )

    @property
    def measure(self) -> Measure:
        fn = partial(
            measure, ceilings=self.ceilings, stage_filter=self.stage_filter,
            trace_dir=self.trace_dir, calls=self.calls, nvtx=self.nvtx,
        )  # fmt: skip
        return Measure(fn, "time_ms", "ms")


def measure(
    case: Case,
    inputs: CaseInputs,
    ceilings: Ceilings | None = None,
    stage_filter: list[str] | None = None,
    trace_dir: Path | None = None,
    calls: int = 10,
    nvtx: bool = False,
) -> list[Row]:
    """The time study's rows of the case, then a row per stage (module docstring)."""
    rows = time_study.measure(case, inputs, ceilings)
    backend, device = case.backend, case.device
    call = time_study.timed_call(case, inputs())
    prefix = f"{backend.name}."
    per_call = partial(_stage_times, call, prefix, device)
    per_call()  # a first profiled call pays the profiler's set-up, not a sample
    spent: dict[str, list[float]] = {s: [] for s in backend.stages_in(case.mode, device)}
    others, walls, unmarked = [], [], []
    for index in range(calls):
        unmarked.append(_unmarked_ms(call, device))
        found, wall_ms = per_call()
        for stage in dict.fromkeys([*spent, *found]):
            spent.setdefault(stage, [0.0] * index).append(found.get(stage, 0.0))
        others.append(wall_ms - sum(found.values()))
        walls.append(wall_ms)
    spent[OTHER] = others
    call_ms = float(np.median(walls))
    if nvtx:
        under_nvtx(call, calls)
    if trace_dir is not None:
        Path(trace_dir).mkdir(parents=True, exist_ok=True)
        export_trace(profiled(call, device)[0], Path(trace_dir) / trace_name(case))
    rows.append(_timing_row(case, UNMARKED, unmarked, UNMARKED_METHOD))
    costs = backend.cost(Shape.of(case))
    for stage, samples in spent.items():
        ms = float(np.median(samples))
        if not stage_filter or any(fnmatch.fnmatchcase(stage, p) for p in stage_filter):
            cost = costs.get(stage, Cost())
            rate = call_throughput(ms, cost.roofline_parts(), None, ceilings, case.dtype)
            share = ms / call_ms if call_ms > 0 else None
            rows.append(_stage_row(case, stage, samples, share, rate))
    return rows


def _stage_times(call, prefix: str, device: str) -> tuple[dict[str, float], float]:
    """Milliseconds of each stage in one call (clocked by the stage markers on the CPU,
    the device time of each stage's kernels under the profiler on a GPU), and of the call."""
    if is_cuda(device):
        prof, wall_ms = profiled(call, device)
        return device_stage_ms(prof.events(), prefix), wall_ms
    return clocked(call, prefix)


def _unmarked_ms(call, device: str) -> float:
    """One call with nothing marking its stages, in ms (on CUDA, until the GPU is done)."""
    if is_cuda(device):
        torch.cuda.synchronize()
    start = time.perf_counter_ns()
    call()
    if is_cuda(device):
        torch.cuda.synchronize()
    return (time.perf_counter_ns() - start) / 1e6


def _timing_row(case: Case, metric: str, samples: list[float], method: str, **fields) -> Row:
    """A row of the median of `samples` (ms), with p10, p90 and every sample."""
    return case_row(
        case,
        metric,
        value=float(np.median(samples)),
        unit="ms",
        p10=float(np.percentile(samples, 10)),
        p90=float(np.percentile(samples, 90)),
        count=len(samples),
        samples=samples,
        method=method,
        **fields,
    )


def _stage_row(case: Case, stage: str, samples: list[float], share, rate) -> Row:
    method = "each call less its stages" if stage == OTHER else "stage self time"
    return _timing_row(case, "stage_ms", samples, method, stage=stage, share=share, **rate)


def trace_name(case: Case) -> str:
    """One file per case: backend label, length, mode and case id, safe on any filesystem."""
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", case.backend.label)
    return f"{label}-n{case.n}-{case.mode}-{case.case_id}.json"
