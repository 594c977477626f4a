"""The one runner every study uses: `run(study, sink, executor=...)`, cases in, rows out.

`run` first validates every case of the study (a case that can never run is a UsageError
before any work, and before the caller opens its outputs), then yields each case's rows as
it ends (a group of cases measured together, `Study.group_key`, ends as a whole): a backend
that cannot run the case, or a case predicted not to fit in memory, gives a `skipped` row;
otherwise the executor builds the inputs and runs the study's measurement, where an
out-of-memory becomes an `oom` row, any other exception an `error` row, and a crash of an
isolated case a `crashed` row; the sweep goes on.

A pooled executor (`executors.Pool`, as Ray's) gets each comparison group
(`Study.comparison_key`) whole, runs it on one worker, and its rows come back as cases end,
groups in any order; each case is finished, in order within its group, and committed as it
comes. Rows measured here, and rows of cases no process measured, name this process
(`in-process/PID`); an isolated process and a Ray worker name themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from attnbench.case import Case
from attnbench.errors import UsageError
from attnbench.results.schema import Row, row_from_record
from attnbench.run.executors import Factory, executor_for
from attnbench.run.placement import here, spread
from attnbench.run.study import Study, status_row
from attnbench.run.worker import skip_reason


def run(
    study: Study,
    sink=None,
    executor: str | Factory = "in-process",
    threads: int | None = None,
    on_case: Callable[[Case], None] = lambda _: None,
    on_group: Callable[[list[Case]], None] = lambda _: None,
) -> Iterator[list[Row]]:
    """Validate the study's cases now, then return an iterator over each case's rows as it
    ends, committing them to `sink` (a `results.sink.ResultSink`, opened by the caller
    before iterating) if given. Cases already complete in a resumed sink are not run again;
    their rows are yielded all the same. `executor` is a name from `executors.EXECUTORS`
    or a factory built as `executor(measure, threads, steady)` (`executors.executor_for`).
    `on_case` sees each case as it starts here; with a pool, `on_group` sees each
    comparison group once it has ended."""
    cases = study.cases
    study.validate(cases)
    make = executor_for(executor) if isinstance(executor, str) else executor
    built = make(study.measure, threads, study.steady)
    if built.pooled:
        return _pooled(study, cases, built, sink, on_group)
    return _sweep(study, cases, built, sink, on_case)


def check_resumable(cases: list[Case], sink) -> None:
    """Before resuming into an open `sink`: its file must hold only cases of this run, as
    rows of cases it would not make (other options, another study's file) would be mixed
    with its own. UsageError naming the settings that differ, else the study's options."""
    planned = {case.case_id for case in cases}
    foreign = [r for r in sink.records if r.get("case_id") not in planned]
    if not foreign:
        return
    count = len({r.get("case_id") for r in foreign})
    raise UsageError(
        f"--resume: {sink.source} holds {count} case(s) this run would not make "
        f"({_difference(foreign[0], cases)}); resume with the options that wrote it, or "
        "write to another file"
    )


def _difference(row: dict, cases: list[Case]) -> str:
    """How the case of `row` differs from the nearest case of this run."""

    def differing(case: Case) -> list[str]:
        values = {  # what a row records of its case (`study.case_row`)
            "study": case.study, "backend": case.backend.spec, "inputs": case.inputs_label,
            "seq": case.n, "batch": case.batch, "heads": case.heads, "dim": case.dim,
            "dtype": case.dtype, "device": case.device, "mode": case.mode,
        }  # fmt: skip
        return [
            f"{col} {row.get(col)} in the file, {value} here"
            for col, value in values.items()
            if str(row.get(col)) != str(value)
        ]

    best = min((differing(case) for case in cases), key=len, default=[])
    if best:
        return "; ".join(best[:3])
    what = f"{row.get('backend')} n={row.get('seq')}"
    return f"{what}: the study's options, such as --repeats, --warmup or --trials, differ"


def _sweep(study, cases, executor, sink, on_case) -> Iterator[list[Row]]:
    for group in _groups(study, cases):
        yield from _run_group(study, group, executor, sink, on_case)


def _groups(study, cases: list[Case]) -> Iterator[list[Case]]:
    """Runs of consecutive cases with the same `study.group_key` (not None); else one by one."""
    group: list[Case] = []
    for case in cases:
        key = study.group_key(case)
        if group and (key is None or key != study.group_key(group[0])):
            yield group
            group = []
        group.append(case)
        if key is None:
            yield group
            group = []
    if group:
        yield group


def _run_group(study, group, executor, sink, on_case) -> Iterator[list[Row]]:
    """The rows of each case of a group, in order: resumed ones as they were, skipped ones
    as such, the rest measured together (one case alone: `executor.run`), each committed
    as a whole case once the group is measured."""
    rows: dict[int, list[Row]] = {}
    measured, resumed = [], set()
    for index, case in enumerate(group):
        on_case(case)
        done = sink.done(case.case_id) if sink is not None else None
        if done is not None:  # complete in a resumed output: its rows, not written again
            rows[index] = [row_from_record(r) for r in done]
            resumed.add(index)
            continue
        reason = skip_reason(case)
        if reason:
            rows[index] = [status_row(case, study.measure, "skipped", reason)]
        else:
            measured.append(index)
    together = study.measure.group is not None and study.group_key(group[0]) is not None
    if together and measured:
        rows |= dict(zip(measured, executor.run_group([group[i] for i in measured]), strict=True))
    else:
        rows |= {i: executor.run(group[i]) for i in measured}
    for index, case in enumerate(group):
        finished = study.finish(case, rows[index])
        if index not in resumed:
            here("in-process", case.device).stamp(finished)
        if sink is not None and index not in resumed:
            sink.add_case(finished)
        yield finished


def comparison_groups(study: Study, cases: list[Case]) -> list[list[Case]]:
    """The cases of each `study.comparison_key`, groups in the order of their first case,
    cases in running order within each."""
    groups: dict[object, list[Case]] = {}
    for case in cases:
        groups.setdefault(study.comparison_key(case), []).append(case)
    return list(groups.values())


@dataclass
class Unit:
    """A comparison group's cases for a pool: those to run, the group key of each (cases
    measured together), and the rows of each case so far by its place in the group."""

    group: list[Case]
    todo: list[int]  # places of the cases to run
    keys: list[object]  # `study.group_key` of each case to run
    rows: dict[int, list[Row]]  # resumed now; measured ones as they come back
    resumed: set[int]
    next: int = 0  # the first place not yet finished

    @property
    def cases(self) -> list[Case]:
        return [self.group[i] for i in self.todo]


def _pooled(study, cases, pool, sink, on_group) -> Iterator[list[Row]]:
    """Each comparison group whole to `pool`; rows come back as cases end, groups in any
    order, and each case is finished and committed as soon as every earlier case of its
    group has been."""
    units = []
    for group in comparison_groups(study, cases):
        done = [sink.done(case.case_id) if sink is not None else None for case in group]
        rows = {i: [row_from_record(r) for r in d] for i, d in enumerate(done) if d is not None}
        todo = [i for i in range(len(group)) if i not in rows]
        keys = [study.group_key(group[i]) for i in todo]
        units.append(Unit(group, todo, keys, rows, set(rows)))
    for unit in units:  # resumed cases first, up to the first one to run
        yield from _finish_ready(study, unit, sink, on_group)
    running = [unit for unit in units if unit.todo]
    sweep = pool.sweep(running)
    try:
        for index, place, rows in sweep:
            unit = running[index]
            unit.rows[unit.todo[place]] = rows
            yield from _finish_ready(study, unit, sink, on_group)
    finally:
        sweep.close()  # now, not when collected: Ctrl-C stops the workers at once


def _finish_ready(study, unit: Unit, sink, on_group) -> Iterator[list[Row]]:
    """Finish and commit the unit's cases in order while their rows are in."""
    while unit.next in unit.rows:
        index, case = unit.next, unit.group[unit.next]
        finished = study.finish(case, unit.rows[index])
        if index not in unit.resumed:
            spread(finished)
        if sink is not None and index not in unit.resumed:
            sink.add_case(finished)
        unit.next += 1
        if unit.next == len(unit.group):
            on_group(unit.group)
        yield finished
