"""Is a noisy run flagged and a quiet one not? Times one backend case several times on the
CPU, first on the machine as it is, then with busy processes competing for the CPUs.

    python benchmarks/noise_check.py --backend softmax --seq 1024 --cases 8 --busy 2

Each case is one `time_call` with its stability verdict (IQR / median of the kept samples
against --max-spread) and the load average and CPU frequency before and after it; each
phase ends with the likely cause of its unstable cases. The busy processes start before the
settling pause, since the 1-minute load average needs time to show them.
"""

from __future__ import annotations

import subprocess
import sys
import time

import torch
import typer
from rich.console import Console
from rich.table import Table

from attnbench import get_backend
from attnbench.measure.conditions import case_conditions, likely_cause, snapshot
from attnbench.measure.timing import time_call

BUSY_LOOP = "while True: pass"


def main(
    backend: str = typer.Option("softmax", help="backend spec to time"),
    seq: int = typer.Option(1024, help="sequence length n"),
    cases: int = typer.Option(8, help="cases timed in each phase"),
    busy: int = typer.Option(2, help="busy processes competing in the second phase"),
    settle: float = typer.Option(30.0, help="seconds the busy processes run before timing"),
    min_time: float = typer.Option(0.2, help="measured seconds per case"),
    max_spread: float = typer.Option(0.10, help="IQR / median above this is unstable"),
    seed: int = typer.Option(0),
) -> None:
    console = Console()
    attention = get_backend(backend)
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 4, seq, 64, generator=generator) for _ in range(3))
    console.print(f"{backend} n={seq} on cpu, torch threads {torch.get_num_threads()}")
    for label, processes in (("quiet", 0), (f"{busy} busy processes", busy)):
        competing = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(processes)]
        try:
            if competing:
                time.sleep(settle)
            _phase(console, label, attention, (q, k, v), cases, min_time, max_spread)
        finally:
            for process in competing:
                process.kill()
                process.wait()


def _phase(console, label, attention, qkv, cases, min_time, max_spread) -> None:
    table = Table(title=label)
    for column in ("case", "median ms", "samples", "spread", "stable", "load", "cpu MHz"):
        table.add_column(column, justify="right")
    unstable = []
    for case in range(cases):
        before = snapshot("cpu")
        timing = time_call(
            lambda: attention(*qkv), "cpu", min_time_s=min_time, max_spread=max_spread
        )
        conditions = case_conditions(before, snapshot("cpu"))
        if not timing.stable:
            unstable.append(conditions)
        table.add_row(
            str(case),
            f"{timing.median:.2f}",
            str(len(timing.samples_ms)),
            f"{timing.spread:.1%}",
            "yes" if timing.stable else "NO",
            f"{conditions['load_before']} -> {conditions['load_after']}",
            f"{conditions['cpu_mhz_before']} -> {conditions['cpu_mhz_after']}",
        )
    console.print(table)
    if unstable:
        console.print(
            f"warning: {len(unstable)} of {cases} cases unstable ({label}): "
            f"{likely_cause(unstable)}"
        )
    else:
        console.print(f"{label}: every case stable")


if __name__ == "__main__":
    typer.run(main)
