"""What a training step of the parity model costs with each backward, measured where the
parity run trained: on the trained weights, whose Q and K put their collisions into few
buckets, not on fresh ones.

    python benchmarks/train_step_cost.py --csv plots/train-step-cost.csv

For each checkpoint of the training-parity run (default: the YOSO model the package ships),
times a whole training step (forward, backward, clipping, an Adam step on a copy of the
weights) of the parity shape (8 sequences of 1024 training bytes, masked as in
training) with each backend in turn, `--rounds` rounds interleaved so that the machine's
drift falls on every backend alike; per backend the median and p10/p90 of its steps, and its
ratio to the first backend's median. The host's one-minute load is printed and written.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
import typer
from rich.console import Console

from attnbench.backends import get_backend, parse_backends
from attnbench.inputs.trained import CHECKPOINT
from attnbench.measure.threads import set_threads
from attnbench.nn.corpus import training_bytes
from attnbench.nn.mlm import load
from attnbench.results.formats import atomic_write
from attnbench.studies.train import as_ids, mask_bytes

app = typer.Typer(add_completion=False)
BACKENDS = ",".join([f"yoso:m=32,tau=8,backward={b}" for b in ("proj", "pairs", "star")] + ["sdpa"])


def one_step(model, backend, inputs, targets) -> float:
    """Seconds of one training step of a copy of `model` attending with `backend`."""
    trainee = copy.deepcopy(model).train()
    trainee.set_attention(backend)
    optimizer = torch.optim.Adam(trainee.parameters(), lr=1e-3)
    started = time.perf_counter()
    logits = trainee(inputs)
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainee.parameters(), 1.0)
    optimizer.step()
    return time.perf_counter() - started


@app.command()
def main(
    checkpoint: list[Path] = typer.Option(
        [CHECKPOINT], help="checkpoints of the parity run, each timed in turn"
    ),
    backends: str = typer.Option(BACKENDS),
    rounds: int = typer.Option(5, min=1),
    n: int = 1024,
    batch: int = 8,
    threads: int = 2,
    csv: Path | None = typer.Option(None),
) -> None:
    set_threads(threads)
    rows = []
    for path in checkpoint:
        rows += _time_backends(path, backends, rounds, n, batch, threads)
    if csv is not None:
        atomic_write(csv, pd.DataFrame(rows).to_csv(index=False))


def _time_backends(path, backends, rounds, n, batch, threads) -> list[dict]:
    """The rows of one checkpoint: every backend's median step, interleaved in rounds."""
    console = Console()
    model, facts = load(path)
    console.print(f"weights trained with {facts.get('backend')}")
    ids = as_ids(training_bytes())
    gen = torch.Generator().manual_seed(0)
    starts = torch.randint(len(ids) - n + 1, (batch,), generator=gen)
    inputs, targets = mask_bytes(ids[starts[:, None] + torch.arange(n)], gen)
    chosen = parse_backends(backends)
    one_step(model, get_backend("sdpa"), inputs, targets)  # warm-up: allocator, kernels
    for backend in chosen:
        one_step(model, backend, inputs, targets)  # compile and warm each backend once
    times: dict[str, list[float]] = {b.spec: [] for b in chosen}
    loads = [os.getloadavg()[0]]
    for _ in range(rounds):
        for backend in chosen:
            times[backend.spec].append(one_step(model, backend, inputs, targets))
        loads.append(os.getloadavg()[0])
    first = float(np.median(times[chosen[0].spec]))
    rows = []
    for backend in chosen:
        samples = np.asarray(times[backend.spec])
        median = float(np.median(samples))
        rows.append({
            "backend": backend.spec, "checkpoint": str(facts.get("backend")), "n": n,
            "batch": batch, "threads": threads, "rounds": rounds, "median_s": median,
            "p10_s": float(np.percentile(samples, 10)), "p90_s": float(np.percentile(samples, 90)),
            "vs_first": median / first, "load1_mean": float(np.mean(loads)),
        })  # fmt: skip
        console.print(f"{backend.label:>28} ({backend.values.get('backward', '')}): "
                      f"{median:.3f} s a step (p10-p90 {rows[-1]['p10_s']:.3f}-"
                      f"{rows[-1]['p90_s']:.3f}), {median / first:.2f}x the first")  # fmt: skip
    console.print(f"one-minute load during the run: {min(loads):.2f}-{max(loads):.2f}")
    return rows


if __name__ == "__main__":
    app()
