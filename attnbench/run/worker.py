"""One case in whatever process measures it: why it is skipped (`skip_reason`), and the
guard that turns any failure of its inputs or measurement into its status row (`run_case`,
`run_cases`). Every executor measures through these, here, in an isolated process or in a
Ray worker, so a case ends the same way wherever it runs.

As a program it is the isolated process of `executors.Isolated`: `python -m
attnbench.run.worker CASE.pkl ROWS.json PARENT_PID` runs one case, or a group measured
together. The cases, their measurement, the thread count and the allocator choice come
pickled; the rows of each case go back as JSON. Only a crash of the process itself leaves
no rows file. The process dies with its parent, so a killed run leaves no case measuring on.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import json
import os
import pickle
import signal
import sys
from pathlib import Path

import torch

from attnbench.case import Case, CaseInputs
from attnbench.measure import is_cuda
from attnbench.measure.memory import available_bytes
from attnbench.results.schema import Row
from attnbench.run.placement import here
from attnbench.run.study import Measure, status_row

HEADROOM = 0.8  # a case may use at most this share of the available memory
# The CPU allocator's out-of-memory is a plain RuntimeError; these phrases name it.
OOM_PHRASES = ("can't allocate memory", "out of memory")
PR_SET_PDEATHSIG = 1  # prctl option: the signal this process gets when its parent dies


def skip_reason(case: Case) -> str:
    """Why `case` is not run: the backend's own reasons, or a predicted lack of memory."""
    reasons = case.backend.unsupported(case)
    if reasons:
        return "; ".join(reasons)
    itemsize = torch.empty((), dtype=case.torch_dtype).element_size()
    need = case.backend.predicted_bytes(case.batch, case.heads, case.n, case.dim, itemsize)
    if need <= 0:
        return ""
    free = available_bytes(case.device)
    if need > HEADROOM * free:
        return no_room(need, free)
    return ""


def no_room(need: int, free: int) -> str:
    return f"needs ~{need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"


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


def rows_to_json(rows: list[list[Row]]) -> str:
    """A worker's rows of each case for its parent; in-memory arrays stay behind."""
    return json.dumps([[dataclasses.asdict(r) | {"array": None} for r in case] for case in rows])


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux), and exit now if
    the parent `parent` died before that was set."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def main(job: str, out: str, parent: str) -> None:
    die_with_parent(int(parent))
    from attnbench.measure.allocator import steady_allocator
    from attnbench.measure.threads import set_threads

    cases, measure, threads, steady = pickle.loads(Path(job).read_bytes())
    if steady:
        steady_allocator()
    set_threads(threads)
    if len(cases) == 1:
        rows = [run_case(cases[0], measure, CaseInputs())]
    else:
        rows = run_cases(cases, measure, CaseInputs())
    for case_rows in rows:
        here("isolated", cases[0].device).stamp(case_rows)
    Path(out).write_text(rows_to_json(rows))


if __name__ == "__main__":
    main(*sys.argv[1:4])
