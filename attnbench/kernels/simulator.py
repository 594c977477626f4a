"""Running numba's CUDA simulator soundly and less slowly (NUMBA_ENABLE_CUDASIM=1 only)."""

from __future__ import annotations

import contextlib
import sys
import threading


@contextlib.contextmanager
def simulating():
    """Within: the simulator's block threads switch sooner, and each shared array is made
    once per call site under a lock.

    The simulator runs a block as OS threads meeting at barriers: switching between them
    sooner makes barrier-heavy kernels several times faster to simulate. numba-cuda 0.30
    finds a block's shared array by its call site and creates it on a miss with no lock, so
    two threads of a launch's first block could each create, and then use, their own copy.
    """
    import numpy as np
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

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    kernelapi.FakeCUDAShared.array = array
    try:
        yield
    finally:
        kernelapi.FakeCUDAShared.array = dynamic
        sys.setswitchinterval(interval)
