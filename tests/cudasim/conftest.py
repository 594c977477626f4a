"""Simulator tests need NUMBA_ENABLE_CUDASIM=1 before numba.cuda is imported, so they run
in their own pytest process (see the README's test command) and are skipped otherwise."""

import os
import sys
import threading

import numpy as np
import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(autouse=True)
def _quick_thread_switches():
    """The simulator runs a block as OS threads meeting at barriers: switching between them
    sooner makes the barrier-heavy pair kernel several times faster to simulate."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


@pytest.fixture(autouse=True)
def _one_shared_array_per_call_site(monkeypatch):
    """The simulator (numba-cuda 0.30) finds a block's shared array by its call site and
    creates it on a miss with no lock, so two threads of a launch's first block can each
    create, and then use, their own copy. The same lookup, under a lock."""
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    lock = threading.Lock()
    dynamic = kernelapi.FakeCUDAShared.array

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:
            return dynamic(self, shape, dtype, alignment)
        caller = sys._getframe(1)
        site = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            if site not in self._allocations:
                self._allocations[site] = np.empty(shape, numpy_support.as_dtype(dtype))
            return self._allocations[site]

    monkeypatch.setattr(kernelapi.FakeCUDAShared, "array", array)
