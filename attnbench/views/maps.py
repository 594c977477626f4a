"""The attention-map figure (YOSO Fig. 6, SCRAM Figs. 2-3): each backend's map side by side.

Its input is the maps study's rows: one per backend, metric "attention_map", the map in
`row.array` ([n, n], or [H, W] for one query). Rows that are not ok drew no map and get
no panel; the study reports them.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm, Normalize

from attnbench.errors import UsageError
from attnbench.results.schema import Row
from attnbench.views.figures import atomic_save, figure_path
from attnbench.views.labels import backend_label

# How a map's weights are drawn: each row as its share of the row (the distribution a
# backend applies to the values: YOSO's output l2(E V) points the way (E / row sum) V does),
# or raw (YOSO's unnormalised collision probabilities E).
SCALES = ("rows", "raw")
# How weights become colours: linearly from 0 to the largest weight of any panel; linearly
# up to the 99th percentile of all weights, those above it clipped; or on a log scale over
# the three decades below the largest weight.
COLOURS = ("linear", "p99", "log")
LOG_DECADES = 3


def scaled(amap: np.ndarray, scale: str, one_query: bool) -> np.ndarray:
    """The map as drawn. Scale "rows": each row divided by its sum (a row summing to 0 stays
    0); one query's map over the key image is a single row. "raw": as given."""
    if scale == "raw":
        return amap
    rows = amap.reshape(1, -1) if one_query else amap
    sums = rows.sum(axis=-1, keepdims=True)
    out = np.divide(rows, sums, out=np.zeros(rows.shape), where=sums > 0)
    return out.reshape(amap.shape)


def colour_norm(maps: list[np.ndarray], colour: str) -> tuple[Normalize, str]:
    """One colour scale for all panels, and what the colour bar should say about it."""
    top = max(float(m.max()) for m in maps) or 1.0
    if colour == "log":
        return LogNorm(vmin=top / 10**LOG_DECADES, vmax=top, clip=True), ", log scale"
    if colour == "p99":
        weights = np.concatenate([m.ravel() for m in maps])
        cap = float(np.percentile(weights, 99)) or top
        return Normalize(vmin=0.0, vmax=cap, clip=True), f", clipped at p99 = {cap:.3g}"
    return Normalize(vmin=0.0, vmax=top), ""


def plot_maps(
    rows: list[Row],
    title: str,
    path: Path,
    query: tuple[int, int] | None = None,
    scale: str = "rows",
    colour: str = "linear",
) -> None:
    """One panel per ok row, in order, titled by its backend's short label, all on one colour
    scale with one labelled colour bar, so a colour means the same weight in every panel;
    the weights are drawn as `scale` and coloured as `colour` say (SCALES, COLOURS)."""
    if scale not in SCALES or colour not in COLOURS:
        raise UsageError(f"maps: scale is one of {SCALES}, colour one of {COLOURS}")
    path = figure_path(path)
    drawn = [row for row in rows if row.status == "ok" and row.array is not None]
    if not drawn:
        raise UsageError("no backend could draw its map")
    labels = [backend_label(row.backend) for row in drawn]
    maps = [scaled(np.asarray(row.array, dtype=float), scale, query is not None) for row in drawn]
    norm, how = colour_norm(maps, colour)
    fig, axes = plt.subplots(
        1, len(maps), figsize=(3.4 * len(maps) + 1.2, 3.9), squeeze=False, layout="constrained"
    )
    image = None
    for i, (ax, label, amap) in enumerate(zip(axes[0], labels, maps, strict=True)):
        image = ax.imshow(amap, cmap="viridis", interpolation="nearest", norm=norm)
        if query is not None:
            ax.plot(query[1], query[0], marker="x", color="red", markersize=8)
            ax.set_xlabel("key x")
            ax.set_ylabel("key y")
        else:
            ax.set_xlabel("key j")
            ax.set_ylabel("query i")
        ax.set_title(_panel_title(i, label), fontsize=10)
    fig.colorbar(image, ax=list(axes[0]), fraction=0.03, pad=0.02, label=_bar_label(scale) + how)
    fig.suptitle(f"{title}\n{_caption(scale)}", fontsize=10)
    try:
        atomic_save(fig, path)
    finally:
        plt.close(fig)


def _bar_label(scale: str) -> str:
    return "share of the row's weight" if scale == "rows" else "weight as the backend gives it"


def _caption(scale: str) -> str:
    if scale == "rows":
        return "each row normalised to sum 1: the distribution over keys each backend applies"
    return "raw weights: YOSO's are collision probabilities E, rows not summing to 1"


def _panel_title(index: int, label: str) -> str:
    """ "(a) softmax": every map figure letters its panels the same way."""
    return f"({chr(ord('a') + index % 26)}) {label}"
