"""A Ray worker: one long-lived process that measures whole comparison groups.

Built as a Ray actor by `ray_executor`, so importing, the thread pools, the CUDA context
and the compiled kernels are paid once per worker, not once per case. Its constructor pins
the threads the pool reserved for it and warms the process up; `run(cases, keys)` then
measures a group's cases in order, as `runner` does in one process (cases with the same
key, not None, together), and yields each case's rows, stamped with where they ran, as soon
as they exist. This module does not import Ray.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from functools import partial

from attnbench.case import Case, CaseInputs
from attnbench.measure import is_cuda
from attnbench.results.schema import Row
from attnbench.run.placement import Placement, here
from attnbench.run.study import Measure, status_row
from attnbench.run.worker import run_case, run_cases, skip_reason


class Worker:
    """Measures the comparison groups a pool hands it, one at a time, in this process."""

    def __init__(self, index: int, measure: Measure, threads: int, steady: bool, device: str):
        from attnbench.backends import backend_classes
        from attnbench.measure.allocator import steady_allocator
        from attnbench.measure.hardware import device_name
        from attnbench.measure.threads import set_threads

        backend_classes()  # the registry, its built-ins and plugins, once
        if steady:
            steady_allocator()
        threads = set_threads(threads)
        if is_cuda(device):
            _warm_cuda(device)
        self.measure = own_ceilings(measure, device, threads)
        self.inputs = CaseInputs()
        name = device_name(device)
        self.placement = here(f"ray-{index}", device, device_name=name, threads=threads)

    def where(self) -> Placement:
        """Where this worker runs; answering it means the worker is ready."""
        return self.placement

    def run(self, cases: list[Case], keys: list) -> Iterator[list[tuple[int, list[Row]]]]:
        """(place, rows) of each case as it ends; cases measured together come together."""
        for places in runs(keys):
            rows = measure_run([cases[i] for i in places], keys[places[0]], self)
            yield [(i, self.placement.stamp(r)) for i, r in zip(places, rows, strict=True)]


def runs(keys: list) -> list[list[int]]:
    """Places of consecutive cases with the same key, not None; one by one otherwise."""
    found: list[list[int]] = []
    for i, key in enumerate(keys):
        if found and key is not None and keys[found[-1][0]] == key:
            found[-1].append(i)
        else:
            found.append([i])
    return found


def measure_run(cases: list[Case], key, worker: Worker) -> list[list[Row]]:
    """The rows of each case: `skipped` where the backend cannot run it or it would not fit
    in this machine's memory, else measured, together when the key says so."""
    measure, rows = worker.measure, {}
    measured = []
    for i, case in enumerate(cases):
        reason = skip_reason(case)
        if reason:
            rows[i] = [status_row(case, measure, "skipped", reason)]
        else:
            measured.append(i)
    if measure.group is not None and key is not None and measured:
        together = run_cases([cases[i] for i in measured], measure, worker.inputs)
        rows |= dict(zip(measured, together, strict=True))
    else:
        rows |= {i: run_case(cases[i], measure, worker.inputs) for i in measured}
    return [rows[i] for i in range(len(cases))]


def own_ceilings(measure: Measure, device: str, threads: int) -> Measure:
    """The measurement set against this machine's ceilings where it takes any (time and
    profile rows give the share of the roofline bound reached): the worker's machine, not
    the driver's, bounds its rows. Ceilings are cached per machine, measured once."""

    def takes(fn) -> bool:
        return isinstance(fn, partial) and "ceilings" in fn.keywords

    if not takes(measure.fn):
        return measure
    from attnbench.measure.limits import load_or_measure

    ceilings = load_or_measure(device, threads)

    def rebind(fn):
        if not takes(fn):
            return fn
        return partial(fn.func, *fn.args, **(fn.keywords | {"ceilings": ceilings}))

    return dataclasses.replace(measure, fn=rebind(measure.fn), group=rebind(measure.group))


def _warm_cuda(device: str) -> None:
    """Create the CUDA context now, not inside the first case."""
    import torch

    torch.zeros(1, device=device).add_(1)
    torch.cuda.synchronize(device)
