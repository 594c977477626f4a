"""The figures of a study's result frame: runtime and memory vs n (time), approximation
error vs n and vs m (error), a whole model's cost per instance vs n (model).

The input is the frame of `rows_frame(rows)` or `read_rows(path)`. Plots only read rows;
every number drawn was measured and written by a study.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator, ScalarFormatter

from attnbench.errors import UsageError
from attnbench.results.schema import unstable
from attnbench.views.figures import (
    CASE_COLUMNS,
    UNSTABLE_LABEL,
    atomic_save,
    case_parts,
    failed_rows,
    figure_path,
    new_figure,
    ok_rows,
    plain_log_ticks,
    style_n_axis,
    with_env,
)
from attnbench.views.labels import backend_label, backend_order, m_of, short_labels

TIME_METRIC, MEMORY_METRIC = "time_ms", "peak_mib"
# How a case that did not run is marked at the bottom edge of a panel: (marker, legend text).
FAILED_MARKS = {
    "skipped": ("x", "skipped (unsupported, or would not fit)"),
    "oom": ("+", "out of memory"),
    "error": ("1", "failed"),
    "crashed": ("1", "failed"),
}
MEAN_LABEL = "mean of the kept samples"
YOSO_E_METRIC, SOFTMAX_METRIC = "radian_vs_yoso_e", "radian_vs_softmax"


def plot_results(df: pd.DataFrame, path: Path, env: dict | None = None) -> None:
    """Draw the figure that fits the rows' study and save it, format chosen by suffix.

    `env` is the run's environment record (the CSV's .env.json): it names the device and
    thread count where the rows do not (files written before those columns existed)."""
    path = figure_path(path)
    studies = sorted(df["study"].dropna().astype(str).unique())
    if len(studies) > 1:
        raise UsageError(f"rows mix several studies ({', '.join(studies)}); plot one at a time")
    df = with_env(df, env)
    rows = ok_rows(df)
    if rows.empty:
        raise UsageError("no successful rows to plot")
    study = studies[0] if studies else ""
    if study == "profile":
        from attnbench.views.roofline import roofline_figure

        return _save(roofline_figure(rows, env), path)
    figures = {"time": time_figure, "error": error_figure, "model": model_figure}
    if study not in figures:
        raise UsageError(f"no figure for study {study!r}")
    fig = figures[study](rows, failed_rows(df))
    try:
        _label_grid_axes(fig, pd.concat([rows, failed_rows(df)]))
    except BaseException:
        plt.close(fig)
        raise
    _save(fig, path)


def _save(fig, path: Path) -> None:
    try:
        atomic_save(fig, path)
    finally:
        plt.close(fig)


def time_figure(rows: pd.DataFrame, failed: pd.DataFrame | None = None):
    """Runtime and peak memory vs n, log-log, as in the YOSO paper's efficiency plot; cases
    that did not run are marked at the bottom edge of both panels."""
    time = rows[rows["metric"] == TIME_METRIC]
    memory = rows[rows["metric"] == MEMORY_METRIC]
    if time.empty and memory.empty:
        raise UsageError(f"no {TIME_METRIC} or {MEMORY_METRIC} rows to plot")
    if failed is None:
        failed = rows.iloc[:0]
    failed = failed[failed["metric"].isin([TIME_METRIC, MEMORY_METRIC])]
    drawn = pd.concat([time, memory])
    parts, varying = case_parts(pd.concat([drawn, failed]))
    panels = [m for m, frame in ((TIME_METRIC, time), (MEMORY_METRIC, memory)) if not frame.empty]
    against = "image size" if _grid_labels(pd.concat([drawn, failed])) else "sequence length"
    fig, axes = new_figure(len(panels), f"Runtime and peak memory vs {against}", parts)
    lines = _Lines(pd.concat([drawn, failed]), varying)
    for ax, metric in zip(axes, panels, strict=True):
        style_n_axis(ax, pd.concat([drawn["seq"], failed["seq"]]))
        if metric == TIME_METRIC:
            lines.draw(ax, time, band=("p10", "p90"))
            if "samples" in time:
                lines.draw_means(ax, time)
            ax.set_ylabel("time (ms), median with p10–p90 band")
        else:
            positive = memory[memory["value"] > 0]
            lines.draw(ax, positive)
            ax.set_ylabel("peak memory (MiB)")
            dropped = len(memory) - len(positive)
            if dropped:
                ax.text(
                    0.02,
                    0.98,
                    f"{dropped} point(s) ≤ 0 MiB not shown (log axis)",
                    transform=ax.transAxes,
                    va="top",
                    fontsize="small",
                    color="0.4",
                )
        if ax.lines:
            ax.set_yscale("log")
            plain_log_ticks(ax.yaxis)
        ax.set_title("runtime" if metric == TIME_METRIC else "peak memory")
        lines.draw_failed(ax, failed, time if metric == TIME_METRIC else memory)
    lines.legend(fig, axes)
    return fig


MODEL_PANELS = (
    ("time_per_instance_ms", "time per instance (ms)", "training step time / batch"),
    ("peak_mib_per_instance", "peak memory per instance (MiB)", "step's peak memory / batch"),
)


def model_figure(rows: pd.DataFrame, failed: pd.DataFrame | None = None):
    """YOSO Fig. 7: a whole model's training time and peak memory per instance vs n, log-log,
    a line per backend; cases that did not run are marked at the bottom edge."""
    metrics = [m for m, _, _ in MODEL_PANELS]
    drawn = rows[rows["metric"].isin(metrics)]
    if drawn.empty:
        raise UsageError(f"no {' or '.join(metrics)} rows to plot")
    failed = rows.iloc[:0] if failed is None else failed
    failed = failed[failed["metric"].isin(metrics)]
    parts, varying = case_parts(pd.concat([drawn, failed]).drop(columns="batch"))
    panels = [p for p in MODEL_PANELS if not drawn[drawn["metric"] == p[0]].empty]
    title = f"Training cost per instance vs sequence length ({_batch_note(drawn)})"
    fig, axes = new_figure(len(panels), title, parts)
    lines = _Lines(pd.concat([drawn, failed]), varying)
    for ax, (metric, ylabel, what) in zip(axes, panels, strict=True):
        frame = drawn[(drawn["metric"] == metric) & (drawn["value"] > 0)]
        style_n_axis(ax, pd.concat([drawn["seq"], failed["seq"]]))
        lines.draw(ax, frame)
        if ax.lines:
            ax.set_yscale("log")
            plain_log_ticks(ax.yaxis)
        ax.set_ylabel(ylabel)
        ax.set_title(what)
        lines.draw_failed(ax, failed, frame)
    lines.legend(fig, axes)
    return fig


def _batch_note(rows: pd.DataFrame) -> str:
    """What the model figure's batch was: the largest that fits, or a cap that bound it."""
    batches = sorted({int(b) for b in pd.to_numeric(rows["batch"], errors="coerce").dropna()})
    caps = rows["reason"].astype(str).str.extract(r"capped at --max-batch (\d+)")[0].dropna()
    size = f"batch {batches[0]}" if len(batches) == 1 else f"batch {batches[0]}–{batches[-1]}"
    if len(caps) == len(rows) and len(rows):
        return f"{size}: capped at --max-batch {caps.iloc[0]}, not the largest that fits"
    if len(caps):
        return f"largest batch that fits, {size}; capped at --max-batch {caps.iloc[0]} in places"
    return f"largest batch that fits, {size}" if batches else "largest batch that fits"


def error_figure(rows: pd.DataFrame, failed: pd.DataFrame | None = None):
    """Angle to YOSO-E and to exact softmax vs n, as in the YOSO paper's error plot; a case
    that did not run is marked at the bottom edge of its panel, as in the time figure. A
    file with gradient rows (error --mode fwdbwd) gets `gradient_figure` instead."""
    from attnbench.views import gradients

    if rows["metric"].astype(str).str.startswith(gradients.GRADIENT_METRIC).any():
        return gradients.gradient_figure(rows, failed, _Lines)
    frames = [(m, rows[rows["metric"] == m]) for m in (YOSO_E_METRIC, SOFTMAX_METRIC)]
    frames = [(m, f) for m, f in frames if not f.empty]
    if not frames:
        raise UsageError(f"no {YOSO_E_METRIC} or {SOFTMAX_METRIC} rows to plot")
    drawn = pd.concat([f for _, f in frames])
    parts, varying = case_parts(drawn)
    by_m = _error_by_m(rows)
    fig, axes = new_figure(
        len(frames) + (by_m is not None), "Approximation error vs sequence length", parts
    )
    lines = _Lines(drawn, varying)
    if by_m is not None:
        _error_vs_m_panel(axes[-1], by_m)
    for ax, (metric, frame) in zip(axes[: len(frames)], frames, strict=True):
        style_n_axis(ax, drawn["seq"])
        std = frame["std"] if "std" in frame else float("nan")
        frame = frame.assign(lo=(frame["value"] - std).clip(lower=0), hi=frame["value"] + std)
        lines.draw(ax, frame, band=("lo", "hi"))
        target = "YOSO-E" if metric == YOSO_E_METRIC else "exact softmax"
        ax.set_ylabel(f"mean angle to {target} (rad)")
        ax.set_title(f"vs {target}, mean ± std over trials")
        ax.set_ylim(bottom=0)
        if failed is not None and not failed.empty:
            mine = failed[failed["metric"].astype(str).isin([metric, "", "nan", "None"])]
            lines.draw_failed(ax, mine, frame)
    lines.legend(fig, axes[: len(frames)])
    return fig


def _error_by_m(rows: pd.DataFrame) -> pd.DataFrame | None:
    """The angle-to-YOSO-E rows of backends with an m, with an `m` column, when at least two
    m are present and the rows are one case family (else no error-vs-m panel)."""
    frame = rows[rows["metric"] == YOSO_E_METRIC]
    if frame.empty:
        return None
    frame = frame.assign(m=frame["backend"].astype(str).map(m_of)).dropna(subset=["m"])
    frame = frame[(frame["m"] > 0) & (frame["value"] > 0)]
    present = [c for c in CASE_COLUMNS if c in frame]
    if frame["m"].nunique() < 2 or any(frame[c].nunique(dropna=False) > 1 for c in present):
        return None
    return frame.drop_duplicates(subset=["backend", "seq"], keep="last")


def _error_vs_m_panel(ax, frame: pd.DataFrame) -> None:
    """Angle to YOSO-E vs m on log-log axes, a line per n, with the Monte Carlo rate c/sqrt(m)
    dashed (c fitted to all points in log space), as a check of YOSO-m's 1/sqrt(m) error."""
    for idx, (n, group) in enumerate(frame.groupby("seq", sort=True)):
        group = group.sort_values("m")
        ax.plot(group["m"], group["value"], marker="o", markersize=4, color=f"C{idx % 10}",
                label=f"n={int(n)}")  # fmt: skip
    ms = sorted(frame["m"].unique())
    scale = math.exp(float((frame["value"].map(math.log) + 0.5 * frame["m"].map(math.log)).mean()))
    ax.plot(ms, [scale / math.sqrt(m) for m in ms], "k--", linewidth=1, label="∝ 1/√m")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ms)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    plain_log_ticks(ax.yaxis)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_xlabel("number of hashes m")
    ax.set_ylabel("mean angle to YOSO-E (rad)")
    ax.set_title("vs m, log-log, a line per n")
    ax.legend(fontsize="small", ncols=2 if frame["seq"].nunique() > 4 else 1)


def _series(rows: pd.DataFrame, varying: list[str]):
    """Yield (backend, extra label, rows sorted by n) for each line to draw."""
    keys = ["backend", *varying]
    for key, group in rows.groupby(keys, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        extra = ", ".join(f"{c}={v}" for c, v in zip(varying, key[1:], strict=True))
        # A re-run may repeat a case; the newest row (written last) wins.
        group = group.drop_duplicates(subset="seq", keep="last").sort_values("seq")
        yield str(key[0]), extra, group


class _Lines:
    """Gives each (backend, case) line the same colour, marker and label in every panel."""

    MARKERS = "osD^v<>pPhX*"

    def __init__(self, rows: pd.DataFrame, varying: list[str]):
        self.varying = varying
        self.order = backend_order(rows["backend"].astype(str))
        self.labels, self.legend_title = short_labels(self.order)
        self.seen: dict[tuple[str, str], int] = {}
        self.extras: dict[str, Line2D] = {}  # legend entries for marks that are not lines

    def _style(self, backend: str, extra: str) -> dict:
        idx = self.seen.setdefault((backend, extra), len(self.seen))
        return {"color": f"C{idx % 10}", "marker": self.MARKERS[idx % len(self.MARKERS)]}

    def draw_failed(self, ax, failed: pd.DataFrame, ok: pd.DataFrame) -> None:
        """A mark on the x axis (not at a value: the case has none), in the backend's colour,
        at each n whose case did not run (FAILED_MARKS by status), unless a later run of the
        case succeeded."""
        done = {(b, e, n) for b, e, g in _series(ok, self.varying) for n in g["seq"]}
        edge = ax.get_xaxis_transform()  # x in data, y in axes fractions
        stacked: dict[float, int] = {}  # marks already at an n: the next one goes above
        for backend, extra, group in _series(failed, self.varying):
            if backend not in self.labels:
                self.order.append(backend)
                self.labels[backend] = backend_label(backend)
            color = self._style(backend, extra)["color"]
            for status, marks in group.groupby(group["status"].astype(str)):
                seqs = [n for n in marks["seq"] if (backend, extra, n) not in done]
                if not seqs:
                    continue
                marker, text = FAILED_MARKS.get(status, FAILED_MARKS["error"])
                heights = []
                for n in seqs:
                    heights.append(0.06 * stacked.get(n, 0))  # on the axis: no value
                    stacked[n] = stacked.get(n, 0) + 1
                ax.plot(
                    seqs, heights, transform=edge, linestyle="none",
                    marker=marker, markersize=9, markeredgewidth=2, color=color, clip_on=False,
                )  # fmt: skip
                self.extras.setdefault(text, Line2D(
                    [], [], linestyle="none", marker=marker, markersize=8, markeredgewidth=2,
                    color="0.35", label=text,
                ))  # fmt: skip

    def draw_means(self, ax, rows: pd.DataFrame) -> None:
        """A dash at the mean of each point's kept samples (the seed reports means; the
        line is the median)."""
        for backend, extra, group in _series(rows, self.varying):
            means = group["samples"].map(lambda s: sum(s) / len(s) if len(s) else float("nan"))
            if means.notna().any():
                color = self._style(backend, extra)["color"]
                ax.plot(group["seq"], means, linestyle="none", marker="_", markersize=12,
                        markeredgewidth=1.5, color=color)  # fmt: skip
                self.extras.setdefault(MEAN_LABEL, Line2D(
                    [], [], linestyle="none", marker="_", markersize=12, markeredgewidth=1.5,
                    color="0.35", label=MEAN_LABEL,
                ))  # fmt: skip

    def draw(self, ax, rows: pd.DataFrame, band: tuple[str, str] | None = None) -> None:
        """A line per series; a point its run flagged unstable is drawn hollow."""
        series = sorted(_series(rows, self.varying), key=lambda s: (self.order.index(s[0]), s[1]))
        for backend, extra, group in series:
            style = self._style(backend, extra)
            label = self.labels[backend] + (f" ({extra})" if extra else "")
            ax.plot(group["seq"], group["value"], label=label, markersize=5, **style)
            shaky = group[unstable(group)]
            if not shaky.empty:
                ax.plot(shaky["seq"], shaky["value"], linestyle="none", marker=style["marker"],
                        markersize=7, markerfacecolor="white", markeredgewidth=1.5,
                        color=style["color"], zorder=3)  # fmt: skip
                self.extras.setdefault(UNSTABLE_LABEL, Line2D(
                    [], [], linestyle="none", marker="o", markersize=7, markerfacecolor="white",
                    markeredgewidth=1.5, color="0.35", label=UNSTABLE_LABEL,
                ))  # fmt: skip
            if band is not None:
                lo, hi = (group[c] if c in group else None for c in band)
                if lo is not None and hi is not None and (lo.notna() & hi.notna()).any():
                    ax.fill_between(
                        group["seq"], lo, hi, color=style["color"], alpha=0.2, linewidth=0
                    )

    def legend(self, fig, axes) -> None:
        """One legend for the figure, below the panels, so it never hides a line."""
        handles, labels = {}, []
        for ax in axes:
            for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
                if label not in handles:
                    handles[label] = h
                    labels.append(label)
        for label, handle in self.extras.items():
            if label not in handles:
                handles[label] = handle
                labels.append(label)
        if handles:
            most = 3 * len(axes)  # about what fits under the panels
            ncols = math.ceil(len(labels) / math.ceil(len(labels) / most))  # balanced rows
            fig.legend(
                [handles[lb] for lb in labels],
                labels,
                loc="outside lower center",
                ncols=ncols,
                title=self.legend_title,
                frameon=False,
            )


def _grid_labels(rows: pd.DataFrame) -> dict[int, str]:
    """n -> "HxW" when every row has a grid and each n has one size; else empty."""
    if "grid_h" not in rows or "grid_w" not in rows or rows.empty:
        return {}
    h = pd.to_numeric(rows["grid_h"], errors="coerce")
    w = pd.to_numeric(rows["grid_w"], errors="coerce")
    if h.isna().any() or w.isna().any():
        return {}
    labels: dict[int, set[str]] = {}
    for n, gh, gw in zip(rows["seq"], h, w, strict=True):
        labels.setdefault(int(n), set()).add(f"{int(gh)}x{int(gw)}")
    if any(len(sizes) != 1 for sizes in labels.values()):
        return {}
    return {n: sizes.pop() for n, sizes in labels.items()}


def _label_grid_axes(fig, rows: pd.DataFrame) -> None:
    """Grid studies: each panel's x axis names the image sizes ("64x64") at n = H*W."""
    labels = _grid_labels(rows)
    images = "grid_h" in rows and not rows.empty and rows["grid_h"].notna().all()
    for ax in fig.axes:
        if ax.get_xscale() != "log":  # colour bars and other non-n axes
            continue
        if labels and len(labels) <= 12:
            seqs = sorted(labels)
            ax.set_xticks(seqs, [labels[n] for n in seqs])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xlabel("image size H×W (n = H·W tokens)")
        elif images:  # sizes too many, or several per n, to name on the axis
            ax.set_xlabel("image tokens n = H·W")
