"""The figure toolkit every figure shares: output paths and atomic saves, the case a figure
describes (its title parts), new figures, and the styling of log axes.

Figures go to files only (the Agg backend, never a screen), in PNG, SVG or PDF by suffix.
matplotlib is imported when a figure is drawn, not with this module: the commands check an
output's suffix here (`PLOT_SUFFIXES`) long before, and most runs draw nothing. `plt`
(`from attnbench.views.figures import plt`) is pyplot under the Agg backend.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import pandas as pd

from attnbench.errors import UsageError
from attnbench.results.paths import PLOT_SUFFIXES

# Columns that describe a case besides backend and n. Constant ones go in the title,
# varying ones into the legend labels so distinct cases never share a line.
CASE_COLUMNS = ("device", "dtype", "mode", "inputs", "batch", "heads", "dim")
GRID_SUFFIX = r" \d+x\d+$"


def figure_path(path: Path) -> Path:
    """`path` as a Path; UsageError unless its suffix names a format a figure is saved in."""
    path = Path(path)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise UsageError(f"cannot plot to {path.name}: use one of {', '.join(PLOT_SUFFIXES)}")
    return path


def atomic_save(fig, path: Path) -> None:
    """Save through a temp file next to `path`, so a reader never sees half an image; a
    write the system refuses (a full disk) is one UsageError, the older file kept."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{path.suffix}")
    try:
        with open(tmp, "wb") as f:
            fig.savefig(f, format=path.suffix.lower()[1:], dpi=150, bbox_inches="tight")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# ----------------------------------------------------------------------------- rows


def with_env(df: pd.DataFrame, env: dict | None) -> pd.DataFrame:
    """Rows with device_name and threads filled in from `env` (the run's .env.json record)
    where they are empty: files written before those columns existed."""
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


def normalised(rows: pd.DataFrame) -> pd.DataFrame:
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


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows worth drawing: status ok and a numeric value (failed cases have none)."""
    rows = normalised(df[df["status"].astype(str) == "ok"])
    return rows.dropna(subset=["value", "seq"])


def failed_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Cases that did not run to the end (skipped, oom, error, crashed): marked, not drawn."""
    rows = normalised(df[~df["status"].astype(str).isin(["ok", "nan", ""])])
    return rows.dropna(subset=["seq"])


def case_parts(rows: pd.DataFrame) -> tuple[list[str], list[str]]:
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


# ----------------------------------------------------------------------------- figures


@cache
def pyplot():
    """matplotlib.pyplot, with the Agg backend chosen before its first import."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a screen
    import matplotlib.pyplot

    return matplotlib.pyplot


def __getattr__(name: str):
    """`plt` on first use (PEP 562), so importing this module does not load matplotlib."""
    if name == "plt":
        return pyplot()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def new_figure(npanels: int, title: str, parts: list[str]):
    """A figure of `npanels` side by side, titled with the case parts below the title."""
    fig, axes = pyplot().subplots(
        1, npanels, figsize=(6 * npanels, 4.8), layout="constrained", squeeze=False
    )
    fig.suptitle(title + ("\n" + subtitle(parts, 40 * npanels) if parts else ""))
    return fig, list(axes[0])


def subtitle(parts: list[str], width: int) -> str:
    """The case parts joined by " · ", broken into lines of about `width` characters."""
    lines = [""]
    for part in parts:
        if lines[-1] and len(lines[-1]) + 3 + len(part) > width:
            lines.append(part)
        else:
            lines[-1] += (" · " if lines[-1] else "") + part
    return "\n".join(lines)


@cache
def _plain_log_formatter() -> type:
    """The formatter class, defined on first use since it derives from matplotlib's."""
    from matplotlib.ticker import LogFormatter

    class PlainLogFormatter(LogFormatter):
        """Log ticks as plain numbers ("0.06", "10"), which read faster than 6e-02 or 10^1."""

        def __call__(self, x, pos=None):
            return f"{x:g}" if super().__call__(x, pos) else ""

    return PlainLogFormatter


def plain_log_ticks(axis, minor_thresholds: tuple[float, float] | None = None) -> None:
    """Plain-number major and minor tick labels on a log `axis` (ax.xaxis or ax.yaxis)."""
    formatter = _plain_log_formatter()
    axis.set_major_formatter(formatter())
    axis.set_minor_formatter(formatter(labelOnlyBase=False, minor_thresholds=minor_thresholds))


def style_n_axis(ax, seqs) -> None:
    """Log-2 n axis with plain numbers at the measured lengths."""
    from matplotlib.ticker import NullLocator, ScalarFormatter

    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length n")  # image studies relabel it (plots._label_grid_axes)
    seqs = sorted(set(seqs))
    if 0 < len(seqs) <= 12:
        ax.set_xticks(seqs)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_locator(NullLocator())
    ax.grid(True, which="major", alpha=0.3)


UNSTABLE_LABEL = "hollow: flagged unstable by its run (spread or CPU wait)"
