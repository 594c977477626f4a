"""The `attnbench` command line: parse and check options, hand a spec to a study, show rows.

No math here. Every user mistake surfaces as one line `error: ...` and exit code 2.
"""

from __future__ import annotations

import importlib.metadata
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from typer.core import TyperGroup

from attnbench.errors import UsageError
from attnbench.measure import DEFAULT_MIN_TIME_S
from attnbench.results.interrupts import Terminated, sigterm_as_interrupt
from attnbench.run.case import MODES

if TYPE_CHECKING:
    from attnbench.inputs import Source

# torch, numba, pandas and matplotlib are imported inside the commands that need them, so
# `--help` and `--version` answer at once.

console = Console(width=None if sys.stdout.isatty() else 120)  # no wrapping in logs
progress_console = Console(stderr=True)


class OneLineErrors(TyperGroup):
    """Turns option-parsing errors and UsageError into one line on stderr and exit code 2."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        try:
            with sigterm_as_interrupt() as sigterm:
                code = super().main(*args, standalone_mode=False, **kwargs)
            if code == 130:  # typer turns Ctrl-C into exit code 130 without a word
                typer.echo("interrupted", err=True)
                code = 143 if sigterm.received else 130  # 128 + SIGTERM, as a shell reports
        except UsageError as exc:
            code = _one_line_error(str(exc))
        except (typer.Abort, KeyboardInterrupt) as exc:
            typer.echo("interrupted", err=True)
            code = 143 if isinstance(exc, Terminated) else 130
        except Exception as exc:
            if not hasattr(exc, "format_message"):  # not an option-parsing error: a real bug
                raise
            code = _one_line_error(exc.format_message())
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


def _one_line_error(message: str) -> int:
    if message.strip():  # empty when click has already shown the help instead
        typer.echo(f"error: {' '.join(message.split())}", err=True)
    return 2


app = typer.Typer(
    cls=OneLineErrors,
    help="Benchmark and profile attention mechanisms: runtime, peak memory, approximation error.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

DEFAULT_TIME_BACKENDS = "softmax,sdpa,yoso-e,yoso-32"


def _version(value: bool) -> None:
    if value:
        try:
            version = importlib.metadata.version("attnbench")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        typer.echo(f"attnbench {version}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """Benchmark and profile attention mechanisms: runtime, peak memory, approximation error."""


def _outputs(csv: Path | None, json: Path | None, plot: Path | None):
    from attnbench.cli.parse import output_path, writable_file
    from attnbench.results.schema import env_sidecar
    from attnbench.views.figures import PLOT_SUFFIXES

    paths = (
        output_path(csv, "--csv", (".csv",)),
        output_path(json, "--json", (".json",)),
        output_path(plot, "--plot", PLOT_SUFFIXES),
    )
    if csv is not None:
        writable_file(env_sidecar(csv), "--csv")
    if csv is not None and json is not None and env_sidecar(csv).resolve() == json.resolve():
        raise UsageError(f"--json: {json} is where --csv keeps its environment record")
    return paths


def _set_threads(threads: int | None) -> int:
    from attnbench.cli.parse import positive
    from attnbench.measure.threads import set_threads

    return set_threads(None if threads is None else positive(threads, "--threads"))


def _sink(env: dict, csv: Path | None, json: Path | None, resume: bool):
    """The result sink: a context that holds its outputs while the run writes them; with
    `resume` it starts from the cases they already hold."""
    from attnbench.results.sink import ResultSink

    if resume and csv is None and json is None:
        raise UsageError("--resume: give the --csv or --json file of the run to continue")
    return ResultSink(env, csv, json, resume=resume)


def _run(study, sink=None, isolate: bool = False, threads: int | None = None) -> list:
    """Run a study under a progress bar and return every case's rows, resumed ones included.

    The runner validates the study's cases first, so a case that can never run is one error
    line before the sink opens its outputs; the sink then holds them while cases commit.
    A study with a `report` hook (the model study's batch search) reports progress inside a
    case: each report replaces the progress line's description.
    """
    from contextlib import nullcontext

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from attnbench.run.runner import run

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    progress = Progress(*columns, console=progress_console, transient=True)
    task = progress.add_task("starting")
    started = 0

    def on_case(case) -> None:
        nonlocal started
        progress.update(task, description=case.title, completed=started)
        started += 1

    if hasattr(study, "report"):
        study.report = lambda text: progress.update(task, description=text)
    executor = "isolated" if isolate else "in-process"
    sweep = run(study, sink, executor, threads, on_case)
    with sink if sink is not None else nullcontext(), progress:
        progress.update(task, total=len(study.cases))
        rows = [row for case_rows in sweep for row in case_rows]
        progress.update(task, completed=len(study.cases))
    return rows


@app.command()
def backends() -> None:
    """List the backends, their parameters and defaults, cost, devices and backward support."""
    from attnbench.backends import backend_classes
    from attnbench.views.tables import backends_table

    console.print(backends_table(backend_classes()))


@app.command("time")
def time_cmd(
    seq: str = typer.Option(
        None, help="lengths: 4096 (default), a list 1k,4k or a doubling range 512..16384"
    ),
    grid: str = typer.Option(
        None, help="images instead of sequences: 128x128, a list, or a range 32x32..256x256"
    ),
    batch: int = typer.Option(1, help="batch size"),
    heads: int = typer.Option(4, help="attention heads"),
    dim: int = typer.Option(64, help="head dimension d"),
    dtype: str = typer.Option("float32", help="float32, float64, float16 or bfloat16"),
    device: str = typer.Option("auto", help="auto, cpu or cuda"),
    backends: str = typer.Option(DEFAULT_TIME_BACKENDS, help="comma list of backend specs"),
    inputs: str = typer.Option(
        "random",
        help="random, clustered[:size=N], model:minilm[:layer=L,head=H], blobs, image:NAME, "
        "svd:NAME, three-blobs, or a .npz/.pt with q, k, v",
    ),
    mode: str = typer.Option("fwd", help="fwd, bwd or fwdbwd"),
    repeats: int = typer.Option(10, help="timed samples per case, at least"),
    min_time: float = typer.Option(
        DEFAULT_MIN_TIME_S, help="seconds of timed samples per case, at least (fast calls: more)"
    ),
    max_spread: str = typer.Option(
        "10%", help="a case whose IQR/median exceeds this is marked unstable"
    ),
    warmup: int = typer.Option(10, help="most warm-up calls (stops early once stable)"),
    seed: int = typer.Option(0, help="seed of the generated inputs"),
    threads: int = typer.Option(None, help="CPU threads for torch and numba (default: torch's)"),
    baseline: str = typer.Option("sdpa", help="backend the speed-up column compares with"),
    isolate: bool = typer.Option(
        False, help="run each case in a fresh process: a crash becomes a `crashed` row"
    ),
    resume: bool = typer.Option(
        False, help="continue the run in --csv/--json: skip the cases it already completed"
    ),
    csv: Path = typer.Option(None, help="write result rows to this CSV (+ .env.json record)"),
    json: Path = typer.Option(None, help="write rows and environment to this JSON file"),
    plot: Path = typer.Option(None, help="draw time and memory vs n to this PNG/SVG/PDF"),
) -> None:
    """Runtime and peak memory vs sequence length (YOSO Fig. 7)."""
    from attnbench.backends import get_backend, parse_backends
    from attnbench.cli.parse import (
        MAX_COUNT,
        check_inputs_fit,
        check_min_time,
        check_seed,
        check_threads,
        non_negative,
        parse_dtype,
        parse_fraction,
        parse_grids,
        parse_sizes,
        positive,
        resolve_device,
    )
    from attnbench.studies.time import TimeSpec

    if mode not in MODES:
        raise UsageError(f"--mode: unknown mode {mode!r}; valid: {', '.join(MODES)}")
    seed, threads = check_seed(seed), check_threads(threads)
    if seq is not None and grid is not None:
        raise UsageError("--seq and --grid both set the lengths; give one of them")
    grids = parse_grids(grid, "--grid") if grid is not None else None
    seqs = parse_sizes("4096" if seq is None else seq, "--seq") if grids is None else []
    batch = positive(batch, "--batch")
    heads = positive(heads, "--heads")
    dim = positive(dim, "--dim")
    spec = TimeSpec(
        seqs=seqs,
        grids=grids,
        backends=parse_backends(backends),
        batch=batch,
        heads=heads,
        dim=dim,
        # an image is repeated over batch and heads
        inputs=_inputs(inputs, batch, heads, dim, seqs, grids),
        dtype=parse_dtype(dtype),
        device=resolve_device(device),
        mode=mode,
        repeats=positive(repeats, "--repeats", MAX_COUNT),
        warmup=non_negative(warmup, "--warmup", MAX_COUNT),
        seed=seed,
        baseline=get_backend(baseline),
        min_time=check_min_time(min_time),
        max_spread=parse_fraction(max_spread, "--max-spread"),
    )
    check_inputs_fit(spec.inputs, spec.layouts(), spec.dtype, spec.device, spec.batch, spec.heads)
    csv, json, plot = _outputs(csv, json, plot)
    from attnbench.measure.allocator import steady_allocator
    from attnbench.measure.env import environment
    from attnbench.results.schema import rows_frame
    from attnbench.views.tables import time_table, unstable_warning

    steady_allocator()
    threads = _set_threads(threads)
    sink = _sink(environment(spec.device, threads, seed), csv, json, resume)
    rows = _run(spec, sink, isolate, threads)
    frame = rows_frame(rows)
    console.print(time_table(frame, spec.baseline.spec, spec.max_spread))
    warning = unstable_warning(frame, spec.max_spread)
    if warning:
        typer.echo(warning, err=True)
    _finish(sink, rows, plot)


@app.command("model")
def model_cmd(
    seq: str = typer.Option("512..4096", help="lengths: a value, list or doubling range"),
    backends: str = typer.Option(DEFAULT_TIME_BACKENDS, help="comma list of backend specs"),
    layers: int = typer.Option(6, help="encoder layers"),
    width: int = typer.Option(256, help="embedding dimension (a multiple of --heads)"),
    hidden: int = typer.Option(1024, help="feed-forward hidden dimension"),
    heads: int = typer.Option(4, help="attention heads"),
    steps: int = typer.Option(10, help="timed training steps per case (their mean is reported)"),
    warmup: int = typer.Option(2, help="untimed training steps before them"),
    memory_budget: str = typer.Option(
        None, help="memory a step may use, e.g. 4GiB or 512MiB (default: 80% of what is free)"
    ),
    max_batch: int = typer.Option(64, help="the largest batch the search tries"),
    device: str = typer.Option("auto", help="auto, cpu or cuda"),
    seed: int = typer.Option(0, help="seed of the model and the random tokens"),
    threads: int = typer.Option(None, help="CPU threads for torch and numba (default: torch's)"),
    resume: bool = typer.Option(
        False, help="continue the run in --csv/--json: skip the cases it already completed"
    ),
    csv: Path = typer.Option(None, help="write result rows to this CSV (+ .env.json record)"),
    json: Path = typer.Option(None, help="write rows and environment to this JSON file"),
    plot: Path = typer.Option(None, help="draw time and memory per instance vs n to PNG/SVG/PDF"),
) -> None:
    """Training cost of a whole encoder per instance vs length, at the largest batch that
    fits (YOSO Fig. 7)."""
    from attnbench.backends import parse_backends
    from attnbench.cli.parse import (
        MAX_BATCH,
        MAX_COUNT,
        MAX_LAYERS,
        MAX_MODEL_SIZE,
        check_seed,
        check_threads,
        non_negative,
        parse_bytes,
        parse_sizes,
        positive,
        resolve_device,
    )
    from attnbench.studies.model import ModelConfig, ModelSpec

    seed, threads = check_seed(seed), check_threads(threads)
    heads = positive(heads, "--heads")
    width = positive(width, "--width", MAX_MODEL_SIZE)
    if width % heads:
        raise UsageError(f"--width: {width} is not a multiple of --heads {heads}")
    config = ModelConfig(
        layers=positive(layers, "--layers", MAX_LAYERS),
        width=width,
        hidden=positive(hidden, "--hidden", MAX_MODEL_SIZE),
        heads=heads,
    )
    spec = ModelSpec(
        seqs=parse_sizes(seq, "--seq"),
        backends=parse_backends(backends),
        config=config,
        steps=positive(steps, "--steps", MAX_COUNT),
        warmup=non_negative(warmup, "--warmup", MAX_COUNT),
        memory_budget=None if memory_budget is None else parse_bytes(memory_budget),
        max_batch=positive(max_batch, "--max-batch", MAX_BATCH),
        device=resolve_device(device),
        seed=seed,
    )
    csv, json, plot = _outputs(csv, json, plot)
    from attnbench.measure.env import environment
    from attnbench.results.schema import rows_frame
    from attnbench.views.tables import model_table

    threads = _set_threads(threads)
    sink = _sink(environment(spec.device, threads, seed), csv, json, resume)
    rows = _run(spec, sink, threads=threads)
    console.print(model_table(rows_frame(rows)))
    _finish(sink, rows, plot)


@app.command("maps")
def maps_cmd(
    backends: str = typer.Option(
        "softmax,yoso-e,yoso-32", help="comma list of backends whose maps to draw"
    ),
    inputs: str = typer.Option(
        "image:camera",
        help="random, clustered[:size=N], model:minilm[:layer=L,head=H] (draws head H, "
        "default 0), blobs, image:NAME, or the SCRAM figure inputs svd:NAME (Fig. 2) and "
        "three-blobs (Fig. 3)",
    ),
    grid: str = typer.Option("1x128", help="token layout HxW (1xN: a sequence)"),
    dim: int = typer.Option(4, help="q/k dimension d"),
    query: str = typer.Option(None, help="y,x: draw this query's map over the key image"),
    seed: int = typer.Option(0, help="seed of the inputs and of stochastic backends"),
    out: Path = typer.Option(Path("maps.png"), "--out", "-o", help="figure path (PNG/SVG/PDF)"),
) -> None:
    """Attention maps side by side (YOSO Fig. 6, SCRAM Figs. 2-3)."""
    from attnbench.backends import parse_backends
    from attnbench.cli.parse import check_inputs_fit, check_seed, output_path, parse_grids, positive
    from attnbench.studies.maps import MapsSpec
    from attnbench.views.figures import PLOT_SUFFIXES
    from attnbench.views.maps import plot_maps

    seed = check_seed(seed)
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
    check_inputs_fit(spec.inputs, [(tokens, spec.grid)])
    out = output_path(out, "--out", PLOT_SUFFIXES)
    rows = _run(spec)
    for row in rows:
        if row.status != "ok":
            console.print(f"{row.backend}: {row.status}: {row.reason}", markup=False)
    if all(row.status != "ok" for row in rows):
        raise UsageError("no backend could draw its map")
    height, width = spec.grid
    where = f", query ({spec.query[0]}, {spec.query[1]})" if spec.query else ""
    plot_maps(rows, f"{inputs} · {height}x{width} · d = {spec.inputs.dim}{where}", out, spec.query)
    console.print(f"wrote {out}")


def _query(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    y, comma, x = text.partition(",")
    if not comma or not y.strip().isdigit() or not x.strip().isdigit():
        raise UsageError(f"--query: expected y,x (two non-negative integers), got {text!r}")
    return int(y), int(x)


@app.command("error")
def error_cmd(
    hashes: str = typer.Option(
        None,
        help="adds yoso:m=... for each number of hashes m: 8..128 doubles 8, 16, ... "
        "(default 8..128 when no --backends)",
    ),
    seq: str = typer.Option(None, help="lengths n: a value, list or doubling range (64..4096)"),
    grid: str = typer.Option(None, help="image sizes HxW instead (blobs and image:NAME inputs)"),
    tau: str = typer.Option("8", help="bits per hash code, 1..24, or auto = ceil(log2 n)"),
    trials: int = typer.Option(3, help="independent seeds per case (mean and std)"),
    mc_seeds: int = typer.Option(
        8, help="seeds per input for stochastic backends' bias and std (1 = skip)"
    ),
    inputs: str = typer.Option(
        "clustered",
        help="random, clustered[:size=N], model:minilm[:layer=L,head=H], blobs, image:NAME, "
        "svd:NAME, three-blobs, or a .npz/.pt with q, k, v",
    ),
    backends: str = typer.Option("", help="compare these backends with the reference"),
    reference: str = typer.Option(
        None,
        help="backend every other is compared with (default: yoso-e with --tau when only "
        "--hashes is swept, as YOSO Fig. 8; else exact softmax)",
    ),
    isolate: bool = typer.Option(
        False, help="run each case in a fresh process: a crash becomes a `crashed` row"
    ),
    resume: bool = typer.Option(
        False, help="continue the run in --csv/--json: skip the cases it already completed"
    ),
    batch: int = typer.Option(1, help="batch size (generated inputs)"),
    heads: int = typer.Option(4, help="attention heads (generated inputs)"),
    dim: int = typer.Option(64, help="head dimension d (generated inputs)"),
    dtype: str = typer.Option("float32", help="dtype the backends run in"),
    device: str = typer.Option("auto", help="auto, cpu or cuda"),
    seed: int = typer.Option(0, help="first seed; trial t uses seed + t"),
    threads: int = typer.Option(None, help="CPU threads for torch and numba"),
    csv: Path = typer.Option(None, help="write result rows to this CSV (+ .env.json record)"),
    json: Path = typer.Option(None, help="write rows and environment to this JSON file"),
    plot: Path = typer.Option(None, help="draw error vs n, a line per m, to PNG/SVG/PDF"),
) -> None:
    """Approximation error of backends against a reference; by default YOSO-m vs YOSO-E over
    hashes and lengths (YOSO Fig. 8)."""
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
    seed, threads = check_seed(seed, trials, mc_seeds), check_threads(threads)
    if seq is not None and grid is not None:
        raise UsageError("--seq and --grid both set the lengths; give one of them")
    grids = parse_grids(grid, "--grid") if grid is not None else None
    seqs = parse_sizes("64..4096" if seq is None else seq, "--seq") if grids is None else []
    # images have one head
    source = _inputs(
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
        device=resolve_device(device),
        seed=seed,
        reference=_reference(reference),
    )
    check_inputs_fit(spec.inputs, spec.layouts(), spec.dtype, spec.device)
    csv, json, plot = _outputs(csv, json, plot)
    from attnbench.measure.env import environment
    from attnbench.results.schema import rows_frame
    from attnbench.views.tables import error_table

    threads = _set_threads(threads)
    sink = _sink(environment(spec.device, threads, seed), csv, json, resume)
    rows = _run(spec, sink, isolate, threads)
    console.print(error_table(rows_frame(rows)))
    _finish(sink, rows, plot)


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


def _inputs(kind: str, batch: int, heads: int, dim: int, seqs, grids) -> Source:
    """The --inputs source, checked against the lengths; a file's own shape replaces batch,
    heads and dim."""
    from attnbench.inputs import Inputs

    source = Inputs(kind, batch, heads, dim)
    if source.on_grid and grids is None:
        raise UsageError(f"--inputs {kind} is an image: give its size with --grid HxW")
    if grids is None:
        source.check_lengths(seqs)
    else:
        source.check_lengths([h * w for h, w in grids], "--grid")
    return source


@app.command("plot")
def plot_cmd(
    results: Path = typer.Argument(..., help="a CSV or JSON written by time or error"),
    out: Path = typer.Option(None, "--out", "-o", help="figure path (default: results.png)"),
) -> None:
    """Redraw a study's figure from a saved result file."""
    from attnbench.cli.parse import output_path
    from attnbench.views.figures import PLOT_SUFFIXES
    from attnbench.views.plots import plot_results

    if not results.is_file():
        raise UsageError(f"{results}: no such file")
    out = output_path(out or results.with_suffix(".png"), "--out", PLOT_SUFFIXES)
    plot_results(_read_results(results), out, _run_env(results))
    console.print(f"wrote {out}")


@app.command("pareto")
def pareto_cmd(
    time_file: Path = typer.Argument(..., help="a CSV or JSON written by time"),
    error_file: Path = typer.Argument(..., help="a CSV or JSON written by error"),
    seq: int = typer.Option(None, "--seq", help="the n compared (default: the largest in both)"),
    metric: str = typer.Option(
        "radian_vs_softmax", "--metric", help="the error drawn, e.g. rel_frobenius_vs_softmax"
    ),
    out: Path = typer.Option(None, "--out", "-o", help="figure path (default: none, table only)"),
) -> None:
    """Quality vs cost: each backend's error against its runtime at one n, Pareto front marked."""
    from attnbench.cli.parse import output_path
    from attnbench.views.figures import PLOT_SUFFIXES
    from attnbench.views.pareto import pareto_points, plot_pareto, render_table, unmatched

    for path in (time_file, error_file):
        if not path.is_file():
            raise UsageError(f"{path}: no such file")
    frames = [_read_results(path) for path in (time_file, error_file)]
    if out is not None:
        out = output_path(out, "--out", PLOT_SUFFIXES)
    points = pareto_points(*frames, seq=seq, metric=metric)
    console.print(render_table(points, metric))
    missing = unmatched(*frames, points)
    if missing:
        typer.echo(f"in one file only, not drawn: {', '.join(missing)}")
    if out is not None:
        plot_pareto(points, out, metric, _run_env(time_file))
        console.print(f"wrote {out}")


def _read_results(path: Path):
    """The rows of a result file; UsageError naming the file if it cannot be read."""
    from attnbench.results.read import read_rows

    try:
        return read_rows(path)
    except (ValueError, KeyError, OSError) as exc:
        raise UsageError(f"{path}: cannot read results ({exc})") from None


def _run_env(results: Path) -> dict | None:
    """The environment record of a result file: a CSV's .env.json sidecar, a JSON's "env"."""
    import json

    from attnbench.results.schema import env_sidecar

    try:
        if results.suffix.lower() == ".json":
            return json.loads(results.read_text()).get("env")
        sidecar = env_sidecar(results)
        return json.loads(sidecar.read_text()) if sidecar.is_file() else None
    except (OSError, ValueError, AttributeError):  # no usable record: the rows alone
        return None


@app.command("compare")
def compare_cmd(
    a: Path = typer.Argument(..., help="the reference result file (CSV or JSON)"),
    b: Path = typer.Argument(..., help="the result file to judge against it"),
    fail_above: str = typer.Option(
        None, "--fail-above", help="exit 1 if a case is significantly slower by more, e.g. 5%"
    ),
    markdown: bool = typer.Option(False, "--markdown", help="print a Markdown table"),
) -> None:
    """Compare two runs case by case: ratio of medians B/A with a 95% bootstrap interval."""
    from attnbench.cli.parse import parse_fraction
    from attnbench.views import compare

    threshold = None  # "5%" or "0.05"; a bare number is a fraction, so below 1
    if fail_above is not None:
        threshold = parse_fraction(fail_above, "--fail-above", "a slowdown")
    comparison = compare.compare_files(a, b)
    if markdown:
        typer.echo(compare.render_markdown(comparison) + "\n")
    else:
        console.print(compare.render_table(comparison))
    for line in compare.summary(comparison, threshold):
        typer.echo(line)
    if comparison.failures(threshold):
        raise typer.Exit(1)


@app.command("report")
def report_cmd(
    plots: Path = typer.Option(Path("plots"), "--plots", help="folder of result CSVs"),
    out: Path = typer.Option(Path("docs/results"), "--out", "-o", help="folder to write into"),
) -> None:
    """Write Markdown tables of the result CSVs (yoso.md, scram.md, field.md) for the docs."""
    from attnbench.views.report import write_reports

    if not plots.is_dir():
        raise UsageError(f"{plots}: no such folder")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: not a folder")
    try:
        written = write_reports(plots, out)
    except ValueError as exc:
        raise UsageError(f"cannot read results ({exc})") from None
    except OSError as exc:
        raise UsageError(f"{out}: cannot write ({exc.strerror or exc})") from None
    for path in written:
        console.print(f"wrote {path}")


@app.command("run")
def run_cmd(
    profile: Path = typer.Argument(..., help="a study file from profiles/, e.g. yoso-fig8.toml"),
) -> None:
    """Run a study described in a TOML profile (command + options), e.g. a paper's figure."""
    argv = profile_argv(profile)
    code = typer.main.get_command(app).main(args=argv, standalone_mode=False)
    if code:
        raise typer.Exit(code)


PROFILE_COMMANDS = ("time", "error", "maps", "model")


def profile_argv(profile: Path) -> list[str]:
    """`command = "error"` and an `[options]` table become `error --key value ...`."""
    if not profile.is_file():
        raise UsageError(f"{profile}: no such profile")
    try:
        doc = tomllib.loads(profile.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{profile}: not valid TOML ({exc})") from None
    command = doc.get("command")
    if command not in PROFILE_COMMANDS:
        valid = ", ".join(f'"{c}"' for c in PROFILE_COMMANDS)
        raise UsageError(f"{profile}: `command` must be one of {valid}, got {command!r}")
    options = doc.get("options", {})
    if not isinstance(options, dict):
        raise UsageError(f"{profile}: [options] must be a table of option = value")
    from attnbench.cli.parse import check_option_keys

    check_option_keys(options, typer.main.get_command(app).commands[command], str(profile))
    argv = [command]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def _finish(sink, rows: list, plot: Path | None) -> None:
    for path in (sink.csv, sink.json):
        if path is not None:
            console.print(f"wrote {path}")
    if plot is not None:
        from attnbench.results.schema import rows_frame
        from attnbench.views.plots import plot_results

        plot_results(rows_frame(rows), plot)
        console.print(f"wrote {plot}")


def main() -> None:
    app()
