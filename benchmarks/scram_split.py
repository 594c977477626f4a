"""Where SCRAM's forward time goes: PatchMatch (init, propagation passes, random search)
vs the window softmax, next to dense sdpa on the same inputs (SCRAM Fig. 4's setup).

    python benchmarks/scram_split.py --grid 32 --grid 64 --grid 128 --grid 256 \\
        --csv plots/scram-cpu-split.csv
    python benchmarks/scram_split.py --grid 128 --inputs image:camera \\
        --csv plots/scram-cpu-split-camera.csv

Each stage is timed on its own with the same inputs; "scram forward" is the whole backend
call, about PatchMatch plus the window softmax. PatchMatch's init, propagation and random
search are the pass times stamped inside real T = 8 runs (`cpu.pass_times`): a run with a
stage left out would build other lists, and so do other work, in the stages it keeps.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
import typer
from rich.console import Console
from rich.table import Table

from attnbench import get_backend
from attnbench.errors import UsageError
from attnbench.inputs import Inputs
from attnbench.kernels.patchmatch import cpu, dispatch
from attnbench.measure.allocator import steady_allocator
from attnbench.measure.threads import set_threads
from attnbench.measure.timing import time_call
from attnbench.results.formats import atomic_write

app = typer.Typer(add_completion=False)


def _ms(fn, repeats: int) -> float:
    return time_call(fn, "cpu", repeats, 3).median


def _pass_ms(q, k, side: int, kappa: int, repeats: int, T: int = 8, jumps=(8, 4, 2, 1)):
    """Median ms of PatchMatch's init, propagation and random search within whole runs."""
    heads, n = q.shape[0], q.shape[1]
    clock = np.empty(2 + T * (len(jumps) + 1))
    spent = []
    for _ in range(repeats + 1):  # the first run compiles or loads the kernel
        ids = np.empty((heads, n, kappa), np.int32)
        sc = np.empty((heads, n, kappa), np.float32)
        changed = np.zeros((2, heads * n), np.int32)
        fields = (ids, sc, np.empty_like(ids), np.empty_like(sc), changed)
        cpu.patchmatch(q, k, side, side, kappa, "max", 1, T, jumps, 0, *fields, clock=clock)
        spent.append(cpu.pass_times(clock, T, len(jumps)))
    return {stage: 1e3 * float(np.median([s[stage] for s in spent[1:]])) for stage in spent[0]}


def stages(
    side: int, heads: int, d: int, kappa: int, b: int, repeats: int, inputs: str
) -> list[dict]:
    """Median ms of each stage at a side x side grid, on inputs made as `attnbench time`
    makes them (seed 0; a picture repeated over the heads)."""
    n = side * side
    source = Inputs(inputs, 1, heads, d)
    q, k, v = source.make(n, 0, torch.float32, "cpu", (side, side))
    q, k, v = (t.expand(1, heads, -1, -1).contiguous() for t in (q, k, v))
    qf, kf, vf = (t.reshape(heads, n, t.shape[-1]) for t in (q, k, v))
    scram = get_backend(f"scram:kappa={kappa},b={b}")
    grid = (side, side)
    found, _ = dispatch.patchmatch(qf, kf, side, side, kappa)
    rows = {
        "patchmatch T=8": lambda: dispatch.patchmatch(qf, kf, side, side, kappa),
        "window softmax": lambda: dispatch.window_softmax(qf, kf, vf, found, side, side, b),
        "scram forward": lambda: scram(q, k, v, grid=grid),
        "sdpa forward": lambda: F.scaled_dot_product_attention(q, k, v),
    }
    ms = {s: _ms(fn, repeats) for s, fn in rows.items()}
    passes = _pass_ms(qf.numpy(), kf.numpy(), side, kappa, repeats)
    ms = {
        "patchmatch T=8": ms.pop("patchmatch T=8"),
        **{f"patchmatch: {stage}": t for stage, t in passes.items()},
        **ms,
    }
    return [{"side": side, "n": n, "stage": s, "ms": t} for s, t in ms.items()]


def _check_inputs(kind: str, heads: int, dim: int) -> None:
    """One line and exit code 2 for inputs `stages` cannot make (unknown, or a file)."""
    try:
        if not Inputs(kind, 1, heads, dim).fixed_shape:
            return
        message = f"--inputs: {kind} is a file; use random, clustered, blobs or image:NAME"
    except UsageError as exc:
        message = str(exc)
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@app.command()
def main(
    grid: list[int] = typer.Option([64, 128], help="square grid sides"),
    heads: int = 4,
    dim: int = 3,
    kappa: int = 4,
    b: int = 1,
    repeats: int = 5,
    inputs: str = typer.Option("random", help="random, clustered, blobs or image:NAME"),
    threads: int = typer.Option(None, min=1, help="CPU threads for torch and numba"),
    csv: Path = typer.Option(None, help="write the table here"),
) -> None:
    _check_inputs(inputs, heads, dim)
    set_threads(threads)
    steady_allocator()
    records = [row for side in grid for row in stages(side, heads, dim, kappa, b, repeats, inputs)]
    df = pd.DataFrame(records)
    forward = df[df["stage"] == "scram forward"].set_index("n")["ms"]
    df["share_of_scram"] = df["ms"] / df["n"].map(forward)
    # Time per query and head: flat across grids means a stage is bound by its work per
    # query, not by the working set outgrowing the caches.
    df["us_per_query"] = df["ms"] * 1e3 / (df["n"] * heads)
    table = Table("grid", "stage", "ms", "share of scram forward", "µs per query")
    for r in df.itertuples():
        table.add_row(
            f"{r.side}x{r.side}",
            r.stage,
            f"{r.ms:.2f}",
            f"{r.share_of_scram:.2f}",
            f"{r.us_per_query:.2f}",
        )
    Console().print(
        f"{inputs} inputs, {torch.get_num_threads()} threads, {heads} heads, d={dim}, kappa={kappa}"
    )
    Console().print(table)
    if csv:
        atomic_write(csv, df.to_csv(index=False))


if __name__ == "__main__":
    app()
