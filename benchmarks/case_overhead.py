"""What `attnbench time` costs per case beyond its timed samples, at n = 256.

Runs a sweep of softmax and sdpa at n = 256 (`--sweeps` times, two cases each) in this
process through the runner, as the CLI does, and prints per case the wall time, the time
inside the samples (each sample's ms times its calls) and their difference: the overhead
(inputs, warm-up, first call, peak-memory call, rows). A first sweep is run and discarded
so that imports and one-time set-up are not counted. The load average is printed with it:
the figures mean little without it.

    python benchmarks/case_overhead.py [--sweeps 5] [--repeats 3] [--warmup 1]

To compare with another version of the package, run this file with that version first on
PYTHONPATH (e.g. a `git worktree` of an older commit).
"""

from __future__ import annotations

import argparse
import os
import time

import attnbench
from attnbench.backends import get_backend, parse_backends
from attnbench.measure.allocator import steady_allocator
from attnbench.run.runner import run
from attnbench.studies.time import TimeStudy

N = 256


def samples_ms(rows) -> float:
    """Time inside the timed samples of a case's rows: each sample is ms per call, over
    `loops` calls (the method's "x{loops}" suffix)."""
    total = 0.0
    for row in rows:
        if row.metric != "time_ms" or not row.samples:
            continue
        loops = int(row.method.rpartition(" x")[2]) if " x" in (row.method or "") else 1
        total += sum(row.samples) * loops
    return total


def sweep(repeats: int, warmup: int) -> tuple[float, float, int]:
    """(wall ms, samples ms, cases) of one sweep of softmax and sdpa at N."""
    spec = TimeStudy(
        seqs=[N],
        backends=parse_backends("softmax,sdpa"),
        baseline=get_backend("sdpa"),
        repeats=repeats,
        warmup=warmup,
        min_time=0.0,
    )
    start = time.perf_counter()
    cases = list(run(spec))
    wall = (time.perf_counter() - start) * 1e3
    return wall, sum(samples_ms(rows) for rows in cases), len(cases)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    steady_allocator()
    sweep(args.repeats, args.warmup)  # imports, first calls
    load_before = os.getloadavg()[0]
    wall = inside = 0.0
    count = 0
    for _ in range(args.sweeps):
        w, s, c = sweep(args.repeats, args.warmup)
        wall, inside, count = wall + w, inside + s, count + c
    load_after = os.getloadavg()[0]
    print(
        f"{os.path.dirname(attnbench.__file__)}: {count} cases at n={N}, "
        f"per case wall {wall / count:.1f} ms, samples {inside / count:.1f} ms, "
        f"overhead {(wall - inside) / count:.1f} ms "
        f"(load {load_before:.2f} -> {load_after:.2f}, {os.cpu_count()} CPUs)"
    )


if __name__ == "__main__":
    main()
