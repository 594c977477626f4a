"""SIGTERM treated as Ctrl-C, and short stretches of code that no signal may cut in two.

A run stopped by SIGTERM (a job scheduler, `kill`, a container stop) must end the way Ctrl-C
does: the interrupt unwinds the stack, outputs keep every completed case, locks are released.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

DEFERRED = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as an interrupt so every `except KeyboardInterrupt` cleanup runs."""


class SigtermState:
    """Whether a SIGTERM arrived while `sigterm_as_interrupt` was active."""

    received: bool = False


@contextmanager
def sigterm_as_interrupt() -> Iterator[SigtermState]:
    """While active, SIGTERM raises `Terminated`; the previous handler is restored after.

    Outside the main thread Python cannot install handlers, so nothing changes there.
    """
    state = SigtermState()

    def handler(signum, frame):
        state.received = True
        raise Terminated

    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield state
    finally:
        signal.signal(signal.SIGTERM, _restorable(previous))


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
