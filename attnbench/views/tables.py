"""The rich tables the commands print: backends, and the rows of a time or error run."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from attnbench.measure.metrics import SLOPE


def _label(spec: str) -> str:
    """The backend's short display name ("yoso-32"), or the spec if it no longer parses."""
    from attnbench.backends import get_backend
    from attnbench.errors import UsageError

    try:
        return get_backend(spec).label
    except UsageError:
        return spec


def _status(row) -> str:
    """Status and reason, as text: a reason such as "[enforce fail at ...]" is no markup."""
    return escape(f"{row.status}: {row.reason}" if row.reason else row.status)


def backends_table(classes: dict) -> Table:
    table = Table(title="attnbench backends")
    for column in ("name", "parameters (defaults)", "complexity", "devices", "backward", "about"):
        table.add_column(column)
    for name, cls in classes.items():
        params = ", ".join(f"{k}={p.default}" for k, p in cls.params.items()) or "-"
        if cls.shorthand:
            params += f"  ({name}-N sets {cls.shorthand})"
        table.add_row(
            name,
            params,
            cls.complexity,
            ", ".join(cls.devices),
            "yes" if cls.backward else "no",
            cls.summary,
        )
    return table


def time_table(rows: list, baseline, max_spread: float) -> Table:
    """A line per backend and length: median, mean of the kept samples (what the SCRAM seed
    reports), spread, peak memory, speed-up, status; an unstable case is marked in its
    status, and in its spread when that is above max_spread."""
    table = Table(title="attnbench time")
    columns = ("backend", "n", "median ms", "mean ms", "p10-p90 ms", "spread", "peak MiB")
    for column in columns:
        table.add_column(column, justify="left" if column == "backend" else "right")
    table.add_column(f"speed-up vs {baseline.label}", justify="right")
    table.add_column("status")
    times = {(r.backend, r.seq, r.inputs): r for r in rows if r.metric == "time_ms"}
    peaks = {(r.backend, r.seq, r.inputs): r.value for r in rows if r.metric == "peak_mib"}
    base = {
        (n, inputs): r.value
        for (b, n, inputs), r in times.items()
        if r.status == "ok" and b == baseline.spec
    }
    for (backend, n, inputs), r in times.items():
        ok = r.status == "ok"
        speedup = getattr(r, "speedup", None)
        if speedup is None and ok and (n, inputs) in base:
            speedup = base[(n, inputs)] / r.value
        peak = peaks.get((backend, n, inputs))
        unstable = ok and r.stable is False
        table.add_row(
            _label(backend),
            str(n),
            f"{r.value:.3f}" if ok else "-",
            f"{sum(r.samples) / len(r.samples):.3f}" if ok and r.samples else "-",
            f"{r.p10:.3f}-{r.p90:.3f}" if ok else "-",
            _spread(r, max_spread) if ok else "-",
            f"{peak:.1f}" if peak is not None else "-",
            f"{speedup:.2f}x" if speedup else "-",
            "[yellow]unstable[/yellow]" if unstable else _status(r),
        )
    return table


def _spread(row, max_spread: float) -> str:
    """IQR / median of the kept samples, with a `!` when above max_spread."""
    if row.spread is None:
        return "-"
    return f"{row.spread:.1%}" + (" !" if row.spread > max_spread else "")


def unstable_warning(rows: list, max_spread: float) -> str | None:
    """One line naming the unstable time cases and the likely cause, or None if none was."""
    from attnbench.measure.conditions import likely_cause

    unstable = [r for r in rows if r.metric == "time_ms" and r.status == "ok" and r.stable is False]
    if not unstable:
        return None
    names = ", ".join(f"{_label(r.backend)} n={r.seq} ({_symptoms(r)})" for r in unstable)
    cause = likely_cause([r.conditions for r in unstable])
    return (
        f"warning: {len(unstable)} case(s) unstable (spread IQR/median above {max_spread:.0%}, "
        f"or threads waiting for a CPU): {names}; likely cause: {cause}. "
        "Re-run them on a quieter machine or with --min-time."
    )


def _symptoms(row) -> str:
    """What made a case unstable: its spread, and its CPU wait when that was recorded."""
    found = [f"spread {row.spread:.0%}"] if row.spread is not None else []
    wait = (row.conditions or {}).get("cpu_wait")
    if wait is not None:
        found.append(f"CPU wait {wait:.0%}")
    return ", ".join(found)


def error_table(rows: list) -> Table:
    """A line per backend, length and metric; then each fitted slope of the angle against
    log2 n (rad per doubling of n, std = its standard error) on a line of its own."""
    table = Table(
        title="attnbench error (mean +- std over trials; slopes: fit over all n, +- std error)"
    )
    for column in ("backend", "n", "metric", "value", "std"):
        table.add_column(column, justify="right" if column in ("n", "value", "std") else "left")
    slopes = [r for r in rows if r.metric.startswith(SLOPE)]
    for r in [r for r in rows if not r.metric.startswith(SLOPE)] + slopes:
        n = "all n" if r.metric.startswith(SLOPE) else str(r.seq)
        if r.status != "ok":
            table.add_row(_label(r.backend), n, r.metric, _status(r), "")
            continue
        table.add_row(_label(r.backend), n, r.metric, f"{r.value:.4g}", f"{r.std:.2g}")
    return table


def model_table(rows: list) -> Table:
    """A line per backend and length of the whole-model study: the batch found, time and peak
    memory per instance (the paper's Fig. 7 values), step time and total peak, status."""
    table = Table(title="attnbench model (training step at the largest batch that fits)")
    columns = ("backend", "n", "batch", "ms / instance", "MiB / instance", "step ms", "peak MiB")
    for column in columns:
        table.add_column(column, justify="left" if column == "backend" else "right")
    table.add_column("status")
    cases: dict[tuple, dict] = {}
    for r in rows:
        cases.setdefault((r.backend, r.seq), {})[r.metric] = r
    for (backend, n), metrics in cases.items():
        main = metrics.get("time_per_instance_ms") or next(iter(metrics.values()))
        ok = main.status == "ok"

        def cell(metric: str, fmt: str, metrics=metrics, ok=ok) -> str:
            row = metrics.get(metric)
            return (
                fmt.format(row.value) if ok and row is not None and row.value is not None else "-"
            )

        table.add_row(
            _label(backend),
            str(n),
            cell("batch", "{:.0f}"),
            cell("time_per_instance_ms", "{:.3f}"),
            cell("peak_mib_per_instance", "{:.2f}"),
            cell("step_ms", "{:.1f}"),
            cell("peak_mib", "{:.1f}"),
            _status(main),
        )
    return table
