"""What `attnbench time` costs per case beyond its timed samples, at n = 256.

Runs `attnbench.time` (the command's own procedure) on softmax and sdpa at n = 256, `--sweeps`
times in one call (the same two backends at `--sweeps` lengths of 256 tokens cannot be
asked for, so the sweep is run `--sweeps` times), and prints per case the wall time from one
case's start to the next's, the time inside the samples (each sample's ms times its calls)
and their difference: the overhead (inputs, warm-up, first call, peak-memory call, rows).
A first sweep is run and discarded so that imports and one-time set-up (the machine's
ceilings, numba's kernels) are not counted. The host's load is printed with it: the figures
mean little without it.

    python benchmarks/case_overhead.py [--sweeps 5] [--repeats 3] [--warmup 1]

To compare with another version of the package, run this file with that version first on
PYTHONPATH (e.g. a `git worktree` of an older commit).
"""

from __future__ import annotations

import argparse
import os
import time

import attnbench
from attnbench.run.procedure import Progress

N = 256


class CaseClock(Progress):
    """The start of each case and the end of the sweep, as the run reports them."""

    def __init__(self):
        self.starts: list[float] = []
        self.ended = 0.0

    def case(self, case, index: int, total: int) -> None:
        self.starts.append(time.perf_counter())

    def end(self) -> None:
        self.ended = time.perf_counter()


def samples_ms(frame) -> float:
    """Time inside the timed samples: each sample is ms per call, over `loops` calls (the
    method's "x{loops}" suffix)."""
    total = 0.0
    for method, samples in frame.loc[frame["metric"] == "time_ms", ["method", "samples"]].values:
        loops = int(method.rpartition(" x")[2]) if " x" in (method or "") else 1
        total += sum(samples) * loops
    return total


def sweep(repeats: int, warmup: int) -> tuple[float, float, int]:
    """(wall ms from the first case's start to the end, samples ms, cases) of one sweep."""
    clock = CaseClock()
    frame = attnbench.time(
        seq=N, backends="softmax,sdpa", baseline="sdpa", rounds=1, repeats=repeats,
        warmup=warmup, min_time=0.0, progress=clock,
    )  # fmt: skip
    wall = (clock.ended - clock.starts[0]) * 1e3
    return wall, samples_ms(frame), len(clock.starts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    sweep(args.repeats, args.warmup)  # imports, ceilings, first calls
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
