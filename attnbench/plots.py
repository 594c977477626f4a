"""Figures drawn from result rows: runtime and memory vs n, approximation error vs n.

Plots only read rows; every number drawn was measured and written by a study.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import matplotlib
import pandas as pd

matplotlib.use("Agg")  # files only, never a screen
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import LogFormatter, NullLocator, ScalarFormatter  # noqa: E402

from attnbench.errors import UsageError  # noqa: E402

PLOT_SUFFIXES = (".png", ".svg", ".pdf")

# Columns that describe a case besides backend and n. Constant ones go in the title,
# varying ones into the legend labels so distinct cases never share a line.
CASE_COLUMNS = ("device", "dtype", "mode", "inputs", "batch", "heads", "dim")

TIME_METRIC, MEMORY_METRIC = "time_ms", "peak_mib"
YOSO_E_METRIC, SOFTMAX_METRIC = "radian_vs_yoso_e", "radian_vs_softmax"


def plot_results(df: pd.DataFrame, path: Path) -> None:
    """Draw the figure that fits the rows' study and save it, format chosen by suffix."""
    path = Path(path)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise UsageError(f"cannot plot to {path.name}: use one of {', '.join(PLOT_SUFFIXES)}")
    studies = sorted(df["study"].dropna().astype(str).unique())
    if len(studies) > 1:
        raise UsageError(f"rows mix several studies ({', '.join(studies)}); plot one at a time")
    rows = _ok_rows(df)
    if rows.empty:
        raise UsageError("no successful rows to plot")
    study = studies[0] if studies else ""
    if study == "time":
        fig = _time_figure(rows)
    elif study == "error":
        fig = _error_figure(rows)
    else:
        raise UsageError(f"no figure for study {study!r}")
    try:
        _atomic_save(fig, path)
    finally:
        plt.close(fig)


GRID_SUFFIX = r" \d+x\d+$"


def _ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows worth drawing: status ok and a numeric value (failed cases have none)."""
    rows = df[df["status"].astype(str) == "ok"].copy()
    for col in ("value", "p10", "p90", "std", "seq"):
        if col in rows:
            rows[col] = pd.to_numeric(rows[col], errors="coerce")
    if "inputs" in rows:
        # "random 128x128": the grid is the x axis (n = H*W), not a case of its own; a
        # picture's name already says it is an image
        inputs = rows["inputs"].astype(str)
        picture = inputs.str.startswith(("blobs", "image:"))
        rows["inputs"] = inputs.str.replace(GRID_SUFFIX, "", regex=True).where(
            picture, inputs.str.replace(GRID_SUFFIX, " image", regex=True)
        )
    return rows.dropna(subset=["value", "seq"])


def _atomic_save(fig, path: Path) -> None:
    """Save through a temp file next to `path`, so a reader never sees half an image."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{path.suffix}")
    try:
        with open(tmp, "wb") as f:
            fig.savefig(f, format=path.suffix.lower()[1:], dpi=150, bbox_inches="tight")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# ----------------------------------------------------------------------------- labels


def _parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split "yoso:m=32,tau=8" into ("yoso", {"m": "32", "tau": "8"})."""
    name, _, rest = spec.partition(":")
    params = {}
    for part in filter(None, rest.split(",")):
        key, _, value = part.partition("=")
        params[key.strip()] = value.strip()
    return name, params


def _m_of(spec: str) -> float | None:
    """The spec's m as a number, so m=8 sorts before m=16; None when it has no m."""
    m = _parse_spec(spec)[1].get("m")
    try:
        return float(m) if m is not None else None
    except ValueError:
        return None


def _display_name(spec: str) -> str:
    """The registry's short label ("yoso-32" for the canonical yoso spec), else the spec."""
    from attnbench.backends import get_backend
    from attnbench.errors import UsageError

    try:
        return get_backend(spec).label
    except UsageError:
        return spec


def _short_labels(specs: list[str]) -> tuple[dict[str, str], str | None]:
    """Label backends "m=8" when several differ only in m; return labels and a legend title.

    Shortening is only safe when every spec with an m shares the family and all other
    parameters; the legend title then spells out what "m=..." stands for.
    """
    labels = {s: _display_name(s) for s in specs}
    with_m = [s for s in specs if _m_of(s) is not None]
    parsed = [_parse_spec(s) for s in with_m]
    rests = {(name, tuple(sorted((k, v) for k, v in p.items() if k != "m"))) for name, p in parsed}
    if len(with_m) < 2 or len(rests) != 1 or len({p["m"] for _, p in parsed}) != len(with_m):
        return labels, None
    for spec, (_, params) in zip(with_m, parsed, strict=True):
        labels[spec] = f"m={params['m']}"
    name, params = parsed[0]
    pattern = ",".join(f"{k}=…" if k == "m" else f"{k}={v}" for k, v in params.items())
    return labels, f"m=… stands for {name}:{pattern}"


def _backend_order(specs) -> list[str]:
    """Backends with an m sorted by m first, then the rest by name."""

    def key(spec: str):
        m = _m_of(spec)
        return (m is None, m if m is not None else 0.0, spec)

    return sorted(set(specs), key=key)


def _case_parts(rows: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Split case columns into title text (constant) and label columns (varying)."""
    present = [c for c in CASE_COLUMNS if c in rows]
    varying = [c for c in present if rows[c].nunique(dropna=False) > 1]
    const = {c: rows[c].iloc[0] for c in present if c not in varying}
    parts = [str(const[c]) for c in ("device", "dtype", "mode") if c in const]
    if "inputs" in const:
        parts.append(f"{const['inputs']} inputs")
    if "batch" in const and "heads" in const:
        parts.append(f"batch×heads = {const['batch']}×{const['heads']}")
    else:
        parts += [f"{c} = {const[c]}" for c in ("batch", "heads") if c in const]
    if "dim" in const:
        parts.append(f"dim = {const['dim']}")
    return parts, varying


def _series(rows: pd.DataFrame, varying: list[str]):
    """Yield (backend, extra label, rows sorted by n) for each line to draw."""
    keys = ["backend", *varying]
    for key, group in rows.groupby(keys, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        extra = ", ".join(f"{c}={v}" for c, v in zip(varying, key[1:], strict=True))
        # A re-run may repeat a case; the newest row (written last) wins.
        group = group.drop_duplicates(subset="seq", keep="last").sort_values("seq")
        yield str(key[0]), extra, group


def _style_n_axis(ax, seqs) -> None:
    """Log-2 n axis with plain numbers at the measured lengths."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length n (pixels H×W for image inputs)")
    seqs = sorted(set(seqs))
    if 0 < len(seqs) <= 12:
        ax.set_xticks(seqs)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_locator(NullLocator())
    ax.grid(True, which="major", alpha=0.3)


# ----------------------------------------------------------------------------- figures


class _PlainLogFormatter(LogFormatter):
    """Log ticks as plain numbers ("0.06", "10"), which read faster than 6e-02 or 10^1."""

    def __call__(self, x, pos=None):
        return f"{x:g}" if super().__call__(x, pos) else ""


class _Lines:
    """Gives each (backend, case) line the same colour, marker and label in every panel."""

    MARKERS = "osD^v<>pPhX*"

    def __init__(self, rows: pd.DataFrame, varying: list[str]):
        self.varying = varying
        self.order = _backend_order(rows["backend"].astype(str))
        self.labels, self.legend_title = _short_labels(self.order)
        self.seen: dict[tuple[str, str], int] = {}

    def draw(self, ax, rows: pd.DataFrame, band: tuple[str, str] | None = None) -> None:
        series = sorted(_series(rows, self.varying), key=lambda s: (self.order.index(s[0]), s[1]))
        for backend, extra, group in series:
            idx = self.seen.setdefault((backend, extra), len(self.seen))
            style = {"color": f"C{idx % 10}", "marker": self.MARKERS[idx % len(self.MARKERS)]}
            label = self.labels[backend] + (f" ({extra})" if extra else "")
            ax.plot(group["seq"], group["value"], label=label, markersize=5, **style)
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


def _new_figure(npanels: int, title: str, parts: list[str]):
    fig, axes = plt.subplots(
        1, npanels, figsize=(6 * npanels, 4.8), layout="constrained", squeeze=False
    )
    fig.suptitle(title + ("\n" + " · ".join(parts) if parts else ""))
    return fig, list(axes[0])


def _time_figure(rows: pd.DataFrame):
    """Runtime and peak memory vs n, log-log, as in the YOSO paper's efficiency plot."""
    time = rows[rows["metric"] == TIME_METRIC]
    memory = rows[rows["metric"] == MEMORY_METRIC]
    if time.empty and memory.empty:
        raise UsageError(f"no {TIME_METRIC} or {MEMORY_METRIC} rows to plot")
    drawn = pd.concat([time, memory])
    parts, varying = _case_parts(drawn)
    panels = [m for m, frame in ((TIME_METRIC, time), (MEMORY_METRIC, memory)) if not frame.empty]
    fig, axes = _new_figure(len(panels), "Runtime and peak memory vs sequence length", parts)
    lines = _Lines(drawn, varying)
    for ax, metric in zip(axes, panels, strict=True):
        _style_n_axis(ax, drawn["seq"])
        if metric == TIME_METRIC:
            lines.draw(ax, time, band=("p10", "p90"))
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
            ax.yaxis.set_major_formatter(_PlainLogFormatter())
            ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False))
        ax.set_title("runtime" if metric == TIME_METRIC else "peak memory")
    lines.legend(fig, axes)
    return fig


def _error_figure(rows: pd.DataFrame):
    """Angle to YOSO-E and to exact softmax vs n, as in the YOSO paper's error plot."""
    frames = [(m, rows[rows["metric"] == m]) for m in (YOSO_E_METRIC, SOFTMAX_METRIC)]
    frames = [(m, f) for m, f in frames if not f.empty]
    if not frames:
        raise UsageError(f"no {YOSO_E_METRIC} or {SOFTMAX_METRIC} rows to plot")
    drawn = pd.concat([f for _, f in frames])
    parts, varying = _case_parts(drawn)
    by_m = _error_by_m(rows)
    fig, axes = _new_figure(
        len(frames) + (by_m is not None), "Approximation error vs sequence length", parts
    )
    lines = _Lines(drawn, varying)
    if by_m is not None:
        _error_vs_m_panel(axes[-1], by_m)
    for ax, (metric, frame) in zip(axes[: len(frames)], frames, strict=True):
        _style_n_axis(ax, drawn["seq"])
        std = frame["std"] if "std" in frame else float("nan")
        frame = frame.assign(lo=(frame["value"] - std).clip(lower=0), hi=frame["value"] + std)
        lines.draw(ax, frame, band=("lo", "hi"))
        target = "YOSO-E" if metric == YOSO_E_METRIC else "exact softmax"
        ax.set_ylabel(f"mean angle to {target} (rad)")
        ax.set_title(f"vs {target}, mean ± std over trials")
        ax.set_ylim(bottom=0)
    lines.legend(fig, axes[: len(frames)])
    return fig


def _error_by_m(rows: pd.DataFrame) -> pd.DataFrame | None:
    """The angle-to-YOSO-E rows of backends with an m, with an `m` column, when at least two
    m are present and the rows are one case family (else no error-vs-m panel)."""
    frame = rows[rows["metric"] == YOSO_E_METRIC]
    if frame.empty:
        return None
    frame = frame.assign(m=frame["backend"].astype(str).map(_m_of)).dropna(subset=["m"])
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
    ax.yaxis.set_major_formatter(_PlainLogFormatter())
    ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False))
    ax.grid(True, which="major", alpha=0.3)
    ax.set_xlabel("number of hashes m")
    ax.set_ylabel("mean angle to YOSO-E (rad)")
    ax.set_title("vs m, log-log, a line per n")
    ax.legend(fontsize="small", ncols=2 if frame["seq"].nunique() > 4 else 1)


def plot_maps(maps: dict, title: str, path: Path, query: tuple[int, int] | None = None) -> None:
    """One panel per backend: its attention map, each on its own colour scale."""
    path = Path(path)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise UsageError(f"cannot plot to {path.name}: use one of {', '.join(PLOT_SUFFIXES)}")
    fig, axes = plt.subplots(1, len(maps), figsize=(3.6 * len(maps), 3.8), squeeze=False)
    for ax, (label, amap) in zip(axes[0], maps.items(), strict=True):
        image = ax.imshow(amap.numpy(), cmap="viridis", interpolation="nearest")
        if query is not None:
            ax.plot(query[1], query[0], marker="x", color="red", markersize=8)
            ax.set_xlabel("key x")
            ax.set_ylabel("key y")
        else:
            ax.set_xlabel("key j")
            ax.set_ylabel("query i")
        ax.set_title(label, fontsize=10)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(title)
    fig.tight_layout()
    try:
        _atomic_save(fig, path)
    finally:
        plt.close(fig)
