"""`attnbench plot`: redraw a study's figure from a saved result file or training log."""

from pathlib import Path
from typing import Annotated

import typer

from attnbench.cli import core, options, shared
from attnbench.errors import UsageError

# --out/-o named the figure of plot and pareto; --plot names a figure in every command
OldOut = Annotated[Path | None, typer.Option("--out", "-o", hidden=True, help="deprecated: --plot")]


def figure_option(plot: Path | None, out: Path | None) -> Path | None:
    """The figure path from --plot, or from its deprecated spelling --out/-o (said once)."""
    if out is None:
        return plot
    if plot is not None:
        raise UsageError("--plot and -o/--out both name the figure; give --plot alone")
    options.deprecated("-o/--out", "--plot")
    return out


@core.app.command("plot")
def plot_cmd(
    results: Path = typer.Argument(
        ..., help="a CSV or JSON written by time, error, model or profile, or train's log"
    ),
    plot: Path | None = typer.Option(
        None,
        "--plot",
        help="the figure: PNG, SVG or PDF (default: the result file with the suffix .png)",
    ),
    out: OldOut = None,
) -> None:
    """Redraw a study's figure from a saved result file, or a training log's held-out
    [MASK] loss against steps and time.

    The figure goes to --plot, by default the result file with the suffix .png."""
    from attnbench.api.probes import output_path
    from attnbench.results.paths import PLOT_SUFFIXES
    from attnbench.views.plots import plot_results

    plot = figure_option(plot, out)
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
