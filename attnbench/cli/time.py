"""`attnbench time`: what one attention call costs, in runtime, peak memory and throughput."""

import typer

from attnbench.case import MODES
from attnbench.cli import core, options, shared
from attnbench.errors import UsageError
from attnbench.measure import DEFAULT_MIN_TIME_S

DEFAULT_BACKENDS = "softmax,sdpa,yoso-e,yoso-32"
DEFAULT_ROUNDS = 5


@core.app.command("time")
def time_cmd(
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
    executor: options.Executor = "local",
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
    from attnbench.api.parse import MAX_COUNT, positive

    rounds = positive(rounds, "--rounds", MAX_COUNT)
    at = shared.where(ctx, executor, isolate, ray_address, cpus_per_worker)
    spec = time_spec(
        _time_study, seq=seq, grid=grid, batch=batch, heads=heads, dim=dim, dtype=dtype,
        device=device, backends=backends, inputs=inputs, mode=mode, repeats=repeats,
        min_time=min_time, max_spread=max_spread, warmup=warmup, seed=seed, baseline=baseline,
        rounds=rounds, gpus=at.gpus,
    )  # fmt: skip
    from attnbench.views.ceilings import provisional_note
    from attnbench.views.tables import time_table

    def table(frame):  # run_timed has set spec.ceilings by the time it prints
        note = provisional_note(spec.ceilings)
        return time_table(frame, spec.baseline.spec, spec.max_spread, note)

    run_timed(spec, threads, at, resume, csv, json, plot, False, table)


def _time_study():
    from attnbench.studies.time import TimeStudy

    return TimeStudy


def time_spec(study, *, seq, grid, batch, heads, dim, dtype, device, backends, inputs, mode,
              repeats, min_time, max_spread, warmup, seed, baseline, gpus=None,
              **extra):  # fmt: skip
    """The time study (or a subclass: the profile study) from the shared options, every
    one checked; `extra` goes to the subclass. `gpus`: whether a Ray cluster has any.

    `study()` gives the study's class. It, the backends and the inputs load torch, numba and
    scipy (seconds, minutes on a loaded host), so they come after every check that needs
    none of them: a mistyped number or name is reported at once."""
    from attnbench.api.parse import (
        MAX_COUNT,
        check_device_name,
        check_dtype_name,
        check_min_time,
        check_seed,
        non_negative,
        parse_fraction,
        parse_grids,
        parse_sizes,
        positive,
    )

    if mode not in MODES:
        raise UsageError(f"--mode: unknown mode {mode!r}; valid: {', '.join(MODES)}")
    if seq is not None and grid is not None:
        raise UsageError("--seq and --grid both set the lengths; give one of them")
    grids = parse_grids(grid, "--grid") if grid is not None else None
    seqs = parse_sizes("4096" if seq is None else seq, "--seq") if grids is None else []
    batch = positive(batch, "--batch")
    heads = positive(heads, "--heads")
    dim = positive(dim, "--dim")
    check_dtype_name(dtype)
    check_device_name(device)
    checked = dict(
        repeats=positive(repeats, "--repeats", MAX_COUNT),
        warmup=non_negative(warmup, "--warmup", MAX_COUNT),
        seed=check_seed(seed),
        min_time=check_min_time(min_time),
        max_spread=parse_fraction(max_spread, "--max-spread"),
    )
    from attnbench.api.parse import parse_dtype
    from attnbench.api.probes import check_inputs_fit, resolve_device
    from attnbench.backends import get_backend, parse_backends

    spec = study()(
        seqs=seqs,
        grids=grids,
        backends=parse_backends(backends),
        batch=batch,
        heads=heads,
        dim=dim,
        # an image is repeated over batch and heads
        inputs=shared.inputs(inputs, batch, heads, dim, seqs, grids),
        dtype=parse_dtype(dtype),
        device=resolve_device(device, gpus),
        mode=mode,
        baseline=get_backend(baseline),
        **checked,
        **extra,
    )
    check_inputs_fit(spec.inputs, spec.layouts(), spec.dtype, spec.device, spec.batch, spec.heads)
    return spec


def run_timed(spec, threads, at, resume, csv, json, plot, remeasure: bool, table) -> None:
    """Run a time or profile study where `at` says: outputs checked, this machine's
    ceilings loaded (or measured once), the sweep run into the sink, `table(frame)` printed."""
    from attnbench.api.parse import check_threads

    asked = threads = check_threads(threads, at.pooled)
    csv, json, plot = shared.outputs(csv, json, plot)
    from attnbench.measure.allocator import steady_allocator
    from attnbench.measure.env import environment
    from attnbench.results.schema import rows_frame
    from attnbench.views.tables import unstable_warning

    steady_allocator()
    threads = shared.set_threads(threads)
    spec.ceilings = shared.ceilings(spec.device, threads, remeasure)
    env = environment(spec.device, threads, spec.seed)
    if spec.ceilings is not None:
        env["ceilings"] = spec.ceilings.as_dict()
    sink = shared.sink(env, csv, json, resume)
    rows = shared.run_study(spec, sink, at, asked if at.pooled else threads)
    frame = rows_frame(rows)
    core.console.print(table(frame))
    warning = unstable_warning(frame, spec.max_spread)
    if warning:
        typer.echo(warning, err=True)
    shared.finish(sink, rows, plot, env)
