"""`compare` as a Python call: the arguments of `attnbench compare`, checked as the command
checks them, the comparison made by `views.compare` and judged by `views.gate`, its table
returned as a DataFrame.

The threshold is parsed before numpy and pandas load, so a mistyped `fail_above` is reported
at once; every mistake is a `UsageError` with the command's text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.api.parse import parse_fraction
from attnbench.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

    from attnbench.views.compare import Comparison
    from attnbench.views.gate import Gate

# key columns that hold counts; the comparison keeps every key value as text
_COUNTS = ("batch", "heads", "seq", "dim", "grid_h", "grid_w")


@dataclass
class Compared:
    """A finished comparison: the cases paired and their intervals, the gate's verdict
    (None: no `fail_above`), and the table of the compared cases as a DataFrame."""

    comparison: Comparison
    gate: Gate | None
    frame: pd.DataFrame

    @property
    def exit_code(self) -> int:
        """The command's exit code: 0 pass (or no gate), 1 fail, 3 inconclusive."""
        return 0 if self.gate is None else self.gate.exit_code


def compare(
    a: str | Path,
    b: str | Path,
    fail_above: str | float | None = None,
    allow_unjudged: bool = False,
) -> pd.DataFrame:
    """Two runs case by case, as `attnbench compare A B`: one row per case in both, with its
    identity, the centres of A and B (median time, or mean error), the ratio B/A with its
    95% interval (`low`, `high`; NaN without one) and its verdict. With `fail_above` (5%,
    0.05) the column `gate` says how the gate took each case (pass, fail, or the cause it
    could not judge it) and `frame.attrs["outcome"]` its verdict on the whole."""
    return run_compare(a, b, fail_above, allow_unjudged).frame


def run_compare(
    a: str | Path,
    b: str | Path,
    fail_above: str | float | None = None,
    allow_unjudged: bool = False,
) -> Compared:
    """`compare`, returning the whole `Compared` (the command prints its table from it)."""
    threshold = None  # a share, as parse_fraction reads it
    if fail_above is not None:
        threshold = parse_fraction(fail_above, "--fail-above", "a slowdown")
    elif allow_unjudged:
        raise UsageError("--allow-unjudged: only with --fail-above (it relaxes the gate)")
    from attnbench.views import compare as views_compare
    from attnbench.views import gate as views_gate

    comparison = views_compare.compare_files(a, b)
    verdict = None if threshold is None else views_gate.judge(comparison, threshold, allow_unjudged)
    return Compared(comparison, verdict, comparison_frame(comparison, verdict))


def comparison_frame(comparison: Comparison, gate: Gate | None = None) -> pd.DataFrame:
    """The compared cases in the order of the command's table: key columns (counts as
    integers), `metric`, `a`, `b`, `ratio`, `low`, `high`, `verdict`, `unstable` (the sides
    whose run flagged the case), `units` (runs: the interval resamples runs or rounds;
    samples: one run of one round a side) and `gate`."""
    import pandas as pd

    from attnbench.views.compare import CASE_KEY, GRID_KEY

    causes = _gate_causes(gate)
    rows = []
    for change in comparison.changes:
        row = {**change.key}
        row.update(
            a=change.a_center,
            b=change.b_center,
            ratio=change.ratio,
            low=change.low,
            high=change.high,
            verdict=change.verdict,
            unstable=change.unstable,
            units="runs" if change.by_runs else "samples",
            gate=causes.get(id(change.key), "pass") if gate is not None else None,
        )
        rows.append(row)
    keys = [c for c in CASE_KEY + GRID_KEY + ("metric",) if any(c in r for r in rows)]
    values = ["a", "b", "ratio", "low", "high", "verdict", "unstable", "units", "gate"]
    frame = pd.DataFrame(rows, columns=keys + values)
    for column in _COUNTS:
        if column in frame:
            numbers = pd.to_numeric(frame[column].replace("", None), errors="coerce")
            frame[column] = numbers.astype("Int64")
    for column in ("a", "b", "ratio", "low", "high"):
        frame[column] = frame[column].astype(float)
    frame.attrs["study"] = comparison.study
    frame.attrs["outcome"] = None if gate is None else gate.outcome
    return frame


def _gate_causes(gate: Gate | None) -> dict[int, str]:
    """id(case key) -> how the gate took the case when not a pass: "fail", or the cause it
    was not judged (the gate holds the comparison's own key dicts)."""
    if gate is None:
        return {}
    causes = {id(change.key): "fail" for change in gate.failed}
    return causes | {id(key): cause for cause, keys in gate.unjudged.items() for key in keys}
