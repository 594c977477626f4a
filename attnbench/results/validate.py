"""What a result file may hold, checked as it is read: every command that reads one (`--resume`,
`compare`, `plot`, `pareto`, `report`) refuses a malformed file with one ValueError naming the
file, the row and the problem, rather than failing deep inside or reading nonsense as numbers.

Invariant: a frame `check_rows` passes has, in every row, `samples` as a flat list of floats
with no infinity, `round_sizes` as positive ints adding up to the samples, whole numbers from
0 to 2**63 - 1 in the integer columns, numbers with no infinity in the float columns, study,
backend, metric, status and seq filled in, and plain values (text, a bool, a number within
int64 and not infinite) elsewhere. A column the schema fixed after the row's schema_version
was a backend parameter then, so it is held to plain values only. NaN is allowed where a
writer leaves a value out: an empty cell, or a trial with no value in a JSON list
(`json.dumps` writes NaN, and readers of samples skip it). A status this version does not
know is text like any other: readers count it as not ok.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import fields

import numpy as np
import pandas as pd

from attnbench.results.schema import Row, is_missing

# JSON a result file nests: the document, its env, the ceilings, their levels, a level
MAX_DEPTH = 32
INT64_MAX = 2**63 - 1
# the fixed columns by the type the schema gives them
_TYPES = {f.name: f.type for f in fields(Row)}
INT_FIELDS = tuple(name for name, kind in _TYPES.items() if kind in ("int", "int | None"))
FLOAT_FIELDS = tuple(name for name, kind in _TYPES.items() if kind == "float | None")
TEXT_FIELDS = tuple(name for name, kind in _TYPES.items() if kind == "str")
LIST_FIELDS = ("samples", "round_sizes")
# a Row's own tables, as `dataclasses.asdict(row)` writes them rather than a column each
DICT_FIELDS = ("params", "conditions")
REQUIRED = ("study", "backend", "metric", "status", "seq")
# the schema that made each column a fixed one: in a file of an older schema a column of that
# name is a backend parameter (schema 2's `share` of linformer), so any plain value
SINCE = {
    **dict.fromkeys(("method", "grid_h", "grid_w", "stable", "spread", "speedup", "baseline"), 2),
    **dict.fromkeys(("case_id", "fingerprint", "run_id", "device_name", "threads"), 2),
    **dict.fromkeys(("git_revision",), 2),
    **dict.fromkeys(("stage", "share", "gflops_alg", "gflops_dense", "gbs_alg"), 3),
    **dict.fromkeys(("intensity_alg", "bound", "bound_pct"), 3),
    **dict.fromkeys(("speedup_low", "speedup_high"), 4),
    **dict.fromkeys(("node", "worker", "hardware", "co_tenancy"), 5),
}
PLAIN = "a plain value (text or a number), not a list or object"
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS = np.frombuffer(b"[{]}", dtype=np.uint8)


def nesting_depth(text: str) -> int:
    """How deep arrays and objects nest in JSON `text` (strings skipped). Measured on the
    text because json.loads recurses once a level: a file nested 200 000 deep would stop it
    with a RecursionError rather than an answer."""
    codes = np.frombuffer(_STRING.sub('""', text).encode(), dtype=np.uint8)
    brackets = codes[np.isin(codes, _BRACKETS)]
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)
    return int(np.cumsum(steps).max(initial=0))


def load_json(text: str, where: str, max_depth: int = MAX_DEPTH):
    """`json.loads(text)`, refusing text nested deeper than `max_depth` or not JSON with a
    ValueError that starts with `where`."""
    depth = nesting_depth(text)
    if depth > max_depth:
        raise ValueError(f"{where}: JSON nested {depth} deep (at most {max_depth} here)")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deep") from None
    except ValueError as exc:  # not JSON, or an integer of more digits than Python reads
        raise ValueError(f"{where}: not valid JSON ({_short(exc)})") from None


def check_rows(df: pd.DataFrame, name: str) -> pd.DataFrame:
    """The rows of the file `name` with samples and round sizes as lists and the number
    columns as numbers; ValueError naming the file, row and column of the first bad value."""
    df = df.copy()
    for column in REQUIRED:
        empty = df[column].map(_empty).to_numpy(dtype=bool)
        if empty.any():
            raise ValueError(f"{_where(name, int(empty.argmax()))}: {column} is empty")
    versions = pd.to_numeric(_cells(df, "schema_version"), errors="coerce")
    versions = np.nan_to_num(np.asarray(versions, dtype=float), nan=1.0)  # schema 1 wrote none
    for column in df.columns:
        if column not in LIST_FIELDS:
            _check_column(df, str(column), name, versions >= SINCE.get(column, 1))
    samples = [_samples(value, _where(name, i)) for i, value in enumerate(_cells(df, "samples"))]
    sizes = [
        _sizes(value, len(samples[i]), _where(name, i))
        for i, value in enumerate(_cells(df, "round_sizes"))
    ]
    if "samples" in df:
        df["samples"] = samples
    if "round_sizes" in df:
        df["round_sizes"] = sizes
    return df


def _check_column(df: pd.DataFrame, column: str, name: str, fixed: np.ndarray) -> None:
    """One column's values by the type the schema gives it in the rows where it is a fixed
    column (`fixed`), any plain value elsewhere and in extra columns; a float column read as
    text becomes numbers."""
    values = df[column]
    kind = values.dtype.kind
    if column in INT_FIELDS:
        check, what = _whole, "a whole number from 0 to 2**63 - 1"
    elif column in FLOAT_FIELDS:
        check, what = _finite, "a finite number"
    elif column == "stable":
        check, what = _flag, "true or false"
    elif column in TEXT_FIELDS:  # text pandas may have read as a number: "12e345" as inf
        check, what = _scalar, PLAIN
    elif column in DICT_FIELDS:
        check, what = _flat_dict, "a table of plain values"
    else:
        check, what = _plain, PLAIN
    if kind in "iuf" and check is _scalar:
        bad = np.zeros(len(values), dtype=bool)
    elif kind in "if" and check in (_finite, _plain):  # (uint64 may pass int64: by value)
        bad = np.isinf(values.to_numpy(dtype=float))  # the common case, at numpy's speed
    else:
        bad = ~values.map(check).to_numpy(dtype=bool)
    if not fixed.all():
        bad = np.where(fixed, bad, ~values.map(_plain).to_numpy(dtype=bool))
    if bad.any():
        i = int(bad.argmax())
        shown = _short(repr(_python(values.iloc[i])))
        what = what if fixed[i] else PLAIN
        raise ValueError(f"{_where(name, i)}: {column} {shown} is not {what}")
    if column in FLOAT_FIELDS and kind not in "iuf" and fixed.all():
        df[column] = pd.to_numeric(values.map(lambda v: None if is_missing(v) else v))


def _whole(value) -> bool:
    if _empty(value):
        return True
    number = _number(value)
    if number is None or isinstance(number, float) and not number.is_integer():
        return False
    return 0 <= int(number) <= INT64_MAX


def _finite(value) -> bool:
    if _empty(value):
        return True
    number = _number(value)
    return number is not None and not _infinite(number)


def _flag(value) -> bool:
    return is_missing(value) or str(value).strip().lower() in (
        "true", "false", "1", "0", "1.0", "0.0",
    )  # fmt: skip


def _plain(value) -> bool:
    """Text, a bool, or a number that is neither infinite nor outside int64."""
    value = _python(value)
    if isinstance(value, str | bool) or value is None:
        return True
    if isinstance(value, int):
        return -INT64_MAX - 1 <= value <= INT64_MAX
    return isinstance(value, float) and not math.isinf(value)


def _scalar(value) -> bool:
    return isinstance(_python(value), str | bool | int | float) or is_missing(value)


def _flat_dict(value) -> bool:
    value = _python(value)
    if isinstance(value, dict):
        return all(_plain(v) for v in value.values())
    return _plain(value)


def _empty(value) -> bool:
    """An empty cell: missing, or blank text."""
    return is_missing(value) or isinstance(value, str) and not value.strip()


def _infinite(number: int | float) -> bool:
    """Infinite, or an int too large for a float (10**400): no measurement is either."""
    try:
        return math.isinf(float(number))
    except OverflowError:
        return True


def _number(value) -> int | float | None:
    """A number as Python has it, from a number or its text; None for anything else."""
    value = _python(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return None
    return None


def _samples(value, where: str) -> list[float]:
    """A row's samples: a list (JSON), a JSON list text (schema 2 on), or numbers separated by
    spaces (schema 1)."""
    value = _python(value)
    if is_missing(value):
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            value = _flat_list(text, where, "samples", "a flat list of finite numbers")
        else:
            value = text.split()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list):
        raise ValueError(f"{where}: samples {_short(repr(value))} is not a list of numbers")
    out = []
    for item in value:
        number = _number(item) if isinstance(item, str | int | float) else None
        if number is None or _infinite(number):
            raise ValueError(
                f"{where}: samples must be a flat list of finite numbers, "
                f"not one holding {_short(repr(item))}"
            )
        out.append(float(number))
    return out


def _sizes(value, count: int, where: str) -> list[int]:
    """A row's round sizes: positive whole numbers, in all as many as the row's samples."""
    value = _python(value)
    if is_missing(value):
        return []
    if isinstance(value, str):
        value = _flat_list(value.strip(), where, "round_sizes", "a flat list of whole numbers")
    if not isinstance(value, list):
        raise ValueError(f"{where}: round_sizes {_short(repr(value))} is not a list")
    for item in value:
        if not (isinstance(item, int | float) and _whole(item) and item >= 1):
            raise ValueError(
                f"{where}: round_sizes must be whole numbers from 1 to 2**63 - 1, "
                f"not {_short(repr(item))}"
            )
    sizes = [int(x) for x in value]
    if sizes and sum(sizes) != count:
        raise ValueError(
            f"{where}: round_sizes add up to {_short(str(sum(sizes)))}, "
            f"not the row's {count} samples"
        )
    return sizes


def _flat_list(text: str, where: str, column: str, what: str):
    """The JSON value of a cell that should hold a flat list (one nested deeper is refused
    before it is parsed)."""
    depth = nesting_depth(text)
    if depth > 1:
        raise ValueError(f"{where}: {column} must be {what}, not a list nested {depth} deep")
    return load_json(text, f"{where}: {column}", max_depth=1)


def _cells(df: pd.DataFrame, column: str) -> list:
    return df[column].tolist() if column in df else [None] * len(df)


def _python(value):
    """A numpy scalar as the Python value it holds."""
    return value.item() if isinstance(value, np.generic) else value


def _where(name: str, i: int) -> str:
    return f"{name}: row {i + 1}"


def _short(text, limit: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
