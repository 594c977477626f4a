"""The result sink: locks its outputs and commits each finished case to all of them.

Invariants, and why they hold:
- While a sink is open no other attnbench run writes its outputs: each has an flock on a
  `.NAME.lock` beside it, and the kernel drops an flock when its holder dies.
- Every output holds whole cases, the CSV and the JSON the same ones. A commit appends the
  case to the CSV, then to the JSON (`formats` explains the layout), each write fsynced
  before the next, with SIGINT and SIGTERM held off until every file holds the case. A write
  that fails (a full disk) cuts every file back to what it held before the case. Only SIGKILL
  (or a power cut) between the two files leaves the JSON one case behind the CSV, and
  `resume` reads the CSV.
- A run's outputs replace older files only whole, with its first case: until then (a run
  interrupted or refused before any case finished) the older files stay as they were; a
  run that ends normally without a case leaves empty files (a resumed one, the rows it
  resumed from).
- A commit writes only its case, so a sweep writes each byte about once. The first commit
  of a run, resumed or not, writes every file whole (temp file + rename); so does, rarely,
  a case that brings a column
  the CSV header lacks (a backend parameter or condition not seen before) or that replaces
  the rows of a resumed case.
- A torn append is repaired before anything reads the file. SIGKILL can cut a write short,
  so while cases are appended the second line of an output's lock file holds its committed
  length (`len(head + body)`, updated after each fsync); the line is blank while the file is
  whole by construction. A run that takes over the lock of a dead holder cuts the output
  back to that length and puts the tail back. Until then readers refuse the torn file.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from attnbench.errors import UsageError
from attnbench.results.formats import (
    JSON_TAIL,
    csv_lines,
    csv_text,
    cut_back,
    env_text,
    json_lines,
    json_text,
    remove_leftover_temps,
    write_at,
    write_temp,
)
from attnbench.results.interrupts import deferred_interrupts
from attnbench.results.read import read_rows
from attnbench.results.schema import (
    COLUMNS,
    DONE_STATUSES,
    Row,
    env_sidecar,
    fingerprint,
    is_missing,
    output_target,
    record,
    record_columns,
)


@dataclass
class _Lock:
    """An flock held through `fd` on the lock file `path`. The file's first line names the
    holder; its second, at `record_at`, is blank or the committed length of the output."""

    path: Path
    fd: int
    record_at: int
    recorded: int | None = None  # what the second line says; None: blank or absent
    keep: bool = False  # the output could not be cut back: leave the record for the next run


@dataclass
class _Output:
    """A file that cases are appended to: `end` is `len(head + body)`, where the next goes."""

    path: Path
    tail: bytes
    lock: _Lock
    end: int = 0


class ResultSink:
    """Locks its outputs and commits each finished case to all of them in one step.

    with ResultSink(env, csv, json_path, resume=True) as sink:
        for case in cases:
            if sink.done(case_id(case)) is None:
                sink.add_case(run(case))
    """

    def __init__(
        self,
        env: dict,
        csv: Path | None = None,
        json_path: Path | None = None,
        resume: bool = False,
    ):
        self.env = env
        self.csv = None if csv is None else output_target(csv)
        self.json = None if json_path is None else output_target(json_path)
        self.resume = resume
        self.run_id = uuid.uuid4().hex
        self.fingerprint = fingerprint(env)
        self.rows: list[Row] = []  # this run's rows
        self.records: list[dict] = []  # every row in the outputs, resumed ones included
        self._by_case: dict[str, list[dict]] = {}  # self.records by case_id
        self._header: list[str] = []  # the CSV's columns
        self._locks: list[_Lock] = []
        self._appended: dict[Path, _Output] = {}
        self._writing: Path | None = None  # the file being written, for the error line
        self._open = False
        self._fresh = False  # nothing written yet: the first case rewrites every output

    @property
    def outputs(self) -> list[Path]:
        csv_files = [self.csv, env_sidecar(self.csv)] if self.csv is not None else []
        return [*csv_files, *([self.json] if self.json is not None else [])]

    def __enter__(self) -> ResultSink:
        try:
            owner = self.env.get("command") or shlex.join(sys.argv)
            tails = {self.csv: b"", self.json: JSON_TAIL.encode()}
            for path in self.outputs:
                lock = _take_lock(path, owner, tails.get(path))
                self._locks.append(lock)
                if path in tails:
                    self._appended[path] = _Output(path, tails[path], lock)
            for path in self.outputs:
                remove_leftover_temps(path)
            if self.resume:
                self._set_records(self._load())
            self._fresh = True  # the files stay as they are until this run's first case
        except BaseException:
            self._release()
            raise
        self._open = True
        return self

    def __exit__(self, kind, *exc) -> None:
        self._open = False
        try:
            if self._fresh and kind is None:  # a run that ended with no case
                self._commit(self._rewrite, self.records, True)
        finally:
            with deferred_interrupts():
                self._release()

    def done(self, case_id: str) -> list[dict] | None:
        """The records of a case already in the outputs, measured in the same environment and
        finished (status ok, skipped or oom), else None. A case is committed whole, so any of
        its rows being present means all are."""
        found = self._by_case.get(case_id, []) if case_id else []
        if not found or any(r.get("fingerprint") != self.fingerprint for r in found):
            return None
        if any(r.get("status") not in DONE_STATUSES for r in found):
            return None
        return found

    def add_case(self, rows: list[Row]) -> None:
        """Commit one case's rows to every output; they replace the rows of the same case_id
        that a resumed file held. A row's own device name and threads (a remote worker's) stay."""
        if not self._open:
            raise RuntimeError("ResultSink.add_case outside `with ResultSink(...) as sink`")
        for row in rows:
            row.run_id, row.fingerprint = self.run_id, self.fingerprint
            row.device_name = row.device_name or self.env.get("device_name") or ""
            row.git_revision = self.env.get("git_revision") or ""
            row.threads = row.threads or self.env.get("threads", self.env.get("torch_threads"))
        new = [record(row) for row in rows]
        ids = {row.case_id for row in rows if row.case_id}
        replaces = any(not self._ours(r) for i in ids for r in self._by_case.get(i, ()))
        new_column = self.csv is not None and not set().union(*new) <= set(self._header)
        if replaces or new_column or self._fresh:
            kept = [r for r in self.records if r.get("case_id") not in ids or self._ours(r)]
            self._commit(self._rewrite, kept + new, self._fresh)
            self._set_records(kept + new)
            self._fresh = False
        else:
            self._commit(self._append, new)
            self.records.extend(new)
            self._index(new)
        self.rows.extend(rows)

    def add(self, row: Row) -> None:
        self.add_case([row])

    def _ours(self, flat: dict) -> bool:
        return flat.get("run_id") == self.run_id

    def _set_records(self, records: list[dict]) -> None:
        self.records, self._by_case = records, {}
        self._index(records)

    def _index(self, records: list[dict]) -> None:
        for flat in records:
            if flat.get("case_id"):
                self._by_case.setdefault(flat["case_id"], []).append(flat)

    @property
    def source(self) -> Path | None:
        """The file a resumed run reads: the CSV, written first at each commit, else the JSON."""
        return next((p for p in (self.csv, self.json) if p is not None and p.exists()), None)

    def _load(self) -> list[dict]:
        """The rows to resume from (see `source`)."""
        source = self.source
        if source is None:
            return []
        try:
            frame = read_rows(source)
        except (ValueError, OSError) as exc:
            raise UsageError(f"--resume: cannot read {source} ({exc})") from None
        # a parameter or condition column is empty on rows of backends that lack it
        return [
            {
                k: None if is_missing(v) else v
                for k, v in flat.items()
                if k in COLUMNS or not is_missing(v)
            }
            for flat in frame.to_dict("records")
        ]

    def _commit(self, write, *args) -> None:
        """`write(*args)` with SIGINT and SIGTERM held until it ends. An OSError (a full disk
        or quota, a file system gone read-only) ends the run with one line; `write` has left
        the files as they were, with every case committed before."""
        try:
            with deferred_interrupts():
                write(*args)
        except OSError as exc:
            if exc.errno is None:
                raise
            cases = len({_case_key(r) for r in self.records})
            raise UsageError(
                f"cannot write {self._writing}: {os.strerror(exc.errno)}; "
                f"the {cases} completed cases are kept"
            ) from None

    def _rewrite(self, records: list[dict], with_env: bool = False) -> None:
        """Every output whole: all temp files first, then the renames, the CSV's first."""
        texts: dict[Path, str] = {}
        if self.csv is not None:
            texts[self.csv] = csv_text(records)
            if with_env:
                texts[env_sidecar(self.csv)] = env_text(self.env)
        if self.json is not None:
            texts[self.json] = json_text(self.env, records)
        for out in self._appended.values():
            self._writing = out.path
            self._record(out.lock, None)  # whole before the rename and after it
        temps: list[tuple[str, Path]] = []
        try:
            for path, text in texts.items():
                self._writing = path
                temps.append((write_temp(path, text), path))
            for tmp, path in temps:
                self._writing = path
                os.replace(tmp, path)
        except BaseException:
            for tmp, _ in temps:
                Path(tmp).unlink(missing_ok=True)
            raise
        for path, out in self._appended.items():
            out.end = len(texts[path].encode()) - len(out.tail)
        self._header = record_columns(records)

    def _append(self, new: list[dict]) -> None:
        """The case's text and the tail written at each output's end, the CSV's first; on any
        failure every output is cut back to its end before the case."""
        texts: dict[Path, str] = {}
        if self.csv is not None:
            texts[self.csv] = csv_lines(new, self._header)
        if self.json is not None:
            texts[self.json] = json_lines(new, first=not self.records)
        started: list[tuple[_Output, int]] = []
        try:
            for path, text in texts.items():
                out, data = self._appended[path], text.encode()
                self._writing = path
                self._record(out.lock, out.end)  # where to cut back to, should the write tear
                started.append((out, out.end))
                write_at(path, out.end, data + out.tail)
                out.end += len(data)
                self._record(out.lock, out.end)
        except BaseException:
            for out, end in reversed(started):
                self._cut_back(out, end)
            raise

    def _cut_back(self, out: _Output, end: int) -> None:
        try:
            self._record(out.lock, end)
            cut_back(out.path, end, out.tail)
        except OSError:
            out.lock.keep = True  # the next run to take the lock cuts the file back
        out.end = end

    def _record(self, lock: _Lock, end: int | None) -> None:
        """Put `end` (None: blank) in the lock file's second line."""
        if lock.recorded != end:
            text = " " * _RECORD_WIDTH if end is None else f"{end:{_RECORD_WIDTH}d}"
            os.pwrite(lock.fd, f"{text}\n".encode(), lock.record_at)
            lock.recorded = end

    def _release(self) -> None:
        while self._locks:
            lock = self._locks.pop()
            if not lock.keep:
                lock.path.unlink(missing_ok=True)
            os.close(lock.fd)


def _case_key(flat: dict):
    return flat.get("case_id") or tuple(
        flat.get(k) for k in ("study", "backend", "device", "dtype", "mode", "inputs", "seq")
    )


# ----------------------------------------------------------------------------- locks

_RECORD_WIDTH = 20


def _take_lock(path: Path, owner: str, tail: bytes | None = None) -> _Lock:
    """An exclusive flock on `.NAME.lock` beside `path`, the file holding our pid and command.

    The kernel drops an flock when its holder dies, so a lock file left by a killed run is
    simply taken over, after cutting `path` back to the committed length it recorded (`tail`:
    the tail `path` ends with; None for a file that is only written whole). A live holder is
    named in the error.
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
            holder = os.pread(fd, 4096, 0).decode(errors="replace").partition("\n")[0]
            os.close(fd)
            pid, _, command = holder.strip().partition(" ")
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
    try:
        if tail is not None:
            _repair(path, _recorded_end(os.pread(fd, 4096, 0)), tail)
    except BaseException:
        os.close(fd)  # the lock file, and a record in it, stay for the next run
        raise
    line = f"{os.getpid()} {' '.join(owner.split())[:200]}\n".encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, line, 0)
    except OSError as exc:  # a full disk, say: no record to keep, so no lock file either
        lock.unlink(missing_ok=True)
        os.close(fd)
        raise UsageError(f"cannot lock {path}: {exc.strerror}") from None
    except BaseException:
        os.close(fd)
        raise
    return _Lock(lock, fd, len(line))


def _recorded_end(held: bytes) -> int | None:
    """The committed length in a lock file's second line, if there is one."""
    second = held.split(b"\n")[1:2]
    text = second[0].strip() if second else b""
    return int(text) if text.isdigit() else None


def _repair(path: Path, end: int | None, tail: bytes) -> None:
    """Cut `path` back to `end` and its tail: a writer that died mid-append left more."""
    try:
        if end is not None and os.stat(path).st_size >= end:  # else not the file recorded
            cut_back(path, end, tail)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise UsageError(f"cannot repair {path}, cut off by a killed run: {exc.strerror}") from None
