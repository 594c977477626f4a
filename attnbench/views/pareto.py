"""Quality vs cost: each backend's approximation error against its runtime at one n.

Both numbers come from result files: a `time` study's median `time_ms` and an `error`
study's mean error metric (default the output's angle to exact softmax), matched on backend,
n, batch, heads and dim. A backend is on the Pareto front when no other matched backend is
at least as fast and at least as accurate, and strictly better in one of the two.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnbench.errors import UsageError
from attnbench.results.schema import is_missing, unstable
from attnbench.views.figures import (
    UNSTABLE_LABEL,
    atomic_save,
    case_parts,
    figure_path,
    new_figure,
    normalised,
    plain_log_ticks,
    with_env,
)
from attnbench.views.labels import backend_label
from attnbench.views.metrics import GRADIENT_PREFIX, LOWER_IS_BETTER
from attnbench.views.tables import inapplicable

DEFAULT_METRIC = "radian_vs_softmax"
BELOW_ZERO = 0.05  # of the error axis's height: room under zero, so an exact point shows whole
KEYS = ["backend", "seq", "batch", "heads", "dim"]  # what a time row and an error row share


def pareto_points(
    times: pd.DataFrame, errors: pd.DataFrame, seq: int | None = None, metric: str = DEFAULT_METRIC
) -> pd.DataFrame:
    """One row per backend present, successful, in both frames at `seq` (default: the
    largest n they share): time_ms, p10, p90, error, error_std, front; sorted by time.

    A gradient's error goes with the time of a forward and backward: for a gradient metric
    only the time file's fwdbwd rows are read, and a file without them is refused."""
    if metric.partition("_vs_")[0] not in LOWER_IS_BETTER or "_vs_" not in metric:
        names = ", ".join(f"{m}_vs_<reference>" for m in LOWER_IS_BETTER)
        raise UsageError(f"--metric {metric}: use an error where lower is closer ({names})")
    time = _ok(times, "time", "time_ms")
    if metric.startswith(GRADIENT_PREFIX):
        modes = sorted(set(time["mode"].astype(str))) if "mode" in time else []
        time = time[time["mode"].astype(str) == "fwdbwd"] if "mode" in time else time.iloc[:0]
        if time.empty:
            raise UsageError(
                f"--metric {metric} is a gradient's error: it needs the time of forward + "
                f"backward, and the time file has no fwdbwd rows (modes: "
                f"{', '.join(modes) or 'none'}); time with `attnbench time --mode fwdbwd`"
            )
    error = _ok(errors, "error", metric)
    if error.empty:
        found = sorted(set(errors.get("metric", pd.Series(dtype=str)).astype(str)))
        hint = ", ".join(m for m in found if "_vs_" in m) or "none"
        raise UsageError(f"the error file has no successful {metric} rows (it has: {hint})")
    shared = sorted(set(time["seq"]) & set(error["seq"]))
    if not shared:
        raise UsageError("the time and error files share no sequence length")
    seq = int(shared[-1]) if seq is None else seq
    if seq not in shared:
        raise UsageError(f"n={seq} is not in both files (shared: {', '.join(map(str, shared))})")
    time, error = time[time["seq"] == seq], error[error["seq"] == seq]
    for frame, what in ((time, "time"), (error, "error")):
        repeated = frame[frame.duplicated(KEYS, keep=False)]["backend"].unique()
        if len(repeated):
            raise UsageError(
                f"the {what} file has several cases of {', '.join(repeated)} at n={seq} "
                "(modes, dtypes or inputs): give one case per backend"
            )
    time = time.assign(unstable=unstable(time))
    time = time[[*KEYS, "value", "p10", "p90", "inputs", "device", "mode", "dtype", "unstable"]]
    error = error[[*KEYS, "value", "std", "inputs"]]
    points = time.merge(error, on=KEYS, suffixes=("", "_error"))
    if points.empty:
        raise UsageError(
            f"no backend at n={seq} is in both files with the same batch, heads and dim"
        )
    points = points.rename(
        columns={"value": "time_ms", "value_error": "error", "std": "error_std",
                 "inputs": "time_inputs", "inputs_error": "error_inputs"}
    )  # fmt: skip
    dropped = [b for b in points["backend"] if inapplicable({"metric": metric, "backend": b})]
    points = points[~points["backend"].isin(dropped)]
    if points.empty:
        raise UsageError(
            f"{metric} does not apply to {', '.join(dropped)} (unit output rows): use "
            "--metric radian_vs_softmax"
        )
    points = points.copy()
    points["front"] = pareto_front(points["time_ms"].tolist(), points["error"].tolist())
    points = points.sort_values("time_ms").reset_index(drop=True)
    points.attrs["inapplicable"] = dropped
    return points


def pareto_front(costs: list[float], errors: list[float]) -> list[bool]:
    """Whether each (cost, error) point is not dominated by another point."""
    points = list(zip(costs, errors, strict=True))

    def dominated(c: float, e: float) -> bool:
        return any(c2 <= c and e2 <= e and (c2 < c or e2 < e) for c2, e2 in points)

    return [not dominated(c, e) for c, e in points]


def unmatched(times: pd.DataFrame, errors: pd.DataFrame, points: pd.DataFrame) -> list[str]:
    """Backends with a successful row at the points' n in only one of the two files."""
    seq = int(points["seq"].iloc[0])
    named = set()
    for frame, study, metric in ((times, "time", "time_ms"), (errors, "error", None)):
        rows = normalised(frame[frame["study"].astype(str) == study])
        rows = rows[(rows["seq"] == seq) & (rows["status"].astype(str) == "ok")]
        if metric:
            rows = rows[rows["metric"] == metric]
        named |= set(rows["backend"].astype(str))
    return sorted(named - set(points["backend"]))


def plot_pareto(
    points: pd.DataFrame, path: Path, metric: str = DEFAULT_METRIC, env: dict | None = None
) -> None:
    """Error (y) against median time (x, log) with the p10–p90 time and ± std error bars,
    each point labelled, the front in blue joined by a step line, dominated points in grey."""
    path = figure_path(path)
    import matplotlib.pyplot as plt

    described = with_env(points.rename(columns={"time_inputs": "inputs"}), env)
    parts, _ = case_parts(described)
    if "error_inputs" in points and set(points["error_inputs"]) != set(points["time_inputs"]):
        parts.append(f"error on {', '.join(sorted(set(points['error_inputs'])))} inputs")
    seq = int(points["seq"].iloc[0])
    fig, (ax,) = new_figure(1, f"Approximation error vs runtime at n = {seq}", parts)
    try:
        low = 0.1 * points["error"].max()  # no label goes below a point near the x axis
        for i, p in points.iterrows():  # by time: neighbours' labels go above and below
            color = "C0" if p["front"] else "0.55"
            below = i % 2 == 1 and p["error"] > low
            xerr = [[max(p["time_ms"] - p["p10"], 0)], [max(p["p90"] - p["time_ms"], 0)]]
            yerr = None if is_missing(p["error_std"]) else p["error_std"]
            face = "white" if p["unstable"] else color  # hollow: its time was flagged
            ax.errorbar(p["time_ms"], p["error"], xerr=None if is_missing(p["p10"]) else xerr,
                        yerr=yerr, marker="o" if p["front"] else "s", color=color,
                        markerfacecolor=face, markersize=6, capsize=2,
                        linestyle="none")  # fmt: skip
            ax.annotate(backend_label(str(p["backend"])), (p["time_ms"], p["error"]),
                        textcoords="offset points", xytext=(5, -11 if below else 4),
                        fontsize="small", color=color)  # fmt: skip
        front = points[points["front"]].sort_values("time_ms")
        ax.step(front["time_ms"], front["error"], where="post", color="C0", alpha=0.5,
                linewidth=1, label="Pareto front (no backend both faster and closer)")  # fmt: skip
        if points["unstable"].any():
            ax.plot([], [], linestyle="none", marker="o", markerfacecolor="white", color="0.35",
                    label=UNSTABLE_LABEL)  # fmt: skip
        ax.set_xscale("log")
        # room to the right for the last point's label, which went past the frame
        ax.set_xlim(points["time_ms"].min() / 1.3, points["time_ms"].max() * 2.5)
        plain_log_ticks(ax.xaxis, minor_thresholds=(2, 1))
        what = "forward + backward" if set(points["mode"]) == {"fwdbwd"} else "call"
        ax.set_xlabel(f"time per {what} (ms), median with p10–p90 bar")
        ax.set_ylabel(f"{_metric_label(metric)}, mean ± std over trials")
        ax.set_ylim(bottom=-BELOW_ZERO * ax.get_ylim()[1])  # exact (zero error): not clipped
        ax.yaxis.set_major_formatter(lambda y, _: "" if y < 0 else f"{y:g}")  # no error < 0
        ax.grid(True, which="both", alpha=0.3)
        fig.legend(loc="outside lower center", frameon=False, fontsize="small")
        atomic_save(fig, path)
    finally:
        plt.close(fig)


def _ok(frame: pd.DataFrame, study: str, metric: str) -> pd.DataFrame:
    """The successful `metric` rows of `study`, with numeric values; a value that is not a
    number, or a time that is not above 0 (the time axis is logarithmic), is refused."""
    rows = frame[frame["study"].astype(str) == study]
    rows = rows[(rows["status"].astype(str) == "ok") & (rows["metric"] == metric)]
    values = pd.to_numeric(rows["value"], errors="coerce")
    bad = rows[values.isna() & rows["value"].notna()]
    if not bad.empty:
        raise UsageError(
            f"the {study} file has {metric} values that are not numbers "
            f"({bad['value'].iloc[0]!r} for {bad['backend'].iloc[0]})"
        )
    rows = normalised(rows)
    if study == "time" and (rows["value"] <= 0).any():
        first = rows[rows["value"] <= 0].iloc[0]
        raise UsageError(
            f"the time file has a time of {first['value']:g} ms for {first['backend']}; "
            "times must be above 0"
        )
    rows = rows.dropna(subset=["value", "seq"])
    for col in ("batch", "heads", "dim"):
        rows[col] = pd.to_numeric(rows[col], errors="coerce")
    rows["seq"] = rows["seq"].astype(int)
    rows["backend"] = rows["backend"].astype(str)
    return rows


def _metric_label(metric: str) -> str:
    name, _, reference = metric.partition("_vs_")
    return f"{LOWER_IS_BETTER[name]} {reference.replace('_', '-')}"


def render_table(points: pd.DataFrame, metric: str = DEFAULT_METRIC):
    """A rich table of the points, fastest first, marking the front."""
    from rich.table import Table

    seq = int(points["seq"].iloc[0])
    table = Table(title=f"quality vs cost at n={seq}")
    for name in ("backend", "time ms", "p10–p90", metric, "± std", "front"):
        table.add_column(name, justify="left" if name == "backend" else "right")
    for _, p in points.iterrows():
        spread = "" if is_missing(p["p10"]) else f"{p['p10']:.3g}–{p['p90']:.3g}"
        std = "" if is_missing(p["error_std"]) else f"{p['error_std']:.3g}"
        table.add_row(
            backend_label(str(p["backend"])), f"{p['time_ms']:.3g}", spread,
            f"{p['error']:.4g}", std, "yes" if p["front"] else "",
        )  # fmt: skip
    return table
