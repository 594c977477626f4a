"""`attnbench train`: train the byte-level masked language model with one or more attention
backends on text shipped with Python, side by side on the same data, seed and schedule
(training parity), and keep a model's checkpoint (`--inputs model:yoso-mlm` reads a
YOSO-trained one)."""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path

import typer

from attnbench.cli import core, options
from attnbench.errors import UsageError

LOG_EVERY = 100  # steps between progress lines when stderr is a log, not a terminal


@core.app.command()
def train(
    backends: str = typer.Option(
        "yoso:m=32,tau=8",
        "--backends",
        "--backend",
        help="backends to train with, one model each (any backend with a backward pass)",
    ),  # fmt: skip
    steps: int = typer.Option(4000, min=1, help="optimizer steps"),
    tokens: int = typer.Option(8192, min=1, help="bytes per step (batch x length)"),
    lengths: str = typer.Option(
        "256,512,1024,2048,4096", help="sequence lengths, taken in turn step by step"
    ),
    lr: float = typer.Option(1e-3, min=0.0, help="peak learning rate (Adam)"),
    warmup: int = typer.Option(100, min=0, help="steps of linear learning-rate warm-up"),
    layers: int = typer.Option(4, min=1),
    width: int = typer.Option(128, min=2),
    heads: int = typer.Option(2, min=1),
    hidden: int = typer.Option(512, min=1, help="feed-forward width"),
    evals: int = typer.Option(4, min=1, help="evaluations on the held-out text"),
    max_seconds: float | None = typer.Option(
        None, min=0.0, help="stop a backend after this many training seconds (scored there)"
    ),
    seed: int = typer.Option(0, min=0),
    threads: options.Threads = None,
    out: Path | None = typer.Option(
        None,
        help="checkpoint (.pt); with several backends each goes beside it as "
        "STEM-BACKEND.pt (default: none written)",
    ),
    log: Path = typer.Option(Path("train.csv"), help="the training log (.csv)"),
    plot: Path | None = typer.Option(
        Path("train.png"), help="held-out [MASK] loss against steps and time (.png, .svg, .pdf)"
    ),
) -> None:
    """Train a small byte-level masked language model with each backend on Python's
    reference documentation and the standard library's source (held-out: the last tenth
    of the documentation), on the CPU, one backend after another on the same data, seed
    and schedule. The log holds every finished backend's steps and is rewritten whole as
    each backend ends, so an interrupted run keeps the backends it finished."""
    from attnbench.api.probes import output_path
    from attnbench.backends import parse_backends

    models = parse_backends(backends)
    untrainable = [b for b in models if not b.backward]
    if untrainable:
        raise UsageError(f"--backends: {untrainable[0].name} has no backward pass; it cannot train")
    if width % heads:
        raise UsageError(f"--width {width} is not a multiple of --heads {heads}")
    runs = [
        _training(model, steps, tokens, lengths, lr, warmup, evals, seed, layers, width,
                  hidden, heads, max_seconds)
        for model in models
    ]  # fmt: skip
    if out is not None and out.suffix.lower() == ".pt":
        out.parent.mkdir(parents=True, exist_ok=True)  # checkpoints/ of a fresh checkout
    out = output_path(out, "--out", (".pt",))
    outs = [_checkpoint_path(out, run.backend.spec, len(runs)) for run in runs]
    log = output_path(log, "--log", (".csv",))
    plot = output_path(plot, "--plot", (".png", ".svg", ".pdf"))
    from attnbench.cli.shared import set_threads

    used = set_threads(threads)
    _train_and_write(runs, outs, log, plot, used)


def _training(model, steps, tokens, lengths, lr, warmup, evals, seed, layers, width, hidden,
              heads, max_seconds):  # fmt: skip
    from attnbench.api.parse import parse_sizes
    from attnbench.nn.mlm import MLMConfig
    from attnbench.studies.train import Training, config_for

    sizes = tuple(parse_sizes(lengths, "--lengths"))
    config = MLMConfig(layers, width, hidden, heads)
    if max(sizes) > config.positions:
        raise UsageError(f"--lengths: at most {config.positions}, the model's positions")
    if tokens < max(sizes):  # a step reads tokens // n sequences: none would fit
        raise UsageError(f"--tokens {tokens} is fewer than one sequence of --lengths {max(sizes)}")
    # typer's min=0 lets nan (no comparison holds) and inf through: both train to NaN
    if not math.isfinite(lr):
        raise UsageError(f"--lr {lr}: the learning rate must be a finite number")
    if max_seconds is not None and math.isnan(max_seconds):
        raise UsageError("--max-seconds nan: give a number of seconds")
    if evals > steps:
        raise UsageError(f"--evals {evals} is more than --steps {steps}")
    tau = model.values.get("tau")
    if model.name == "yoso" and not isinstance(tau, int):
        raise UsageError(f"--backends {model.spec}: YOSO trains with a fixed integer tau")
    return Training(
        backend=model, config=config_for(model, config), steps=steps, tokens=tokens,
        lengths=sizes, lr=lr, warmup=warmup, evals=evals, seed=seed, max_seconds=max_seconds,
    )  # fmt: skip


def _checkpoint_path(out: Path | None, spec: str, count: int) -> Path | None:
    """`out` for one backend; STEM-BACKEND.pt beside it for each of several."""
    if out is None or count == 1:
        return out
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", spec).strip("-")
    return out.with_name(f"{out.stem}-{slug}.pt")


def _train_and_write(runs, outs, log: Path, plot: Path | None, threads: int) -> None:
    import pandas as pd
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from attnbench.nn.corpus import held_out_bytes, training_bytes
    from attnbench.results.formats import atomic_write
    from attnbench.studies.train import train as train_model
    from attnbench.views.training import parity_plot

    text, held = training_bytes(), held_out_bytes()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())  # fmt: skip
    frames, written = [], []
    command = "attnbench " + " ".join(sys.argv[1:])
    logged = not core.progress_console.is_terminal
    with Progress(*columns, console=core.progress_console, transient=True) as progress:
        for run, out in zip(runs, outs, strict=True):
            label = run.backend.label
            task = progress.add_task(label, total=run.steps)

            def on_step(entry: dict, task=task, label=label, steps=run.steps) -> None:
                _check_finite(entry, label)
                entry["threads"], entry["load1"] = threads, os.getloadavg()[0]
                description = f"{label}, loss {entry['loss']:.3f}"
                progress.update(task, advance=1, description=description)
                if logged and entry["step"] % LOG_EVERY == 0:
                    line = f"[{entry['step']}/{steps}] {description}, {entry['seconds']:.0f} s"
                    core.progress_console.print(line, markup=False, highlight=False)
                if "heldout_mask_loss" in entry:
                    core.progress_console.print(_eval_line(label, entry), markup=False)

            model, entries = train_model(run, text, held, on_step)
            progress.remove_task(task)
            frames.append(pd.DataFrame(entries))
            # every finished backend's rows, whole, replacing the file in one step
            atomic_write(log, pd.concat(frames).to_csv(index=False))
            if out is not None:
                _save(model, run, entries, out, command, text, held, threads)
                written.append(out)
            core.console.print(_eval_line(label, entries[-1]), markup=False)
    written.append(log)
    if plot is not None:
        parity_plot(pd.concat(frames), plot, command)
        written.append(plot)
    core.console.print("wrote " + ", ".join(map(str, written)))


def _save(model, run, entries, out: Path, command, text, held, threads) -> None:
    import platform

    import torch

    from attnbench.nn.mlm import checkpoint_bytes
    from attnbench.results.formats import atomic_write_bytes

    last = entries[-1]
    facts = {
        "command": command, "backend": run.backend.spec,
        "steps": last["step"], "steps_planned": run.steps, "tokens_per_step": run.tokens,
        "lengths": list(run.lengths),
        "lr": run.lr, "warmup": run.warmup, "seed": run.seed, "training_bytes": len(text),
        "held_out_bytes": len(held), "seconds": last["seconds"], "threads": threads,
        "torch": str(torch.__version__), "python": platform.python_version(),
        **{k: v for k, v in last.items() if k.startswith("heldout_")},
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, checkpoint_bytes(model, facts))


def _check_finite(entry: dict, label: str) -> None:
    """Stop at the first non-finite loss: the weights are NaN from there on, so the run
    is refused before its checkpoint or log is written (earlier backends' stay)."""
    if not math.isfinite(entry["loss"]):
        raise UsageError(
            f"train: {label}'s loss is {entry['loss']} at step {entry['step']} (lr "
            f"{entry['lr']:g}); nothing written for it; try a lower --lr"
        )


def _eval_line(label: str, entry: dict) -> str:
    return (
        f"{label} step {entry['step']}: held-out [MASK] loss {entry['heldout_mask_loss']:.3f} "
        f"(unigram {entry['heldout_unigram_mask_loss']:.3f}), accuracy "
        f"{entry['heldout_mask_accuracy']:.3f} (unigram "
        f"{entry['heldout_unigram_mask_accuracy']:.3f}); all masked bytes "
        f"{entry['heldout_accuracy']:.3f} (copy-or-most-frequent "
        f"{entry['heldout_copy_accuracy']:.3f})"
    )
