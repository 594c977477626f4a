"""Stage times of one call on the CPU, clocked by the stage markers themselves.

Under torch's profiler every aten op is recorded, which slows a call of many small ops well
past its unprofiled time, so its stages would not add up to the call. On the CPU a stage is
instead clocked where it is marked: while a `StageClock` runs, `Backend.stage` enters a
span that reads the clock at entry and exit, and nothing else is recorded. A span's *self*
time (its duration less the spans nested in it on the same thread) goes to its name, so a
stage nested in another counts once and the stages of a call add up to at most the call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_running: StageClock | None = None


class StageClock:
    """Nanoseconds of self time by span name, over the calls made while it runs."""

    def __init__(self) -> None:
        self.spent_ns: dict[str, int] = {}
        self._local = threading.local()

    def span(self, name: str) -> _Span:
        return _Span(self, name)

    def stack(self) -> list[_Span]:
        """The spans open on this thread, innermost last."""
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        return self._local.stack


class _Span:
    __slots__ = ("clock", "name", "start", "nested")

    def __init__(self, clock: StageClock, name: str) -> None:
        self.clock, self.name, self.nested = clock, name, 0

    def __enter__(self) -> _Span:
        self.clock.stack().append(self)
        self.start = time.perf_counter_ns()
        return self

    def __exit__(self, *exc) -> None:
        duration = time.perf_counter_ns() - self.start
        stack = self.clock.stack()
        stack.pop()
        spent = self.clock.spent_ns
        spent[self.name] = spent.get(self.name, 0) + duration - self.nested
        if stack:
            stack[-1].nested += duration


def running() -> StageClock | None:
    """The clock the stage markers report to now, if one runs."""
    return _running


@contextmanager
def clocking() -> Iterator[StageClock]:
    """Run a fresh clock for the duration of the block."""
    global _running
    clock, saved = StageClock(), _running
    _running = clock
    try:
        yield clock
    finally:
        _running = saved


def clocked(fn: Callable[[], object], prefix: str) -> tuple[dict[str, float], float]:
    """Milliseconds of each stage named `prefix` + stage in one call of `fn`, and the
    call's wall time in milliseconds."""
    with clocking() as clock:
        start = time.perf_counter_ns()
        fn()
        wall_ms = (time.perf_counter_ns() - start) / 1e6
    spent = {
        name[len(prefix) :]: ns / 1e6
        for name, ns in clock.spent_ns.items()
        if name.startswith(prefix)
    }
    return spent, wall_ms
