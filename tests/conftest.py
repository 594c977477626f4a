"""The test session: kernels compiled once and never by a test, two workers, and one
machine ceilings cache of the session's own.

numba's CPU kernels compile on their first call unless its on-disk cache holds them, minutes
on a fresh clone, and the first test to call one would pay for it (or two workers at once).
So the session starts by compiling them, in the controlling process alone: two processes
at once (`compile_kernels`), each calling a disjoint part of the kernels on tiny inputs,
fill the cache (or find it filled) while the tests are collected. No test starts before the
"others" part is done; PatchMatch's kernels, the longest to compile, go on beside the first
tests, and a test process's first call of one waits until they are in the cache
(`_wait_for_patchmatch`), so they are loaded, not compiled again. The tests that run
PatchMatch come last (LATE), so that none waits. A test during which a cached kernel still
compiled, or that waited for PatchMatch's, warns (`pytest_runtest_call`).

With pytest-xdist installed (the test extra) the suite runs on WORKERS workers unless `-n`
says otherwise (`-n 0` or `-p no:xdist`: one process). Tests that must not run beside each
other share a group (`GROUPS`), and a group runs on one worker, in order
(`pytest_xdist_make_scheduler`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest

from attnbench.measure.ceilings import CACHE_ENV

pytest.register_assert_rewrite("helpers")  # its asserts explain their failures too

WORKERS = 2  # the two cores the suite is sized for (test_gate_loaded.py)
# module, or module::function -> group. ray: the module's one local cluster and the Ray
# processes its tests count; readme: the README's commands in its order, in one folder
# (later ones read what earlier ones wrote); host: tests that load the host, or whose
# processes must see their signals at set stages.
GROUPS = {
    "test_ray.py": "ray",
    "test_readme.py": "readme",
    "test_gate_loaded.py": "host",
    "test_signals.py": "host",
    "test_ceilings.py::test_the_other_processes_share_is_read_from_proc_stat": "host",
}
# Modules whose tests run PatchMatch on the CPU, run after the others (ORDER).
LATE = (
    "test_bad_inputs.py", "test_cli.py", "test_cost_scram.py", "test_exact.py",
    "test_hostile_inputs.py", "test_images.py", "test_patchmatch.py", "test_runner.py",
    "test_scram.py", "test_scram_mc.py", "test_selftest.py", "test_patchmatch_cuda.py",
)  # fmt: skip
ORDER = {"ray": 0, None: 1, "host": 2, "readme": 3, "late": 4}  # groups, no group, LATE
WAIT_WARNING_S = 5.0  # a wait for PatchMatch's kernels longer than loading them takes
PARTS = ("others", "patchmatch")  # of `compile_kernels`, one process each
PATCHMATCH = "attnbench.kernels.patchmatch.cpu"  # the kernels of the "patchmatch" part
_SESSION = pytest.StashKey[Path]()  # the session's folder: ceilings, compilation locks
_COMPILING = pytest.StashKey[dict]()  # the compiling processes and their logs


def compile_kernels(part: str) -> None:
    """Call each CPU kernel of `part` once on tiny inputs, with the argument types the
    library gives it, so that numba compiles it into its on-disk cache (or loads it).
    "patchmatch": PatchMatch's search (its passes compile inside it, sharing the helpers
    they inline) and window softmax; "others": YOSO's hashes and cumulations and the
    machine's kernels."""
    import torch

    from attnbench.kernels.patchmatch import dispatch

    q = torch.randn(1, 16, 8)
    if part == "patchmatch":
        dispatch.patchmatch(q, q, 4, 4, 2)
        dispatch.window_softmax(q, q, q, torch.zeros(1, 16, 2, dtype=torch.int32), 4, 4, 1)
        return
    import numpy as np

    from attnbench.kernels import adds, stream
    from attnbench.studies.selftest import numeric
    from attnbench.studies.selftest.target import target

    cpu = target("cpu", quick=True)
    numeric.hash_checks(cpu)
    numeric.yoso_checks(cpu)
    a, b, c = np.zeros(64), np.zeros(64), np.zeros(64)
    adds.vector_adds(1, 1)
    stream.fill(a, 1.0, 1)
    stream.copy(a, b, 1, 2)
    stream.triad(a, b, c, 0.5, 1, 2)


def _start_compiling(config: pytest.Config, parts: tuple[str, ...]) -> None:
    """A process for each of `parts`, each holding a lock on a file of the session folder
    from before it starts until it ends, however it ends (`_wait_for_patchmatch`)."""
    import fcntl

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}  # CPU kernels
    folder = config.stash[_SESSION]
    procs, logs = {}, {}
    for part in parts:
        lock = os.open(folder / f"{part}.lock", os.O_CREAT | os.O_WRONLY)
        fcntl.flock(lock, fcntl.LOCK_EX)  # the process's copy of it holds the lock
        logs[part] = tempfile.TemporaryFile("w+")
        procs[part] = subprocess.Popen(
            [sys.executable, __file__, part, str(folder)], env=env, pass_fds=(lock,),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=logs[part],
        )  # fmt: skip
        os.close(lock)
    config.stash[_COMPILING] = dict(procs=procs, logs=logs)


def _report(config: pytest.Config, part: str) -> None:
    """Say how long `part`'s process took, or how it failed (it has ended)."""
    compiling = config.stash[_COMPILING]
    proc, log = compiling["procs"].pop(part), compiling["logs"][part]
    took = config.stash[_SESSION] / f"{part}.seconds"
    seconds = took.read_text() if took.exists() else "?"
    lines = [f"numba's CPU kernels ({part}) compiled or loaded from its cache in {seconds} s"]
    if proc.returncode != 0:
        log.seek(0)
        lines.append(f"warning: compiling them failed: {log.read().strip()[-1000:]}")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    if reporter is not None:
        for line in lines:
            reporter.write_line(line)


def _wait_for_patchmatch(lock: Path) -> None:
    """Make the first call of each cached PatchMatch kernel in this process wait until the
    "patchmatch" part's process has ended, so that it loads the kernel from the cache.

    numba looks up a dispatcher's `_compile_for_args` on the instance when no compiled
    version fits a call: set there, it waits for the lock, removes itself and hands over."""
    import fcntl
    import importlib

    from numba.core.caching import NullCache
    from numba.core.dispatcher import Dispatcher

    def gate(kernel):
        def compile_for_args(*args, **kws):
            start = time.perf_counter()
            with open(lock) as held:
                fcntl.flock(held, fcntl.LOCK_SH)
            _waited.append(time.perf_counter() - start)
            kernel.__dict__.pop("_compile_for_args", None)
            return kernel._compile_for_args(*args, **kws)

        kernel._compile_for_args = compile_for_args

    for kernel in vars(importlib.import_module(PATCHMATCH)).values():
        if isinstance(kernel, Dispatcher) and not isinstance(kernel._cache, NullCache):
            gate(kernel)


def _controller(config: pytest.Config) -> bool:
    """This is the process that runs the session, not an xdist worker."""
    return not hasattr(config, "workerinput")


def _runs_tests(config: pytest.Config) -> bool:
    """This process runs tests: an xdist worker, or a session without workers."""
    return not _controller(config) or config.getoption("dist", "no") == "no"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """WORKERS xdist workers when xdist is installed and `-n` is not given; one process
    under the CUDA simulator, whose thread per CUDA thread, switched often, contends with
    a second worker's and runs no faster beside it."""
    if not config.pluginmanager.hasplugin("xdist") or not _controller(config):
        return
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return
    if config.option.numprocesses is None and config.option.dist == "no":
        if not config.option.usepdb and not config.option.collectonly:
            config.option.numprocesses = WORKERS


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """The controller makes the session folder and starts compiling the kernels before
    the tests are collected and before any worker starts (under the simulator only
    PatchMatch's, the only CPU kernels its tests call); a process that runs tests holds
    its first call of a PatchMatch kernel until they are compiled."""
    config = session.config
    if _controller(config):
        config.stash[_SESSION] = Path(tempfile.mkdtemp(prefix="attnbench-test-session-"))
        if config.option.collectonly:
            return
        simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
        _start_compiling(config, ("patchmatch",) if simulated else PARTS)
    else:
        config.stash[_SESSION] = Path(config.workerinput["session_folder"])
    if _runs_tests(config) and (config.stash[_SESSION] / "patchmatch.lock").exists():
        _wait_for_patchmatch(config.stash[_SESSION] / "patchmatch.lock")


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """No test before the "others" part is compiled (xdist's workers collect meanwhile)."""
    config = session.config
    if _controller(config) and "others" in config.stash.get(_COMPILING, {}).get("procs", {}):
        config.stash[_COMPILING]["procs"]["others"].wait()
        _report(config, "others")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The compiling processes end with the session (it may end before its tests need
    them); numba writes each cache file whole, so a killed one leaves none half written."""
    config = session.config
    if not _controller(config):
        return
    for part, proc in list(config.stash.get(_COMPILING, {}).get("procs", {}).items()):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        else:
            _report(config, part)
    if _SESSION in config.stash:
        shutil.rmtree(config.stash[_SESSION], ignore_errors=True)


def group_of(nodeid: str) -> str | None:
    """The test's group in GROUPS (by module and function, or by module), or None."""
    path, _, name = nodeid.partition("::")
    module = path.rsplit("/", 1)[-1]
    return GROUPS.get(f"{module}::{name.split('[')[0]}", GROUPS.get(module))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Ray tests first (the longest group, mostly waiting on its cluster), then the
    tests of no group, those that load the host (once PatchMatch is compiled), the README's,
    and LATE's; the same order in every worker, so that xdist sees one collection."""

    def rank(item: pytest.Item) -> int:
        group, module = group_of(item.nodeid), item.nodeid.split("::")[0].rsplit("/", 1)[-1]
        if group is not None:
            return ORDER[group]
        return ORDER["late"] if module in LATE else ORDER[None]

    items.sort(key=rank)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """With `--dist load` (that of `-n`): a group's tests go to one worker, in order, and
    every other test to whichever worker is free, in the collection's order. xdist's own
    `loadgroup` reads groups from marks it writes into test ids, which pytest 9.2 ignores."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Each xdist worker is handed the session folder."""
    node.workerinput["session_folder"] = str(node.config.stash[_SESSION])


@pytest.fixture(scope="session", autouse=True)
def ceilings_cache(request):
    """The session keeps measured machine ceilings in one temporary cache folder, shared by
    its workers and the processes its tests start (each thread count measured once), so
    tests neither read nor write the user's cache."""
    folder = request.config.stash[_SESSION] / "ceilings"
    saved = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(folder)
    yield str(folder)
    if saved is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = saved


_compiled: list[str] = []  # cached project kernels numba compiled during the running test
_waited: list[float] = []  # seconds the running test's PatchMatch calls waited for the cache
_listener = None


def _watch_compiles():
    """A listener of numba's compile events that notes each outermost compilation of a
    project kernel kept in numba's cache (made on first use, once numba is imported)."""
    global _listener
    if _listener is None:
        from numba.core import event
        from numba.core.caching import NullCache

        from attnbench.kernels.compiling import PREFIX, kernel_name

        class Watch(event.Listener):
            depth = 0

            def on_start(self, ev):
                self.depth += 1
                kernel = ev.data["dispatcher"]
                cached = not isinstance(getattr(kernel, "_cache", None), NullCache)
                if self.depth == 1 and cached and kernel.py_func.__module__.startswith(PREFIX):
                    _compiled.append(kernel_name(kernel))

            def on_end(self, ev):
                self.depth -= 1

        _listener = Watch()
    return _listener


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A test during which a cached project kernel compiled warns (the session's
    compilation missed the types that test called it with), and so does one that waited
    for PatchMatch's kernels (its module belongs in LATE)."""
    from numba.core import event

    _compiled.clear()
    _waited.clear()
    with event.install_listener("numba:compile", _watch_compiles()):
        result = yield
    if _compiled:
        names = ", ".join(sorted(set(_compiled)))
        warnings.warn(f"numba compiled {names} during the test", stacklevel=1)
    if sum(_waited) > WAIT_WARNING_S:
        warnings.warn(f"waited {sum(_waited):.1f} s for PatchMatch's kernels", stacklevel=1)
    return result


if __name__ == "__main__":  # one part of the kernels, in a process of its own
    start = time.perf_counter()
    compile_kernels(sys.argv[1])
    took = Path(sys.argv[2]) / f"{sys.argv[1]}.seconds"
    took.write_text(f"{time.perf_counter() - start:.1f}")
