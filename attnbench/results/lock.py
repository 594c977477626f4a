"""The lock file beside each output: who holds the output, and where a torn append ends.

Invariants, and why they hold:
- `.NAME.lock` is opened without following a symbolic link and is changed only when it is
  a regular file of this user's, with one name, holding lock lines (or nothing): a link or
  a file planted there cannot turn the lock's writes onto another file. It is created 0600.
- Its second line, while cases are appended, is a `Record`: the output's committed length,
  the run that wrote it, and the SHA-256 of those committed bytes. A run that takes over
  the lock of a killed one trusts the record only if the output still starts with exactly
  those bytes, which the recording run wrote: a file restored or replaced since, or a
  planted record, is left alone (and the user told) instead of being cut to that length.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from attnbench.errors import UsageError

_END_WIDTH = 20
RECORD_WIDTH = _END_WIDTH + 1 + 32 + 1 + 64  # end, run id (uuid4 hex), SHA-256 hex
_RECORD = re.compile(rb" *(\d+) ([0-9a-f]{32}) ([0-9a-f]{64})")
# what a lock file holds: nothing, or "PID COMMAND" and a second line (either cut short)
_LOCK_TEXT = re.compile(rb"(\d+([ \n].*)?)?", re.S)
_MAX_LOCK_BYTES = 4096


@dataclass(frozen=True)
class Record:
    """The committed part of an output: `end` bytes, written by the run `run_id`, hashing to
    `digest`; where a torn append is cut back to."""

    end: int
    run_id: str
    digest: str

    def text(self) -> str:
        return f"{self.end:{_END_WIDTH}d} {self.run_id} {self.digest}"


@dataclass
class Lock:
    """An flock held through `fd` on the lock file `path`. The file's first line names the
    holder; its second, at `record_at`, is blank or a `Record`."""

    path: Path
    fd: int
    record_at: int
    recorded: Record | None = None  # what the second line says; None: blank or absent
    keep: bool = False  # the output may be torn: leave the record for the next run
    owed: Record | None = None  # a killed run's record, trusted: its output is cut back to it


def take_lock(path: Path, owner: str, appended: bool) -> Lock:
    """An exclusive flock on `.NAME.lock` beside `path`, the file holding our pid and command.

    The kernel drops an flock when its holder dies, so a lock file left by a killed run is
    simply taken over; its record, where trusted (`appended`: cases are appended to `path`),
    is kept as `owed` and the file left as it is, to be read as cut back to it and replaced
    whole by the run's first commit (`repair`). A live holder is named in the error.
    """
    lock = path.with_name(f".{path.name}.lock")
    while True:
        fd = _open(lock, path)
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
            same = os.path.samestat(os.fstat(fd), os.lstat(lock))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        held = _held(fd, lock, path)
        owed = _trusted_record(path, lock, held) if appended else None
    except BaseException:
        os.close(fd)
        raise
    line = f"{os.getpid()} {' '.join(owner.split())[:200]}\n".encode()
    text = line + (f"{owed.text()}\n".encode() if owed else b"")
    try:
        os.pwrite(fd, text, 0)  # then cut to length: no moment with the record gone
        os.ftruncate(fd, len(text))
    except OSError as exc:  # a full disk, say: no record to keep, so no lock file either
        if owed is None:
            lock.unlink(missing_ok=True)
        os.close(fd)
        raise UsageError(f"cannot lock {path}: {exc.strerror}") from None
    except BaseException:
        os.close(fd)
        raise
    return Lock(lock, fd, len(line), recorded=owed, keep=owed is not None, owed=owed)


def write_record(lock: Lock, record: Record | None) -> None:
    """Put `record` (None: blank) in the lock file's second line."""
    if lock.recorded != record:
        text = " " * RECORD_WIDTH if record is None else record.text()
        os.pwrite(lock.fd, f"{text}\n".encode(), lock.record_at)
        lock.recorded = record


def release(lock: Lock) -> None:
    if not lock.keep:
        lock.path.unlink(missing_ok=True)
    os.close(lock.fd)


def _open(lock: Path, path: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        return os.open(lock, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(
                f"cannot lock {path}: {lock} is a symbolic link; attnbench writes its lock "
                "file itself, so remove the link"
            ) from None
        raise UsageError(f"cannot lock {path}: {exc.strerror}") from None


def _held(fd: int, lock: Path, path: Path) -> bytes:
    """What the lock file holds, once it is known to be an attnbench lock file of this user's:
    a regular file with one name (not a hard link to another file) and lock lines."""
    info = os.fstat(fd)
    held = os.pread(fd, _MAX_LOCK_BYTES + 1, 0)
    ours = stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_uid == os.geteuid()
    if not ours or len(held) > _MAX_LOCK_BYTES or not _LOCK_TEXT.fullmatch(held):
        raise UsageError(
            f"cannot lock {path}: {lock} is not an attnbench lock file of this user's; "
            "remove it if no attnbench run is writing there"
        )
    return held


def _trusted_record(path: Path, lock: Path, held: bytes) -> Record | None:
    """The record a killed run left in `held`, if `path` still starts with the bytes it
    committed; else None, with a line on stderr when there was a record to distrust."""
    second = held.split(b"\n")[1:2]
    text = second[0].strip() if second else b""
    if not text or not path.exists():
        return None
    found = _RECORD.fullmatch(text)
    if found:
        record = Record(int(found[1]), found[2].decode(), found[3].decode())
        try:
            with open(path, "rb") as f:
                committed = f.read(record.end)
        except OSError:
            committed = b""
        digest = hashlib.sha256(committed).hexdigest()
        if len(committed) == record.end and digest == record.digest:
            if record.run_id.encode() in committed:  # its first commit holds its own rows
                return record
    print(
        f"warning: {lock.name} says a killed run left {path} cut off, but the file is not "
        "the one that run wrote (restored or replaced since?): it is left as it is",
        file=sys.stderr,
    )
    return None
