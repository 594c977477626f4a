"""Reading result files back: CSV or JSON of any schema so far, always as a frame of this one.

Invariant: `read_rows` gives the fixed `COLUMNS` first, in order, then the parameter and
condition columns; it refuses a file that is not a result file, a CSV whose last row was
cut off (rather than reading the missing fields as empty values), and a row that
`validate.check_rows` does not pass, each with one ValueError naming the file.
"""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

import pandas as pd

from attnbench.results.schema import (
    COLUMNS,
    DEFAULTS,
    INT_COLUMNS,
    SCHEMA_VERSION,
    as_samples,
    as_sizes,
)
from attnbench.results.validate import check_rows, load_json


def read_rows(path: Path) -> pd.DataFrame:
    """Read a CSV or JSON result file, any schema so far, into a frame with this schema's columns
    first (samples as lists of floats), then the parameter and condition columns."""
    path = Path(path)
    text = _text(path)
    if path.suffix.lower() == ".json":
        doc = load_json(text, path.name)
        rows = doc.get("rows") if isinstance(doc, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError(f"{path} is not an attnbench result file")
        df = pd.DataFrame(rows)
    else:
        _check_complete(text, path)
        df = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""], dtype=HASHES)
    missing = [c for c in ("study", "backend", "seq", "metric", "value", "status") if c not in df]
    if missing:
        raise ValueError(f"{path} is not an attnbench result file (missing {', '.join(missing)})")
    _check_schema(df, path)
    df = _as_v2(check_rows(df, path.name))
    _check_unique(df, path)
    return df


# Hex digests, read as text: pandas would read a case id such as "3141e59265" as a number.
HASHES = dict.fromkeys(("case_id", "fingerprint", "run_id", "git_revision"), "str")


def _text(path: Path) -> str:
    """The file's text; an empty file, one that is not UTF-8 (an image, a spreadsheet) or one
    holding NUL bytes (blocks a crash left zero-filled; no writer of ours puts one in text)
    is no result file."""
    data = path.read_bytes()
    if not data.strip():
        raise ValueError(f"{path.name} is empty, not an attnbench result file")
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path.name} is not an attnbench result file (not UTF-8 text: byte "
            f"{data[exc.start]:#04x} at offset {exc.start})"
        ) from None
    if "\x00" in text:
        raise ValueError(
            f"{path.name} holds a NUL byte at offset {data.index(0)}: a file zero-filled by a "
            "crash, or no result file"
        )
    return text


# What names a case's row when a file has no case ids (schema 1): its settings and metric.
_SETTINGS = ["study", "backend", "impl", "device", "dtype", "mode", "inputs", "batch", "heads",
             "seq", "dim", "grid_h", "grid_w", "method"]  # fmt: skip


def _check_unique(df: pd.DataFrame, path: Path) -> None:
    """Refuse a file that holds one case's metric twice (rows repeated by hand, or two runs'
    files joined): pooled, the two would read as one case with twice the samples."""
    ids = df["case_id"].astype(object).fillna("").astype(str)
    settings = df[_SETTINGS].astype(object)
    settings.loc[ids != "", :] = ""  # a case id names the case alone
    key = pd.concat([ids, settings, df[["metric", "stage"]].astype(object)], axis=1)
    repeated = df[key.duplicated()]
    if len(repeated):
        first = repeated.iloc[0]
        raise ValueError(
            f"{path.name} holds {len(repeated)} repeated row(s), first {first['backend']} "
            f"n={first['seq']} {first['metric']} (rows copied twice, or files joined): "
            "keep one row per case and metric"
        )


def _check_schema(df: pd.DataFrame, path: Path) -> None:
    """Refuse rows of a schema this version does not know: a newer one may mean other
    things by the same columns, so reading it as ours could silently mix meanings."""
    if "schema_version" not in df:
        return  # schema 1 wrote none
    raw = df["schema_version"]
    try:
        versions = pd.to_numeric(raw, errors="coerce")
    except OverflowError:  # an integer too large for a float: no schema this reads
        versions = pd.to_numeric(raw.map(_capped), errors="coerce")
    bad = raw[versions.isna() & raw.notna()]
    if len(bad):
        raise ValueError(f"{path.name}: schema_version {bad.iloc[0]!r} is not a number")
    newest = versions.max()
    if newest > SCHEMA_VERSION or versions.min() < 1:
        odd = newest if newest > SCHEMA_VERSION else versions.min()
        raise ValueError(
            f"{path.name}: schema_version {odd:g} is not one this attnbench reads "
            f"(1..{SCHEMA_VERSION}); a newer attnbench wrote it, or it was edited"
        )


def _capped(value):
    return math.inf if isinstance(value, int) and abs(value) > 2**63 else value


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
    """Add the columns an older file lacks (their defaults); move a schema 1 file's grid and
    method into their own columns."""
    df = df.copy()
    if "schema_version" not in df:
        df["schema_version"] = 1
    for name, default in DEFAULTS.items():
        if name not in df:
            df[name] = default
    df["samples"] = df["samples"].map(as_samples) if "samples" in df else [[]] * len(df)
    df["round_sizes"] = df["round_sizes"].map(as_sizes) if "round_sizes" in df else [[]] * len(df)
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
    for name in INT_COLUMNS:
        try:
            df[name] = df[name].astype("Int64")
        except (TypeError, ValueError):
            pass  # not whole numbers: left as read
    extra = [c for c in df.columns if c not in COLUMNS]
    return df[[*COLUMNS, *extra]]
