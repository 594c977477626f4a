"""`attnbench maps`: what each backend does to the attention map, in pictures."""

from pathlib import Path

import typer

from attnbench.api.maps import DEFAULT_BACKENDS
from attnbench.cli import core, options


@core.app.command("maps")
def maps_cmd(
    ctx: typer.Context,
    backends: options.Backends = DEFAULT_BACKENDS,
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
    plot: Path = typer.Option(Path("maps.png"), help="draw the maps to this PNG/SVG/PDF"),
    out: options.OldOut = None,
) -> None:
    """Attention maps side by side (YOSO Fig. 6, SCRAM Figs. 2-3).

    One grid HxW (1xN: a sequence); a model's inputs draw head H (default 0)."""
    from attnbench.api.maps import run_maps

    plot = options.renamed(ctx, "--out", out, "--plot", plot)
    finished = run_maps(
        backends=backends, inputs=inputs, grid=grid, dim=dim, query=query, scale=scale,
        colour=colour, seed=seed, plot=plot, progress=core.progress_bar(),
    )  # fmt: skip
    for row in finished.outcome.rows:
        if row.status != "ok":
            core.console.print(f"{row.backend}: {row.status}: {row.reason}", markup=False)
    core.report_finished(finished)
