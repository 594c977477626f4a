"""The rich tables the commands print: backends, and the rows of a time, error or model run.

A run's table reads the frame of `rows_frame(rows)` (the columns a result file has, so
`read_rows(path)` works too): one row per record, missing numbers as NaN or None. Tables only
read rows: a speed-up is the study's `speedup` column, never recomputed here.
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
    images = bool(records) and all(not is_missing(r.get("grid_h")) for r in records)
    size = "H×W" if images else "n"
    columns = ("backend", size, "median\nms", "mean\nms", "p10-p90\nms", "spread", "peak\nMiB")
    for column in columns:
        left = column == "backend"
        table.add_column(column, justify="left" if left else "right", no_wrap=True)
    paired = any(not is_missing(r.get("speedup_low")) for r in records)
    interval = " (95% CI)" if paired else ""
    label = f"speed-up{interval}\nvs {backend_label(baseline)}"
    table.add_column(label, justify="right", no_wrap=True)
    table.add_column("GFLOP/s\nalg. / dense-eq.", justify="right", no_wrap=True)
    table.add_column("% of\nbound", justify="right", no_wrap=True)
    table.add_column("status")
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
            f"{int(r['grid_h'])}x{int(r['grid_w'])}" if images else _n(r["seq"]),
            _ms(r["value"]) if ok else "-",
            _ms(sum(samples) / len(samples)) if ok and _has(samples) else "-",
            f"{_ms(r['p10'])}-{_ms(r['p90'])}" if ok else "-",
            _spread(r, max_spread) if ok else "-",
            f"{peak:.1f}" if not is_missing(peak) else "-",
            _speedup(r),
            _rates(r) if ok else "-",
            _bound(r) if ok else "-",
            "[yellow]unstable[/yellow]" if _unstable(r) else _status(r),
        )
    return table


def _speedup(record: dict) -> str:
    """The speed-up, with its interval when rounds paired it with the baseline's."""
    speedup, low, high = (record.get(k) for k in ("speedup", "speedup_low", "speedup_high"))
    if is_missing(speedup) or not speedup:
        return "-"
    if is_missing(low) or is_missing(high):
        return f"{speedup:.2f}x"
    return f"{speedup:.2f}x ({low:.2f}-{high:.2f})"


def _speedup_gaps(times: list[dict], baseline: str) -> str | None:
    """Why a measured case has no speed-up: the baseline was not in the run, or did not
    run at that size; None when every measured case has one."""
    gaps = [r for r in times if r["status"] == "ok" and is_missing(r.get("speedup"))]
    if not gaps:
        return None
    label = backend_label(baseline)
    if not any(r["backend"] == baseline for r in times):
        return f"speed-up: none, {label} (--baseline) was not among the backends of this run"
    return f"speed-up '-': {label} (--baseline) has no time at that size (it failed or was skipped)"


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
    columns = ("backend", "n", "stage", "ms", "share", "GFLOP/s", "GB/s", "FLOP/B", "bound")
    for column in (*columns, "% of\nbound", "GFLOP/s\ndense-eq."):
        left = column in ("backend", "stage", "bound")
        table.add_column(column, justify="left" if left else "right", no_wrap=True)
    for r in _records(frame):
        if r["metric"] == "unmarked_ms":
            table.add_row("", "", "whole call, interleaved", _ms(r["value"]))
            continue
        if r["metric"] not in ("time_ms", "stage_ms"):
            continue
        whole = r["metric"] == "time_ms"
        if whole and table.row_count:
            table.add_section()
        if r["status"] != "ok":
            table.add_row(backend_label(r["backend"]), _n(r["seq"]), _status(r))
            continue
        table.add_row(
            backend_label(r["backend"]) if whole else "",
            _n(r["seq"]) if whole else "",
            ("whole call" + (" [yellow]unstable[/yellow]" if _unstable(r) else ""))
            if whole
            else escape(str(r["stage"])),
            _ms(r["value"]),
            "" if whole or is_missing(r.get("share")) else f"{r['share']:.0%}",
            _number(r.get("gflops_alg"), "{:.1f}"),
            _number(r.get("gbs_alg"), "{:.1f}"),
            _number(r.get("intensity_alg"), "{:.2f}"),
            _text(r.get("bound")),
            _number(r.get("bound_pct"), "{:.0f}%") + (" !" if _over(r) else ""),
            _number(r.get("gflops_dense"), "{:.1f}"),
        )
    return table


def unstable_warning(
    frame: pd.DataFrame, max_spread: float, metric: str = "time_ms", remedy: str = "--min-time"
) -> str | None:
    """One line naming the cases whose `metric` row is unstable and the likely cause, and
    what takes more samples (`remedy`), or None if none was."""
    from attnbench.measure.conditions import likely_cause

    unstable = [r for r in _records(frame) if r["metric"] == metric and _unstable(r)]
    if not unstable:
        return None
    names = ", ".join(
        f"{backend_label(r['backend'])} n={_n(r['seq'])} ({_symptoms(r)})" for r in unstable
    )
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
        title="attnbench error (mean +- std over trials; slopes: fit over all n, +- std error)"
    )
    for column in ("backend", "n", "metric", "value", "std"):
        table.add_column(column, justify="right" if column in ("n", "value", "std") else "left")
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
        n = "all n" if r["metric"].startswith(SLOPE) else _n(r["seq"])
        label = backend_label(r["backend"])
        if r["status"] != "ok":
            table.add_row(label, n, r["metric"], _status(r), "")
            continue
        table.add_row(label, n, r["metric"], f"{r['value']:.4g}", f"{r['std']:.2g}")
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
            return fmt.format(row["value"]) if ok and row and not is_missing(row["value"]) else "-"

        table.add_row(
            backend_label(backend),
            _n(n),
            cell("batch", "{:.0f}"),
            cell("time_per_instance_ms", "{:.3f}"),
            cell("peak_mib_per_instance", "{:.2f}"),
            cell("step_ms", "{:.1f}"),
            cell("peak_mib", "{:.1f}"),
            "[yellow]unstable[/yellow]" if _unstable(main) else _status(main),
        )
    return table


# ----------------------------------------------------------------------------- cells


def _records(frame: pd.DataFrame) -> list[dict]:
    """The frame's rows as dicts, in order (a later row of a case replaces an earlier one)."""
    return frame.to_dict("records")


def _case(record: dict) -> tuple:
    return record["backend"], record["seq"], record["inputs"]


def _has(samples) -> bool:
    return isinstance(samples, list | tuple) and len(samples) > 0


def _n(seq) -> str:
    """A length as an integer, also when the frame's column is float (a row lacked one)."""
    return "-" if is_missing(seq) else str(int(seq))


def _text(value) -> str:
    return "" if is_missing(value) else str(value)


def _status(record: dict) -> str:
    """Status and reason, as text: a reason such as "[enforce fail at ...]" is no markup."""
    reason = _text(record.get("reason"))
    return escape(f"{record['status']}: {reason}" if reason else str(record["status"]))


def _unstable(record: dict) -> bool:
    """An ok case the study judged unstable (stable False; None: not judged)."""
    stable = record.get("stable")
    return record["status"] == "ok" and not is_missing(stable) and not bool(stable)


def _spread(record: dict, max_spread: float) -> str:
    """IQR / median of the kept samples, with a `!` when above max_spread."""
    spread = record.get("spread")
    if is_missing(spread):
        return "-"
    return f"{spread:.1%}" + (" !" if spread > max_spread else "")


def _ms(value: float) -> str:
    """Milliseconds to about four significant digits."""
    return f"{value:.1f}" if value >= 100 else f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def _number(value, fmt: str) -> str:
    return "-" if is_missing(value) else fmt.format(value)


def _rates(record: dict) -> str:
    """Achieved GFLOP/s by the algorithmic and by the dense-equivalent count."""
    alg, dense = record.get("gflops_alg"), record.get("gflops_dense")
    return f"{_number(alg, '{:.1f}')} / {_number(dense, '{:.1f}')}"


def _bound(record: dict) -> str:
    """% of the roofline bound reached, and which bound: "13% compute", "75% L2"; "!"
    where the row is above its bound."""
    pct, bound = record.get("bound_pct"), _text(record.get("bound"))
    return "-" if is_missing(pct) else f"{pct:.0f}% {bound}" + (" !" if _over(record) else "")


def _over(record: dict) -> bool:
    """The row reads above 100 % of its bound (its `over_bound` names the likely cause)."""
    return bool(_text(record.get("over_bound")))


def over_bound_note(records: list[dict]) -> str | None:
    """ "! above its bound" and each such row's likely cause, a line per row (rich markup,
    escaped); None if none."""
    over = [r for r in records if r["status"] == "ok" and _over(r)]
    if not over:
        return None
    lines = [
        f"{backend_label(r['backend'])} n={_n(r['seq'])}"
        + (f" {r['stage']}" if _text(r.get("stage")) else "")
        + f": {r['over_bound']}"
        for r in over
    ]
    return escape("! above 100 % of its roofline bound, likely causes:\n" + "\n".join(lines))


def _conditions(record: dict) -> dict:
    """The host's conditions around the case: each is a column of its own in the frame."""
    return {k: record[k] for k in CONDITION_KEYS if k in record and not is_missing(record[k])}


def _symptoms(record: dict) -> str:
    """What made a case unstable: its spread, and its CPU wait when that was recorded."""
    spread = record.get("spread")
    found = [] if is_missing(spread) else [f"spread {spread:.0%}"]
    wait = _conditions(record).get("cpu_wait")
    if wait is not None:
        found.append(f"CPU wait {wait:.0%}")
    return ", ".join(found)
