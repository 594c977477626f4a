"""Where a case runs: in this process (`InProcess`) or in a fresh one (`Isolated`).

An executor is built from a study's measurement (`executor(measure, threads, steady)`) and
answers `run(case) -> rows`; every failure of a case is its status row, never the end of the
sweep. Each case runs on its own copy of the backend, so draw state (a stochastic backend's
call counter) belongs to the case, and cases stay plain values.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Protocol

import torch

from attnbench.case import Case, CaseInputs
from attnbench.measure import is_cuda
from attnbench.results.schema import Row
from attnbench.run.study import Measure, status_row

# The CPU allocator's out-of-memory is a plain RuntimeError; these phrases name it.
OOM_PHRASES = ("can't allocate memory", "out of memory")


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, reason) of a failed case: out-of-memory from any allocator is `oom`."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return "oom", first or type(exc).__name__
    if isinstance(exc, RuntimeError) and any(p in str(exc).lower() for p in OOM_PHRASES):
        return "oom", first
    return "error", f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def run_case(case: Case, measure: Measure, inputs: CaseInputs) -> list[Row]:
    """The per-case guard: inputs are built and the measurement runs inside it, so any
    failure of either is this case's status row, never the end of the sweep. The
    measurement gets a fresh copy of the backend (its draws start at call 0)."""
    case = dataclasses.replace(case, backend=case.backend.with_values())
    try:
        return measure(case, inputs.bind(case))
    except Exception as exc:  # noqa: BLE001 - every failure becomes a row
        failure = classify(exc)
    # out of the except block: its traceback no longer holds the failed case's tensors
    inputs.clear()
    release_memory(case.device)
    return [status_row(case, measure, *failure)]


def run_cases(cases: list[Case], measure: Measure, inputs: CaseInputs) -> list[list[Row]]:
    """The rows of each case of a group measured together (`Measure.group`), each on a fresh
    copy of its backend; the group measurement turns a case's failure into its status row,
    and a failure outside any one case (building the shared inputs) fails them all."""
    cases = [dataclasses.replace(c, backend=c.backend.with_values()) for c in cases]
    try:
        return measure.group(cases, inputs)
    except Exception as exc:  # noqa: BLE001 - every failure becomes rows
        failure = classify(exc)
    inputs.clear()
    release_memory(cases[0].device)
    return [[status_row(case, measure, *failure)] for case in cases]


def release_memory(device: str) -> None:
    """Give back what a failed attempt left: Python's garbage (a full collection, as a failed
    case's tensors can sit in reference cycles through its traceback), and the GPU
    allocator's cache. For failures and the model study's memory budget only: a full
    collection costs a tenth of a second or more once torch is loaded."""
    gc.collect()
    if is_cuda(device):
        torch.cuda.empty_cache()


class Executor(Protocol):
    def __init__(self, measure: Measure, threads: int | None = None, steady: bool = False): ...

    def run(self, case: Case) -> list[Row]: ...

    def run_group(self, cases: list[Case]) -> list[list[Row]]: ...


class InProcess:
    """Runs each case in this process, sharing inputs between cases of the same layout.
    Threads and allocator are this process's, set by the caller."""

    def __init__(self, measure: Measure, threads: int | None = None, steady: bool = False):
        self.measure = measure
        self.inputs = CaseInputs()

    def run(self, case: Case) -> list[Row]:
        return run_case(case, self.measure, self.inputs)

    def run_group(self, cases: list[Case]) -> list[list[Row]]:
        return run_cases(cases, self.measure, self.inputs)


class Isolated:
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


EXECUTORS: dict[str, type[Executor]] = {"in-process": InProcess, "isolated": Isolated}

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


def rows_to_json(rows: list[list[Row]]) -> str:
    """A worker's rows of each case for its parent; in-memory arrays stay behind."""
    return json.dumps([[dataclasses.asdict(r) | {"array": None} for r in case] for case in rows])
