"""`attnbench maps`: what each backend does to the attention map, in pictures."""

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
    from attnbench.api.parse import check_seed, parse_grids, positive
    from attnbench.api.probes import check_inputs_fit, output_path
    from attnbench.backends import parse_backends
    from attnbench.results.paths import PLOT_SUFFIXES
    from attnbench.studies.maps import MapsStudy
    from attnbench.views.maps import COLOURS, SCALES, plot_maps

    seed = check_seed(seed)
    if scale not in SCALES:
        raise UsageError(f"--scale: unknown scale {scale!r}; valid: {', '.join(SCALES)}")
    if colour not in COLOURS:
        raise UsageError(f"--colour: unknown colour scale {colour!r}; valid: {', '.join(COLOURS)}")
    grids = parse_grids(grid, "--grid")
    if len(grids) != 1:
        raise UsageError("--grid: maps take one grid HxW")
    spec = MapsStudy(
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
