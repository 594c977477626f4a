"""`attnbench pareto`: quality against cost, one point per backend at one length."""

from pathlib import Path

import typer

from attnbench.cli import core, options, shared
from attnbench.errors import UsageError


@core.app.command("pareto")
def pareto_cmd(
    ctx: typer.Context,
    time_file: Path = typer.Argument(..., help="a CSV or JSON written by time"),
    error_file: Path = typer.Argument(..., help="a CSV or JSON written by error"),
    n: int | None = typer.Option(
        None, "--n", help="the length n compared (default: the largest in both files)"
    ),
    metric: str = typer.Option(
        "radian_vs_softmax", "--metric", help="the error drawn, e.g. rel_frobenius_vs_softmax"
    ),
    plot: options.Plot = None,
    seq: int | None = typer.Option(None, "--seq", hidden=True, help="deprecated: --n"),
    out: options.OldOut = None,
) -> None:
    """Quality vs cost: each backend's error against its runtime at one n, Pareto front marked.

    Prints the table; --plot also draws the figure."""
    from attnbench.api.probes import output_path
    from attnbench.results.paths import PLOT_SUFFIXES
    from attnbench.views.labels import backend_label
    from attnbench.views.pareto import pareto_points, plot_pareto, render_table, unmatched

    n = options.renamed(ctx, "--seq", seq, "--n", n)
    plot = options.renamed(ctx, "--out", out, "--plot", plot)
    for path in (time_file, error_file):
        if not path.is_file():
            raise UsageError(f"{path}: no such file")
    frames = [shared.read_results(path) for path in (time_file, error_file)]
    if plot is not None:
        plot = output_path(plot, "--plot", PLOT_SUFFIXES)
    points = pareto_points(*frames, seq=n, metric=metric)
    core.console.print(render_table(points, metric))
    dropped = points.attrs.get("inapplicable", [])
    missing = [b for b in unmatched(*frames, points) if b not in dropped]
    if missing:
        typer.echo(f"in one file only, not drawn: {', '.join(missing)}")
    if dropped:
        names = ", ".join(backend_label(b) for b in dropped)
        typer.echo(f"{metric} does not apply to {names} (unit output rows), not drawn")
    if plot is not None:
        plot_pareto(points, plot, metric, shared.run_env(time_file))
        core.console.print(f"wrote {plot}")
