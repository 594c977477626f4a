"""`attnbench train`: train the byte-level masked language model with one or more attention
backends on text shipped with Python, side by side on the same data, seed and schedule
(training parity), and keep a model's checkpoint (`--inputs model:yoso-mlm` reads a
YOSO-trained one)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from attnbench.api.train import DEFAULT_BACKENDS, DEFAULT_LENGTHS, TrainingProgress
from attnbench.cli import core, options

LOG_EVERY = 100  # steps between progress lines when stderr is a log, not a terminal


@core.app.command()
def train(
    ctx: typer.Context,
    backends: str = typer.Option(
        DEFAULT_BACKENDS,
        "--backends",
        "--backend",
        help="backends to train with, one model each (any backend with a backward pass)",
    ),  # fmt: skip
    steps: int = typer.Option(4000, help="optimizer steps"),
    tokens: int = typer.Option(8192, help="bytes per step (batch x length)"),
    lengths: str = typer.Option(
        DEFAULT_LENGTHS, help="sequence lengths, taken in turn step by step"
    ),
    lr: float = typer.Option(1e-3, help="peak learning rate (Adam)"),
    warmup: int = typer.Option(100, help="steps of linear learning-rate warm-up"),
    layers: int = typer.Option(4),
    width: int = typer.Option(128),
    heads: int = typer.Option(2),
    hidden: int = typer.Option(512, help="feed-forward width"),
    evals: int = typer.Option(4, help="evaluations on the held-out text"),
    max_seconds: float | None = typer.Option(
        None, help="stop a backend after this many training seconds (scored there)"
    ),
    seed: int = typer.Option(0, help="seed of the weights, the batches and the masks"),
    threads: options.Threads = None,
    checkpoint: Path | None = typer.Option(
        None,
        help="write the model to this checkpoint (.pt); with several backends each goes "
        "beside it as STEM-BACKEND.pt (default: none written)",
    ),
    csv: Path = typer.Option(Path("train.csv"), help="write the training log to this CSV"),
    plot: Path | None = typer.Option(
        Path("train.png"), help="held-out [MASK] loss against steps and time (.png, .svg, .pdf)"
    ),
    out: Path | None = typer.Option(None, hidden=True, help="deprecated: --checkpoint"),
    log: Path | None = typer.Option(None, hidden=True, help="deprecated: --csv"),
) -> None:
    """Train a small byte-level masked language model with each backend on Python's
    reference documentation and the standard library's source (held-out: the last tenth
    of the documentation), on the CPU, one backend after another on the same data, seed
    and schedule. The log holds every finished backend's steps and is rewritten whole as
    each backend ends, so an interrupted run keeps the backends it finished."""
    checkpoint = options.renamed(ctx, "--out", out, "--checkpoint", checkpoint)
    csv = options.renamed(ctx, "--log", log, "--csv", csv)
    from attnbench.api.train import run_train

    finished = run_train(
        backends=backends, steps=steps, tokens=tokens, lengths=lengths, lr=lr, warmup=warmup,
        layers=layers, width=width, heads=heads, hidden=hidden, evals=evals,
        max_seconds=max_seconds, seed=seed, threads=threads, checkpoint=checkpoint, csv=csv,
        plot=plot, progress=TrainingBar(), command="attnbench " + " ".join(sys.argv[1:]),
    )  # fmt: skip
    core.report_finished(finished)


class TrainingBar(TrainingProgress):
    """A bar per backend on stderr, its loss as it goes (off a terminal, a line every
    LOG_EVERY steps instead), a line per held-out evaluation there, and each backend's
    last evaluation on stdout as it ends."""

    def __init__(self):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TimeRemainingColumn())  # fmt: skip
        self.bar = Progress(*columns, console=core.progress_console, transient=True)
        self.logged = not core.progress_console.is_terminal
        self.task, self.label, self.steps = None, "", 0

    def start(self) -> None:
        self.bar.start()

    def backend(self, label: str, steps: int) -> None:
        self.task, self.label, self.steps = self.bar.add_task(label, total=steps), label, steps

    def step(self, entry: dict) -> None:
        description = f"{self.label}, loss {entry['loss']:.3f}"
        self.bar.update(self.task, advance=1, description=description)
        if self.logged and entry["step"] % LOG_EVERY == 0:
            line = f"[{entry['step']}/{self.steps}] {description}, {entry['seconds']:.0f} s"
            core.progress_console.print(line, markup=False, highlight=False)
        if "heldout_mask_loss" in entry:
            core.progress_console.print(eval_line(self.label, entry), markup=False)

    def ended(self, label: str, entries: list[dict]) -> None:
        self.bar.remove_task(self.task)
        core.console.print(eval_line(label, entries[-1]), markup=False)

    def end(self) -> None:
        self.bar.stop()


def eval_line(label: str, entry: dict) -> str:
    return (
        f"{label} step {entry['step']}: held-out [MASK] loss {entry['heldout_mask_loss']:.3f} "
        f"(unigram {entry['heldout_unigram_mask_loss']:.3f}), accuracy "
        f"{entry['heldout_mask_accuracy']:.3f} (unigram "
        f"{entry['heldout_unigram_mask_accuracy']:.3f}); all masked bytes "
        f"{entry['heldout_accuracy']:.3f} (copy-or-most-frequent "
        f"{entry['heldout_copy_accuracy']:.3f})"
    )
