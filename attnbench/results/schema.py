"""The result schema: what a row is, and how it becomes the flat record written to disk.

Invariant: a row is one backend x case x metric; its flat record holds the fixed `COLUMNS`
in their order, then each backend parameter and each per-case condition as a column of its
own, so that `row_from_record(record(row))` gives the row back. Samples are a list of floats;
`round_sizes` (schema 4) a list of ints: how many of the samples, in order, each round took.
Schema 5 says where each case ran: `node`, `worker`, `hardware` and `co_tenancy`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

import pandas as pd

SCHEMA_VERSION = 5

STATUSES = ("ok", "skipped", "oom", "error", "crashed")
# A resumed case with one of these statuses is not run again; error and crashed ones are.
DONE_STATUSES = ("ok", "skipped", "oom")

CONDITION_KEYS = (
    "cpu_wait", "load_before", "load_after", "cpu_mhz_before", "cpu_mhz_after",
    "sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "throttle_reasons",
    "energy_mj_per_call",
)  # fmt: skip

# The environment fields that decide whether two measurements can be compared.
FINGERPRINT_KEYS = (
    "attnbench", "git_revision", "torch", "numba", "device_name", "torch_threads", "platform",
)  # fmt: skip


@dataclass
class Row:
    """One measurement. Empty strings / None mean 'not applicable'."""

    study: str  # "time" | "error"
    backend: str  # canonical spec, e.g. "yoso:m=32,tau=8,seed=0"
    impl: str  # implementation, e.g. "torch"
    device: str  # "cpu" | "cuda" | "cuda-sim"
    dtype: str
    mode: str  # "fwd" | "bwd" | "fwdbwd" (time); "fwd" (error)
    inputs: str  # "random" | "clustered" | file name
    batch: int
    heads: int
    seq: int
    dim: int
    metric: str  # "time_ms", "first_call_ms", "peak_mib", "radian_vs_yoso_e", ...
    value: float | None = None  # median for times, mean for errors
    unit: str = ""
    p10: float | None = None
    p90: float | None = None
    std: float | None = None
    count: int | None = None  # samples (time) or trials (error) behind `value`
    samples: list[float] = field(default_factory=list)  # every kept sample
    status: str = "ok"  # one of STATUSES
    reason: str = ""  # why a case was skipped or failed, or a warning about it
    method: str = ""  # how it was measured, e.g. "vmhwm", "trials seeds 0..2"
    grid_h: int | None = None
    grid_w: int | None = None
    stable: bool | None = None  # spread <= the run's --max-spread
    spread: float | None = None  # IQR / median of the kept samples
    speedup: float | None = None  # the baseline's median / this row's median
    baseline: str = ""
    # run in rounds (time --rounds): the samples each round kept, in order, and the
    # confidence interval of the speed-up from the paired per-round ratios (`measure.rounds`)
    round_sizes: list[int] = field(default_factory=list)
    speedup_low: float | None = None
    speedup_high: float | None = None
    # profile rows: the stage timed ("" = the whole call) and its share of the whole call
    stage: str = ""
    share: float | None = None
    # throughput of the row's time: GFLOP/s by the algorithmic and the dense-equivalent
    # counts (backends/cost.py), GB/s and FLOP/byte by the algorithmic count, the roofline
    # bound that applies ("compute" or the bandwidth of a memory level) and % of it reached
    gflops_alg: float | None = None
    gflops_dense: float | None = None
    gbs_alg: float | None = None
    intensity_alg: float | None = None
    bound: str = ""
    bound_pct: float | None = None
    over_bound: str = ""  # bound_pct above 100: the likely cause (measure.roofline); else ""
    case_id: str = ""  # stable hash of the case, made by the runner
    # filled in by ResultSink from the environment record
    fingerprint: str = ""
    run_id: str = ""
    device_name: str = ""
    threads: int | None = None
    git_revision: str = ""
    # where the case ran (`run.placement`): the host, the process ("in-process/PID",
    # "isolated/PID", "ray-N/PID"), the physical GPU's UUID or the CPU's model name, and how
    # many of the run's workers were measuring on that host at once, this one included
    node: str = ""
    worker: str = ""
    hardware: str = ""
    co_tenancy: int | None = None
    schema_version: int = SCHEMA_VERSION
    params: dict = field(default_factory=dict)  # backend parameters, a column each
    conditions: dict = field(default_factory=dict)  # CONDITION_KEYS measured around the case
    # an array result (the maps study's attention map): kept in memory, never written
    array: Any = field(default=None, repr=False, compare=False)


COLUMNS = [f.name for f in fields(Row) if f.name not in ("params", "conditions", "array")]
INT_COLUMNS = (
    "batch", "heads", "seq", "dim", "count", "grid_h", "grid_w", "threads", "co_tenancy",
)  # fmt: skip
# what a fixed column holds when a file (an older schema's) lacks it
DEFAULTS = {
    f.name: None if f.default is MISSING else f.default
    for f in fields(Row)
    if f.name in COLUMNS and f.name not in ("samples", "round_sizes")
}


def param_column(name: str) -> str:
    """The column of a backend parameter: its name, or `param_NAME` when that is taken."""
    return f"param_{name}" if name in COLUMNS or name in CONDITION_KEYS else name


def record(row: Row) -> dict:
    """The flat dict written for a row: fixed columns, then parameters and conditions."""
    flat = {name: getattr(row, name) for name in COLUMNS}
    flat["samples"] = as_samples(row.samples)
    flat["round_sizes"] = as_sizes(row.round_sizes)
    flat.update((param_column(k), v) for k, v in row.params.items())
    flat.update(row.conditions)
    return flat


def row_from_record(flat: dict) -> Row:
    """The Row behind a flat record (read back or resumed); other columns become params."""
    values = {k: None if is_missing(v) else v for k, v in flat.items()}
    fixed = {k: v for k, v in values.items() if k in COLUMNS and v is not None}
    fixed["samples"] = as_samples(values.get("samples"))
    fixed["round_sizes"] = as_sizes(values.get("round_sizes"))
    extra = {k: v for k, v in values.items() if k not in COLUMNS and v is not None}
    conditions = {k: v for k, v in extra.items() if k in CONDITION_KEYS}
    params = {
        k.removeprefix("param_") if param_column(k.removeprefix("param_")) == k else k: v
        for k, v in extra.items()
        if k not in CONDITION_KEYS
    }
    return Row(**fixed, params=params, conditions=conditions)


def record_columns(records: list[dict]) -> list[str]:
    """The columns of flat records: the fixed ones first, then every other in the order seen."""
    extra = [k for k in dict.fromkeys(k for r in records for k in r) if k not in COLUMNS]
    return [*COLUMNS, *extra]


def unstable(rows: pd.DataFrame) -> pd.Series:
    """Whether each row's run flagged its case unstable (`stable` false, as a bool or as
    text read back from a CSV; a row with no verdict, as a model study's, is not flagged)."""
    if "stable" not in rows:
        return pd.Series(False, index=rows.index)
    return rows["stable"].astype(str).str.lower().isin(["false", "0", "0.0"])


def rows_frame(rows: list[Row]) -> pd.DataFrame:
    return records_frame([record(r) for r in rows])


def records_frame(records: list[dict]) -> pd.DataFrame:
    """Flat records as a frame with the columns of `record_columns`."""
    return pd.DataFrame(records, columns=record_columns(records))


def fingerprint(env: dict) -> str:
    """A short hash of the environment fields that decide whether results are comparable."""
    text = json.dumps([env.get(key) for key in FINGERPRINT_KEYS], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def as_samples(value) -> list[float]:
    """Samples as floats, from a list, a JSON list text (v2) or a space-separated text (v1)."""
    if isinstance(value, list | tuple):
        return [float(x) for x in value]
    if is_missing(value):
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return [float(x) for x in json.loads(text)]
        return [float(x) for x in text.split()]
    return [float(value)]


def as_sizes(value) -> list[int]:
    """Round sizes as ints, from a list or a JSON list text; [] for an empty cell."""
    return [int(x) for x in as_samples(value)]


def is_missing(value) -> bool:
    """None, NaN (of any float type), NaT or pandas' NA: an empty cell. The one rule every
    reader and view uses, so a cell is empty in a table exactly when it is in a file."""
    if value is None or value is pd.NA:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # a list or array: a value, not an empty cell
        return False
