"""The one runner every study uses: cases in, rows out, and every failure a row with a status.

For a sweep of cases the runner first validates them all (a case that can never run is a
UsageError before any work), then for each case: a backend that cannot run it, or a case
predicted not to fit in memory, gives a `skipped` row; otherwise an executor builds the
inputs and runs the study's measurement inside one guard, so an out-of-memory becomes an
`oom` row, any other exception an `error` row, and the sweep goes on. The executor is an
interface (`run(case) -> rows`): in this process, or in a fresh subprocess per case
(`Isolated`), where a crash becomes a `crashed` row; another could hand cases to a cluster.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from attnbench.measure import is_cuda
from attnbench.measure.memory import available_bytes
from attnbench.results.sink import Row, row_from_record
from attnbench.run.case import Case

HEADROOM = 0.8  # a case may use at most this share of the available memory
# The CPU allocator's out-of-memory is a plain RuntimeError; these phrases name it.
OOM_PHRASES = ("can't allocate memory", "out of memory")


@dataclass(frozen=True)
class Measure:
    """A study's measurement of one case: `fn(case, inputs) -> rows`. A case that does not
    run (skipped, oom, error, crashed) gets one row of `metric` in `unit` with its status.

    `fn` must be a module-level function (or a partial of one) so `Isolated` can pickle it."""

    fn: Callable[[Case, CaseInputs], list]
    metric: str
    unit: str = ""

    def __call__(self, case: Case, inputs: CaseInputs) -> list:
        return self.fn(case, inputs)


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
    return case_row(case, measure.metric, unit=measure.unit, status=status, reason=reason)


def _plain(value: Any) -> Any:
    """A parameter value as a CSV cell: tuples (scram's jumps) as their spec text 8/4/2/1."""
    if isinstance(value, tuple | list):
        return "/".join(map(str, value))
    return value


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, reason) of a failed case: out-of-memory from any allocator is `oom`."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return "oom", first or type(exc).__name__
    if isinstance(exc, RuntimeError) and any(p in str(exc).lower() for p in OOM_PHRASES):
        return "oom", first
    return "error", f"{type(exc).__name__}: {first}" if first else type(exc).__name__


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


def validate(cases: Iterable[Case]) -> None:
    """Raise UsageError for the first case whose backend can never run it, before any work."""
    for case in cases:
        case.backend.validate(case)


class CaseInputs:
    """q, k, v of the current case's layout for any seed, built on first use and kept while
    cases of the same layout follow (a study's backends share one set of inputs)."""

    def __init__(self) -> None:
        self._layout: tuple | None = None
        self._memo: dict = {}
        self.case: Case | None = None

    def bind(self, case: Case) -> CaseInputs:
        layout = (
            case.inputs.kind, case.inputs.dim, case.n, case.grid, case.batch, case.heads,
            case.dim, case.dtype, case.device,
        )  # fmt: skip
        if layout != self._layout:
            self._layout, self._memo = layout, {}  # the previous layout's tensors are freed
        self.case = case
        return self

    def __call__(self, seed: int | None = None) -> list[torch.Tensor]:
        """q, k, v drawn with `seed` (default: the case's); an image is repeated over the
        case's batch and heads."""
        case = self.case
        seed = case.seed if seed is None else seed
        return self.memo(("qkv", seed), lambda: _make_qkv(case, seed))

    def memo(self, key, make: Callable[[], Any]) -> Any:
        """`make()` once per layout and key: what several cases derive from the same inputs."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def clear(self) -> None:
        self._layout, self._memo = None, {}


def _make_qkv(case: Case, seed: int) -> list[torch.Tensor]:
    qkv = case.inputs.make(case.n, seed, case.torch_dtype, case.device, case.grid)
    if case.inputs.on_grid and (case.batch, case.heads) != (1, 1):
        qkv = [t.expand(case.batch, case.heads, -1, -1).contiguous() for t in qkv]
    return qkv


def run_case(case: Case, measure: Measure, inputs: CaseInputs) -> list:
    """The per-case guard: inputs are built and the measurement runs inside it, so any
    failure of either is this case's status row, never the end of the sweep."""
    try:
        return measure(case, inputs.bind(case))
    except Exception as exc:  # noqa: BLE001 - every failure becomes a row
        failure = classify(exc)
    # out of the except block: its traceback no longer holds the failed case's tensors
    inputs.clear()
    _release(case.device)
    return [status_row(case, measure, *failure)]


def _release(device: str) -> None:
    gc.collect()
    if is_cuda(device):
        torch.cuda.empty_cache()


class Executor(Protocol):
    def run(self, case: Case) -> list: ...


class InProcess:
    """Runs each case in this process, sharing inputs between cases of the same layout."""

    def __init__(self, measure: Measure):
        self.measure = measure
        self.inputs = CaseInputs()

    def run(self, case: Case) -> list:
        return run_case(case, self.measure, self.inputs)


class Isolated:
    """Runs each case in a fresh Python process (`python -m attnbench.run.worker`): a segfault,
    an abort or the OOM killer ends only that process, and the case gets a `crashed` row."""

    def __init__(self, measure: Measure, threads: int | None = None, steady: bool = False):
        self.measure = measure
        self.threads = threads
        self.steady = steady  # apply `steady_allocator` in the worker, as the parent did

    def run(self, case: Case) -> list[Row]:
        with tempfile.TemporaryDirectory(prefix="attnbench-case-") as tmp:
            job, out = Path(tmp) / "case.pkl", Path(tmp) / "rows.json"
            job.write_bytes(pickle.dumps((case, self.measure, self.threads, self.steady)))
            # the worker imports what this process imports: this package, a plugin's module,
            # the module defining the measurement
            path = os.pathsep.join([_package_root(), *filter(None, sys.path)])
            env = {**os.environ, "PYTHONPATH": path}
            done = subprocess.run(
                [sys.executable, "-m", "attnbench.run.worker", str(job), str(out)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
            )
            if done.returncode == 0 and out.is_file():
                return [Row(**row) for row in json.loads(out.read_text())]
        return [status_row(case, self.measure, "crashed", _crash_reason(done))]


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


def rows_to_json(rows: list[Row]) -> str:
    return json.dumps([dataclasses.asdict(r) for r in rows])


def run(
    cases: list[Case],
    measure: Measure,
    executor: Executor | None = None,
    sink=None,
    on_case: Callable[[Case], None] = lambda _: None,
    finish: Callable[[Case, list], list] = lambda _, rows: rows,
) -> Iterator[list]:
    """Yield each case's rows as it ends, committing them to `sink` (a `results.ResultSink`)
    if given. Cases already complete in a resumed sink are not run again; their rows are
    yielded all the same. `finish(case, rows)` may add what needs earlier cases (a speed-up
    against a baseline) before the rows are written."""
    validate(cases)
    executor = executor or InProcess(measure)
    for case in cases:
        on_case(case)
        done = sink.done(case.case_id) if sink is not None else None
        if done is not None:  # complete in a resumed output: its rows, not written again
            yield finish(case, [row_from_record(r) for r in done])
            continue
        reason = skip_reason(case)
        if reason:
            rows = [status_row(case, measure, "skipped", reason)]
        else:
            rows = executor.run(case)
        rows = finish(case, rows)
        if sink is not None:
            _commit(sink, rows)
        yield rows


def _commit(sink, rows: list) -> None:
    sink.add_case([r for r in rows if isinstance(r, Row)])
