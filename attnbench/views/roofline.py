"""The roofline of a profile run: this machine's ceilings, and a point per backend and stage.

x is arithmetic intensity (FLOP per byte moved), y the achieved GFLOP/s, both by the
algorithmic count of each stage's cost model. The ceilings are the run's own measurements
(its environment record): the GEMM peak of the run's dtype, the rate of vector adds (the
ceiling of stages whose flops cannot fuse into FMAs) where measured, and per memory level
the line intensity x bandwidth up to that peak. A point below the line that bounds it shows the
headroom left; each backend's whole call is drawn as a star at its length.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from attnbench.errors import UsageError
from attnbench.measure.ceilings import Ceilings
from attnbench.views.figures import case_parts, new_figure
from attnbench.views.labels import backend_label, backend_order

LEVEL_STYLES = {"L1": ":", "L2": "-.", "L3": "--", "DRAM": "-", "HBM": "-"}
STAGE_MARKERS = "osD^v<>phP*X"


def roofline_figure(rows: pd.DataFrame, env: dict | None):
    """The figure of profile rows (ok rows of one run) with the ceilings of `env`."""
    if not env or not env.get("ceilings"):
        raise UsageError("the run's record holds no machine ceilings; rerun attnbench profile")
    ceilings = Ceilings.from_dict(env["ceilings"])
    points = _points(rows)
    if points.empty:
        raise UsageError("no stage has both a cost model and a time to plot")
    dtype = str(points["dtype"].iloc[0])
    fig, axes = new_figure(1, "attnbench profile: roofline", case_parts(points)[0])
    fig.set_size_inches(11, 6.5)
    ax = axes[0]
    lo = min(points["intensity_alg"].min() / 4, 0.05)
    hi = max(points["intensity_alg"].max() * 4, 200.0)
    x = np.logspace(math.log10(lo), math.log10(hi), 200)
    peak = ceilings.peak(dtype)
    ax.axhline(peak, color="black", lw=1.5)
    ax.annotate(f"GEMM peak {dtype}, measured: {peak:.0f} GFLOP/s", (hi, peak),
                xytext=(-4, -3), textcoords="offset points", ha="right", va="top",
                fontsize=8)  # fmt: skip
    adds = ceilings.add_peak(dtype)
    if adds:
        ax.axhline(adds, color="black", lw=1, ls=(0, (6, 2)))
        ax.annotate(f"vector adds {dtype}, measured: {adds:.0f} GFLOP/s (no multiply to fuse)",
                    (lo, adds), xytext=(4, -3), textcoords="offset points", ha="left",
                    va="top", fontsize=8)  # fmt: skip
    computed = ceilings.computed.get("gflops_fp32")
    if computed and dtype == "float32":
        ax.axhline(computed, color="grey", lw=1, ls=":")
        ax.annotate(f"cores x SIMD x FMA x clock, computed: {computed:.0f} GFLOP/s",
                    (hi, max(computed, peak)), xytext=(-4, 3), textcoords="offset points",
                    ha="right", va="bottom", fontsize=8, color="grey")  # fmt: skip
    for level in ceilings.levels:
        roof = np.minimum(x * level.gbs, peak)
        ax.plot(x, roof, color="black", lw=1, ls=LEVEL_STYLES.get(level.name, "-"),
                label=f"{level.name} bandwidth {level.gbs:.0f} GB/s")  # fmt: skip
    colours = {b: f"C{i}" for i, b in enumerate(backend_order(points["backend"].unique()))}
    stages = list(dict.fromkeys(points.loc[points["stage"] != "", "stage"]))
    for r in points.itertuples():
        whole = r.stage == ""
        marker = "*" if whole else _marker(stages, r.stage)
        ax.scatter(r.intensity_alg, r.gflops_alg, color=colours[r.backend], marker=marker,
                   s=140 if whole else 45, edgecolor="black", lw=0.5, zorder=3)  # fmt: skip
    for backend, colour in colours.items():
        ax.scatter([], [], color=colour, marker="o", label=backend_label(backend))
    _stage_legend(ax, stages, points)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(bottom=max(points["gflops_alg"].min() / 4, 1e-3), top=peak * 3)
    ax.set_xlabel("arithmetic intensity, FLOP/byte (algorithmic count)")
    ax.set_ylabel("achieved GFLOP/s (algorithmic count)")
    ax.set_title(
        "lines: this machine's measured ceilings; star: a whole call at its n, "
        "other marks: its stages",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def _marker(stages: list[str], stage: str) -> str:
    return STAGE_MARKERS[stages.index(stage) % len(STAGE_MARKERS)]


def _stage_legend(ax, stages: list[str], points: pd.DataFrame) -> None:
    """What each mark is, in a legend of its own outside the axes (right) rather than a
    label beside each point: stages of several backends sit close together, and their
    labels overlap. Each backend's whole call is named with its length."""
    from matplotlib.lines import Line2D

    def mark(marker: str, label: str, size: float = 6) -> Line2D:
        return Line2D([], [], ls="", marker=marker, markersize=size, color="white",
                      markeredgecolor="black", label=label)  # fmt: skip

    lengths = points.loc[points["stage"] == "", "seq"]
    whole = "whole call" + (f" (n={int(lengths.max())})" if len(lengths) else "")
    handles = [mark("*", whole, 10), *(mark(_marker(stages, s), s) for s in stages)]
    legend = ax.legend(handles=handles, fontsize=7, loc="upper left", title="mark",
                       title_fontsize=7, bbox_to_anchor=(1.01, 1.0),
                       borderaxespad=0.0)  # fmt: skip
    ax.add_artist(legend)  # the next legend() call would replace it


def _points(rows: pd.DataFrame) -> pd.DataFrame:
    """Whole calls and stages with a rate and an intensity, at each backend's longest n."""
    keep = rows[rows["metric"].isin(["time_ms", "stage_ms"])].copy()
    keep["stage"] = keep["stage"].fillna("").astype(str)
    for column in ("intensity_alg", "gflops_alg"):
        keep[column] = pd.to_numeric(keep[column], errors="coerce")
    keep = keep[(keep["intensity_alg"] > 0) & (keep["gflops_alg"] > 0)]
    if keep.empty:
        return keep
    longest = keep.groupby("backend")["seq"].transform("max")
    return keep[keep["seq"] == longest]
