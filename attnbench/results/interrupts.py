"""SIGINT and SIGTERM: an interrupt that unwinds during a run, the end of the process at once
outside one, and short stretches of code that no signal may cut in two.

A run stopped by SIGTERM (a job scheduler, `kill`, a container stop) must end the way Ctrl-C
does: the interrupt unwinds the stack, outputs keep every completed case, locks are released.
Outside a run (while modules import, while the interpreter shuts down) there is nothing to
unwind, and an exception there can be swallowed or turned into another by library code, so
the process ends at once: one line `interrupted`, exit code 128 + the signal's number.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

DEFERRED = (signal.SIGINT, signal.SIGTERM)
IMPORTING = "<frozen importlib"  # the file name of the import machinery's frames


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as an interrupt so every `except KeyboardInterrupt` cleanup runs."""


class SigtermState:
    """Whether a SIGTERM arrived while `sigterm_as_interrupt` was active."""

    received: bool = False


_announced = False  # whether this process has said `interrupted`


def announce_interrupt() -> None:
    """Write `interrupted` on stderr: the one line of an interrupted run."""
    global _announced
    _announced = True
    sys.stderr.write("interrupted\n")
    sys.stderr.flush()


def exit_at_once(signum: int, frame=None) -> None:
    """A signal handler: the line (unless already said), then exit 128 + `signum`, running
    no other code."""
    global _announced
    if not _announced:
        _announced = True
        try:
            sys.stderr.flush()
        except (OSError, ValueError, RuntimeError):  # closed, or cut in the middle of a write
            pass
        os.write(2, b"interrupted\n")
    os._exit(128 + signum)


def end_at_once() -> None:
    """From now on SIGINT and SIGTERM end the process at once (`exit_at_once`), and any of
    them held blocked by whoever started this process is delivered now, to that handler."""
    for sig in DEFERRED:
        signal.signal(sig, exit_at_once)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, DEFERRED)


def exit_process(code: int) -> None:
    """End the process with `code` as the interpreter would (threads joined, atexit run,
    streams flushed) while SIGINT and SIGTERM still end it at once: a signal that arrives
    before the very end turns the exit into 128 + its number, never a silent 0."""
    end_at_once()
    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter calls first
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_BLOCK, DEFERRED)
    pending = signal.sigpending() & set(DEFERRED)  # sent after the handlers' last chance
    if pending:
        exit_at_once(min(pending))
    os._exit(code)


@contextmanager
def sigterm_as_interrupt() -> Iterator[SigtermState]:
    """While active, SIGTERM raises `Terminated` and SIGINT `KeyboardInterrupt`, except
    while a module imports, where both end the process at once (`exit_at_once`); the
    previous handlers are restored after.

    Outside the main thread Python cannot install handlers, so nothing changes there.
    """
    state = SigtermState()

    def handler(signum, frame):
        if _importing(frame):
            exit_at_once(signum)
        if signum == signal.SIGTERM:
            state.received = True
            raise Terminated
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    previous = {sig: signal.signal(sig, handler) for sig in DEFERRED}
    try:
        yield state
    finally:
        for sig, old in previous.items():
            signal.signal(sig, _restorable(old))


def _importing(frame) -> bool:
    """Whether `frame` runs inside an import (the import machinery is on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(IMPORTING):
            return True
        frame = frame.f_back
    return False


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, then deliver them to the handlers that
    were installed before, so a commit of several files is never cut in two."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, frame: pending.append(signum)) for sig in DEFERRED
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, _restorable(handler))
        for sig in dict.fromkeys(pending):
            signal.raise_signal(sig)


def _restorable(handler):
    """`signal.signal` answers None for a handler set outside Python; the default stands in."""
    return signal.SIG_DFL if handler is None else handler
