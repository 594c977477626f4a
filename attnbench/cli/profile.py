"""`attnbench profile`: where each backend's time goes, stage by stage, and how far each
stage is from this machine's limit."""

from pathlib import Path

import typer

from attnbench.api.time import DEFAULT_BACKENDS
from attnbench.cli import core, options
from attnbench.measure import DEFAULT_MIN_TIME_S


@core.app.command("profile")
def profile_cmd(
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
    stages: str = typer.Option(
        None, help="keep only these stages: a comma list of names or globs (hash,backward*)"
    ),
    trace: Path = typer.Option(
        None, help="write one Perfetto/Chrome trace per case into this folder"
    ),
    calls: int = typer.Option(10, help="profiled calls per case (stage times: their median)"),
    repeats: options.Repeats = 10,
    min_time: options.MinTime = DEFAULT_MIN_TIME_S,
    max_spread: options.MaxSpread = "10%",
    warmup: options.Warmup = 10,
    seed: options.Seed = 0,
    threads: options.Threads = None,
    baseline: options.Baseline = "sdpa",
    remeasure: bool = typer.Option(False, help="measure this machine's ceilings again"),
    nvtx: bool = typer.Option(
        False, help="CUDA: also run --calls calls with NVTX ranges, for nsys profile -t cuda,nvtx"
    ),
    isolate: options.Isolate = False,
    executor: options.Executor = "in-process",
    ray_address: options.RayAddress = None,
    cpus_per_worker: options.CpusPerWorker = None,
    resume: options.Resume = False,
    csv: options.Csv = None,
    json: options.Json = None,
    plot: options.Plot = None,
) -> None:
    """Stage by stage: time, share, GFLOP/s, GB/s and % of the roofline bound.

    Each backend marks its stages (YOSO's hash and cumulation, SCRAM's PatchMatch passes,
    ...); --plot draws the roofline, --trace keeps a trace for ui.perfetto.dev."""
    from attnbench.api.time import run_profile

    executor = options.executor_name(executor, isolate)
    finished = run_profile(
        seq=seq, grid=grid, batch=batch, heads=heads, dim=dim, dtype=dtype, device=device,
        backends=backends, inputs=inputs, mode=mode, stages=stages, trace=trace, calls=calls,
        repeats=repeats, min_time=min_time, max_spread=max_spread, warmup=warmup, seed=seed,
        threads=threads, baseline=baseline, remeasure=remeasure, nvtx=nvtx,
        executor=executor, ray_address=ray_address, cpus_per_worker=cpus_per_worker,
        resume=resume, csv=csv, json=json, plot=plot, progress=core.progress_bar(),
    )  # fmt: skip
    from attnbench.views.ceilings import provisional_note
    from attnbench.views.tables import stage_table

    study = finished.study
    core.console.print(stage_table(finished.frame, provisional_note(study.ceilings)))
    core.report_finished(finished, study.max_spread)
    if trace is not None:
        core.console.print(f"wrote traces into {trace} (open them in ui.perfetto.dev)")
