"""Where a study's cases run, by name: `in-process` (this process), `isolated` (a fresh
process per case, so a crash is a row) or `ray` (a Ray cluster's workers). The names are
the `--executor` option's and the kind each row's `worker` column records.

Every executor is registered in `EXECUTORS` as a factory, `factory(measure, threads,
steady, **options)`, and is one of two kinds, said by its `pooled` class attribute: an
`Executor` is handed the cases one by one (or a group measured together) and answers
their rows; a `Pool` has workers of its own and is handed whole comparison groups
(`runner.Unit`). Every failure of a case is its status row, never the end of the sweep
(`worker.run_case`); each case runs on its own copy of the backend, so draw state (a
stochastic backend's call counter) belongs to the case, and cases stay plain values.

Ray's factory imports the pool (and the pool Ray) when called, so attnbench runs without Ray.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from attnbench.case import Case, CaseInputs
from attnbench.errors import UsageError
from attnbench.results.schema import Row
from attnbench.run.study import Measure, status_row
from attnbench.run.worker import run_case, run_cases

if TYPE_CHECKING:
    from attnbench.run.ray_cluster import Cluster


class Executor(Protocol):
    """Measures the cases the runner hands it, in order: `run(case)` the rows of one,
    `run_group(cases)` those of cases measured together (`Measure.group`)."""

    pooled: ClassVar[bool] = False

    def __init__(self, measure: Measure, threads: int | None = None, steady: bool = False): ...

    def run(self, case: Case) -> list[Row]: ...

    def run_group(self, cases: list[Case]) -> list[list[Row]]: ...


class Pool(Protocol):
    """Workers of its own, handed every comparison group at once: `sweep(units)` yields
    (unit, place, rows) as each case of a unit (`runner.Unit`) ends, units in any order,
    each unit's cases in order. A unit runs whole on one worker, so a speed-up is never
    computed across two machines."""

    pooled: ClassVar[bool] = True

    def sweep(self, units: list) -> Iterator[tuple[int, int, list[Row]]]: ...


Factory = Callable[..., Executor | Pool]  # factory(measure, threads, steady, **options)


class InProcess(Executor):
    """Runs each case in this process, sharing inputs between cases of the same layout.
    Threads and allocator are this process's, set by the caller."""

    def __init__(self, measure: Measure, threads: int | None = None, steady: bool = False):
        self.measure = measure
        self.inputs = CaseInputs()

    def run(self, case: Case) -> list[Row]:
        return run_case(case, self.measure, self.inputs)

    def run_group(self, cases: list[Case]) -> list[list[Row]]:
        return run_cases(cases, self.measure, self.inputs)


class Isolated(Executor):
    """Runs each case (or group of cases) in a fresh Python process (`python -m
    attnbench.run.worker`): a segfault, an abort or the OOM killer ends only that process,
    and its cases get a `crashed` row."""

    def __init__(self, measure: Measure, threads: int | None = None, steady: bool = False):
        self.measure = measure
        self.threads = threads
        self.steady = steady  # apply `steady_allocator` in the worker, as the parent did
        remove_stale_case_folders()

    def run(self, case: Case) -> list[Row]:
        return self._in_worker([case])[0]

    def run_group(self, cases: list[Case]) -> list[list[Row]]:
        """The group in one worker, so its cases take turns in one process as they would
        here; a crash gives every case of the group a `crashed` row."""
        return self._in_worker(cases)

    def _in_worker(self, cases: list[Case]) -> list[list[Row]]:
        with tempfile.TemporaryDirectory(prefix=f"{CASE_FOLDER}{os.getpid()}-") as tmp:
            job, out = Path(tmp) / "case.pkl", Path(tmp) / "rows.json"
            job.write_bytes(pickle.dumps((cases, self.measure, self.threads, self.steady)))
            # the worker imports what this process imports: this package, a plugin's module,
            # the module defining the measurement
            path = os.pathsep.join([_package_root(), *filter(None, sys.path)])
            env = {**os.environ, "PYTHONPATH": path}
            parent = str(os.getpid())
            done = subprocess.run(
                [sys.executable, "-m", "attnbench.run.worker", str(job), str(out), parent],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
            )
            if done.returncode == 0 and out.is_file():
                return [[Row(**row) for row in rows] for rows in json.loads(out.read_text())]
        reason = _crash_reason(done)
        return [[status_row(case, self.measure, "crashed", reason)] for case in cases]


def ray_pool(
    measure: Measure,
    threads: int | None = None,
    steady: bool = False,
    *,
    cluster: Cluster,
    cpus_per_worker: int | None = None,
) -> Pool:
    """A pool of Ray workers on `cluster` (`ray_cluster.connect`), each holding
    `cpus_per_worker` CPUs (None: a whole node's, or a GPU's share)."""
    from attnbench.run.ray_executor import RayPool

    return RayPool(measure, threads, steady, cluster=cluster, cpus_per_worker=cpus_per_worker)


EXECUTORS: dict[str, Factory] = {}


def register_executor(name: str, factory: Factory) -> None:
    """Make `name` an executor: `factory(measure, threads, steady, **options)` builds it, an
    `Executor` or a `Pool` by its `pooled` attribute."""
    EXECUTORS[name] = factory


def executor_for(name: str, **options) -> Factory:
    """The factory of the executor `name`, `options` bound (Ray's `cluster` and
    `cpus_per_worker`): `factory(measure, threads, steady)` builds it. An unknown name is a
    UsageError listing the executors."""
    if name not in EXECUTORS:
        valid = ", ".join(EXECUTORS)
        raise UsageError(f"--executor: unknown executor {name!r}; valid: {valid}")
    factory = EXECUTORS[name]
    return partial(factory, **options) if options else factory


register_executor("in-process", InProcess)
register_executor("isolated", Isolated)
register_executor("ray", ray_pool)

# An isolated case's temp folder: this prefix, the run's pid, "-", a random name.
CASE_FOLDER = "attnbench-case-"


def remove_stale_case_folders() -> None:
    """Remove the case folders of runs that are no longer alive (a run killed with SIGKILL
    cannot remove its own); a folder whose pid is alive, or not ours to read, stays."""
    for folder in Path(tempfile.gettempdir()).glob(f"{CASE_FOLDER}*-*"):
        pid = folder.name[len(CASE_FOLDER) :].partition("-")[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _crash_reason(done: subprocess.CompletedProcess) -> str:
    code = done.returncode
    if code < 0:
        try:
            what = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            what = f"killed by signal {-code}"
    else:
        what = f"exited with code {code}"
    last = [line for line in done.stderr.splitlines() if line.strip()][-1:]
    return what + (f" ({last[0].strip()})" if last else "")


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])
