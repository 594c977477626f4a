"""What a study gives the runner: its cases, the measurement of one case, and a `finish`
step for what a case's rows need from earlier cases (a speed-up against the baseline).

A study is a plain object; `runner.run(study, ...)` validates its cases once and runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnbench.case import Case, CaseInputs
from attnbench.results.schema import Row


@dataclass(frozen=True)
class Measure:
    """A study's measurement of one case: `fn(case, inputs) -> rows`. A case that does not
    run (skipped, oom, error, crashed) gets one row of `metric` in `unit` with its status.
    `group(cases, inputs) -> rows of each case`, where given, measures the cases of a group
    together (`Study.group_key`) and turns a failure of one case into that case's status
    row itself.

    `fn` and `group` must be module-level functions (or partials of them) so an isolated
    worker can unpickle them."""

    fn: Callable[[Case, CaseInputs], list[Row]]
    metric: str
    unit: str = ""
    group: Callable[[list[Case], CaseInputs], list[list[Row]]] | None = None

    def __call__(self, case: Case, inputs: CaseInputs) -> list[Row]:
        return self.fn(case, inputs)


class Study:
    """The interface every study implements (the time, error, model and maps studies do).

    `cases`: every case of the sweep, in running order. `measure`: the per-case
    measurement. `validate(cases)`: raise UsageError for a case that can never run.
    `finish(case, rows)`: the rows as they are written, given every earlier case (called in
    order, resumed cases included). `steady`: whether an isolated worker uses the steady
    allocator, as the time study's own process does. `uses_ceilings`: the run loads this
    machine's ceilings into the study's `ceilings` before its cases. `group_key(case)`:
    consecutive cases with the same key, not None, are measured together by
    `measure.group`. `comparison_key(case)`: the cases whose rows are related to one
    another (a speed-up against the baseline of the same length); an executor that spreads
    a sweep over workers runs each such comparison group on one worker, in one process, in
    order, so no ratio spans two machines, and `finish` sees the group's cases in order.
    Cases measured together (`group_key`) must fall in one comparison group."""

    steady: bool = False
    uses_ceilings: bool = False  # rows are set against this machine's ceilings (`ceilings`)
    device: str = "cpu"
    seed: int | None = None
    report: Callable[[str], None] | None = None  # a case's word on itself as it runs

    def group_key(self, case: Case) -> object | None:
        return None

    def comparison_key(self, case: Case) -> object:
        """The backends of one size, dtype and mode are compared with one another."""
        return (case.n, case.grid, case.dtype, case.mode)

    @property
    def cases(self) -> list[Case]:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def measure(self) -> Measure:  # pragma: no cover - abstract
        raise NotImplementedError

    def validate(self, cases: list[Case]) -> None:
        """UsageError for the first case whose backend can never run it (a window larger
        than the grid), before any work."""
        for case in cases:
            case.backend.validate(case)

    def finish(self, case: Case, rows: list[Row]) -> list[Row]:
        return rows


class Cases(Study):
    """A fixed list of cases with one measurement: an ad-hoc study."""

    def __init__(self, cases: list[Case], measure: Measure):
        self._cases, self._measure = list(cases), measure

    @property
    def cases(self) -> list[Case]:
        return self._cases

    @property
    def measure(self) -> Measure:
        return self._measure


def case_row(case: Case, metric: str, **fields: Any) -> Row:
    """A row of `case`: its columns filled in once here, the measurement in `fields`."""
    backend = case.backend
    return Row(
        study=case.study,
        backend=backend.spec,
        impl=backend.impl(case.device),
        device=case.device,
        dtype=case.dtype,
        mode=case.mode,
        inputs=case.inputs_label,
        batch=case.batch,
        heads=case.heads,
        seq=case.n,
        dim=case.dim,
        grid_h=case.grid[0] if case.grid else None,
        grid_w=case.grid[1] if case.grid else None,
        params={k: _plain(v) for k, v in backend.values.items()},
        case_id=case.case_id,
        metric=metric,
        **fields,
    )


def status_row(case: Case, measure: Measure, status: str, reason: str) -> Row:
    """The one row of a case that did not run: skipped, oom, error or crashed."""
    return case_row(case, measure.metric, unit=measure.unit, status=status, reason=reason)


def _plain(value: Any) -> Any:
    """A parameter value as a CSV cell: tuples (scram's jumps) as their spec text 8/4/2/1."""
    if isinstance(value, tuple | list):
        return "/".join(map(str, value))
    return value
