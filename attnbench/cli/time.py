"""`attnbench time`: what one attention call costs, in runtime, peak memory and throughput."""

import typer

from attnbench.api.time import DEFAULT_BACKENDS, DEFAULT_ROUNDS
from attnbench.cli import core, options
from attnbench.measure import DEFAULT_MIN_TIME_S


@core.app.command("time")
def time_cmd(
    seq: options.Seq = None,
    grid: options.Grid = None,
    batch: options.Batch = 1,
    heads: options.Heads = 4,
    dim: options.Dim = 64,
    dtype: options.Dtype = "float32",
    device: options.Device = "auto",
    backends: options.Backends = DEFAULT_BACKENDS,
    inputs: options.Inputs = "random",
    mode: options.Mode = "fwd",
    repeats: options.Repeats = 10,
    min_time: options.MinTime = DEFAULT_MIN_TIME_S,
    max_spread: options.MaxSpread = "10%",
    warmup: options.Warmup = 10,
    rounds: int = typer.Option(
        DEFAULT_ROUNDS,
        help="rounds in which the backends of each length take turns, in a new random order "
        "each round; speed-ups and their 95% interval come from the per-round ratios "
        "(1: each backend timed once, in turn)",
    ),
    seed: options.Seed = 0,
    threads: options.Threads = None,
    baseline: options.Baseline = "sdpa",
    isolate: options.Isolate = False,
    executor: options.Executor = "in-process",
    ray_address: options.RayAddress = None,
    cpus_per_worker: options.CpusPerWorker = None,
    resume: options.Resume = False,
    csv: options.Csv = None,
    json: options.Json = None,
    plot: options.Plot = None,
) -> None:
    """Runtime and peak memory of one attention call vs sequence length (SCRAM Fig. 4).

    Lengths default to --seq 4096; --grid times images instead. The backends of a length
    take turns in --rounds rounds, so that a drift of the machine moves them alike and
    cancels in their speed-ups. Each row also gets its throughput and the share of this
    machine's roofline bound it reaches."""
    from attnbench.api.time import run_time

    executor = options.executor_name(executor, isolate)
    finished = run_time(
        seq=seq, grid=grid, batch=batch, heads=heads, dim=dim, dtype=dtype, device=device,
        backends=backends, inputs=inputs, mode=mode, repeats=repeats, min_time=min_time,
        max_spread=max_spread, warmup=warmup, rounds=rounds, seed=seed, threads=threads,
        baseline=baseline, executor=executor, ray_address=ray_address,
        cpus_per_worker=cpus_per_worker, resume=resume, csv=csv, json=json, plot=plot,
        progress=core.progress_bar(),
    )  # fmt: skip
    from attnbench.views.ceilings import provisional_note
    from attnbench.views.tables import time_table

    study = finished.study
    note = provisional_note(study.ceilings)
    core.console.print(time_table(finished.frame, study.baseline.spec, study.max_spread, note))
    core.report_finished(finished, study.max_spread)
