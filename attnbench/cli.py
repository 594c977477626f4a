"""The `attnbench` command line: parse and check options, hand a spec to a study, show rows.

No math here. Every user mistake surfaces as one line `error: ...` and exit code 2.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperGroup

from attnbench.backends import Backend, backend_classes, get_backend, parse_backends
from attnbench.errors import UsageError
from attnbench.inputs import Inputs
from attnbench.interrupts import Terminated, sigterm_as_interrupt
from attnbench.measure.allocator import steady_allocator
from attnbench.measure.env import environment
from attnbench.measure.threads import set_threads
from attnbench.plots import PLOT_SUFFIXES, plot_maps, plot_results
from attnbench.results import ResultSink, Row, env_sidecar, read_rows
from attnbench.spec import (
    MAX_COUNT,
    check_inputs_fit,
    check_option_keys,
    check_seed,
    check_threads,
    non_negative,
    output_path,
    parse_dtype,
    parse_grids,
    parse_sizes,
    positive,
    resolve_device,
    writable_file,
)
from attnbench.studies.error import ErrorSpec, run_error
from attnbench.studies.maps import MapsSpec, attention_maps
from attnbench.studies.time import MODES, TimeSpec, run_time

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
OUT_SUFFIXES = {"csv": (".csv",), "json": (".json",), "plot": PLOT_SUFFIXES}


def _outputs(csv: Path | None, json: Path | None, plot: Path | None):
    paths = (
        output_path(csv, "--csv", OUT_SUFFIXES["csv"]),
        output_path(json, "--json", OUT_SUFFIXES["json"]),
        output_path(plot, "--plot", OUT_SUFFIXES["plot"]),
    )
    if csv is not None:
        writable_file(env_sidecar(csv), "--csv")
    if csv is not None and json is not None and env_sidecar(csv).resolve() == json.resolve():
        raise UsageError(f"--json: {json} is where --csv keeps its environment record")
    return paths


def _set_threads(threads: int | None) -> int:
    return set_threads(None if threads is None else positive(threads, "--threads"))


def _run_study(
    study: Callable[[Callable[[str], None]], Iterator[list[Row]]], total: int, sink: ResultSink
) -> None:
    """Drive a study under a progress bar, saving rows as each case finishes.

    `study(on_step)` calls `on_step(text)` as each step starts, so the steps before it are done.
    """
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=progress_console, transient=True) as progress:
        task = progress.add_task("starting", total=total)
        started = 0

        def on_step(text: str) -> None:
            nonlocal started
            progress.update(task, description=text, completed=started)
            started += 1

        for batch in study(on_step):
            sink.add_case(batch)
        progress.update(task, completed=total)


@app.command()
def backends() -> None:
    """List the backends, their parameters and defaults, cost, devices and backward support."""
    table = Table(title="attnbench backends")
    for column in ("name", "parameters (defaults)", "complexity", "devices", "backward", "about"):
        table.add_column(column)
    for name, cls in backend_classes().items():
        params = ", ".join(f"{k}={p.default}" for k, p in cls.params.items()) or "-"
        if cls.shorthand:
            params += f"  ({name}-N sets {cls.shorthand})"
        table.add_row(
            name,
            params,
            cls.complexity,
            ", ".join(cls.devices),
            "yes" if cls.backward else "no",
            cls.summary,
        )
    console.print(table)


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
        "random", help="random, clustered, blobs, image:NAME, or a .npz/.pt with q, k, v"
    ),
    mode: str = typer.Option("fwd", help="fwd, bwd or fwdbwd"),
    repeats: int = typer.Option(10, help="timed samples per case"),
    warmup: int = typer.Option(10, help="most warm-up calls (stops early once stable)"),
    seed: int = typer.Option(0, help="seed of the generated inputs"),
    threads: int = typer.Option(None, help="CPU threads for torch and numba (default: torch's)"),
    baseline: str = typer.Option("sdpa", help="backend the speed-up column compares with"),
    csv: Path = typer.Option(None, help="write result rows to this CSV (+ .env.json record)"),
    json: Path = typer.Option(None, help="write rows and environment to this JSON file"),
    plot: Path = typer.Option(None, help="draw time and memory vs n to this PNG/SVG/PDF"),
) -> None:
    """Runtime and peak memory vs sequence length (YOSO Fig. 7)."""
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
    )
    check_inputs_fit(spec.inputs, spec.layouts(), spec.dtype, spec.device, spec.batch, spec.heads)
    baseline_backend = get_backend(baseline)
    csv, json, plot = _outputs(csv, json, plot)
    steady_allocator()
    with ResultSink(environment(spec.device, _set_threads(threads), seed), csv, json) as sink:
        _run_study(partial(run_time, spec), spec.cases, sink)
    console.print(_time_table(sink.rows, baseline_backend))
    _finish(sink, plot)


@app.command("maps")
def maps_cmd(
    backends: str = typer.Option(
        "softmax,yoso-e,yoso-32", help="comma list of backends whose maps to draw"
    ),
    inputs: str = typer.Option("image:camera", help="random, clustered, blobs or image:NAME"),
    grid: str = typer.Option("1x128", help="token layout HxW (1xN: a sequence)"),
    dim: int = typer.Option(4, help="q/k dimension d"),
    query: str = typer.Option(None, help="y,x: draw this query's map over the key image"),
    seed: int = typer.Option(0, help="seed of the inputs and of stochastic backends"),
    out: Path = typer.Option(Path("maps.png"), "--out", "-o", help="figure path (PNG/SVG/PDF)"),
) -> None:
    """Attention maps side by side (YOSO Fig. 6, SCRAM Figs. 2-3)."""
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
    check_inputs_fit(Inputs(spec.source, 1, 1, spec.dim), [(tokens, spec.grid)])
    out = output_path(out, "--out", OUT_SUFFIXES["plot"])
    maps = attention_maps(spec)
    height, width = spec.grid
    where = f", query ({spec.query[0]}, {spec.query[1]})" if spec.query else ""
    plot_maps(maps, f"{inputs} · {height}x{width} · d = {spec.dim}{where}", out, spec.query)
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
    hashes: str = typer.Option("8..128", help="numbers of hashes m: 8..128 doubles 8, 16, ..."),
    seq: str = typer.Option(None, help="lengths n: a value, list or doubling range (64..4096)"),
    grid: str = typer.Option(None, help="image sizes HxW instead (blobs and image:NAME inputs)"),
    tau: str = typer.Option("8", help="bits per hash code, 1..24, or auto = ceil(log2 n)"),
    trials: int = typer.Option(3, help="independent seeds per case (mean and std)"),
    mc_seeds: int = typer.Option(
        8, help="seeds per input for stochastic backends' bias and std (1 = skip)"
    ),
    inputs: str = typer.Option(
        "clustered", help="random, clustered, blobs, image:NAME, or a .npz/.pt with q, k, v"
    ),
    backends: str = typer.Option("", help="also compare these backends with exact softmax"),
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
    """Approximation error: YOSO-m vs YOSO-E over hashes and lengths (YOSO Fig. 8)."""
    from attnbench.backends.registry import tau_param

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
        hashes=parse_sizes(hashes, "--hashes"),
        tau=tau_value,
        trials=positive(trials, "--trials", MAX_COUNT),
        mc_seeds=positive(mc_seeds, "--mc-seeds", MAX_COUNT),
        inputs=source,
        backends=parse_backends(backends) if backends.strip() else [],
        dtype=parse_dtype(dtype),
        device=resolve_device(device),
        seed=seed,
    )
    check_inputs_fit(spec.inputs, spec.layouts(), spec.dtype, spec.device)
    csv, json, plot = _outputs(csv, json, plot)
    with ResultSink(environment(spec.device, _set_threads(threads), seed), csv, json) as sink:
        _run_study(partial(run_error, spec), spec.steps, sink)
    console.print(_error_table(sink.rows))
    _finish(sink, plot)


def _inputs(kind: str, batch: int, heads: int, dim: int, seqs, grids) -> Inputs:
    """The --inputs source, checked against the lengths; a file's own shape replaces batch,
    heads and dim."""
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
    if not results.is_file():
        raise UsageError(f"{results}: no such file")
    out = output_path(out or results.with_suffix(".png"), "--out", PLOT_SUFFIXES)
    try:
        frame = read_rows(results)
    except (ValueError, KeyError, OSError) as exc:
        raise UsageError(f"{results}: cannot read results ({exc})") from None
    plot_results(frame, out)
    console.print(f"wrote {out}")


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
    from attnbench import compare

    threshold = None if fail_above is None else compare.parse_threshold(fail_above)
    comparison = compare.compare_files(a, b)
    if markdown:
        typer.echo(compare.render_markdown(comparison) + "\n")
    else:
        console.print(compare.render_table(comparison))
    for line in compare.summary(comparison, threshold):
        typer.echo(line)
    if comparison.failures(threshold):
        raise typer.Exit(1)


@app.command("run")
def run_cmd(
    profile: Path = typer.Argument(..., help="a study file from profiles/, e.g. yoso-fig8.toml"),
) -> None:
    """Run a study described in a TOML profile (command + options), e.g. a paper's figure."""
    argv = profile_argv(profile)
    code = typer.main.get_command(app).main(args=argv, standalone_mode=False)
    if code:
        raise typer.Exit(code)


def profile_argv(profile: Path) -> list[str]:
    """`command = "error"` and an `[options]` table become `error --key value ...`."""
    if not profile.is_file():
        raise UsageError(f"{profile}: no such profile")
    try:
        doc = tomllib.loads(profile.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{profile}: not valid TOML ({exc})") from None
    command = doc.get("command")
    if command not in ("time", "error"):
        raise UsageError(f'{profile}: `command` must be "time" or "error", got {command!r}')
    options = doc.get("options", {})
    if not isinstance(options, dict):
        raise UsageError(f"{profile}: [options] must be a table of option = value")
    check_option_keys(options, typer.main.get_command(app).commands[command], str(profile))
    argv = [command]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def _finish(sink: ResultSink, plot: Path | None) -> None:
    for path in (sink.csv, sink.json):
        if path is not None:
            console.print(f"wrote {path}")
    if plot is not None:
        from attnbench.results import rows_frame

        plot_results(rows_frame(sink.rows), plot)
        console.print(f"wrote {plot}")


def _label(spec: str) -> str:
    try:
        return get_backend(spec).label
    except UsageError:
        return spec


def _time_table(rows: list[Row], baseline: Backend) -> Table:
    table = Table(title="attnbench time")
    for column in ("backend", "n", "median ms", "p10-p90 ms", "peak MiB"):
        table.add_column(column, justify="left" if column == "backend" else "right")
    table.add_column(f"speed-up vs {baseline.label}", justify="right")
    table.add_column("status")
    times = {(r.backend, r.seq): r for r in rows if r.metric == "time_ms"}
    peaks = {(r.backend, r.seq): r.value for r in rows if r.metric == "peak_mib"}
    base = {n: r.value for (b, n), r in times.items() if r.status == "ok" and b == baseline.spec}
    for (backend, n), r in times.items():
        ok = r.status == "ok"
        speedup = base[n] / r.value if ok and n in base else None
        table.add_row(
            _label(backend),
            str(n),
            f"{r.value:.3f}" if ok else "-",
            f"{r.p10:.3f}-{r.p90:.3f}" if ok else "-",
            f"{peaks[(backend, n)]:.1f}" if (backend, n) in peaks else "-",
            f"{speedup:.2f}x" if speedup else "-",
            f"{r.status}: {r.reason}" if r.reason else r.status,
        )
    return table


def _error_table(rows: list[Row]) -> Table:
    table = Table(title="attnbench error (mean +- std over trials)")
    for column in ("backend", "n", "metric", "value", "std"):
        table.add_column(column, justify="right" if column in ("n", "value", "std") else "left")
    for r in rows:
        if r.status != "ok":
            table.add_row(_label(r.backend), str(r.seq), r.metric, f"{r.status}: {r.reason}", "")
            continue
        table.add_row(_label(r.backend), str(r.seq), r.metric, f"{r.value:.4g}", f"{r.std:.2g}")
    return table


def main() -> None:
    app()
