"""One tidy result schema for every study, and a writer that never loses or half-writes a case.

A row is one backend x case x metric. On disk a row is a flat record: the fixed columns
(`COLUMNS`), then each backend parameter and each per-case condition as a column of its own;
samples are a JSON list in CSV. `ResultSink` writes CSV (+ .env.json sidecar) and JSON;
`read_rows` reads schema 1 and 2 files.
"""

from __future__ import annotations

import csv
import fcntl
import glob
import hashlib
import io
import json
import math
import os
import re
import shlex
import sys
import tempfile
import uuid
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from attnbench.errors import UsageError
from attnbench.results.interrupts import deferred_interrupts

SCHEMA_VERSION = 2

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
    case_id: str = ""  # stable hash of the case, made by the runner
    # filled in by ResultSink from the environment record
    fingerprint: str = ""
    run_id: str = ""
    device_name: str = ""
    threads: int | None = None
    git_revision: str = ""
    schema_version: int = SCHEMA_VERSION
    params: dict = field(default_factory=dict)  # backend parameters, a column each
    conditions: dict = field(default_factory=dict)  # CONDITION_KEYS measured around the case
    # an array result (the maps study's attention map): kept in memory, never written
    array: Any = field(default=None, repr=False, compare=False)


COLUMNS = [f.name for f in fields(Row) if f.name not in ("params", "conditions", "array")]
_INT_COLUMNS = ("batch", "heads", "seq", "dim", "count", "grid_h", "grid_w", "threads")
_DEFAULTS = {
    f.name: None if f.default is MISSING else f.default
    for f in fields(Row)
    if f.name in COLUMNS and f.name != "samples"
}


def param_column(name: str) -> str:
    """The column of a backend parameter: its name, or `param_NAME` when that is taken."""
    return f"param_{name}" if name in COLUMNS or name in CONDITION_KEYS else name


def record(row: Row) -> dict:
    """The flat dict written for a row: fixed columns, then parameters and conditions."""
    flat = {name: getattr(row, name) for name in COLUMNS}
    flat["samples"] = _samples(row.samples)
    flat.update((param_column(k), v) for k, v in row.params.items())
    flat.update(row.conditions)
    return flat


def row_from_record(flat: dict) -> Row:
    """The Row behind a flat record (read back or resumed); other columns become params."""
    values = {k: None if _missing(v) else v for k, v in flat.items()}
    fixed = {k: v for k, v in values.items() if k in COLUMNS and v is not None}
    fixed["samples"] = _samples(values.get("samples"))
    extra = {k: v for k, v in values.items() if k not in COLUMNS and v is not None}
    conditions = {k: v for k, v in extra.items() if k in CONDITION_KEYS}
    params = {
        k.removeprefix("param_") if param_column(k.removeprefix("param_")) == k else k: v
        for k, v in extra.items()
        if k not in CONDITION_KEYS
    }
    return Row(**fixed, params=params, conditions=conditions)


def rows_frame(rows: list[Row]) -> pd.DataFrame:
    return records_frame([record(r) for r in rows])


def records_frame(records: list[dict]) -> pd.DataFrame:
    """Flat records as a frame: the fixed columns first, then every other column seen."""
    extra = [k for k in dict.fromkeys(k for r in records for k in r) if k not in COLUMNS]
    return pd.DataFrame(records, columns=[*COLUMNS, *extra])


def fingerprint(env: dict) -> str:
    """A short hash of the environment fields that decide whether results are comparable."""
    text = json.dumps([env.get(key) for key in FINGERPRINT_KEYS], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def env_sidecar(csv_path: Path) -> Path:
    """The environment record written next to a CSV: results.csv -> results.env.json."""
    return Path(csv_path).with_suffix(".env.json")


# ----------------------------------------------------------------------------- writing


class ResultSink:
    """Locks its outputs and commits each finished case to all of them in one step.

        with ResultSink(env, csv, json_path, resume=True) as sink:
            for case in cases:
                if sink.done(case_id(case)) is None:
                    sink.add_case(run(case))

    Invariants: while the sink is open no other attnbench run can write the same files; the
    CSV and the JSON hold the same complete cases after every commit, and no temp file stays.
    A commit writes every file to a temp file and then renames them in turn with SIGINT and
    SIGTERM held off, so only SIGKILL (or a power cut) between two renames can leave the
    JSON one case behind the CSV; every file is complete even then, and `resume` reads the CSV.
    """

    def __init__(
        self,
        env: dict,
        csv: Path | None = None,
        json_path: Path | None = None,
        resume: bool = False,
    ):
        self.env = env
        self.csv = None if csv is None else Path(csv)
        self.json = None if json_path is None else Path(json_path)
        self.resume = resume
        self.run_id = uuid.uuid4().hex
        self.fingerprint = fingerprint(env)
        self.rows: list[Row] = []  # this run's rows
        self.records: list[dict] = []  # every row in the outputs, resumed ones included
        self._locks: list[tuple[Path, int]] = []
        self._open = False

    @property
    def outputs(self) -> list[Path]:
        csv_files = [self.csv, env_sidecar(self.csv)] if self.csv is not None else []
        return [*csv_files, *([self.json] if self.json is not None else [])]

    def __enter__(self) -> ResultSink:
        try:
            owner = self.env.get("command") or shlex.join(sys.argv)
            for path in self.outputs:
                self._locks.append(_take_lock(path, owner))
            for path in self.outputs:
                _remove_leftover_temps(path)
            if self.resume:
                self.records = self._load()
            self._commit(self.records, with_env=True)
        except BaseException:
            self._release()
            raise
        self._open = True
        return self

    def __exit__(self, *exc) -> None:
        self._open = False
        with deferred_interrupts():
            self._release()

    def done(self, case_id: str) -> list[dict] | None:
        """The records of a case already in the outputs, measured in the same environment and
        finished (status ok, skipped or oom), else None. A case is committed whole, so any of
        its rows being present means all are."""
        found = [r for r in self.records if case_id and r.get("case_id") == case_id]
        if not found or any(r.get("fingerprint") != self.fingerprint for r in found):
            return None
        if any(r.get("status") not in DONE_STATUSES for r in found):
            return None
        return found

    def add_case(self, rows: list[Row]) -> None:
        """Commit one case's rows to every output; they replace the rows of the same case_id
        that a resumed file held."""
        if not self._open:
            raise RuntimeError("ResultSink.add_case outside `with ResultSink(...) as sink`")
        for row in rows:
            row.run_id, row.fingerprint = self.run_id, self.fingerprint
            row.device_name = self.env.get("device_name") or ""
            row.git_revision = self.env.get("git_revision") or ""
            row.threads = self.env.get("threads", self.env.get("torch_threads"))
        ids = {row.case_id for row in rows if row.case_id}
        kept = [r for r in self.records if r.get("case_id") not in ids or self._ours(r)]
        records = kept + [record(row) for row in rows]
        self._commit(records)
        self.records = records
        self.rows.extend(rows)

    def add(self, row: Row) -> None:
        self.add_case([row])

    def _ours(self, flat: dict) -> bool:
        return flat.get("run_id") == self.run_id

    def _load(self) -> list[dict]:
        """The rows to resume from: the CSV, renamed first at each commit, else the JSON."""
        source = next((p for p in (self.csv, self.json) if p is not None and p.exists()), None)
        if source is None:
            return []
        try:
            frame = read_rows(source)
        except (ValueError, OSError) as exc:
            raise UsageError(f"--resume: cannot read {source} ({exc})") from None
        # a parameter or condition column is empty on rows of backends that lack it
        return [
            {
                k: None if _missing(v) else v
                for k, v in flat.items()
                if k in COLUMNS or not _missing(v)
            }
            for flat in frame.to_dict("records")
        ]

    def _commit(self, records: list[dict], with_env: bool = False) -> None:
        texts: dict[Path, str] = {}
        if self.csv is not None:
            texts[self.csv] = _csv_text(records)
            if with_env:
                texts[env_sidecar(self.csv)] = json.dumps(self.env, indent=2, default=_plain) + "\n"
        if self.json is not None:
            texts[self.json] = _json_text(self.env, records)
        path = None
        temps: list[tuple[str, Path]] = []
        try:
            with deferred_interrupts():
                try:
                    for path, text in texts.items():
                        temps.append((_write_temp(path, text), path))
                    for tmp, path in temps:
                        os.replace(tmp, path)
                except BaseException:
                    for tmp, _ in temps:
                        Path(tmp).unlink(missing_ok=True)
                    raise
        except OSError as exc:  # a full disk or quota, a file system gone read-only, ...:
            if exc.errno is None:  # the run ends with one line, the committed cases stay
                raise
            cases = len({_case_key(r) for r in self.records})
            raise UsageError(
                f"cannot write {path}: {os.strerror(exc.errno)}; "
                f"the {cases} completed cases are kept"
            ) from None

    def _release(self) -> None:
        while self._locks:
            lock, fd = self._locks.pop()
            lock.unlink(missing_ok=True)
            os.close(fd)


def _csv_text(records: list[dict]) -> str:
    frame = records_frame(records)
    frame["samples"] = frame["samples"].map(lambda s: json.dumps(_samples(s)))
    return frame.to_csv(index=False)


def _json_text(env: dict, records: list[dict]) -> str:
    """The JSON document, one row per line so that long sweeps stay readable and diffable."""
    rows = ",\n".join(json.dumps(r, default=_plain) for r in records)
    env_text = json.dumps(env, indent=2, default=_plain)
    return f'{{"schema_version": {SCHEMA_VERSION},\n"env": {env_text},\n"rows": [\n{rows}\n]}}\n'


def _plain(value):
    """numpy scalars and other strays as JSON values."""
    return value.item() if hasattr(value, "item") else str(value)


def _case_key(flat: dict):
    return flat.get("case_id") or tuple(
        flat.get(k) for k in ("study", "backend", "device", "dtype", "mode", "inputs", "seq")
    )


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` through a temp file in the same directory, then rename."""
    os.replace(_write_temp(Path(path), text), path)


def _write_temp(path: Path, text: str) -> str:
    """`text` in a new hidden temp file beside `path` (`.NAME.XXXXXXXX.tmp`); its name.

    The data reach the disk before the caller renames the file over `path`, so a machine that
    stops just after the rename leaves the old or the new file, never an empty one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are ordinary files
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove_leftover_temps(path: Path) -> None:
    """Delete the temp files a killed run left beside `path` (call while holding its lock)."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        if pattern.fullmatch(leftover.name):
            leftover.unlink(missing_ok=True)


def _take_lock(path: Path, owner: str) -> tuple[Path, int]:
    """An exclusive flock on `.NAME.lock` beside `path`, the file holding our pid and command.

    The kernel drops an flock when its holder dies, so a lock file left by a killed run is
    simply taken over; a live holder is named in the error.
    """
    lock = path.with_name(f".{path.name}.lock")
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise UsageError(f"cannot lock {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip()
            os.close(fd)
            pid, _, command = holder.partition(" ")
            who = f"pid {pid}: {command}" if command else f"pid {pid or 'unknown'}"
            raise UsageError(f"{path} is being written by another attnbench run ({who})") from None
        except BaseException:
            os.close(fd)
            raise
        # the previous holder removes the file on release: then lock a fresh one
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    text = f"{os.getpid()} {' '.join(owner.split())[:200]}\n".encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, text, 0)
    return lock, fd


# ----------------------------------------------------------------------------- reading


def read_rows(path: Path) -> pd.DataFrame:
    """Read a CSV or JSON result file, schema 1 or 2, into a frame with the schema 2 columns
    first (samples as lists of floats), then the parameter and condition columns."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        doc = json.loads(path.read_text())
        rows = doc.get("rows") if isinstance(doc, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError(f"{path} is not an attnbench result file")
        df = pd.DataFrame(rows)
    else:
        text = path.read_text()
        _check_complete(text, path)
        df = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""])
    missing = [c for c in ("study", "backend", "seq", "metric", "value", "status") if c not in df]
    if missing:
        raise ValueError(f"{path} is not an attnbench result file (missing {', '.join(missing)})")
    return _as_v2(df)


def _check_complete(text: str, path: Path) -> None:
    """Refuse a CSV whose last row was cut off (a writer killed mid-row, a copy cut short):
    its missing fields would otherwise read as empty values."""
    reader = csv.reader(io.StringIO(text), strict=True)
    try:
        header = next(reader, [])
        last_line = text.count("\n") + (0 if text.endswith("\n") else 1)
        for fields_ in reader:
            if fields_ and len(fields_) < len(header):
                n, count = reader.line_num, f"{len(fields_)} of {len(header)} fields"
                if n == last_line:
                    raise ValueError(f"{path.name} is truncated at line {n} ({count})")
                raise ValueError(f"{path.name}: line {n} has {count}")
    except csv.Error as exc:
        if not text.endswith("\n"):
            raise ValueError(
                f"{path.name} is truncated at line {reader.line_num} ({exc})"
            ) from None
        raise ValueError(f"{path.name}: bad CSV at line {reader.line_num} ({exc})") from None


_GRID = re.compile(r" (\d+)x(\d+)$")
_V1_METHOD = re.compile(r"method=(?P<method>.+)|(?P<trials>trials use seeds .+)")


def _as_v2(df: pd.DataFrame) -> pd.DataFrame:
    """Add the schema 2 columns a schema 1 file lacks; move its grid and method into them."""
    df = df.copy()
    if "schema_version" not in df:
        df["schema_version"] = 1
    for name, default in _DEFAULTS.items():
        if name not in df:
            df[name] = default
    df["samples"] = df["samples"].map(_samples) if "samples" in df else [[]] * len(df)
    old = pd.to_numeric(df["schema_version"], errors="coerce").fillna(1) < 2
    if old.any():
        grid = df["inputs"].astype(str).str.extract(_GRID).astype(float)
        no_grid = old & df["grid_h"].isna()
        df[["grid_h", "grid_w"]] = df[["grid_h", "grid_w"]].astype(object)
        df.loc[no_grid, ["grid_h", "grid_w"]] = grid[no_grid].to_numpy()
        found = df["reason"].astype(object).fillna("").astype(str).str.extract(_V1_METHOD)
        method = found["method"].fillna(found["trials"])
        moved = old & method.notna()
        df[["method", "reason"]] = df[["method", "reason"]].astype(object)
        df.loc[moved, "method"] = method[moved]
        df.loc[moved, "reason"] = ""
    for name in _INT_COLUMNS:
        try:
            df[name] = df[name].astype("Int64")
        except (TypeError, ValueError):
            pass  # not whole numbers: left as read
    extra = [c for c in df.columns if c not in COLUMNS]
    return df[[*COLUMNS, *extra]]


def _samples(value) -> list[float]:
    """Samples as floats, from a list, a JSON list text (v2) or a space-separated text (v1)."""
    if isinstance(value, list | tuple):
        return [float(x) for x in value]
    if _missing(value):
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return [float(x) for x in json.loads(text)]
        return [float(x) for x in text.split()]
    return [float(value)]


def _missing(value) -> bool:
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)
