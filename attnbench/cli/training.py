"""`attnbench train`: train the byte-level masked language model with YOSO attention on text
shipped with Python, for `--inputs model:yoso-mlm` (Q, K, V of a YOSO-trained model)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from attnbench.cli import core
from attnbench.errors import UsageError

LOG_EVERY = 100  # steps between progress lines when stderr is a log, not a terminal


@core.app.command()
def train(
    backend: str = typer.Option("yoso:m=32,tau=8", help="the YOSO backend to train with"),
    steps: int = typer.Option(4000, min=1, help="optimizer steps"),
    tokens: int = typer.Option(8192, min=1, help="bytes per step (batch x length)"),
    lengths: str = typer.Option(
        "256,512,1024,2048,4096", help="sequence lengths, taken in turn step by step"
    ),
    lr: float = typer.Option(1e-3, min=0.0, help="peak learning rate (Adam)"),
    layers: int = typer.Option(4, min=1),
    width: int = typer.Option(128, min=2),
    heads: int = typer.Option(2, min=1),
    hidden: int = typer.Option(512, min=1, help="feed-forward width"),
    evals: int = typer.Option(4, min=1, help="evaluations on the held-out text"),
    seed: int = typer.Option(0, min=0),
    out: Path = typer.Option(Path("yoso-mlm.pt"), help="the checkpoint (.pt)"),
    log: Path = typer.Option(Path("train-yoso-mlm.csv"), help="the training log (.csv)"),
    plot: Path | None = typer.Option(
        Path("train-yoso-mlm.png"), help="the loss curve (.png, .svg or .pdf)"
    ),
) -> None:
    """Train a small byte-level masked language model with YOSO attention on Python's
    reference documentation and the standard library's source (held-out: the last tenth
    of the documentation), on the CPU. Writes the checkpoint, the log and the loss curve
    only when training ends."""
    from attnbench.cli.parse import output_path
    from attnbench.nn.mlm import MLMConfig

    run = _training(backend, steps, tokens, lengths, lr, evals, seed)
    if width % heads:
        raise UsageError(f"--width {width} is not a multiple of --heads {heads}")
    run.config = MLMConfig(layers, width, hidden, heads, tau=run.config.tau)
    out = output_path(out, "--out", (".pt",))
    log = output_path(log, "--log", (".csv",))
    plot = output_path(plot, "--plot", (".png", ".svg", ".pdf"))
    _train_and_write(run, out, log, plot)


def _training(backend, steps, tokens, lengths, lr, evals, seed):
    from attnbench.backends import get_backend
    from attnbench.cli.parse import parse_sizes
    from attnbench.nn.mlm import MLMConfig
    from attnbench.studies.train import Training

    model = get_backend(backend)
    tau = model.values.get("tau")
    if not isinstance(tau, int) or not model.backward:
        raise UsageError(
            f"--backend {backend}: train with a YOSO backend (a fixed integer tau and a "
            "backward pass); the trained model infers with YOSO's expectation"
        )
    sizes = tuple(parse_sizes(lengths, "--lengths"))
    positions = MLMConfig().positions
    if max(sizes) > positions:
        raise UsageError(f"--lengths: at most {positions}, the model's positions")
    if evals > steps:
        raise UsageError(f"--evals {evals} is more than --steps {steps}")
    return Training(
        backend=model, config=MLMConfig(tau=tau), steps=steps, tokens=tokens, lengths=sizes,
        lr=lr, evals=evals, seed=seed,
    )  # fmt: skip


def _train_and_write(run, out: Path, log: Path, plot: Path | None) -> None:
    import platform

    import pandas as pd
    import torch
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from attnbench.nn.corpus import held_out_bytes, training_bytes
    from attnbench.nn.mlm import checkpoint_bytes
    from attnbench.results.formats import atomic_write, atomic_write_bytes
    from attnbench.studies.train import train as train_model
    from attnbench.views.training import loss_plot

    text, held = training_bytes(), held_out_bytes()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())  # fmt: skip
    with Progress(*columns, console=core.progress_console, transient=True) as progress:
        task = progress.add_task("training", total=run.steps)

        logged = not core.progress_console.is_terminal

        def on_step(entry: dict) -> None:
            description = f"training, loss {entry['loss']:.3f}"
            progress.update(task, advance=1, description=description)
            if logged and entry["step"] % LOG_EVERY == 0:
                line = f"[{entry['step']}/{run.steps}] {description}, {entry['seconds']:.0f} s"
                core.progress_console.print(line, markup=False, highlight=False)
            if "heldout_accuracy" in entry:
                core.progress_console.print(_eval_line(entry))

        model, entries = train_model(run, text, held, on_step)
    frame = pd.DataFrame(entries)
    last = entries[-1]
    facts = {
        "command": "attnbench " + " ".join(sys.argv[1:]),
        "backend": run.backend.spec,
        "steps": run.steps, "tokens_per_step": run.tokens, "lengths": list(run.lengths),
        "lr": run.lr, "seed": run.seed, "training_bytes": len(text), "held_out_bytes": len(held),
        "seconds": last["seconds"], "torch": str(torch.__version__),
        "python": platform.python_version(),
        **{key: last[key] for key in ("heldout_loss", "heldout_accuracy",
                                      "heldout_accuracy_sampled", "unigram_accuracy")},
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, checkpoint_bytes(model, facts))
    atomic_write(log, frame.to_csv(index=False))
    written = [out, log]
    if plot is not None:
        loss_plot(frame, plot, f"{facts['command']}")
        written.append(plot)
    core.console.print(_eval_line(last))
    core.console.print("wrote " + ", ".join(map(str, written)))


def _eval_line(entry: dict) -> str:
    return (
        f"step {entry['step']}: held-out masked-byte accuracy {entry['heldout_accuracy']:.3f} "
        f"(expectation), {entry['heldout_accuracy_sampled']:.3f} (sampled), unigram "
        f"{entry['unigram_accuracy']:.3f}; held-out loss {entry['heldout_loss']:.3f}"
    )
