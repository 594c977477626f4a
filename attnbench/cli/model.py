"""`attnbench model`: what a backend costs inside a whole encoder being trained."""

import typer

from attnbench.cli import core, options, shared
from attnbench.cli.time import DEFAULT_BACKENDS
from attnbench.errors import UsageError


@core.app.command("model")
def model_cmd(
    ctx: typer.Context,
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
    executor: options.Executor = "local",
    ray_address: options.RayAddress = None,
    cpus_per_worker: options.CpusPerWorker = None,
    resume: options.Resume = False,
    csv: options.Csv = None,
    json: options.Json = None,
    plot: options.Plot = None,
) -> None:
    """Training cost of a whole encoder per instance vs length (YOSO Fig. 7).

    Each case trains at the largest batch that fits the memory budget."""
    from attnbench.api.parse import (
        MAX_BATCH,
        MAX_COUNT,
        MAX_LAYERS,
        MAX_MODEL_SIZE,
        check_seed,
        check_threads,
        non_negative,
        parse_bytes,
        parse_fraction,
        parse_sizes,
        positive,
    )
    from attnbench.api.probes import resolve_device
    from attnbench.backends import parse_backends
    from attnbench.studies.model import ModelConfig, ModelStudy

    seed = check_seed(seed)
    heads = positive(heads, "--heads")
    width = positive(width, "--width", MAX_MODEL_SIZE)
    at = shared.where(ctx, executor, False, ray_address, cpus_per_worker)
    asked = threads = check_threads(threads, at.pooled)
    if width % heads:
        raise UsageError(f"--width: {width} is not a multiple of --heads {heads}")
    config = ModelConfig(
        layers=positive(layers, "--layers", MAX_LAYERS),
        width=width,
        hidden=positive(hidden, "--hidden", MAX_MODEL_SIZE),
        heads=heads,
    )
    spec = ModelStudy(
        seqs=parse_sizes(seq, "--seq"),
        backends=parse_backends(backends),
        config=config,
        steps=positive(steps, "--steps", MAX_COUNT),
        warmup=non_negative(warmup, "--warmup", MAX_COUNT),
        memory_budget=None if memory_budget is None else parse_bytes(memory_budget),
        max_batch=positive(max_batch, "--max-batch", MAX_BATCH),
        device=resolve_device(device, at.gpus),
        seed=seed,
        max_spread=parse_fraction(max_spread, "--max-spread"),
    )
    csv, json, plot = shared.outputs(csv, json, plot)
    from attnbench.measure.env import environment
    from attnbench.results.schema import rows_frame
    from attnbench.views.tables import model_table, unstable_warning

    threads = shared.set_threads(threads)
    sink = shared.sink(environment(spec.device, threads, seed), csv, json, resume)
    rows = shared.run_study(spec, sink, at, asked if at.pooled else threads)
    frame = rows_frame(rows)
    core.console.print(model_table(frame))
    warning = unstable_warning(frame, spec.max_spread, "time_per_instance_ms", "more --steps")
    if warning:
        typer.echo(warning, err=True)
    shared.finish(sink, rows, plot)
