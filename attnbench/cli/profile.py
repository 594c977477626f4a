"""`attnbench profile`: where each backend's time goes, stage by stage, and how far each
stage is from this machine's limit."""

from pathlib import Path

import typer

from attnbench.cli import core, options, shared
from attnbench.cli.time import DEFAULT_BACKENDS, run_timed, time_spec
from attnbench.errors import UsageError
from attnbench.measure import DEFAULT_MIN_TIME_S, is_cuda


@core.app.command("profile")
def profile_cmd(
    ctx: typer.Context,
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
    executor: options.Executor = "local",
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
    from attnbench.api.parse import MAX_COUNT, positive

    stage_filter = _stage_filter(stages)
    calls = positive(calls, "--calls", MAX_COUNT)
    at = shared.where(ctx, executor, isolate, ray_address, cpus_per_worker)
    spec = time_spec(
        _profile_study, seq=seq, grid=grid, batch=batch, heads=heads, dim=dim, dtype=dtype,
        device=device, backends=backends, inputs=inputs, mode=mode, repeats=repeats,
        min_time=min_time, max_spread=max_spread, warmup=warmup, seed=seed, baseline=baseline,
        stage_filter=stage_filter, calls=calls, nvtx=nvtx, gpus=at.gpus,
    )  # fmt: skip
    if nvtx and not is_cuda(spec.device):
        raise UsageError("--nvtx: NVTX ranges are for a CUDA run under nsys; give --device cuda")
    spec.trace_dir = _trace_dir(trace)
    spec.check_stage_filter()  # before the machine's ceilings are measured
    from attnbench.views.ceilings import provisional_note
    from attnbench.views.tables import stage_table

    def table(frame):  # run_timed has set spec.ceilings by the time it prints
        return stage_table(frame, provisional_note(spec.ceilings))

    run_timed(spec, threads, at, resume, csv, json, plot, remeasure, table)
    if trace is not None:
        core.console.print(f"wrote traces into {trace} (open them in ui.perfetto.dev)")


def _profile_study():
    from attnbench.studies.profile import ProfileStudy

    return ProfileStudy


def _stage_filter(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise UsageError(f"--stages: empty item in {text!r}")
    return names


def _trace_dir(path: Path | None) -> Path | None:
    """The trace folder, probed before any work: its parent must exist, as every output's
    folder must (`writable_file`), and a trace file must be creatable there. The folder
    itself may be new (the study makes it when the first trace is written), so a bad
    --trace leaves nothing behind."""
    if path is None:
        return None
    from attnbench.api.probes import writable_file

    if path.is_dir():
        writable_file(path / "trace.json", "--trace")
    elif path.exists():
        raise UsageError(f"--trace: {path} is a file; give a folder for the traces")
    else:
        writable_file(path, "--trace")  # its parent: exists, writable
    return path
