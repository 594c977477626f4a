"""Sweeps on a Ray cluster: a pool of long-lived workers, one per GPU or block of CPUs, each
measuring whole comparison groups.

Invariants, and why they hold:
- A speed-up is never computed across two machines: a comparison group (the backends of one
  size, `Study.comparison_key`) goes to one worker whole and runs in its one process, in
  order, measured together where the study says so, exactly as it would here.
- Rows come back as cases end (each group's in order, groups in any order) and the runner
  commits them through the same sink, so the files hold whole cases and `--resume` works.
- A worker that dies (a segfault in a kernel, a killed actor, a lost node) costs only the
  cases of its group that had not come back: they become `crashed` rows and the sweep goes
  on. Ray restarts the worker; it takes work again once it answers, and until then the
  other workers take the rest.
- Whatever ends the sweep (its end, Ctrl-C, an error) kills the workers, so nothing keeps
  measuring after the run.
Each row names its node, worker process, hardware and co-tenancy (`run.placement`); the
co-tenancy is counted here, where every worker's comings and goings are seen.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from attnbench.errors import UsageError
from attnbench.results.schema import Row
from attnbench.run.placement import Placement, here
from attnbench.run.ray_cluster import Cluster, WorkerPlan
from attnbench.run.study import Measure, status_row

ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours the names in its messages
RAISED = re.compile(r"[\w.]+(Error|Exception): ")  # a traceback's last line
WAIT_S = 1.0  # the longest a wait for the workers blocks, so Ctrl-C is seen at once
PINNED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")


class RayPool:
    """The `ray` executor, a pool (`executors.Pool`, said by `pooled`: the registry imports
    this module, not the other way round): `sweep(units)` yields (unit, place, rows) as each
    case of a unit (`runner.Unit`) ends. Workers are started when a sweep starts, as many
    as the cluster holds and the units can use."""

    pooled: ClassVar[bool] = True

    def __init__(
        self,
        measure: Measure,
        threads: int | None = None,
        steady: bool = False,
        *,
        cluster: Cluster,
        cpus_per_worker: int | None = None,
    ):
        self.measure, self.threads, self.steady = measure, threads, steady
        self.cluster, self.cpus_per_worker = cluster, cpus_per_worker

    def sweep(self, units: list) -> Iterator[tuple[int, int, list[Row]]]:
        if not units:
            return
        device = units[0].group[0].device
        plans = self.cluster.plan(device, self.cpus_per_worker, self.threads)[: len(units)]
        ray, workers = self.cluster.ray, []
        try:
            for index, plan in enumerate(plans):
                workers.append(self._start(ray, index, plan, device))
            yield from _Dispatch(ray, workers, units, self.measure).run()
        finally:
            for worker in workers:
                try:
                    ray.kill(worker.actor, no_restart=True)
                except ray.exceptions.RayError:
                    pass  # gone already, with its cluster

    def _start(self, ray, index: int, plan: WorkerPlan, device: str) -> _Worker:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from attnbench.run.ray_worker import Worker

        threads = str(plan.threads)
        actor = (
            ray.remote(Worker)
            .options(
                num_cpus=plan.cpus,
                num_gpus=plan.gpus,
                # on its node while the node lives; restarted anywhere after a crash
                scheduling_strategy=NodeAffinitySchedulingStrategy(plan.node_id, soft=True),
                max_restarts=-1,
                max_task_retries=0,  # a crashed group's cases become rows, never rerun
                runtime_env={"env_vars": dict.fromkeys(PINNED, threads)},
            )
            .remote(index, self.measure, plan.threads, self.steady, device)
        )
        return _Worker(actor, actor.where.remote())


@dataclass
class _Worker:
    """The driver's view of a worker: `answer` is pending while it starts or restarts."""

    actor: Any
    answer: Any = None  # the ObjectRef of `where()`
    placement: Placement | None = None
    unit: int | None = None  # the unit it runs
    stream: Any = None  # the ObjectRefGenerator of `run()`
    done: int = 0  # cases of its unit that came back
    co_tenancy: int = 1  # most workers busy on its node since its last case came back

    @property
    def idle(self) -> bool:
        return self.placement is not None and self.answer is None and self.unit is None


class _Dispatch:
    """One sweep: hands units to idle workers and turns what comes back into rows."""

    def __init__(self, ray, workers: list[_Worker], units: list, measure: Measure):
        self.ray, self.workers, self.units, self.measure = ray, list(workers), units, measure
        self.queue = deque(range(len(units)))
        self.busy: dict[str, int] = {}  # workers running a unit, by node
        self.failures: list[str] = []  # why workers could not start
        self.started = False  # some worker answered

    def run(self) -> Iterator[tuple[int, int, list[Row]]]:
        while self.queue or any(w.unit is not None for w in self.workers):
            for worker in self.workers:
                if worker.idle and self.queue:
                    self._hand(worker, self.queue.popleft())
            if not self.workers:
                yield from self._abandon()
                return
            waited = [(w.answer if w.answer is not None else w.stream, w) for w in self.workers]
            waited = [(obj, w) for obj, w in waited if obj is not None]
            ready, _ = self.ray.wait([obj for obj, _ in waited], num_returns=1, timeout=WAIT_S)
            for obj, worker in waited:
                if not any(obj is r for r in ready):
                    continue
                if obj is worker.answer:
                    self._answered(worker)
                else:
                    yield from self._came_back(worker)

    def _hand(self, worker: _Worker, index: int) -> None:
        unit, node = self.units[index], worker.placement.node
        worker.unit, worker.done = index, 0
        worker.stream = worker.actor.run.remote(unit.cases, unit.keys)
        self.busy[node] = self.busy.get(node, 0) + 1
        for other in self.workers:
            if other.unit is not None and other.placement.node == node:
                other.co_tenancy = max(other.co_tenancy, self.busy[node])

    def _answered(self, worker: _Worker) -> None:
        """A worker started, or restarted after a crash, or could not."""
        try:
            worker.placement = self.ray.get(worker.answer)
        except self.ray.exceptions.RayError as exc:
            self.workers.remove(worker)
            self.failures.append(_first_line(exc))
            if not self.workers and not self.started:
                why = self.failures[0]
                raise UsageError(f"--executor ray: no worker could start ({why})") from None
        else:
            self.started = True
        worker.answer = None

    def _came_back(self, worker: _Worker) -> Iterator[tuple[int, int, list[Row]]]:
        """The next cases of the worker's unit, its end, or its failure."""
        errors = self.ray.exceptions
        try:
            results = self.ray.get(next(worker.stream))
        except StopIteration:
            self._free(worker)
            return
        except errors.RayTaskError as exc:  # the worker's own code failed: it lives on
            yield from self._lose(worker, "error", _first_line(getattr(exc, "cause", None) or exc))
            self._free(worker)
            return
        except errors.RayError as exc:  # the worker's process died
            yield from self._lose(worker, "crashed", f"Ray worker died ({_first_line(exc)})")
            self._free(worker)
            worker.answer = _restarted(worker.actor)
            return
        node = worker.placement.node
        for place, rows in results:
            yield worker.unit, place, worker.placement.stamp(rows, worker.co_tenancy)
            worker.done = place + 1
        worker.co_tenancy = self.busy.get(node, 1)

    def _lose(self, worker: _Worker, status: str, reason: str):
        """Status rows for the cases of the worker's unit that did not come back."""
        unit = self.units[worker.unit]
        for place in range(worker.done, len(unit.todo)):
            row = status_row(unit.cases[place], self.measure, status, reason)
            yield worker.unit, place, worker.placement.stamp([row], worker.co_tenancy)

    def _free(self, worker: _Worker) -> None:
        self.busy[worker.placement.node] -= 1
        worker.unit, worker.stream, worker.co_tenancy = None, None, 1

    def _abandon(self) -> Iterator[tuple[int, int, list[Row]]]:
        """Every worker is gone for good: the cases left become `crashed` rows."""
        reason = f"no Ray worker left ({self.failures[-1] if self.failures else 'all died'})"
        for index in self.queue:
            for place, case in enumerate(self.units[index].cases):
                row = status_row(case, self.measure, "crashed", reason)
                yield index, place, here("in-process", case.device).stamp([row])
        self.queue.clear()


def _restarted(actor):
    """The answer of `where()` from the actor Ray restarts. Sent at once, the call can reach
    the dead process before Ray has seen it die; retried, it waits for the restart (an
    actor that cannot restart fails it all the same, and leaves the pool)."""
    return actor.where.options(max_task_retries=-1).remote()


def _first_line(exc: BaseException) -> str:
    """What a Ray error says in one line: the exception a worker raised where its text
    holds one (a constructor that failed), else its first line."""
    lines = [line.strip() for line in ANSI.sub("", str(exc)).splitlines() if line.strip()]
    raised = [line for line in lines if RAISED.match(line)]
    if raised:
        return raised[-1]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
