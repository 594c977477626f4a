"""`attnbench error` and `attnbench maps`: how far a backend is from exact attention, in
numbers and in pictures."""

from pathlib import Path

import typer

from attnbench.cli import core, options, shared
from attnbench.errors import UsageError


@core.app.command("maps")
def maps_cmd(
    backends: options.Backends = "softmax,yoso-e,yoso-32",
    inputs: options.Inputs = "image:camera",
    grid: options.OneGrid = "1x128",
    dim: options.Dim = 4,
    query: str = typer.Option(None, help="y,x: draw this query's map over the key image"),
    scale: str = typer.Option(
        "rows", help="rows: each row as its share of the row (what a backend applies); raw"
    ),
    colour: str = typer.Option(
        "linear", help="linear, p99 (clipped at the 99th percentile) or log (3 decades)"
    ),
    seed: options.Seed = 0,
    out: options.Out = Path("maps.png"),
) -> None:
    """Attention maps side by side (YOSO Fig. 6, SCRAM Figs. 2-3).

    One grid HxW (1xN: a sequence); a model's inputs draw head H (default 0)."""
    from attnbench.backends import parse_backends
    from attnbench.cli.parse import check_inputs_fit, check_seed, output_path, parse_grids, positive
    from attnbench.studies.maps import MapsSpec
    from attnbench.views.figures import PLOT_SUFFIXES
    from attnbench.views.maps import COLOURS, SCALES, plot_maps

    seed = check_seed(seed)
    if scale not in SCALES:
        raise UsageError(f"--scale: unknown scale {scale!r}; valid: {', '.join(SCALES)}")
    if colour not in COLOURS:
        raise UsageError(f"--colour: unknown colour scale {colour!r}; valid: {', '.join(COLOURS)}")
    grids = parse_grids(grid, "--grid")
    if len(grids) != 1:
        raise UsageError("--grid: maps take one grid HxW")
    spec = MapsSpec(
        backends=parse_backends(backends),
        source=inputs,
        grid=grids[0],
        dim=positive(dim, "--dim"),
        query=_query(query),
        seed=seed,
    )
    tokens = spec.grid[0] * spec.grid[1]
    spec.inputs.check_lengths([tokens], "--grid")
    check_inputs_fit(spec.inputs, [(tokens, spec.grid)])
    out = output_path(out, "--out", PLOT_SUFFIXES)
    rows = shared.run_study(spec)
    for row in rows:
        if row.status != "ok":
            core.console.print(f"{row.backend}: {row.status}: {row.reason}", markup=False)
    if all(row.status != "ok" for row in rows):
        raise UsageError("no backend could draw its map")
    height, width = spec.grid
    where = f", query ({spec.query[0]}, {spec.query[1]})" if spec.query else ""
    title = f"{inputs} · {height}x{width} · d = {spec.inputs.dim}{where}"
    plot_maps(rows, title, out, spec.query, scale, colour)
    core.console.print(f"wrote {out}")


def _query(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    y, comma, x = text.partition(",")
    if not comma or not y.strip().isdigit() or not x.strip().isdigit():
        raise UsageError(f"--query: expected y,x (two non-negative integers), got {text!r}")
    return int(y), int(x)


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
    from attnbench.backends import parse_backends
    from attnbench.backends.registry import tau_param
    from attnbench.cli.parse import (
        MAX_COUNT,
        check_inputs_fit,
        check_seed,
        check_threads,
        parse_dtype,
        parse_grids,
        parse_sizes,
        positive,
        resolve_device,
    )
    from attnbench.studies.error import ErrorSpec

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
    spec = ErrorSpec(
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
    from attnbench.cli.parse import parse_sizes

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
