"""What does `--executor ray` cost, and do its speed-ups agree with a local run's? Times the
same CPU sweep of the time study (rounds, so every speed-up has its 95% interval) through
the local executor and through a Ray cluster of this machine with one-CPU workers.

    python benchmarks/ray_overhead.py --cases 64 --workers 2

The sweep is `--cases` cases: every backend at `--cases / backends` lengths from 128 up in
steps of 64, one thread per process. Printed: the wall time of each sweep (the cluster's
start apart; the workers' start is inside the Ray sweep), the worker time Ray adds per
case, (workers used x Ray wall - local wall) / cases, which counts the workers as busy
throughout and spreads their start over the cases, and each speed-up with its interval from
both runs, marked where the two intervals do not overlap.
"""

from __future__ import annotations

import logging
import time

import typer
from rich.console import Console
from rich.table import Table

import attnbench
from attnbench.backends import get_backend
from attnbench.results.schema import is_missing


def main(
    cases: int = typer.Option(64, help="cases in the sweep (a multiple of the backends)"),
    backends: str = typer.Option(
        "sdpa,softmax,yoso-8,yoso-e", help="backends; the first is the baseline"
    ),  # fmt: skip
    workers: int = typer.Option(2, help="Ray workers, one CPU each"),
    rounds: int = typer.Option(3, help="rounds per length (the speed-ups' intervals)"),
    repeats: int = typer.Option(6, help="samples per case"),
    min_time: float = typer.Option(0.05, help="seconds of samples per case per round"),
    warmup: int = typer.Option(3, help="most warm-up calls per case"),
    heads: int = typer.Option(2),
    dim: int = typer.Option(32),
) -> None:
    console = Console()
    specs = [s.strip() for s in backends.split(",")]
    lengths = [128 + 64 * i for i in range(max(1, cases // len(specs)))]

    def sweep(**where) -> tuple[dict, float]:
        """The time rows of the sweep by (backend, n), and its wall time in seconds, run by
        `attnbench.time`: the command's own procedure (allocator, threads, ceilings)."""
        start = time.perf_counter()
        frame = attnbench.time(
            seq=lengths, backends=specs, heads=heads, dim=dim, repeats=repeats, warmup=warmup,
            min_time=min_time, rounds=rounds, baseline=specs[0], threads=1, **where,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        rows = frame[frame.metric == "time_ms"]
        return {(r.backend, r.seq): r for r in rows.itertuples()}, seconds

    total = len(lengths) * len(specs)
    console.print(f"{total} cases: {', '.join(specs)} at n = {lengths[0]}..{lengths[-1]}")
    local, local_s = sweep()
    console.print(f"local executor: {local_s:.1f} s")

    import ray

    start = time.perf_counter()
    ray.init(num_cpus=workers, include_dashboard=False, logging_level=logging.ERROR)
    console.print(f"Ray cluster of {workers} CPUs started in {time.perf_counter() - start:.1f} s")
    try:  # the run joins this cluster, and leaves it running
        remote, remote_s = sweep(executor="ray", cpus_per_worker=1)
    finally:
        ray.shutdown()
    used = min(workers, len(lengths))  # a worker per length at most: a length is a group
    overhead = (used * remote_s - local_s) / total
    console.print(
        f"Ray executor ({used} workers): {remote_s:.1f} s; worker time added per case: "
        f"{overhead * 1000:.0f} ms"
    )
    names = {get_backend(s).spec: s for s in specs}
    console.print(_speedups(local, remote, specs[0], names))


def _speedups(local: dict, remote: dict, baseline: str, names: dict) -> Table:
    table = Table(title="speed-up vs " + baseline + " (95% interval)")
    for column in ("backend", "n", "local", "ray", "overlap"):
        table.add_column(column, justify="left" if column == "backend" else "right")
    apart = 0
    for key, here in local.items():
        there = remote.get(key)
        if there is None or is_missing(here.speedup_low) or is_missing(there.speedup_low):
            continue
        overlap = here.speedup_low <= there.speedup_high and there.speedup_low <= here.speedup_high
        apart += not overlap
        table.add_row(
            names.get(key[0], key[0]), str(key[1]), _interval(here), _interval(there),
            "yes" if overlap else "NO",
        )  # fmt: skip
    table.caption = f"{apart} speed-up(s) whose intervals do not overlap"
    return table


def _interval(row) -> str:
    return f"{row.speedup:.2f}x ({row.speedup_low:.2f}-{row.speedup_high:.2f})"


if __name__ == "__main__":
    typer.run(main)
