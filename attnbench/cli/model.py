"""`attnbench model`: what a backend costs inside a whole encoder being trained."""

import typer

from attnbench.api.time import DEFAULT_BACKENDS
from attnbench.cli import core, options


@core.app.command("model")
def model_cmd(
    seq: options.Seq = "512..4096",
    backends: options.Backends = DEFAULT_BACKENDS,
    layers: int = typer.Option(6, help="encoder layers"),
    width: int = typer.Option(256, help="embedding dimension (a multiple of --heads)"),
    hidden: int = typer.Option(1024, help="feed-forward hidden dimension"),
    heads: options.Heads = 4,
    steps: int = typer.Option(10, help="timed training steps per case (their mean is reported)"),
    warmup: int = typer.Option(2, help="untimed training steps before them"),
    memory_budget: str = typer.Option(
        None, help="memory a step may use, e.g. 4GiB or 512MiB (default: 80% of what is free)"
    ),
    max_batch: int = typer.Option(64, help="the largest batch the search tries"),
    max_spread: options.MaxSpread = "10%",
    device: options.Device = "auto",
    seed: options.Seed = 0,
    threads: options.Threads = None,
    executor: options.Executor = "in-process",
    ray_address: options.RayAddress = None,
    cpus_per_worker: options.CpusPerWorker = None,
    resume: options.Resume = False,
    csv: options.Csv = None,
    json: options.Json = None,
    plot: options.Plot = None,
) -> None:
    """Training cost of a whole encoder per instance vs length (YOSO Fig. 7).

    Each case trains at the largest batch that fits the memory budget."""
    from attnbench.api.model import run_model

    finished = run_model(
        seq=seq, backends=backends, layers=layers, width=width, hidden=hidden, heads=heads,
        steps=steps, warmup=warmup, memory_budget=memory_budget, max_batch=max_batch,
        max_spread=max_spread, device=device, seed=seed, threads=threads,
        executor=options.executor_name(executor, False), ray_address=ray_address,
        cpus_per_worker=cpus_per_worker, resume=resume, csv=csv, json=json, plot=plot,
        progress=core.progress_bar(),
    )  # fmt: skip
    from attnbench.views.tables import model_table

    core.console.print(model_table(finished.frame))
    core.report_finished(
        finished, finished.study.max_spread, "time_per_instance_ms", "more --steps"
    )
