"""`attnbench error`: how far a backend is from exact attention, in numbers."""

import typer

from attnbench.cli import core, options, shared
from attnbench.errors import UsageError


@core.app.command("error")
def error_cmd(
    ctx: typer.Context,
    hashes: str = typer.Option(
        None,
        help="adds yoso:m=... for each number of hashes m: 8..128 doubles 8, 16, ... "
        "(default 8..128 when no --backends)",
    ),
    seq: options.Seq = None,
    grid: options.Grid = None,
    tau: str = typer.Option("8", help="bits per hash code, 1..24, or auto = ceil(log2 n)"),
    trials: int = typer.Option(3, help="independent seeds per case (mean and std)"),
    mc_seeds: int = typer.Option(
        8, help="seeds per input for stochastic backends' bias and std (1 = skip)"
    ),
    inputs: options.Inputs = "clustered",
    backends: options.Backends = "",
    reference: str = typer.Option(
        None,
        help="backend every other is compared with (default: yoso-e with --tau when only "
        "--hashes is swept, as YOSO Fig. 8; else exact softmax)",
    ),
    mode: str = typer.Option(
        "fwd",
        help="fwd: the outputs' error; fwdbwd: also dQ, dK, dV's for a fixed upstream "
        "gradient (grad_rel, grad_cos, grad_bias, grad_noise)",
    ),
    isolate: options.Isolate = False,
    executor: options.Executor = "local",
    ray_address: options.RayAddress = None,
    cpus_per_worker: options.CpusPerWorker = None,
    resume: options.Resume = False,
    batch: options.Batch = 1,
    heads: options.Heads = 4,
    dim: options.Dim = 64,
    dtype: options.Dtype = "float32",
    device: options.Device = "auto",
    seed: options.Seed = 0,
    threads: options.Threads = None,
    csv: options.Csv = None,
    json: options.Json = None,
    plot: options.Plot = None,
) -> None:
    """Approximation error of backends against a reference (YOSO Fig. 8).

    By default YOSO-m against YOSO-E over the hashes and n = 64..4096; trial t uses seed + t.
    --mode fwdbwd adds the gradients' error (every backend and the reference need a backward)."""
    from attnbench.api.parse import (
        MAX_COUNT,
        check_seed,
        check_threads,
        parse_dtype,
        parse_grids,
        parse_sizes,
        positive,
    )
    from attnbench.api.probes import check_inputs_fit, resolve_device
    from attnbench.backends import parse_backends
    from attnbench.backends.registry import tau_param
    from attnbench.studies.error import ErrorStudy

    try:
        tau_value = tau_param().parse(tau)
    except ValueError as exc:
        raise UsageError(f"--tau: bad value {tau!r} ({exc})") from None
    seed = check_seed(seed, trials, mc_seeds)
    if seq is not None and grid is not None:
        raise UsageError("--seq and --grid both set the lengths; give one of them")
    grids = parse_grids(grid, "--grid") if grid is not None else None
    seqs = parse_sizes("64..4096" if seq is None else seq, "--seq") if grids is None else []
    at = shared.where(ctx, executor, isolate, ray_address, cpus_per_worker)
    asked = threads = check_threads(threads, at.pooled)
    # images have one head
    source = shared.inputs(
        inputs, positive(batch, "--batch"), positive(heads, "--heads"), positive(dim, "--dim"),
        seqs, grids,
    )  # fmt: skip
    spec = ErrorStudy(
        seqs=seqs,
        grids=grids,
        hashes=_hashes(hashes, backends),
        tau=tau_value,
        trials=positive(trials, "--trials", MAX_COUNT),
        mc_seeds=positive(mc_seeds, "--mc-seeds", MAX_COUNT),
        inputs=source,
        backends=parse_backends(backends) if backends.strip() else [],
        dtype=parse_dtype(dtype),
        device=resolve_device(device, at.gpus),
        seed=seed,
        reference=_reference(reference),
        mode=mode,
    )
    check_inputs_fit(spec.inputs, spec.layouts(), spec.dtype, spec.device)
    csv, json, plot = shared.outputs(csv, json, plot)
    from attnbench.measure.env import environment
    from attnbench.results.schema import rows_frame
    from attnbench.views.tables import error_table

    threads = shared.set_threads(threads)
    sink = shared.sink(environment(spec.device, threads, seed), csv, json, resume)
    rows = shared.run_study(spec, sink, at, asked if at.pooled else threads)
    core.console.print(error_table(rows_frame(rows)))
    shared.finish(sink, rows, plot)


def _hashes(hashes: str | None, backends: str) -> list[int]:
    """The swept numbers of hashes: YOSO Fig. 8's 8..128 unless backends are given instead."""
    from attnbench.api.parse import parse_sizes

    if hashes is None:
        return [] if backends.strip() else parse_sizes("8..128", "--hashes")
    return parse_sizes(hashes, "--hashes")


def _reference(spec: str | None) -> str | None:
    from attnbench.backends import get_backend

    if spec is None:
        return None
    try:
        return get_backend(spec).spec
    except UsageError as exc:
        raise UsageError(f"--reference: {exc}") from None
