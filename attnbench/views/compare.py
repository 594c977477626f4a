"""Compare two result files case by case: ratio of medians B/A with a bootstrap interval.

A change is significant when the 95 % interval of the ratio excludes 1.0. The interval comes
from resampling each file's kept samples independently (a percentile bootstrap), seeded per
case so the same files always give the same verdicts, whatever their row order.
The regression gate fails a case that is significantly slower AND whose ratio exceeds
1 + threshold: a significant but small slowdown, or a large but noisy one, passes.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from rich.table import Table

from attnbench.errors import UsageError
from attnbench.results.read import read_rows
from attnbench.views.labels import backend_label

METRICS = ("time_ms",)  # first_call_ms has one sample and peak_mib is not a time
CASE_KEY = ("backend", "device", "dtype", "mode", "inputs", "batch", "heads", "seq", "dim")
GRID_KEY = ("grid_h", "grid_w")  # schema 2 only
RESAMPLES = 2000
LEVEL = 0.95
SEED = 0


@dataclass
class Change:
    """One case found in both files, with the samples behind each median."""

    key: dict  # case key columns and metric, as text
    a: list[float]
    b: list[float]
    a_median: float
    b_median: float
    low: float | None = None  # interval bounds of b_median / a_median; None: too few samples
    high: float | None = None

    @property
    def ratio(self) -> float:
        return self.b_median / self.a_median if self.a_median > 0 else math.nan

    @property
    def verdict(self) -> str:
        if self.low is None:
            return "no CI"
        if self.low > 1.0:
            return "slower"
        if self.high < 1.0:
            return "faster"
        return "same"

    def fails(self, threshold: float) -> bool:
        """Significantly slower, and by more than `threshold` (0.05 = 5 %)."""
        return self.verdict == "slower" and self.ratio > 1.0 + threshold


@dataclass
class Missing:
    """A case not compared: absent from one file, or not ok there (status "" when absent)."""

    key: dict
    a_status: str
    b_status: str


@dataclass
class Comparison:
    changes: list[Change]
    missing: list[Missing] = field(default_factory=list)

    def failures(self, threshold: float | None) -> list[Change]:
        if threshold is None:
            return []
        return [c for c in self.changes if c.fails(threshold)]

    def varying(self) -> list[str]:
        """Key columns worth a place in the case text: n, and those that differ between cases."""
        keys = [c.key for c in self.changes] + [m.key for m in self.missing]
        columns = [c for c in CASE_KEY + GRID_KEY + ("metric",) if c != "backend"]
        return [c for c in columns if c == "seq" or len({k.get(c) for k in keys}) > 1]


def parse_samples(value) -> list[float]:
    """Samples as schema 2 writes them (a list, or a JSON list in CSV) or schema 1 ("1.2 1.3")."""
    if value is None:
        return []
    if isinstance(value, int | float):  # a CSV reader turns a lone sample into a number
        value = [value]
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        value = json.loads(text) if text.startswith("[") else text.split()
    return [s for s in map(float, value) if math.isfinite(s)]


def load_times(path: Path) -> pd.DataFrame:
    """The time rows of one result file, with samples as lists; UsageError if unreadable."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        frame = read_rows(path)
        frame = frame[frame["metric"].isin(METRICS)].copy()
        frame["samples"] = [parse_samples(s) for s in frame.get("samples", [None] * len(frame))]
    except (ValueError, KeyError, TypeError, OSError) as exc:
        text = " ".join(str(exc).split())
        message = text if str(path) in text else f"{path}: cannot read results ({text})"
        raise UsageError(message) from None
    if frame.empty:
        raise UsageError(f"{path}: no {' or '.join(METRICS)} rows to compare")
    return frame


def compare_files(a: Path, b: Path) -> Comparison:
    return compare_frames(load_times(a), load_times(b))


def compare_frames(a: pd.DataFrame, b: pd.DataFrame) -> Comparison:
    """Pair the rows of A and B by case; the ok rows of one case are pooled within a file."""
    columns = [c for c in CASE_KEY + GRID_KEY if c in a and c in b] + ["metric"]
    cases_a, cases_b = _cases(a, columns), _cases(b, columns)
    changes, missing = [], []
    for key in list(cases_a) + [k for k in cases_b if k not in cases_a]:
        named = dict(zip(columns, key, strict=True))
        status_a, samples_a, median_a = cases_a.get(key, ("", [], math.nan))
        status_b, samples_b, median_b = cases_b.get(key, ("", [], math.nan))
        if status_a == status_b == "ok":
            changes.append(_change(named, samples_a, samples_b, median_a, median_b))
        else:
            missing.append(Missing(named, status_a, status_b))
    return Comparison(changes, missing)


def _cases(frame: pd.DataFrame, columns: list[str]) -> dict[tuple, tuple[str, list, float]]:
    """case key -> (status, pooled samples, median); "ok" when any of its rows is ok."""
    cases: dict[tuple, tuple[str, list, list]] = {}
    for row in frame.to_dict("records"):
        key = tuple(_norm(row.get(c)) for c in columns)
        status, samples, values = cases.get(key, ("", [], []))
        if row["status"] == "ok":
            status, samples, values = "ok", samples + row["samples"], values + [row["value"]]
        elif status != "ok":
            status = str(row["status"])
        cases[key] = (status, samples, values)
    return {
        k: (s, samples, float(np.median(samples or values)) if s == "ok" else math.nan)
        for k, (s, samples, values) in cases.items()
    }


def _norm(value) -> str:
    """Key values as text, so 512, 512.0 and "512" (CSV vs JSON) match and NaN matches None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _change(key: dict, a: list[float], b: list[float], a_median: float, b_median: float):
    change = Change(key, a, b, a_median, b_median)
    if len(a) >= 2 and len(b) >= 2 and a_median > 0:
        change.low, change.high = ratio_interval(a, b, seed=_case_seed(key))
    return change


def _case_seed(key: dict) -> int:
    """A seed fixed by the case alone (str hash() is salted per process)."""
    return SEED + zlib.crc32(json.dumps(key, sort_keys=True).encode())


def ratio_interval(
    a: list[float], b: list[float], resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap interval of median(b) / median(a), resampling A and B apart."""
    rng = np.random.default_rng(seed)
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    med_a = np.median(rng.choice(a_arr, size=(resamples, a_arr.size)), axis=1)
    med_b = np.median(rng.choice(b_arr, size=(resamples, b_arr.size)), axis=1)
    ratios = med_b / med_a
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


_SHORT = {"seq": "n", "batch": "B", "heads": "H", "dim": "d", "grid_h": "h", "grid_w": "w"}


def _case_text(key: dict, columns: list[str]) -> str:
    values = [(c, key.get(c, "")) for c in columns]
    return " ".join(f"{_SHORT[c]}={v}" if c in _SHORT else v for c, v in values if v)


def _name(key: dict, columns: list[str]) -> str:
    return f"{backend_label(key['backend'])} {_case_text(key, columns)}"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:g}%"


def _rows(comparison: Comparison) -> list[tuple[str, ...]]:
    columns = comparison.varying()
    rows = []
    for c in comparison.changes:
        rows.append(
            (
                backend_label(c.key["backend"]),
                _case_text(c.key, columns),
                f"{c.a_median:.3f}",
                f"{c.b_median:.3f}",
                f"{c.ratio:.3f}",
                "-" if c.low is None else f"{c.low:.3f}-{c.high:.3f}",
                c.verdict,
            )
        )
    return rows


HEADERS = ("backend", "case", "A median ms", "B median ms", "B/A", "95% CI", "verdict")
LEFT = ("backend", "case", "verdict")
STYLES = {"slower": "bold red", "faster": "bold green", "no CI": "yellow"}


def render_table(comparison: Comparison, title: str = "attnbench compare (B vs A)") -> Table:
    """A rich table; a significant verdict is coloured and marked with `*`."""
    table = Table(title=title)
    for h in HEADERS:
        table.add_column(h, justify="left" if h in LEFT else "right")
    for *cells, verdict in _rows(comparison):
        mark = " *" if verdict in ("slower", "faster") else ""
        style = STYLES.get(verdict)
        table.add_row(*cells, f"[{style}]{verdict}{mark}[/]" if style else verdict)
    return table


def render_markdown(comparison: Comparison) -> str:
    """A GitHub-flavoured Markdown table; a significant verdict is bold."""
    lines = ["| " + " | ".join(HEADERS) + " |"]
    lines.append("|" + "|".join("---" if h in LEFT else "---:" for h in HEADERS) + "|")
    for *cells, verdict in _rows(comparison):
        if verdict in ("slower", "faster"):
            verdict = f"**{verdict}**"
        lines.append("| " + " | ".join((*cells, verdict)) + " |")
    return "\n".join(lines)


def summary(comparison: Comparison, threshold: float | None) -> list[str]:
    """Plain lines that follow the table: cases not compared, counts, and the gate's verdict."""
    columns = comparison.varying()
    lines = []
    groups = {"only in A": [], "only in B": [], "not ok in a file": []}
    for m in comparison.missing:
        name = _name(m.key, columns)
        if not m.b_status:
            groups["only in A"].append(name if m.a_status == "ok" else f"{name} ({m.a_status})")
        elif not m.a_status:
            groups["only in B"].append(name if m.b_status == "ok" else f"{name} ({m.b_status})")
        else:
            groups["not ok in a file"].append(f"{name} (A {m.a_status}, B {m.b_status})")
    lines += [f"{title}: {'; '.join(names)}" for title, names in groups.items() if names]
    counts: dict[str, int] = {}
    for c in comparison.changes:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    tally = ", ".join(f"{n} {v}" for v, n in counts.items()) or "no case in both files"
    lines.append(
        f"{tally}: ratio of medians B/A with a {LEVEL:.0%} bootstrap interval "
        f"({RESAMPLES} resamples); significant when the interval excludes 1"
    )
    if counts.get("no CI"):
        lines.append("no CI: fewer than 2 samples in a file, medians compared without an interval")
    if threshold is not None:
        failed = comparison.failures(threshold)
        limit = _percent(threshold)
        if failed:
            names = "; ".join(f"{_name(c.key, columns)} {c.ratio:.3f}x" for c in failed)
            lines.append(f"FAIL: significantly slower by more than {limit}: {names}")
        else:
            lines.append(f"pass: no case significantly slower by more than {limit}")
    return lines
