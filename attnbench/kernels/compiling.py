"""A line on stderr while numba compiles a CPU kernel, and one with the time it took.

A kernel's first call in a process compiles it unless numba's on-disk cache holds it, and
that can take minutes (SCRAM's PatchMatch on a loaded machine): without a word it looks like
a hang. numba broadcasts a "numba:compile" event around each compilation that misses the
cache; the outermost one is reported, not the helpers it compiles inside it. The time study
never counts a compilation in its samples: it happens in the first call, reported apart as
`first_call_ms`, and the samples come after the warm-up. numba-cuda's kernels broadcast no
such event, so a CUDA kernel's compilation is not announced.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from numba.core import event

KIND = "numba:compile"
PREFIX = "attnbench.kernels."


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # the stream of the moment: a CLI may swap it


class CompileReporter(event.Listener):
    """Writes one line when an outermost compilation starts and one when it ends (a failed
    one ends too: its error follows)."""

    def __init__(self, write: Callable[[str], None] = _stderr):
        self.write = write
        self.depth = 0  # compilations in progress: a kernel compiles the helpers it calls
        self.name = ""
        self.started = 0.0

    def on_start(self, ev: event.Event) -> None:
        self.depth += 1
        if self.depth == 1:
            self.name = kernel_name(ev.data["dispatcher"])
            self.started = time.perf_counter()
            self.write(f"compiling numba kernel {self.name} (first call; not in timed samples)")

    def on_end(self, ev: event.Event) -> None:
        self.depth -= 1
        if self.depth == 0:
            seconds = time.perf_counter() - self.started
            self.write(f"compiled numba kernel {self.name} in {seconds:.1f} s")


def kernel_name(dispatcher) -> str:
    """The kernel's module and name, without the package prefix they all share."""
    fn = dispatcher.py_func
    return f"{fn.__module__}.{fn.__qualname__}".removeprefix(PREFIX)


_installed: CompileReporter | None = None


def report_compiles() -> CompileReporter:
    """Register the process's one reporter (again: the same one); the kernel modules call
    this on import, before any of their kernels can compile."""
    global _installed
    if _installed is None:
        _installed = CompileReporter()
        event.register(KIND, _installed)
    return _installed
