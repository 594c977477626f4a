"""The result sink: each finished case committed to all of its outputs, in one step.

Invariants, and why they hold:
- While a sink is open no other attnbench run writes its outputs, and a torn append is
  repaired: `repair` holds that protocol (the lock beside each output, the record of its
  committed length, cutting a torn file back), which the commits below keep.
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
- A torn file left by a killed run is resumed from as cut back to its record, and is
  replaced whole only by this run's first commit, once the run is under way.
- An older file that cannot be replaced (immutable or append-only) refuses the run before
  any case, and a rename that fails puts back the files renamed before it, so the outputs
  never mix an older run's files with this one's.
"""

from __future__ import annotations

import os
import shlex
import sys
import uuid
from pathlib import Path

from attnbench.errors import UsageError
from attnbench.results.formats import (
    JSON_TAIL,
    check_replaceable,
    csv_lines,
    csv_text,
    env_text,
    json_lines,
    json_text,
    link_aside,
    put_back,
    remove_leftover_temps,
    whole_numbers,
    write_at,
    write_temp,
)
from attnbench.results.interrupts import deferred_interrupts
from attnbench.results.lock import Lock
from attnbench.results.paths import env_sidecar, output_target
from attnbench.results.repair import Appended, lock_outputs, read_committed, release_all
from attnbench.results.schema import (
    COLUMNS,
    DONE_STATUSES,
    Row,
    fingerprint,
    is_missing,
    record,
    record_columns,
)


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
        self._locks: list[Lock] = []
        self._appended: dict[Path, Appended] = {}
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
            self._appended = lock_outputs(self.outputs, tails, owner, self.run_id, self._locks)
            for path in self.outputs:
                remove_leftover_temps(path)
                check_replaceable(path)
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
        """The rows to resume from (see `source`): of a file a killed run left torn, the part
        it committed. Whole numbers stay ints (pandas reads a column with empty cells as
        floats, which would be written back as `8.0`)."""
        source = self.source
        if source is None:
            return []
        try:
            frame, text = read_committed(self._appended[source])
        except (ValueError, OSError) as exc:
            raise UsageError(f"--resume: cannot read {source} ({exc})") from None
        # a parameter or condition column is empty on rows of backends that lack it
        records = [
            {
                k: None if is_missing(v) else v
                for k, v in flat.items()
                if k in COLUMNS or not is_missing(v)
            }
            for flat in frame.to_dict("records")
        ]
        for column, values in whole_numbers(text, source.suffix.lower() == ".json").items():
            if len(values) == len(records):
                for flat, value in zip(records, values, strict=True):
                    if value is not None:
                        flat[column] = value
        return records

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
            kept = f"the {cases} completed cases are kept"
            if self._fresh:
                kept = "the files are left as they were"
            raise UsageError(
                f"cannot write {self._writing}: {os.strerror(exc.errno)}; {kept}"
            ) from None

    def _rewrite(self, records: list[dict], with_env: bool = False) -> None:
        """Every output whole: all temp files first, then the renames, the CSV's first. A
        rename that fails puts back the files renamed before it (kept aside as hard links),
        so the outputs are all older files or all this run's. A torn file's record goes once
        the file is replaced."""
        texts: dict[Path, str] = {}
        if self.csv is not None:
            texts[self.csv] = csv_text(records)
            if with_env:
                texts[env_sidecar(self.csv)] = env_text(self.env)
        if self.json is not None:
            texts[self.json] = json_text(self.env, records)
        for out in self._appended.values():
            if not out.torn:
                self._writing = out.path
                out.mark_whole()  # whole before the rename and after it
        temps: list[tuple[str, Path]] = []
        aside: dict[Path, str | None] = {}  # None: no file there, or no hard links
        renamed: list[Path] = []
        try:
            for path, text in texts.items():
                self._writing = path
                temps.append((write_temp(path, text), path))
                aside[path] = link_aside(path)
            for tmp, path in temps:
                self._writing = path
                os.replace(tmp, path)
                renamed.append(path)
        except BaseException:
            for path in reversed(renamed):
                put_back(path, aside.pop(path))
            raise
        finally:
            for name in [tmp for tmp, _ in temps] + [a for a in aside.values() if a]:
                Path(name).unlink(missing_ok=True)
        for path, out in self._appended.items():
            out.replaced(texts[path].encode())
        self._header = record_columns(records)

    def _append(self, new: list[dict]) -> None:
        """The case's text and the tail written at each output's end, the CSV's first; on any
        failure every output is cut back to its end before the case."""
        texts: dict[Path, str] = {}
        if self.csv is not None:
            texts[self.csv] = csv_lines(new, self._header)
        if self.json is not None:
            texts[self.json] = json_lines(new, first=not self.records)
        started: list[tuple[Appended, tuple]] = []
        try:
            for path, text in texts.items():
                out, data = self._appended[path], text.encode()
                self._writing = path
                out.record()  # where to cut back to, should the write tear
                started.append((out, out.mark()))
                write_at(path, out.end, data + out.tail)
                out.appended(data)
        except BaseException:
            for out, mark in reversed(started):
                out.cut_back(mark)
            raise

    def _release(self) -> None:
        release_all(self._locks)


def _case_key(flat: dict):
    return flat.get("case_id") or tuple(
        flat.get(k) for k in ("study", "backend", "device", "dtype", "mode", "inputs", "seq")
    )
