"""The rich tables the commands print: backends, and the rows of a time, error or model run.

A run's table reads the frame of `rows_frame(rows)` (the columns a result file has, so
`read_rows(path)` works too): one row per record, missing numbers as NaN or None. Tables only
read rows: a speed-up is the study's `speedup` column, never recomputed here. Each cell's
text is `cells`' (the same value reads the same here and in the docs' Markdown tables).
"""

from __future__ import annotations

import functools

import pandas as pd
from rich import box
from rich.markup import escape
from rich.table import Table

from attnbench.errors import UsageError
from attnbench.measure.metrics import SLOPE
from attnbench.results.schema import CONDITION_KEYS, is_missing
from attnbench.views import cells
from attnbench.views.cells import MISSING
from attnbench.views.labels import backend_label


def time_table(
    frame: pd.DataFrame, baseline: str, max_spread: float, ceilings_note: str | None = None
) -> Table:
    """A line per backend and length: median, mean of the kept samples (what the SCRAM seed
    reports), spread, peak memory, the speed-up the study recorded against `baseline` (a
    spec; with its 95 % interval when rounds paired it), status; an unstable case is marked
    in its status, and in its spread when that is above max_spread. The caption carries
    `ceilings_note` (provisional ceilings) before the rows above their bound."""
    table = Table(title="attnbench time", box=box.SIMPLE_HEAD)
    records = _records(frame)
    size = cells.size_header(frame)
    columns = ("backend", size, "median", "mean", "p10 – p90", "spread", "peak\nMiB")
    for column in columns:
        left = column == "backend"
        table.add_column(column, justify="left" if left else "right", no_wrap=column != columns[4])
    paired = any(not is_missing(r.get("speedup_low")) for r in records)
    interval = " (95% CI)" if paired else ""
    label = f"speed-up{interval}\nvs {backend_label(baseline)}"
    # where the console is narrow, these wrap at their spaces rather than lose characters
    table.add_column(label, justify="right")
    table.add_column("GFLOP/s\nalg. / dense-eq.", justify="right")
    table.add_column("% of\nbound", justify="right")
    table.add_column("status", min_width=len(cells.UNSTABLE))
    times = {_case(r): r for r in records if r["metric"] == "time_ms"}
    peaks = {_case(r): r["value"] for r in records if r["metric"] == "peak_mib"}
    captions = [
        _speedup_gaps(list(times.values()), baseline),
        escape(ceilings_note or ""),
        over_bound_note(records),
    ]
    table.caption = "\n".join(c for c in captions if c) or None
    for case, r in times.items():
        ok = r["status"] == "ok"
        samples = r.get("samples")
        peak = peaks.get(case)
        table.add_row(
            backend_label(r["backend"]),
            cells.size(r),
            cells.ms(r["value"]) if ok else MISSING,
            cells.ms(sum(samples) / len(samples)) if ok and _has(samples) else MISSING,
            cells.interval(r["p10"], r["p90"]) if ok else MISSING,
            _spread(r, max_spread) if ok else MISSING,
            cells.mib(peak),
            cells.speedup(r.get("speedup"), r.get("speedup_low"), r.get("speedup_high")),
            _rates(r) if ok else MISSING,
            escape(cells.bound(r)) if ok else MISSING,
            _status(r),
        )
    return table


def _speedup_gaps(times: list[dict], baseline: str) -> str | None:
    """Why a measured case has no speed-up: the baseline was not in the run, or did not
    run at that size; None when every measured case has one."""
    gaps = [r for r in times if r["status"] == "ok" and is_missing(r.get("speedup"))]
    if not gaps:
        return None
    label = backend_label(baseline)
    if not any(r["backend"] == baseline for r in times):
        return f"speed-up: none, {label} (--baseline) was not among the backends of this run"
    why = "has no time at that size (it failed or was skipped)"
    return f"speed-up '{MISSING}': {label} (--baseline) {why}"


def stage_table(frame: pd.DataFrame, ceilings_note: str | None = None) -> Table:
    """A block per backend and length of a profile run: the whole call (as `time` measures it,
    then unmarked calls interleaved with the profiled ones), then each stage with its median
    time, share of the profiled calls, throughput by the algorithmic count (GFLOP/s, GB/s,
    FLOP/byte) and the % of the roofline bound it reaches, marked `!` above 100 % with the
    row's likely cause in the caption, after `ceilings_note` (provisional ceilings); the
    whole call also by the dense-equivalent count. A case that did not run shows its
    status instead."""
    table = Table(
        title="attnbench profile (rates by the algorithmic count unless marked)",
        box=box.SIMPLE_HEAD,
    )
    captions = [escape(ceilings_note or ""), over_bound_note(_records(frame))]
    table.caption = "\n".join(c for c in captions if c) or None
    columns = ("backend", cells.size_header(frame), "stage", "median", "share", "GFLOP/s")
    for column in (*columns, "GB/s", "FLOP/B", "% of bound", "GFLOP/s\ndense-eq."):
        left = column in ("backend", "stage", "% of bound")
        table.add_column(column, justify="left" if left else "right", no_wrap=True)
    for r in _records(frame):
        if r["metric"] == "unmarked_ms":
            table.add_row("", "", "whole call, interleaved", cells.ms(r["value"]))
            continue
        if r["metric"] not in ("time_ms", "stage_ms"):
            continue
        whole = r["metric"] == "time_ms"
        if whole and table.row_count:
            table.add_section()
        if r["status"] != "ok":
            table.add_row(backend_label(r["backend"]), cells.size(r), _status(r))
            continue
        table.add_row(
            backend_label(r["backend"]) if whole else "",
            cells.size(r) if whole else "",
            ("whole call" + (f" [yellow]{cells.UNSTABLE}[/yellow]" if cells.unstable(r) else ""))
            if whole
            else escape(str(r["stage"])),
            cells.ms(r["value"]),
            "" if whole else cells.percent(r.get("share")),
            cells.number(r.get("gflops_alg")),
            cells.number(r.get("gbs_alg")),
            cells.number(r.get("intensity_alg")),
            escape(cells.bound(r)),
            cells.number(r.get("gflops_dense")),
        )
    return table


def unstable_warning(
    frame: pd.DataFrame, max_spread: float, metric: str = "time_ms", remedy: str = "--min-time"
) -> str | None:
    """One line naming the cases whose `metric` row is unstable and the likely cause, and
    what takes more samples (`remedy`), or None if none was."""
    from attnbench.measure.conditions import likely_cause

    unstable = [r for r in _records(frame) if r["metric"] == metric and cells.unstable(r)]
    if not unstable:
        return None
    names = ", ".join(f"{_case_name(r)} ({_symptoms(r)})" for r in unstable)
    cause = likely_cause([_conditions(r) for r in unstable])
    return (
        f"warning: {len(unstable)} case(s) unstable (spread IQR/median above {max_spread:.0%}, "
        f"or threads waiting for a CPU): {names}; likely cause: {cause}. "
        f"Re-run them on a quieter machine or with {remedy}."
    )


def error_table(frame: pd.DataFrame) -> Table:
    """A line per backend, length and metric; then each fitted slope of the angle against
    log2 n (rad per doubling of n, std = its standard error) on a line of its own. Errors of
    magnitude are left out for backends whose outputs are unit rows (`inapplicable`), and
    the caption says so."""
    table = Table(
        title="attnbench error (mean ± std over trials; slopes: fit over all n, ± std error)"
    )
    for column in ("backend", cells.size_header(frame), "metric", "mean ± std"):
        table.add_column(column, justify="left" if column in ("backend", "metric") else "right")
    records = _records(frame)
    left_out = sorted({backend_label(r["backend"]) for r in records if inapplicable(r)})
    if left_out:
        table.caption = (
            f"not shown for {', '.join(left_out)}: {', '.join(MAGNITUDE_ERRORS)} against a "
            "reference without unit output rows — theirs are unit rows, so only the angle "
            "compares"
        )
    records = [r for r in records if not inapplicable(r)]
    slopes = [r for r in records if r["metric"].startswith(SLOPE)]
    for r in [r for r in records if not r["metric"].startswith(SLOPE)] + slopes:
        n = "all n" if r["metric"].startswith(SLOPE) else cells.size(r)
        label = backend_label(r["backend"])
        if r["status"] != "ok":
            table.add_row(label, n, r["metric"], _status(r))
            continue
        table.add_row(label, n, r["metric"], cells.mean_std(r["value"], r.get("std")))
    return table


# Errors that compare output magnitudes: meaningless for a backend with unit output rows.
MAGNITUDE_ERRORS = ("rel_frobenius", "max_abs", "mc_bias", "mc_std")


def inapplicable(record: dict) -> bool:
    """An error of magnitude between a backend with unit output rows and a reference without
    (Backend.unit_rows), or the other way round: YOSO against softmax, not against YOSO-E."""
    name, _, reference = str(record["metric"]).partition("_vs_")
    if name not in MAGNITUDE_ERRORS:
        return False
    ours, theirs = _unit_rows(str(record["backend"])), _unit_rows(reference.replace("_", "-"))
    return ours is not None and theirs is not None and ours != theirs


@functools.cache
def _unit_rows(spec: str) -> bool | None:
    """Backend.unit_rows of `spec`; None for a backend this install does not have."""
    from attnbench.backends import get_backend  # torch: only for error tables

    try:
        return get_backend(spec).unit_rows
    except UsageError:
        return None


def model_table(frame: pd.DataFrame) -> Table:
    """A line per backend and length of the whole-model study: the batch found, time and peak
    memory per instance (the paper's Fig. 7 values), step time and total peak, status (an
    unstable time is marked there, as in the time table)."""
    table = Table(title="attnbench model (training step at the largest batch that fits)")
    columns = ("backend", cells.size_header(frame), "batch", "time / instance")
    columns += ("peak MiB / instance", "step", "peak MiB")
    for column in columns:
        table.add_column(column, justify="left" if column == "backend" else "right")
    table.add_column("status")
    cases: dict[tuple, dict] = {}
    for r in _records(frame):
        cases.setdefault((r["backend"], r["seq"]), {})[r["metric"]] = r
    for (backend, _), metrics in cases.items():
        main = metrics.get("time_per_instance_ms") or next(iter(metrics.values()))
        ok = main["status"] == "ok"

        def cell(metric: str, text, metrics=metrics, ok=ok) -> str:
            row = metrics.get(metric)
            return text(row["value"]) if ok and row else MISSING

        table.add_row(
            backend_label(backend),
            cells.size(main),
            cell("batch", cells.count),
            cell("time_per_instance_ms", cells.ms),
            cell("peak_mib_per_instance", cells.mib),
            cell("step_ms", cells.ms),
            cell("peak_mib", cells.mib),
            _status(main),
        )
    return table


# ------------------------------------------------------------- rows, markup, captions


def _records(frame: pd.DataFrame) -> list[dict]:
    """The frame's rows as dicts, in order (a later row of a case replaces an earlier one)."""
    return frame.to_dict("records")


def _case(record: dict) -> tuple:
    return record["backend"], record["seq"], record["inputs"]


def _has(samples) -> bool:
    return isinstance(samples, list | tuple) and len(samples) > 0


def _case_name(record: dict) -> str:
    """A case in a line of text: "yoso-8 n=1024"."""
    return f"{backend_label(record['backend'])} n={cells.count(record['seq'])}"


def _text(value) -> str:
    return "" if is_missing(value) else str(value)


def _status(record: dict) -> str:
    """The status cell (rich markup): unstable in yellow, else status and reason as text (a
    reason such as "[enforce fail at ...]" is no markup)."""
    if cells.unstable(record):
        return f"[yellow]{cells.UNSTABLE}[/yellow]"
    return escape(cells.status(record))


def _spread(record: dict, max_spread: float) -> str:
    """IQR / median of the kept samples, with a `!` when above max_spread."""
    spread = record.get("spread")
    above = not is_missing(spread) and spread > max_spread
    return cells.percent(spread) + (f" {cells.OVER}" if above else "")


def _rates(record: dict) -> str:
    """Achieved GFLOP/s by the algorithmic and by the dense-equivalent count."""
    alg, dense = record.get("gflops_alg"), record.get("gflops_dense")
    return f"{cells.number(alg)} / {cells.number(dense)}"


def over_bound_note(records: list[dict]) -> str | None:
    """ "! above its bound" and each such row's likely cause, a line per row (rich markup,
    escaped); None if none."""
    over = [r for r in records if r["status"] == "ok" and cells.over_bound(r)]
    if not over:
        return None
    lines = [
        _case_name(r) + (f" {r['stage']}" if _text(r.get("stage")) else "") + f": {r['over_bound']}"
        for r in over
    ]
    return escape("! above 100 % of its roofline bound, likely causes:\n" + "\n".join(lines))


def _conditions(record: dict) -> dict:
    """The host's conditions around the case: each is a column of its own in the frame."""
    return {k: record[k] for k in CONDITION_KEYS if k in record and not is_missing(record[k])}


def _symptoms(record: dict) -> str:
    """What made a case unstable: its spread, and its CPU wait when that was recorded."""
    spread = record.get("spread")
    found = [] if is_missing(spread) else [f"spread {cells.percent(spread)}"]
    wait = _conditions(record).get("cpu_wait")
    if wait is not None:
        found.append(f"CPU wait {cells.percent(wait)}")
    return ", ".join(found)
