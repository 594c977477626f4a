"""`train` as a Python call: the options of `attnbench train`, parsed and checked as the
command does, the byte-level masked language model trained with each backend in turn on
the same data, seed and schedule, and the training log returned as a DataFrame.

The log is rows (`csv`), the figure is `plot`, the model is `checkpoint`: each is written
only when asked. The log holds every finished backend's steps and is rewritten whole as
each backend ends, so an interrupted run keeps the backends it finished.

Every check that needs no torch comes before it loads.
"""

from __future__ import annotations

import inspect
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.api import parse
from attnbench.api.probes import output_path, writable_file
from attnbench.api.time import Finished
from attnbench.errors import UsageError
from attnbench.results.paths import PLOT_SUFFIXES
from attnbench.run.procedure import Outcome

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_BACKENDS = "yoso:m=32,tau=8"
DEFAULT_LENGTHS = "256,512,1024,2048,4096"


class TrainingProgress:
    """What a training run tells as it goes; this one tells nothing. `start` and `end`
    bracket the run; `backend(label, steps)` comes as a backend starts, `step(entry)` with
    each logged step (held-out scores on the evaluation steps), `ended(label, entries)` as
    a backend ends, its log kept."""

    def start(self) -> None:
        pass

    def backend(self, label: str, steps: int) -> None:
        pass

    def step(self, entry: dict) -> None:
        pass

    def ended(self, label: str, entries: list[dict]) -> None:
        pass

    def end(self) -> None:
        pass


def train(
    backends: str | list[str] = DEFAULT_BACKENDS,
    steps: int = 4000,
    tokens: int = 8192,
    lengths: str | int | list[int] = DEFAULT_LENGTHS,
    lr: float = 1e-3,
    warmup: int = 100,
    layers: int = 4,
    width: int = 128,
    heads: int = 2,
    hidden: int = 512,
    evals: int = 4,
    max_seconds: float | None = None,
    seed: int = 0,
    threads: int | None = None,
    checkpoint: str | Path | None = None,
    csv: str | Path | None = None,
    plot: str | Path | None = None,
    progress: TrainingProgress | None = None,
) -> pd.DataFrame:
    """The training log of `attnbench train` with the same options: one row per step per
    backend, held-out scores on the evaluation steps. Files are written only when asked:
    `csv` the log, `plot` held-out loss against steps and time, `checkpoint` the model
    (.pt; with several backends each goes beside it as STEM-BACKEND.pt). A bad option is a
    `UsageError` with the command's text."""
    return run_train(**locals()).frame


def run_train(command: str | None = None, **options) -> Finished:
    """`train`, returning the whole `Finished` run: `study` the runs (`Training`), `frame`
    the log, `outcome.written` the checkpoints and the log. `command` is the command line
    kept in each checkpoint and the figure (default: the call as `attnbench train` reads
    it); an option not given takes `train`'s default."""
    defaults = {k: p.default for k, p in inspect.signature(train).parameters.items()}
    options = {**defaults, **options}
    command = command or _command_line(options, defaults)
    progress = options.pop("progress") or TrainingProgress()
    threads, paths = options.pop("threads"), _outputs(options)
    if threads is not None:
        threads = parse.positive(threads, "--threads")
    checked = check_train_options(**options)
    runs = trainings(checked)
    checkpoint = _room_for(paths["checkpoint"])
    outs = [checkpoint_path(checkpoint, run.backend.spec, len(runs)) for run in runs]
    from attnbench.measure.threads import set_threads

    used = set_threads(threads)
    frame, written = _train_and_write(runs, outs, paths["csv"], progress, used, command)
    if paths["plot"] is not None:
        from attnbench.views.training import parity_plot

        parity_plot(frame, paths["plot"], command)
    outcome = Outcome(frame.to_dict("records"), {"threads": used}, paths["csv"], None, written)
    return Finished(runs, outcome, frame, paths["plot"])


def check_train_options(
    *, backends, steps, tokens, lengths, lr, warmup, layers, width, heads, hidden, evals,
    max_seconds, seed,
) -> dict:  # fmt: skip
    """Every option that can be checked without torch, checked."""
    steps = parse.positive(steps, "--steps")
    heads = parse.positive(heads, "--heads")
    width = parse.positive(width, "--width", parse.MAX_MODEL_SIZE)
    if width < 2:
        raise UsageError(f"--width: must be 2 or more, got {width}")
    if width % heads:
        raise UsageError(f"--width {width} is not a multiple of --heads {heads}")
    sizes = tuple(parse.parse_sizes(parse.sizes_text(lengths), "--lengths"))
    tokens = parse.positive(tokens, "--tokens")
    if not math.isfinite(lr):  # nan and inf train to NaN
        raise UsageError(f"--lr {lr}: the learning rate must be a finite number")
    if lr < 0:
        raise UsageError(f"--lr: must be zero or more, got {lr}")
    if max_seconds is not None and math.isnan(max_seconds):
        raise UsageError("--max-seconds nan: give a number of seconds")
    if max_seconds is not None and max_seconds < 0:
        raise UsageError(f"--max-seconds: must be zero or more, got {max_seconds}")
    evals = parse.positive(evals, "--evals")
    if evals > steps:
        raise UsageError(f"--evals {evals} is more than --steps {steps}")
    return dict(
        backends=parse.backends_text(backends), steps=steps, tokens=tokens, lengths=sizes, lr=lr,
        warmup=parse.non_negative(warmup, "--warmup"), evals=evals, seed=parse.check_seed(seed),
        max_seconds=max_seconds, layers=parse.positive(layers, "--layers", parse.MAX_LAYERS),
        width=width, heads=heads, hidden=parse.positive(hidden, "--hidden", parse.MAX_MODEL_SIZE),
    )  # fmt: skip


def trainings(checked: dict) -> list:
    """One `Training` per backend from checked options; here torch loads, with the
    backends, each checked able to train."""
    from attnbench.backends import parse_backends
    from attnbench.nn.mlm import MLMConfig
    from attnbench.studies.train import Training, config_for

    options = dict(checked)
    models = parse_backends(options.pop("backends"))
    untrainable = [b for b in models if not b.backward]
    if untrainable:
        raise UsageError(f"--backends: {untrainable[0].name} has no backward pass; it cannot train")
    config = MLMConfig(*(options.pop(k) for k in ("layers", "width", "hidden", "heads")))
    if max(options["lengths"]) > config.positions:
        raise UsageError(f"--lengths: at most {config.positions}, the model's positions")
    tokens, longest = options["tokens"], max(options["lengths"])
    if tokens < longest:  # a step reads tokens // n sequences: none would fit
        raise UsageError(f"--tokens {tokens} is fewer than one sequence of --lengths {longest}")
    for model in models:
        if model.name == "yoso" and not isinstance(model.values.get("tau"), int):
            raise UsageError(f"--backends {model.spec}: YOSO trains with a fixed integer tau")
    return [Training(backend=b, config=config_for(b, config), **options) for b in models]


def checkpoint_path(out: Path | None, spec: str, count: int) -> Path | None:
    """`out` for one backend; STEM-BACKEND.pt beside it for each of several."""
    if out is None or count == 1:
        return out
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", spec).strip("-")
    return out.with_name(f"{out.stem}-{slug}.pt")


def _outputs(options: dict) -> dict:
    """The three output paths, popped from `options`, suffixes checked; the log and the
    figure probed writable (the checkpoint's folder may not exist yet: `_room_for`)."""
    paths = {k: options.pop(k) for k in ("checkpoint", "csv", "plot")}
    paths = {k: None if v is None else Path(v) for k, v in paths.items()}
    if paths["checkpoint"] is not None and paths["checkpoint"].suffix.lower() != ".pt":
        raise UsageError(f"--checkpoint: {paths['checkpoint']} must end in one of .pt")
    paths["csv"] = output_path(paths["csv"], "--csv", (".csv",))
    paths["plot"] = output_path(paths["plot"], "--plot", PLOT_SUFFIXES)
    return paths


def _room_for(checkpoint: Path | None) -> Path | None:
    """The checkpoint's folder made (checkpoints/ of a fresh checkout), then probed
    writable: once every option is known good, so a bad one leaves nothing behind."""
    if checkpoint is None:
        return None
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    return writable_file(checkpoint, "--checkpoint")


def _command_line(options: dict, defaults: dict) -> str:
    """The call as `attnbench train` reads it: every option not at its default."""
    words = ["attnbench", "train"]
    for name, value in options.items():
        if name != "progress" and value is not None and value != defaults[name]:
            text = parse.list_text(value) if isinstance(value, list) else str(value)
            words += [f"--{name.replace('_', '-')}", text]
    return " ".join(words)


def _train_and_write(runs, outs, csv: Path | None, progress: TrainingProgress, threads: int,
                     command: str) -> tuple[pd.DataFrame, list[Path]]:  # fmt: skip
    """Each run in turn; after each, its checkpoint and the whole log so far are written
    (each file replaced in one step)."""
    import pandas as pd

    from attnbench.nn.corpus import held_out_bytes, training_bytes
    from attnbench.results.formats import atomic_write
    from attnbench.studies import train as study

    text, held = training_bytes(), held_out_bytes()
    frames, written = [], []
    progress.start()
    try:
        for run, out in zip(runs, outs, strict=True):
            label = run.backend.label
            progress.backend(label, run.steps)

            def on_step(entry: dict, label=label) -> None:
                check_finite(entry, label)
                entry["threads"], entry["load1"] = threads, os.getloadavg()[0]
                progress.step(entry)

            model, entries = study.train(run, text, held, on_step)
            frames.append(pd.DataFrame(entries))
            if csv is not None:
                atomic_write(csv, pd.concat(frames).to_csv(index=False))
            if out is not None:
                save(model, run, entries, out, command, len(text), len(held), threads)
                written.append(out)
            progress.ended(label, entries)
    finally:
        progress.end()
    if csv is not None:
        written.append(csv)
    return pd.concat(frames, ignore_index=True), written


def save(model, run, entries, out: Path, command: str, text_bytes: int, held_bytes: int,
         threads: int) -> None:  # fmt: skip
    """The model's checkpoint with the facts of its run."""
    import platform

    import torch

    from attnbench.nn.mlm import checkpoint_bytes
    from attnbench.results.formats import atomic_write_bytes

    last = entries[-1]
    facts = {
        "command": command, "backend": run.backend.spec,
        "steps": last["step"], "steps_planned": run.steps, "tokens_per_step": run.tokens,
        "lengths": list(run.lengths),
        "lr": run.lr, "warmup": run.warmup, "seed": run.seed, "training_bytes": text_bytes,
        "held_out_bytes": held_bytes, "seconds": last["seconds"], "threads": threads,
        "torch": str(torch.__version__), "python": platform.python_version(),
        **{k: v for k, v in last.items() if k.startswith("heldout_")},
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, checkpoint_bytes(model, facts))


def check_finite(entry: dict, label: str) -> None:
    """Stop at the first non-finite loss: the weights are NaN from there on, so the run
    is refused before its checkpoint or log is written (earlier backends' stay)."""
    if not math.isfinite(entry["loss"]):
        raise UsageError(
            f"train: {label}'s loss is {entry['loss']} at step {entry['step']} (lr "
            f"{entry['lr']:g}); nothing written for it; try a lower --lr"
        )
