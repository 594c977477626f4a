"""One tidy result schema for every study, and writers that never leave a truncated file.

A row is one backend x case x metric. Writers rewrite their file atomically (temp file +
rename) after every finished row, so an interrupted sweep keeps every completed row.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import pandas as pd

SCHEMA_VERSION = 1


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
    samples: str = ""  # every sample, space-separated
    status: str = "ok"  # "ok" | "skipped" | "oom" | "error"
    reason: str = ""
    schema_version: int = SCHEMA_VERSION


COLUMNS = [f.name for f in fields(Row)]


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` through a temp file in the same directory, then rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are ordinary files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def rows_frame(rows: list[Row]) -> pd.DataFrame:
    return pd.DataFrame([asdict(r) for r in rows], columns=COLUMNS)


class ResultSink:
    """Collects rows and keeps the CSV / JSON outputs up to date after every row."""

    def __init__(self, env: dict, csv: Path | None = None, json_path: Path | None = None):
        self.env = env
        self.csv = csv
        self.json = json_path
        self.rows: list[Row] = []

    def add(self, row: Row) -> None:
        self.rows.append(row)
        self.flush()

    def flush(self) -> None:
        if self.csv is not None:
            atomic_write(self.csv, rows_frame(self.rows).to_csv(index=False))
            atomic_write(env_sidecar(self.csv), json.dumps(self.env, indent=2) + "\n")
        if self.json is not None:
            doc = {
                "schema_version": SCHEMA_VERSION,
                "env": self.env,
                "rows": [asdict(r) for r in self.rows],
            }
            atomic_write(self.json, json.dumps(doc, indent=2) + "\n")


def env_sidecar(csv: Path) -> Path:
    """The environment record written next to a CSV: results.csv -> results.env.json."""
    return csv.with_suffix(".env.json")


def read_rows(path: Path) -> pd.DataFrame:
    """Read a CSV or JSON result file back into a frame with the schema's columns."""
    path = Path(path)
    if path.suffix == ".json":
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
            raise ValueError(f"{path} is not an attnbench result file")
        df = pd.DataFrame(doc["rows"])
    else:
        df = pd.read_csv(path, keep_default_na=False, na_values=[""])
    missing = [c for c in ("study", "backend", "seq", "metric", "value", "status") if c not in df]
    if missing:
        raise ValueError(f"{path} is not an attnbench result file (missing {', '.join(missing)})")
    return df
