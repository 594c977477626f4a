"""The gradient rows of `attnbench error --mode fwdbwd`, drawn and tabled: dQ, dK and dV's
error against n, and a table of each gradient's error, cosine, bias and noise."""

from __future__ import annotations

import pandas as pd

from attnbench.results.schema import is_missing
from attnbench.views.cells import number as _num
from attnbench.views.cells import size as _size
from attnbench.views.cells import size_header as _size_header
from attnbench.views.figures import case_parts, new_figure, plain_log_ticks, style_n_axis

GRADIENT_METRIC = "grad_rel_"  # one call's gradient error (error --mode fwdbwd)


def gradient_figure(rows: pd.DataFrame, failed: pd.DataFrame | None, lines_of):
    """One call's relative error of dQ, dK and dV against the reference vs n (log y: exact
    backends sit at rounding, estimators near 1), mean ± std over trials, a line per backend.
    `lines_of(rows, varying)` styles the lines (plots' own), passed in so that plots, which
    calls this, is not imported back."""
    metrics = rows["metric"].astype(str)
    reference = sorted(set(metrics[metrics.str.startswith(GRADIENT_METRIC)]))[0]
    reference = reference.partition("_vs_")[2]
    panels = [(g, f"{GRADIENT_METRIC}{g.lower()}_vs_{reference}") for g in ("dQ", "dK", "dV")]
    drawn = rows[rows["metric"].isin([m for _, m in panels])]
    parts, varying = case_parts(drawn)
    target = reference.replace("_", "-")
    fig, axes = new_figure(3, f"Gradient error vs sequence length, against {target}", parts)
    lines = lines_of(drawn, varying)
    for ax, (name, metric) in zip(axes, panels, strict=True):
        frame = drawn[(drawn["metric"] == metric) & (drawn["value"] > 0)]
        style_n_axis(ax, drawn["seq"])
        low = frame["value"] - frame["std"]
        frame = frame.assign(
            lo=low.where(low > 0, frame["value"] / 10), hi=frame["value"] + frame["std"]
        )
        lines.draw(ax, frame, band=("lo", "hi"))
        ax.set_yscale("log")
        plain_log_ticks(ax.yaxis)
        ax.set_ylabel(f"|{name} − {name} of {target}| / |{name} of {target}|")
        ax.set_title(f"{name}: one call, mean ± std over trials")
        if failed is not None and not failed.empty:
            mine = failed[failed["metric"].astype(str).isin([metric, "", "nan", "None"])]
            lines.draw_failed(ax, mine, frame)
    lines.legend(fig, axes)
    return fig


GRADIENT_NOTE = (
    "Gradients (`error --mode fwdbwd`), one upstream gradient per trial: one call's relative"
    " error and cosine, mean ± std over trials; over a stochastic backend's draws, its"
    " relative bias and one call's relative noise, ± their Monte Carlo standard errors."
)
GRADIENT_KINDS = ("rel", "cos", "bias", "noise")
GRADIENT_NAMES = {"dq": "dQ", "dk": "dK", "dv": "dV"}


def gradient_table(frame: pd.DataFrame) -> tuple[list[str], list[list[str]], list[bool]]:
    """One row per (backend, size, reference, gradient), one column per gradient metric
    (grad_<kind>_<g>_vs_<reference>)."""
    cells: dict[tuple, dict[str, str]] = {}
    for _, row in frame[frame["status"] == "ok"].iterrows():
        name, _, reference = str(row["metric"]).partition("_vs_")
        _, kind, gradient = name.split("_", 2)
        key = (row["backend"], _size(row), reference.replace("_", "-"), gradient)
        std = row.get("std")
        text = _num(row["value"])
        cells.setdefault(key, {})[kind] = text if is_missing(std) else f"{text} ± {_num(std)}"
    rows = [
        [f"`{backend}`", size, reference, GRADIENT_NAMES.get(gradient, gradient),
         *(found.get(kind, "–") for kind in GRADIENT_KINDS)]
        for (backend, size, reference, gradient), found in cells.items()
    ]  # fmt: skip
    header = ["backend", _size_header(frame), "vs", "gradient", "rel. error", "cosine"]
    return [*header, "bias", "noise"], rows, [False, True, False, False, True, True, True, True]
