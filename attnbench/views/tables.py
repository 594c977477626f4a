"""The rich tables the commands print: backends, and the rows of a time, error or model run.

A run's table reads the frame of `rows_frame(rows)` (the columns a result file has, so
`read_rows(path)` works too): one row per record, missing numbers as NaN or None. Tables only
read rows: a speed-up is the study's `speedup` column, never recomputed here.
"""

from __future__ import annotations

import math

import pandas as pd
from rich.markup import escape
from rich.table import Table

from attnbench.measure.metrics import SLOPE
from attnbench.results.schema import CONDITION_KEYS
from attnbench.views.labels import backend_label


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


def time_table(frame: pd.DataFrame, baseline: str, max_spread: float) -> Table:
    """A line per backend and length: median, mean of the kept samples (what the SCRAM seed
    reports), spread, peak memory, the speed-up the study recorded against `baseline` (a
    spec), status; an unstable case is marked in its status, and in its spread when that is
    above max_spread."""
    table = Table(title="attnbench time")
    columns = ("backend", "n", "median ms", "mean ms", "p10-p90 ms", "spread", "peak MiB")
    for column in columns:
        table.add_column(column, justify="left" if column == "backend" else "right")
    table.add_column(f"speed-up vs {backend_label(baseline)}", justify="right")
    table.add_column("status")
    records = _records(frame)
    times = {_case(r): r for r in records if r["metric"] == "time_ms"}
    peaks = {_case(r): r["value"] for r in records if r["metric"] == "peak_mib"}
    for case, r in times.items():
        ok = r["status"] == "ok"
        samples = r.get("samples")
        speedup = r.get("speedup")
        peak = peaks.get(case)
        table.add_row(
            backend_label(r["backend"]),
            _n(r["seq"]),
            f"{r['value']:.3f}" if ok else "-",
            f"{sum(samples) / len(samples):.3f}" if ok and _has(samples) else "-",
            f"{r['p10']:.3f}-{r['p90']:.3f}" if ok else "-",
            _spread(r, max_spread) if ok else "-",
            f"{peak:.1f}" if not _missing(peak) else "-",
            f"{speedup:.2f}x" if not _missing(speedup) and speedup else "-",
            "[yellow]unstable[/yellow]" if _unstable(r) else _status(r),
        )
    return table


def unstable_warning(frame: pd.DataFrame, max_spread: float) -> str | None:
    """One line naming the unstable time cases and the likely cause, or None if none was."""
    from attnbench.measure.conditions import likely_cause

    unstable = [r for r in _records(frame) if r["metric"] == "time_ms" and _unstable(r)]
    if not unstable:
        return None
    names = ", ".join(
        f"{backend_label(r['backend'])} n={_n(r['seq'])} ({_symptoms(r)})" for r in unstable
    )
    cause = likely_cause([_conditions(r) for r in unstable])
    return (
        f"warning: {len(unstable)} case(s) unstable (spread IQR/median above {max_spread:.0%}, "
        f"or threads waiting for a CPU): {names}; likely cause: {cause}. "
        "Re-run them on a quieter machine or with --min-time."
    )


def error_table(frame: pd.DataFrame) -> Table:
    """A line per backend, length and metric; then each fitted slope of the angle against
    log2 n (rad per doubling of n, std = its standard error) on a line of its own."""
    table = Table(
        title="attnbench error (mean +- std over trials; slopes: fit over all n, +- std error)"
    )
    for column in ("backend", "n", "metric", "value", "std"):
        table.add_column(column, justify="right" if column in ("n", "value", "std") else "left")
    records = _records(frame)
    slopes = [r for r in records if r["metric"].startswith(SLOPE)]
    for r in [r for r in records if not r["metric"].startswith(SLOPE)] + slopes:
        n = "all n" if r["metric"].startswith(SLOPE) else _n(r["seq"])
        label = backend_label(r["backend"])
        if r["status"] != "ok":
            table.add_row(label, n, r["metric"], _status(r), "")
            continue
        table.add_row(label, n, r["metric"], f"{r['value']:.4g}", f"{r['std']:.2g}")
    return table


def model_table(frame: pd.DataFrame) -> Table:
    """A line per backend and length of the whole-model study: the batch found, time and peak
    memory per instance (the paper's Fig. 7 values), step time and total peak, status."""
    table = Table(title="attnbench model (training step at the largest batch that fits)")
    columns = ("backend", "n", "batch", "ms / instance", "MiB / instance", "step ms", "peak MiB")
    for column in columns:
        table.add_column(column, justify="left" if column == "backend" else "right")
    table.add_column("status")
    cases: dict[tuple, dict] = {}
    for r in _records(frame):
        cases.setdefault((r["backend"], r["seq"]), {})[r["metric"]] = r
    for (backend, n), metrics in cases.items():
        main = metrics.get("time_per_instance_ms") or next(iter(metrics.values()))
        ok = main["status"] == "ok"

        def cell(metric: str, fmt: str, metrics=metrics, ok=ok) -> str:
            row = metrics.get(metric)
            return fmt.format(row["value"]) if ok and row and not _missing(row["value"]) else "-"

        table.add_row(
            backend_label(backend),
            _n(n),
            cell("batch", "{:.0f}"),
            cell("time_per_instance_ms", "{:.3f}"),
            cell("peak_mib_per_instance", "{:.2f}"),
            cell("step_ms", "{:.1f}"),
            cell("peak_mib", "{:.1f}"),
            _status(main),
        )
    return table


# ----------------------------------------------------------------------------- cells


def _records(frame: pd.DataFrame) -> list[dict]:
    """The frame's rows as dicts, in order (a later row of a case replaces an earlier one)."""
    return frame.to_dict("records")


def _case(record: dict) -> tuple:
    return record["backend"], record["seq"], record["inputs"]


def _missing(value) -> bool:
    """None or NaN: what a frame holds where a row has no value."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _has(samples) -> bool:
    return isinstance(samples, list | tuple) and len(samples) > 0


def _n(seq) -> str:
    """A length as an integer, also when the frame's column is float (a row lacked one)."""
    return "-" if _missing(seq) else str(int(seq))


def _text(value) -> str:
    return "" if _missing(value) else str(value)


def _status(record: dict) -> str:
    """Status and reason, as text: a reason such as "[enforce fail at ...]" is no markup."""
    reason = _text(record.get("reason"))
    return escape(f"{record['status']}: {reason}" if reason else str(record["status"]))


def _unstable(record: dict) -> bool:
    """An ok case the study judged unstable (stable False; None: not judged)."""
    stable = record.get("stable")
    return record["status"] == "ok" and not _missing(stable) and not bool(stable)


def _spread(record: dict, max_spread: float) -> str:
    """IQR / median of the kept samples, with a `!` when above max_spread."""
    spread = record.get("spread")
    if _missing(spread):
        return "-"
    return f"{spread:.1%}" + (" !" if spread > max_spread else "")


def _conditions(record: dict) -> dict:
    """The host's conditions around the case: each is a column of its own in the frame."""
    return {k: record[k] for k in CONDITION_KEYS if k in record and not _missing(record[k])}


def _symptoms(record: dict) -> str:
    """What made a case unstable: its spread, and its CPU wait when that was recorded."""
    spread = record.get("spread")
    found = [] if _missing(spread) else [f"spread {spread:.0%}"]
    wait = _conditions(record).get("cpu_wait")
    if wait is not None:
        found.append(f"CPU wait {wait:.0%}")
    return ", ".join(found)
