"""The bytes of result files: CSV and JSON text of flat records, and the ways they reach disk.

Invariant: every result file is `head + body + tail`, and the body is the rows' text in
order, so a case can be appended by writing its rows and the tail at `len(head + body)`:
    CSV   head: the header line       body: one line per row         tail: ""
    JSON  head: `{"schema_version": 2,\\n"env": ENV,\\n"rows": [`
          body: "\\n" ROW for the first row, ",\\n" ROW after        tail: "\\n]}\\n"
A CSV cell is empty for None/NaN, a float as Python (and pandas) writes it, samples and
round sizes a JSON list; the whole-file text and the appended text of the same rows are the
same bytes.
Whole files are written through a temp file beside them and a rename, so a reader sees the
old file or the new one; appended data are fsynced before the writer returns.
"""

from __future__ import annotations

import csv
import errno
import glob
import io
import json
import os
import re
import secrets
import tempfile
from pathlib import Path

from attnbench.errors import UsageError
from attnbench.results.schema import (
    SCHEMA_VERSION,
    as_samples,
    as_sizes,
    is_missing,
    record_columns,
)

JSON_TAIL = "\n]}\n"


def csv_head(columns: list[str]) -> str:
    return _csv([columns])


def csv_lines(records: list[dict], columns: list[str]) -> str:
    """The CSV lines of `records` under the header `columns` (each record's keys among them)."""
    return _csv([_cell(r.get(c), c) for c in columns] for r in records)


def csv_text(records: list[dict]) -> str:
    columns = record_columns(records)
    return csv_head(columns) + csv_lines(records, columns)


def json_head(env: dict) -> str:
    return f'{{"schema_version": {SCHEMA_VERSION},\n"env": {_env_json(env)},\n"rows": ['


def json_lines(records: list[dict], first: bool) -> str:
    """The JSON body text of `records`, one row per line so that long sweeps stay readable
    and diffable; `first`: they are the first rows of the file."""
    return "".join(
        ("\n" if first and i == 0 else ",\n") + json.dumps(r, default=_plain)
        for i, r in enumerate(records)
    )


def json_text(env: dict, records: list[dict]) -> str:
    return json_head(env) + json_lines(records, first=True) + JSON_TAIL


def env_text(env: dict) -> str:
    """The environment sidecar written next to a CSV."""
    return _env_json(env) + "\n"


def _env_json(env: dict) -> str:
    return json.dumps(env, indent=2, default=_plain)


def _csv(rows) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def _cell(value, column: str):
    if column == "samples":
        return json.dumps(as_samples(value))
    if column == "round_sizes":
        return json.dumps(as_sizes(value))
    if hasattr(value, "item"):  # a numpy scalar
        value = value.item()
    return "" if is_missing(value) else value


def _plain(value):
    """numpy scalars and other strays as plain Python values."""
    return value.item() if hasattr(value, "item") else str(value)


_WHOLE = re.compile(r"-?\d+")


def whole_numbers(text: str, is_json: bool) -> dict[str, list[int | None]]:
    """The columns of a result file's text written as whole numbers in every non-empty cell,
    each with its rows' ints (None: empty), so that a file read back with pandas, which
    turns a column with empty cells into floats, is written again as it was."""
    if is_json:
        rows = json.loads(text).get("rows") or []
        columns = dict.fromkeys(k for r in rows for k in r)
        cells = {c: [r.get(c) for r in rows] for c in columns}
    else:
        lines = [r for r in csv.reader(io.StringIO(text)) if r]
        header, rows = (lines[0], lines[1:]) if lines else ([], [])
        cells = {c: [r[i] if i < len(r) and r[i] != "" else None for r in rows]
                 for i, c in enumerate(header)}  # fmt: skip
    return {
        column: [None if v is None else int(v) for v in values]
        for column, values in cells.items()
        if any(v is not None for v in values)
        and all(v is None or _is_whole(v, is_json) for v in values)
    }


def _is_whole(value, is_json: bool) -> bool:
    if is_json:
        return isinstance(value, int) and not isinstance(value, bool)
    return _WHOLE.fullmatch(value) is not None


# ----------------------------------------------------------------------------- on disk


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` through a temp file in the same directory, then rename."""
    os.replace(write_temp(Path(path), text), path)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """`atomic_write` for binary data (a checkpoint)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_temp(path: Path, text: str) -> str:
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


def remove_leftover_temps(path: Path) -> None:
    """Delete the temp files a killed run left beside `path` (call while holding its lock)."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        if pattern.fullmatch(leftover.name):
            leftover.unlink(missing_ok=True)


def check_replaceable(path: Path) -> None:
    """UsageError if the file at `path` is immutable or append-only (`chattr +i`, `+a`):
    renaming over it fails, so a run must be refused before it replaces any other file."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))
    except PermissionError as exc:  # EACCES: a read-only file, which a rename still replaces
        if exc.errno == errno.EPERM:
            raise UsageError(
                f"cannot replace {path}: {exc.strerror} (immutable or append-only? see "
                "lsattr); the files are left as they were"
            ) from None
    except OSError:
        pass  # no file yet, or one the writes report in their own words


def link_aside(path: Path) -> str | None:
    """A second, hidden name beside `path` for the file there (`.NAME.XXXXXXXX.tmp`), to put
    it back after it is replaced: "" where there is no file, None where it cannot be linked
    (a file system without hard links)."""
    while True:
        aside = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            os.link(path, aside, follow_symlinks=False)
        except FileExistsError:
            continue
        except FileNotFoundError:
            return ""
        except OSError:
            return None
        return str(aside)


def put_back(path: Path, aside: str | None) -> None:
    """Undo a rename over `path` (`aside` from `link_aside`): the older file back, or no file
    where there was none. Best effort: the error that called for it is the one reported."""
    try:
        if aside:
            os.replace(aside, path)
        elif aside == "":
            path.unlink(missing_ok=True)
    except OSError:
        pass


def write_at(path: Path, offset: int, data: bytes) -> None:
    """Write `data` into the existing file `path` at `offset`; on the disk when this returns.

    A write may be cut short (a signal, a full disk): the rest is written by the next one."""
    fd = os.open(path, os.O_WRONLY)
    try:
        _pwrite_all(fd, data, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def cut_back(path: Path, end: int, tail: bytes) -> None:
    """Make `path` end with `tail` at `end`: what was written past `end` goes, whole or torn."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, end + len(tail))
        _pwrite_all(fd, tail, end)
        os.fsync(fd)
    finally:
        os.close(fd)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
