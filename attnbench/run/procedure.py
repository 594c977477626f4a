"""A study's whole run, said once for the command line, the Python API and the benchmarks:
the steady allocator (for a study that times calls), the thread count, this machine's
ceilings (for a study that sets rows against them), the environment record, the result
sink, the resume check, and the sweep itself.

Whoever skips a step measures something else: a benchmark that timed without the steady
allocator read speed-ups of 0.25x where the command read 0.7x. So every caller goes through
`run_study`, and only its `Progress` differs (a bar on a terminal, nothing in a notebook).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.errors import UsageError
from attnbench.measure import is_cuda

if TYPE_CHECKING:  # pandas loads with them: not before the options are checked
    from attnbench.results.schema import Row
    from attnbench.run.study import Study


class Progress:
    """What a run tells as it goes; this one tells nothing. `status(text)` is a context
    around a long step with no cases (measuring the machine's ceilings), its `update`
    taking each sub-step's text; `start(total)` comes once the cases are known; `case`
    sees each case as it starts here, `group` each comparison group a pool has ended;
    `report(text)` is what a case says of itself while it runs (the model study's batch
    search)."""

    def status(self, text: str):
        return nullcontext(_Steps())

    def start(self, total: int) -> None:
        pass

    def case(self, case, index: int, total: int) -> None:
        pass

    def group(self, group: list, index: int, total: int) -> None:
        pass

    def report(self, text: str) -> None:
        pass

    def end(self) -> None:
        pass


class _Steps:
    def update(self, text: str) -> None:
        pass


@dataclass
class Where:
    """Where the cases run: `executor` as `runner.run` takes it (a name, or a pool's
    factory), `cluster` the Ray cluster of a pool (None: this machine), and `threads` the
    count asked for (None: torch's, or each Ray worker's CPUs)."""

    executor: object = "in-process"
    cluster: object = None
    threads: int | None = None

    @property
    def pooled(self) -> bool:
        return self.cluster is not None


@dataclass
class Outcome:
    """What a run produced: every case's rows (resumed ones included), the environment
    record written beside them, and the files written (None: not asked for)."""

    rows: list[Row]
    env: dict
    csv: Path | None = None
    json: Path | None = None
    written: list[Path] = field(default_factory=list)


def run_study(
    study: Study,
    where: Where | None = None,
    csv: Path | None = None,
    json: Path | None = None,
    resume: bool = False,
    remeasure: bool = False,
    progress: Progress | None = None,
) -> Outcome:
    """Run `study` end to end (module doc) and return its rows. The study's cases are
    validated before any output is opened, so a case that can never run is one UsageError
    and no file; then the outputs are locked (another run writing them is one UsageError
    before minutes spent measuring the machine), and `csv`/`json` hold the rows as each
    case commits, `resume` continuing them. `remeasure` measures the ceilings again even
    when cached."""
    from attnbench.measure.env import environment
    from attnbench.measure.threads import set_threads
    from attnbench.results.sink import ResultSink
    from attnbench.run.runner import check_resumable, comparison_groups, run

    where = where or Where()
    progress = progress or Progress()
    if resume and csv is None and json is None:
        raise UsageError("--resume: give the --csv or --json file of the run to continue")
    study.validate(study.cases)
    if study.steady:
        from attnbench.measure.allocator import steady_allocator

        steady_allocator()
    threads = set_threads(where.threads)
    env = environment(study.device, threads, study.seed)
    sink = ResultSink(env, csv, json, resume=resume)
    if not where.pooled:
        study.report = progress.report
    total = len(comparison_groups(study, study.cases)) if where.pooled else len(study.cases)
    counted = iter(range(1, total + 1))
    with sink:
        if resume:
            check_resumable(study.cases, sink)
        if study.uses_ceilings:  # before the sweep: its measurement reads them
            study.ceilings = _ceilings(study.device, threads, remeasure, progress)
            if study.ceilings is not None:
                env["ceilings"] = study.ceilings.as_dict()  # the sink writes env at its first case
        sweep = run(
            study,
            sink,
            where.executor,
            where.threads if where.pooled else threads,
            lambda case: progress.case(case, next(counted), total),
            lambda group: progress.group(group, next(counted), total),
        )
        progress.start(total)
        try:
            rows = [row for case_rows in sweep for row in case_rows]
        finally:
            progress.end()
    written = [path for path in (sink.csv, sink.json) if path is not None]
    return Outcome(rows, env, sink.csv, sink.json, written)


def _ceilings(device: str, threads: int, remeasure: bool, progress: Progress):
    """This machine's ceilings at `threads`: from the cache, or measured now (once per
    machine); None for a cluster's GPU this machine lacks (each Ray worker sets its rows
    against its own machine's ceilings)."""
    import torch

    from attnbench.measure.limits import load_or_measure

    if is_cuda(device) and not torch.cuda.is_available():
        return None
    with progress.status("measuring this machine's limits (once; cached)") as line:
        return load_or_measure(device, threads, remeasure, on_step=line.update)
