"""The attention-map figure (YOSO Fig. 6, SCRAM Figs. 2-3): each backend's map side by side.

Its input is the maps study's rows: one per backend, metric "attention_map", the map in
`row.array` ([n, n], or [H, W] for one query). Rows that are not ok drew no map and get
no panel; the study reports them.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnbench.errors import UsageError
from attnbench.results.schema import Row
from attnbench.views.figures import atomic_save, figure_path
from attnbench.views.labels import backend_label


def plot_maps(
    rows: list[Row], title: str, path: Path, query: tuple[int, int] | None = None
) -> None:
    """One panel per ok row, in order, titled by its backend's short label, all on one colour
    scale (0 to the largest weight of any map) with one labelled colour bar, so a colour
    means the same weight in every panel."""
    path = figure_path(path)
    drawn = [row for row in rows if row.status == "ok" and row.array is not None]
    if not drawn:
        raise UsageError("no backend could draw its map")
    arrays = [(backend_label(row.backend), np.asarray(row.array)) for row in drawn]
    top = max(float(a.max()) for _, a in arrays) or 1.0
    fig, axes = plt.subplots(
        1, len(arrays), figsize=(3.4 * len(arrays) + 1.2, 3.9), squeeze=False,
        layout="constrained",
    )  # fmt: skip
    image = None
    for i, (ax, (label, amap)) in enumerate(zip(axes[0], arrays, strict=True)):
        image = ax.imshow(amap, cmap="viridis", interpolation="nearest", vmin=0.0, vmax=top)
        if query is not None:
            ax.plot(query[1], query[0], marker="x", color="red", markersize=8)
            ax.set_xlabel("key x")
            ax.set_ylabel("key y")
        else:
            ax.set_xlabel("key j")
            ax.set_ylabel("query i")
        ax.set_title(_panel_title(i, label), fontsize=10)
    what = "attention weight of the query" if query is not None else "attention weight (row: query)"
    fig.colorbar(image, ax=list(axes[0]), fraction=0.03, pad=0.02, label=what)
    fig.suptitle(title)
    try:
        atomic_save(fig, path)
    finally:
        plt.close(fig)


def _panel_title(index: int, label: str) -> str:
    """ "(a) softmax": every map figure letters its panels the same way."""
    return f"({chr(ord('a') + index % 26)}) {label}"
