"""Compare result files case by case: ratio of medians B/A (of trial means, for error files)
with a bootstrap interval.

Each side is one or more result files (runs), each case's samples split into the rounds of
its run when it ran in rounds (`time --rounds`). A change is significant when the 95 %
interval of the ratio excludes 1.0. With two or more runs or rounds on each side the interval
is Student's t over those units, its spread from a hierarchical bootstrap (runs drawn with
replacement, then each drawn run's rounds, then each drawn round's kept samples), so drift
between runs and rounds is in it; with one run of one round on a side it resamples the kept
samples alone and covers the noise within a run only, which back-to-back runs on a shared
machine exceed. Every interval is
seeded per case, so the same files always give the same verdicts, whatever their row order.
A case either run flagged unstable gets no verdict of its own ("unstable"). The regression
gate (`views.gate`) fails a case whose interval lies above 1 (a real slowdown) and whose
ratio exceeds 1 + threshold (a large one): a significant but small slowdown passes, and a
case it cannot judge makes its outcome inconclusive, never a pass.

Two error-study files (`attnbench error`, gradient rows included) compare likewise, per case
and per error where lower is closer (`views.metrics.is_error`): the ratio of the trial means
B/A, verdicts "worse" and "better", and the gate fails a case significantly worse by more
than the threshold. A file is one run and each trial a round of one sample, so the trials are
the units of the t interval above: a percentile bootstrap of three trials' means is far too
narrow (about one pair in five of the same distribution comes out significant). A cosine or
a captured mass (higher is closer) and a slope are not compared, and the summary names them.
Both sides must be of one study: times and errors have no ratio in common.
"""

from __future__ import annotations

import glob
import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.errors import UsageError
from attnbench.measure.rounds import split
from attnbench.results.read import read_rows
from attnbench.results.schema import as_sizes, is_missing, unstable
from attnbench.views.intervals import RESAMPLES, ratio_interval, runs_interval, units
from attnbench.views.metrics import is_error

METRICS = ("time_ms",)  # first_call_ms has one sample and peak_mib is not a time
TIME, ERROR = "time", "error"  # the studies compared: a file's rows are of one or the other
STATISTICS = {TIME: np.median, ERROR: np.mean}  # a side's centre: median time, mean trial
VERDICTS = {TIME: ("slower", "faster"), ERROR: ("worse", "better")}  # B above A, below A
OF = {TIME: "time_ms rows (a time study's)", ERROR: "error rows (an error study's)"}
CASE_KEY = ("backend", "device", "dtype", "mode", "inputs", "batch", "heads", "seq", "dim")
GRID_KEY = ("grid_h", "grid_w")  # schema 2 only
SEED = 0


@dataclass
class Change:
    """One case found in both files, with the samples behind each centre."""

    key: dict  # case key columns and metric, as text
    a: list[list[list[float]]]  # each run's rounds, each round's kept samples (or trial)
    b: list[list[list[float]]]
    a_center: float  # of all the side's samples: their median (time) or mean (error)
    b_center: float
    low: float | None = None  # interval bounds of b_center / a_center; None: too few samples
    high: float | None = None
    unstable: str = ""  # "A", "B" or "A and B": the sides whose run flagged the case
    study: str = TIME

    @property
    def ratio(self) -> float:
        return self.b_center / self.a_center if self.a_center > 0 else math.nan

    @property
    def by_runs(self) -> bool:
        """The interval resamples runs or rounds (two or more on each side), not samples
        alone."""
        return min(units(self.a), units(self.b)) >= 2

    @property
    def verdict(self) -> str:
        if self.unstable:
            return "unstable"
        if self.low is None:
            return "no CI"
        up, down = VERDICTS[self.study]
        if self.low > 1.0:
            return up
        if self.high < 1.0:
            return down
        return "same"

    def fails(self, threshold: float) -> bool:
        """Significantly slower (an error: worse) by more than `threshold` (0.05 = 5 %): the
        interval above 1 and the ratio above 1 + threshold. A case flagged unstable fails
        only when its whole interval lies above 1 + threshold, since noise that wide cannot
        have made it; else the gate names it as not judged (`views.gate`)."""
        if self.unstable:
            return self.low is not None and self.low > 1.0 + threshold
        return self.verdict == VERDICTS[self.study][0] and self.ratio > 1.0 + threshold


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
    study: str = TIME
    skipped: list[str] = field(default_factory=list)  # a side's metrics not compared

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


@dataclass
class Side:
    """What one side brings: its study (every file of one), the rows compared, and the
    metrics it has that are not (an error study's cosines, captured masses, slopes)."""

    study: str
    rows: pd.DataFrame
    skipped: set[str] = field(default_factory=set)


def load_side(pattern: str) -> Side:
    """The rows of one side: a file, or every file a glob pattern names (each a run), all
    of one study, since a time and an error have no ratio."""
    text = str(pattern)
    paths = [Path(text)]
    if glob.has_magic(text):
        paths = [Path(p) for p in sorted(glob.glob(text))]
        if not paths:
            raise UsageError(f"{text}: no file matches")
    sides = [load_file(p) for p in paths]
    for path, side in zip(paths, sides, strict=True):
        if side.study != sides[0].study:
            raise UsageError(
                f"{path} has {OF[side.study]} and {paths[0]} {OF[sides[0].study]}: "
                "the files of a side must be of one study"
            )
    rows = [side.rows.assign(_file=str(p)) for p, side in zip(paths, sides, strict=True)]
    skipped = set().union(*(side.skipped for side in sides))
    return Side(sides[0].study, pd.concat(rows, ignore_index=True), skipped)


def load_file(path: Path) -> Side:
    """The rows compared of one result file, with samples as lists: its time rows if it has
    any (a time study), else its errors where lower is closer (an error study); UsageError
    if unreadable or it has neither."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        frame = read_rows(path)
        metric = frame["metric"].astype(str)
        study = TIME if metric.isin(METRICS).any() else ERROR
        chosen = metric.isin(METRICS) if study == TIME else metric.map(is_error).astype(bool)
        skipped = {m for m in metric[~chosen] if "_vs_" in m} if study == ERROR else set()
        frame = frame[chosen].copy()
        frame["samples"] = [parse_samples(s) for s in frame.get("samples", [None] * len(frame))]
    except (ValueError, KeyError, TypeError, OSError) as exc:
        text = " ".join(str(exc).split())
        message = text if str(path) in text else f"{path}: cannot read results ({text})"
        raise UsageError(message) from None
    if frame.empty:
        raise UsageError(
            f"{path}: no {' or '.join(METRICS)} rows to compare, nor error rows where lower "
            "is closer"
        )
    return Side(study, frame, skipped)


def compare_files(a: str | Path, b: str | Path) -> Comparison:
    """Compare two sides of one study (both time or both error files), else UsageError."""
    side_a, side_b = load_side(str(a)), load_side(str(b))
    if side_a.study != side_b.study:
        raise UsageError(
            f"{a} has {OF[side_a.study]} and {b} {OF[side_b.study]}: compare two files of one study"
        )
    comparison = compare_frames(side_a.rows, side_b.rows, side_a.study)
    comparison.skipped = sorted(side_a.skipped | side_b.skipped)
    return comparison


@dataclass
class _Case:
    """One case on one side: its status, each run's rounds of samples (its value when a
    row kept none), and whether a run flagged it unstable."""

    status: str = ""
    runs: dict[str, list[list[float]]] = field(default_factory=dict)
    unstable: bool = False

    def center(self, study: str) -> float:
        """The study's statistic of all the case's samples (`STATISTICS`)."""
        pooled = [s for run in self.runs.values() for part in run for s in part]
        return float(STATISTICS[study](pooled)) if pooled else math.nan


def compare_frames(a: pd.DataFrame, b: pd.DataFrame, study: str = TIME) -> Comparison:
    """Pair the rows of A and B by case; the ok rows of one case on a side are its runs."""
    columns = [c for c in CASE_KEY + GRID_KEY if c in a and c in b] + ["metric"]
    cases_a, cases_b = _cases(a, columns, study), _cases(b, columns, study)
    changes, missing = [], []
    for key in list(cases_a) + [k for k in cases_b if k not in cases_a]:
        named = dict(zip(columns, key, strict=True))
        side_a, side_b = cases_a.get(key, _Case()), cases_b.get(key, _Case())
        if side_a.status == side_b.status == "ok":
            changes.append(_change(named, side_a, side_b, study))
        else:
            missing.append(Missing(named, side_a.status, side_b.status))
    return Comparison(changes, missing, study)


def _cases(frame: pd.DataFrame, columns: list[str], study: str) -> dict[tuple, _Case]:
    """case key -> its _Case; "ok" when any of its rows is ok. A run is a file and run id."""
    cases: dict[tuple, _Case] = {}
    for row in frame.assign(_unstable=unstable(frame)).to_dict("records"):
        case = cases.setdefault(tuple(_norm(row.get(c)) for c in columns), _Case())
        if row["status"] == "ok":
            run = f"{row.get('_file', '')}#{_norm(row.get('run_id'))}"
            case.status = "ok"
            case.runs.setdefault(run, []).extend(_rounds(row, study))
            case.unstable |= bool(row["_unstable"])
        elif case.status != "ok":
            case.status = str(row["status"])
    return cases


def _rounds(row: dict, study: str) -> list[list[float]]:
    """A row's samples split into its rounds (one round when it ran in none, or when its
    round sizes do not fit its samples), or its value alone when it kept no samples. An
    error row's trials are each a round of their own: independent draws, the interval's
    units (see the module's docstring)."""
    samples = row["samples"]
    if not samples:
        return [[float(row["value"])]]
    if study == ERROR:
        return [[s] for s in samples]
    try:
        return split(samples, as_sizes(row.get("round_sizes")))
    except ValueError:
        return [samples]


def _norm(value) -> str:
    """Key values as text, so 512, 512.0 and "512" (CSV vs JSON) match and NaN matches None."""
    if is_missing(value):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _change(key: dict, a: _Case, b: _Case, study: str) -> Change:
    """The case's change with its interval, when both centres are above 0 (a log ratio) and
    each side has two samples or more."""
    sides = " and ".join(side for side, case in (("A", a), ("B", b)) if case.unstable)
    runs_a, runs_b = list(a.runs.values()), list(b.runs.values())
    change = Change(key, runs_a, runs_b, a.center(study), b.center(study), study=study)
    change.unstable = sides
    if not (change.a_center > 0 and change.b_center > 0):
        return change
    # RESAMPLES read here, not bound as a default, so a test may lower it
    how = dict(resamples=RESAMPLES, seed=_case_seed(key), statistic=STATISTICS[study])
    if change.by_runs:
        change.low, change.high = runs_interval(runs_a, runs_b, **how)
    elif min(_count(change.a), _count(change.b)) >= 2:
        pooled_a = [s for run in change.a for part in run for s in part]
        pooled_b = [s for run in change.b for part in run for s in part]
        change.low, change.high = ratio_interval(pooled_a, pooled_b, **how)
    return change


def _count(runs: list[list[list[float]]]) -> int:
    return sum(len(part) for run in runs for part in run)


def _case_seed(key: dict) -> int:
    """A seed fixed by the case alone (str hash() is salted per process)."""
    return SEED + zlib.crc32(json.dumps(key, sort_keys=True).encode())
