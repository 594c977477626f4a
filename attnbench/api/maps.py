"""`maps` as a Python call: the options of `attnbench maps`, parsed and checked as the
command does, the study run by `run.procedure`, one row per backend with its map.

Every check that needs neither torch nor matplotlib comes before they load; the figure is
drawn, and matplotlib loaded, only when `plot` names a file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.api import parse
from attnbench.api.probes import output_path
from attnbench.api.time import Finished
from attnbench.errors import UsageError
from attnbench.results.paths import PLOT_SUFFIXES
from attnbench.run.procedure import Progress, run_study

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_BACKENDS = "softmax,yoso-e,yoso-32"
# How the figure draws weights and colours them (views.maps.SCALES, COLOURS), known here
# without loading matplotlib.
SCALES = ("rows", "raw")
COLOURS = ("linear", "p99", "log")


def maps(
    backends: str | list[str] = DEFAULT_BACKENDS,
    inputs: str = "image:camera",
    grid: str = "1x128",
    dim: int = 4,
    query: str | tuple[int, int] | None = None,
    scale: str = "rows",
    colour: str = "linear",
    seed: int = 0,
    plot: str | Path | None = None,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """Each backend's dense attention map of the same inputs: the rows of `attnbench maps`
    with the same options, one per backend, its map in the `array` column ([n, n], or
    [H, W] for one `query` y,x over the key image). The figure is drawn only when `plot`
    names a file; a bad option is a `UsageError` with the command's text."""
    return run_maps(**locals()).frame


def run_maps(
    backends: str | list[str] = DEFAULT_BACKENDS,
    inputs: str = "image:camera",
    grid: str = "1x128",
    dim: int = 4,
    query: str | tuple[int, int] | None = None,
    scale: str = "rows",
    colour: str = "linear",
    seed: int = 0,
    plot: str | Path | None = None,
    progress: Progress | None = None,
) -> Finished:
    """`maps`, returning the whole `Finished` run (the command reports its failed rows)."""
    seed = parse.check_seed(seed)
    if scale not in SCALES:
        raise UsageError(f"--scale: unknown scale {scale!r}; valid: {', '.join(SCALES)}")
    if colour not in COLOURS:
        raise UsageError(f"--colour: unknown colour scale {colour!r}; valid: {', '.join(COLOURS)}")
    grids = parse.parse_grids(grid, "--grid")
    if len(grids) != 1:
        raise UsageError("--grid: maps take one grid HxW")
    dim = parse.positive(dim, "--dim")
    query = _query(query)
    plot = output_path(None if plot is None else Path(plot), "--plot", PLOT_SUFFIXES)
    study = maps_study(parse.backends_text(backends), inputs, grids[0], dim, query, seed)
    outcome = run_study(study, progress=progress)
    finished = Finished(study, outcome, maps_frame(outcome.rows), plot)
    if plot is not None:
        _draw(finished, inputs, scale, colour)
    return finished


def maps_study(backends: str, inputs: str, grid: tuple[int, int], dim: int, query, seed: int):
    """The study from checked options; here torch loads, with the backends and the inputs."""
    from attnbench.api.probes import check_inputs_fit
    from attnbench.backends import parse_backends
    from attnbench.inputs import Inputs
    from attnbench.studies.maps import MapsStudy

    study = MapsStudy(
        backends=parse_backends(backends),
        inputs=Inputs(inputs, 1, 1, dim),
        grid=grid,
        dim=dim,
        query=query,
        seed=seed,
    )
    tokens = grid[0] * grid[1]
    study.inputs.check_lengths([tokens], "--grid")
    check_inputs_fit(study.inputs, [(tokens, grid)])
    return study


def maps_frame(rows: list) -> pd.DataFrame:
    """The rows as a DataFrame, each map as a numpy array in `array` (None: no map drawn),
    which the result files never hold."""
    import numpy as np
    import pandas as pd

    from attnbench.results.schema import rows_frame

    frame = rows_frame(rows)
    arrays = [None if row.array is None else np.asarray(row.array) for row in rows]
    frame["array"] = pd.Series(arrays, index=frame.index, dtype=object)
    return frame


def _draw(finished: Finished, inputs: str, scale: str, colour: str) -> None:
    """The figure, a panel per map; UsageError naming each failure when no backend drew."""
    from attnbench.views.maps import plot_maps

    rows, study = finished.outcome.rows, finished.study
    if all(row.status != "ok" for row in rows):
        reasons = "; ".join(f"{row.backend}: {row.status}: {row.reason}" for row in rows)
        raise UsageError(f"no backend could draw its map ({reasons})")
    height, width = study.grid
    where = f", query ({study.query[0]}, {study.query[1]})" if study.query else ""
    title = f"{inputs} · {height}x{width} · d = {study.inputs.dim}{where}"
    plot_maps(rows, title, finished.plot, study.query, scale, colour)


def _query(value) -> tuple[int, int] | None:
    """--query y,x as two non-negative integers (a pair of ints from Python)."""
    if value is None:
        return None
    text = value if isinstance(value, str) else ",".join(str(part) for part in value)
    y, comma, x = text.partition(",")
    if not comma or not y.strip().isdigit() or not x.strip().isdigit():
        raise UsageError(f"--query: expected y,x (two non-negative integers), got {value!r}")
    return int(y), int(x)
