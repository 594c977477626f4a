"""A numba kernel's first-call compilation is announced on stderr, and a time study's
samples never include it (it falls in the first call, reported apart as first_call_ms).

Each test compiles a tiny fresh function (no on-disk cache): well under a second.
"""

from __future__ import annotations

from numba import njit
from numba.core import event

import attnbench.kernels.lsh.core  # noqa: F401  (a kernel module: installs the reporter)
from attnbench.kernels import compiling
from attnbench.measure.timing import Timer


def _fresh_kernel():
    @njit
    def helper(x):
        return x + 1

    @njit
    def kernel(x):
        return helper(x) * 2

    return kernel


def test_an_outermost_compilation_is_announced_and_timed_once():
    lines = []
    kernel = _fresh_kernel()
    with event.install_listener(compiling.KIND, compiling.CompileReporter(lines.append)):
        assert kernel(1) == 4
        assert kernel(2) == 6  # compiled: nothing more to say
    name = "test_compiling._fresh_kernel.<locals>.kernel"
    assert lines[0] == f"compiling numba kernel {name} (first call; not in timed samples)"
    assert lines[1].startswith(f"compiled numba kernel {name} in ") and lines[1].endswith(" s")
    assert len(lines) == 2  # its helper compiled inside it, not reported on its own


def test_kernel_modules_install_one_reporter_on_stderr(capsys):
    assert compiling.report_compiles() is compiling.report_compiles()
    _fresh_kernel()(1)
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" numba kernel ")[0] for line in err] == ["compiling", "compiled"]


def test_compilation_falls_in_the_first_call_not_in_the_samples():
    calls, compiled_during = [], []
    kernel = _fresh_kernel()

    class Listener(event.Listener):
        def on_start(self, ev):
            compiled_during.append(len(calls))

        def on_end(self, ev):
            pass

    def call():
        calls.append(None)
        kernel(1)

    with event.install_listener(compiling.KIND, Listener()):
        timing = Timer(call, "cpu", warmup=0, min_time_s=0).timing()
        assert compiled_during[0] == 1 and set(compiled_during) == {1}  # the first call
        timer = Timer(call, "cpu", warmup=0, min_time_s=0)
    timer.sample(3, 0)
    assert len(timer.timing().samples_ms) == 3 and timing.first_call_ms > 0
    assert len(calls) == 2 + 3 * timer.loops  # two first calls, then the samples
