"""The lock on each output and the repair of a torn append: the protocol the sink keeps so that
one run writes an output at a time and a killed one leaves nothing a later run cannot mend.

Invariants, and why they hold:
- While a sink is open no other attnbench run writes its outputs: each has an flock on a
  `.NAME.lock` beside it (`lock` says what the file holds, and why a planted one is refused),
  and the kernel drops an flock when its holder dies.
- SIGKILL can cut an append short, so while cases are appended the second line of an
  output's lock file records its committed length and bytes (`lock.Record`): it is written
  before each append and after it. The line is blank while the file is whole by
  construction (just replaced, or about to be).
- An append that fails (a full disk) cuts the file back to its committed end at once; if
  even that fails, the record stays in the lock file for the next run.
- A run that takes over the lock of a dead holder, and trusts its record, reads the output
  as cut back to that length (`read_committed`) without changing it; its first commit
  replaces the file whole (`Appended.replaced`) and blanks the record. A run refused or
  stopped before that leaves the file, and the record, as they were; until then readers
  refuse the torn file.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from attnbench.results.formats import cut_back
from attnbench.results.lock import Lock, Record, release, take_lock, write_record
from attnbench.results.read import read_rows


@dataclass
class Appended:
    """An output that cases are appended to by the run `run_id`: `end` is `len(head + body)`,
    where the next case goes, and `digest` the SHA-256 of those first `end` bytes."""

    path: Path
    tail: bytes
    lock: Lock
    run_id: str
    end: int = 0
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)

    @property
    def torn(self) -> bool:
        """A killed run's record is trusted: the file is read, and replaced, as cut back to it."""
        return self.lock.owed is not None

    def mark_whole(self) -> None:
        """Blank the record: the file is whole by construction until the next append."""
        write_record(self.lock, None)

    def replaced(self, data: bytes) -> None:
        """The file was replaced whole by `data`: appends go at its tail, and a killed run's
        record, now moot, goes with the lock file."""
        self.end = len(data) - len(self.tail)
        self.digest = hashlib.sha256(data[: self.end])
        self.mark_whole()
        self.lock.owed, self.lock.keep = None, False

    def record(self) -> None:
        """Record the committed part, `end` bytes hashing to `digest`, in the lock file."""
        write_record(self.lock, Record(self.end, self.run_id, self.digest.hexdigest()))

    def mark(self) -> tuple[int, hashlib._Hash]:
        """Where to cut back to should the next append fail."""
        return self.end, self.digest.copy()

    def appended(self, data: bytes) -> None:
        """`data` reached the disk at `end`: they are committed, and recorded so."""
        self.end += len(data)
        self.digest.update(data)
        self.record()

    def cut_back(self, mark: tuple[int, hashlib._Hash]) -> None:
        """Cut the file back to `mark` after a failed append; where that fails too, the record
        is kept for the next run to take the lock, which cuts the file back."""
        self.end, self.digest = mark
        try:
            self.record()
            cut_back(self.path, self.end, self.tail)
        except OSError:
            self.lock.keep = True


def lock_outputs(
    paths: list[Path], tails: dict[Path, bytes], owner: str, run_id: str, locks: list[Lock]
) -> dict[Path, Appended]:
    """Lock each of `paths`, adding each lock to `locks` once it is held (so that the caller
    releases every one taken should a later one be refused); those in `tails` (the file's
    tail) are appended to, and come back as `Appended`."""
    appended: dict[Path, Appended] = {}
    for path in paths:
        lock = take_lock(path, owner, appended=path in tails)
        locks.append(lock)
        if path in tails:
            appended[path] = Appended(path, tails[path], lock, run_id)
    return appended


def release_all(locks: list[Lock]) -> None:
    """Release the locks, last taken first; each is gone from `locks` once released."""
    while locks:
        release(locks.pop())


def read_committed(out: Appended) -> tuple[pd.DataFrame, str]:
    """The rows and the text of `out` that a resumed run reads: of a torn file, the part the
    killed run committed (a copy cut back is read: the file is not changed before a commit).
    ValueError or OSError when they cannot be read."""
    if not out.torn:
        frame, data = read_rows(out.path), out.path.read_bytes()
        return frame, data.decode()
    data = out.path.read_bytes()[: out.lock.owed.end] + out.tail
    with tempfile.TemporaryDirectory(prefix="attnbench-") as folder:
        copy = Path(folder, out.path.name)
        copy.write_bytes(data)
        frame = read_rows(copy)
    return frame, data.decode()
