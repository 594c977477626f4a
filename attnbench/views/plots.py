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
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import LogFormatter, NullLocator, ScalarFormatter  # noqa: E402

from attnbench.errors import UsageError  # noqa: E402

PLOT_SUFFIXES = (".png", ".svg", ".pdf")

# Columns that describe a case besides backend and n. Constant ones go in the title,
# varying ones into the legend labels so distinct cases never share a line.
CASE_COLUMNS = ("device", "dtype", "mode", "inputs", "batch", "heads", "dim")

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
    path = Path(path)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise UsageError(f"cannot plot to {path.name}: use one of {', '.join(PLOT_SUFFIXES)}")
    studies = sorted(df["study"].dropna().astype(str).unique())
    if len(studies) > 1:
        raise UsageError(f"rows mix several studies ({', '.join(studies)}); plot one at a time")
    df = _with_env(df, env)
    rows = _ok_rows(df)
    if rows.empty:
        raise UsageError("no successful rows to plot")
    study = studies[0] if studies else ""
    if study == "time":
        fig = _time_figure(rows, _failed_rows(df))
    elif study == "error":
        fig = _error_figure(rows, _failed_rows(df))
    elif study == "model":
        fig = _model_figure(rows, _failed_rows(df))
    else:
        raise UsageError(f"no figure for study {study!r}")
    try:
        _label_grid_axes(fig, pd.concat([rows, _failed_rows(df)]))
        _atomic_save(fig, path)
    finally:
        plt.close(fig)


def _with_env(df: pd.DataFrame, env: dict | None) -> pd.DataFrame:
    """Rows with device_name and threads filled in from `env` where they are empty."""
    df = df.copy()
    env = env or {}
    name = env.get("device_name") or ""
    threads = env.get("threads", env.get("torch_threads"))
    if "device_name" not in df:
        df["device_name"] = ""
    if "threads" not in df:
        df["threads"] = None
    empty = df["device_name"].isna() | (df["device_name"].astype(str).str.strip() == "")
    df["device_name"] = df["device_name"].astype(object).where(~empty, name)
    if threads is not None:
        df["threads"] = df["threads"].astype(object).where(df["threads"].notna(), threads)
    return df


GRID_SUFFIX = r" \d+x\d+$"


def _ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows worth drawing: status ok and a numeric value (failed cases have none)."""
    rows = _normalised(df[df["status"].astype(str) == "ok"])
    return rows.dropna(subset=["value", "seq"])


def _failed_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Cases that did not run to the end (skipped, oom, error, crashed): marked, not drawn."""
    rows = _normalised(df[~df["status"].astype(str).isin(["ok", "nan", ""])])
    return rows.dropna(subset=["seq"])


def _normalised(rows: pd.DataFrame) -> pd.DataFrame:
    """Numeric value columns, and inputs without their grid size."""
    rows = rows.copy()
    for col in ("value", "p10", "p90", "std", "seq", "grid_h", "grid_w"):
        if col in rows:
            rows[col] = pd.to_numeric(rows[col], errors="coerce")
    if "inputs" in rows:
        # "random 128x128": the grid is the x axis (n = H*W), not a case of its own; a
        # picture's name already says it is an image
        inputs = rows["inputs"].astype(str)
        picture = inputs.str.startswith(("blobs", "image:", "svd:", "three-blobs"))
        rows["inputs"] = inputs.str.replace(GRID_SUFFIX, "", regex=True).where(
            picture, inputs.str.replace(GRID_SUFFIX, " image", regex=True)
        )
    return rows


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
    if parts and "device" in const:
        name = _constant(rows, "device_name")
        parts[0] += f" ({name})" if name else ""
    threads = _constant(rows, "threads")
    if threads:
        parts.insert(1 if "device" in const else 0, f"{int(float(threads))} CPU threads")
    if "inputs" in const:
        parts.append(f"{const['inputs']} inputs")
    if "batch" in const and "heads" in const:
        parts.append(f"batch×heads = {const['batch']}×{const['heads']}")
    else:
        parts += [f"{c} = {const[c]}" for c in ("batch", "heads") if c in const]
    if "dim" in const:
        parts.append(f"dim = {const['dim']}")
    return parts, varying


def _constant(rows: pd.DataFrame, column: str) -> str:
    """The column's one non-empty value as text, or "" when it is absent, empty or varies."""
    if column not in rows:
        return ""
    values = {str(v).strip() for v in rows[column].dropna()} - {"", "nan", "None"}
    return values.pop() if len(values) == 1 else ""


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
        self.extras: dict[str, Line2D] = {}  # legend entries for marks that are not lines

    def _style(self, backend: str, extra: str) -> dict:
        idx = self.seen.setdefault((backend, extra), len(self.seen))
        return {"color": f"C{idx % 10}", "marker": self.MARKERS[idx % len(self.MARKERS)]}

    def draw_failed(self, ax, failed: pd.DataFrame, ok: pd.DataFrame) -> None:
        """A mark at the bottom edge, in the backend's colour, at each n whose case did not
        run (FAILED_MARKS by status), unless a later run of the case succeeded."""
        done = {(b, e, n) for b, e, g in _series(ok, self.varying) for n in g["seq"]}
        edge = ax.get_xaxis_transform()  # x in data, y in axes fractions
        stacked: dict[float, int] = {}  # marks already at an n: the next one goes above
        for backend, extra, group in _series(failed, self.varying):
            if backend not in self.labels:
                self.order.append(backend)
                self.labels[backend] = _display_name(backend)
            color = self._style(backend, extra)["color"]
            for status, marks in group.groupby(group["status"].astype(str)):
                seqs = [n for n in marks["seq"] if (backend, extra, n) not in done]
                if not seqs:
                    continue
                marker, text = FAILED_MARKS.get(status, FAILED_MARKS["error"])
                heights = []
                for n in seqs:
                    heights.append(0.03 + 0.06 * stacked.get(n, 0))
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
        series = sorted(_series(rows, self.varying), key=lambda s: (self.order.index(s[0]), s[1]))
        for backend, extra, group in series:
            style = self._style(backend, extra)
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


def _new_figure(npanels: int, title: str, parts: list[str]):
    fig, axes = plt.subplots(
        1, npanels, figsize=(6 * npanels, 4.8), layout="constrained", squeeze=False
    )
    fig.suptitle(title + ("\n" + _subtitle(parts, 40 * npanels) if parts else ""))
    return fig, list(axes[0])


def _subtitle(parts: list[str], width: int) -> str:
    """The case parts joined by " · ", broken into lines of about `width` characters."""
    lines = [""]
    for part in parts:
        if lines[-1] and len(lines[-1]) + 3 + len(part) > width:
            lines.append(part)
        else:
            lines[-1] += (" · " if lines[-1] else "") + part
    return "\n".join(lines)


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
    if not labels or len(labels) > 12:
        return
    seqs = sorted(labels)
    for ax in fig.axes:
        if ax.get_xscale() != "log":  # colour bars and other non-n axes
            continue
        ax.set_xticks(seqs, [labels[n] for n in seqs])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("image size H×W (n = H·W tokens)")


def _time_figure(rows: pd.DataFrame, failed: pd.DataFrame | None = None):
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
    parts, varying = _case_parts(pd.concat([drawn, failed]))
    panels = [m for m, frame in ((TIME_METRIC, time), (MEMORY_METRIC, memory)) if not frame.empty]
    fig, axes = _new_figure(len(panels), "Runtime and peak memory vs sequence length", parts)
    lines = _Lines(pd.concat([drawn, failed]), varying)
    for ax, metric in zip(axes, panels, strict=True):
        _style_n_axis(ax, pd.concat([drawn["seq"], failed["seq"]]))
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
            ax.yaxis.set_major_formatter(_PlainLogFormatter())
            ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False))
        ax.set_title("runtime" if metric == TIME_METRIC else "peak memory")
        lines.draw_failed(ax, failed, time if metric == TIME_METRIC else memory)
    lines.legend(fig, axes)
    return fig


MODEL_PANELS = (
    ("time_per_instance_ms", "time per instance (ms)", "training step time / batch"),
    ("peak_mib_per_instance", "peak memory per instance (MiB)", "step's peak memory / batch"),
)


def _model_figure(rows: pd.DataFrame, failed: pd.DataFrame | None = None):
    """YOSO Fig. 7: a whole model's training time and peak memory per instance vs n, log-log,
    a line per backend; cases that did not run are marked at the bottom edge."""
    metrics = [m for m, _, _ in MODEL_PANELS]
    drawn = rows[rows["metric"].isin(metrics)]
    if drawn.empty:
        raise UsageError(f"no {' or '.join(metrics)} rows to plot")
    failed = rows.iloc[:0] if failed is None else failed
    failed = failed[failed["metric"].isin(metrics)]
    parts, varying = _case_parts(pd.concat([drawn, failed]).drop(columns="batch"))
    panels = [p for p in MODEL_PANELS if not drawn[drawn["metric"] == p[0]].empty]
    title = "Training cost per instance vs sequence length (largest batch that fits)"
    fig, axes = _new_figure(len(panels), title, parts)
    lines = _Lines(pd.concat([drawn, failed]), varying)
    for ax, (metric, ylabel, what) in zip(axes, panels, strict=True):
        frame = drawn[(drawn["metric"] == metric) & (drawn["value"] > 0)]
        _style_n_axis(ax, pd.concat([drawn["seq"], failed["seq"]]))
        lines.draw(ax, frame)
        if ax.lines:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(_PlainLogFormatter())
            ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False))
        ax.set_ylabel(ylabel)
        ax.set_title(what)
        lines.draw_failed(ax, failed, frame)
    lines.legend(fig, axes)
    return fig


def _error_figure(rows: pd.DataFrame, failed: pd.DataFrame | None = None):
    """Angle to YOSO-E and to exact softmax vs n, as in the YOSO paper's error plot; a case
    that did not run is marked at the bottom edge of its panel, as in the time figure."""
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
    """One panel per backend, all on one colour scale (0 to the largest weight of any map)
    with one labelled colour bar, so a colour means the same weight in every panel."""
    path = Path(path)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise UsageError(f"cannot plot to {path.name}: use one of {', '.join(PLOT_SUFFIXES)}")
    arrays = {label: amap.numpy() for label, amap in maps.items()}
    top = max((float(a.max()) for a in arrays.values()), default=1.0) or 1.0
    fig, axes = plt.subplots(
        1, len(arrays), figsize=(3.4 * len(arrays) + 1.2, 3.9), squeeze=False,
        layout="constrained",
    )  # fmt: skip
    image = None
    for i, (ax, (label, amap)) in enumerate(zip(axes[0], arrays.items(), strict=True)):
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
        _atomic_save(fig, path)
    finally:
        plt.close(fig)


def _panel_title(index: int, label: str) -> str:
    """ "(a) softmax": every map figure letters its panels the same way."""
    return f"({chr(ord('a') + index % 26)}) {label}"
