"""`attnbench plot`: redraw a study's figure from a saved result file or training log."""

from pathlib import Path

import typer

from attnbench.cli import core, options, shared
from attnbench.errors import UsageError


@core.app.command("plot")
def plot_cmd(
    ctx: typer.Context,
    results: Path = typer.Argument(
        ..., help="a CSV or JSON written by time, error, model or profile, or train's log"
    ),
    plot: Path | None = typer.Option(
        None,
        "--plot",
        help="the figure: PNG, SVG or PDF (default: the result file with the suffix .png)",
    ),
    out: options.OldOut = None,
) -> None:
    """Redraw a study's figure from a saved result file, or a training log's held-out
    [MASK] loss against steps and time.

    The figure goes to --plot, by default the result file with the suffix .png."""
    from attnbench.api.probes import output_path
    from attnbench.results.paths import PLOT_SUFFIXES
    from attnbench.views.plots import plot_results

    plot = options.renamed(ctx, "--out", out, "--plot", plot)
    if not results.is_file():
        raise UsageError(f"{results}: no such file")
    plot = output_path(plot or results.with_suffix(".png"), "--plot", PLOT_SUFFIXES)
    from attnbench.views.training import is_training_log, parity_plot, read_log

    if is_training_log(results):
        try:
            log = read_log(results)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        parity_plot(log, plot, f"attnbench train: {results.name}")
        core.console.print(f"wrote {plot}")
        return
    plot_results(shared.read_results(results), plot, shared.run_env(results))
    core.console.print(f"wrote {plot}")
