"""Every SCRAM CUDA kernel type-checks and compiles to PTX for a real GPU (via NVRTC, no GPU
needed): code the simulator accepts but a GPU would not fails here."""

import types

import pytest

from attnbench.kernels.target import simulator_enabled

pytestmark = pytest.mark.skipif(
    simulator_enabled(), reason="PTX compilation needs numba's real CUDA target"
)

if not simulator_enabled():
    import numba.cuda.dispatcher
    from numba import cuda

    from attnbench.kernels.patchmatch import cuda as pm_cuda

    KERNELS = pm_cuda.KERNELS
else:  # the simulator's cuda.jit returns no compilable dispatchers
    KERNELS = {}


@pytest.fixture
def fake_device(monkeypatch):
    """Kernels calling njit helpers ask the current device for its compute capability."""
    monkeypatch.setattr(
        numba.cuda.dispatcher,
        "get_current_device",
        lambda: types.SimpleNamespace(compute_capability=(8, 0)),
    )


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_compiles_to_ptx(name, fake_device):
    kernel, signature = KERNELS[name]
    ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=(8, 0))
    assert ".entry" in ptx


def test_every_kernel_is_listed():
    defined = {
        name
        for name, value in vars(pm_cuda).items()
        if isinstance(value, numba.cuda.dispatcher.CUDADispatcher)
        and not value.targetoptions.get("device", False)
    }
    assert len(defined) == 4
    listed = {kernel.py_func.__name__ for kernel, _ in KERNELS.values()}
    assert defined == listed
