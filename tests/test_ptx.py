"""Every CUDA kernel (YOSO's and SCRAM's) type-checks and compiles to PTX for a real GPU (via
NVRTC, no GPU needed), so code the simulator accepts but a GPU would not (run-time local array
sizes, untyped helpers) fails here."""

import types

import pytest

from attnbench.kernels.target import simulator_enabled

pytestmark = pytest.mark.skipif(
    simulator_enabled(), reason="PTX compilation needs numba's real CUDA target"
)

if not simulator_enabled():
    import numba.cuda.dispatcher
    from numba import cuda

    from attnbench.kernels.lsh import cuda as lsh_cuda
    from attnbench.kernels.patchmatch import cuda as pm_cuda

    MODULES = {"lsh": lsh_cuda, "patchmatch": pm_cuda}
    KERNELS = [
        (family, name, *entry)
        for family, module in MODULES.items()
        for name, entry in sorted(module.KERNELS.items())
    ]
else:  # the simulator's cuda.jit returns no compilable dispatchers
    MODULES, KERNELS = {}, []


@pytest.fixture
def fake_device(monkeypatch):
    """Kernels calling njit helpers ask the current device for its compute capability."""
    monkeypatch.setattr(
        numba.cuda.dispatcher,
        "get_current_device",
        lambda: types.SimpleNamespace(compute_capability=(8, 0)),
    )


@pytest.mark.parametrize(
    ("family", "name", "kernel", "signature"), KERNELS, ids=[f"{f}.{n}" for f, n, *_ in KERNELS]
)
def test_kernel_compiles_to_ptx(family, name, kernel, signature, fake_device):
    ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=(8, 0))
    assert ".entry" in ptx


def _dispatchers(module):
    """The module's kernels (not device functions): its own and those in its dicts of
    variants (one per index width)."""
    found = []
    for value in vars(module).values():
        for item in value.values() if isinstance(value, dict) else [value]:
            if isinstance(item, numba.cuda.dispatcher.CUDADispatcher):
                if not item.targetoptions.get("device", False):
                    found.append(item)
    return found


@pytest.mark.parametrize(("family", "count"), [("lsh", 12), ("patchmatch", 2)])
def test_every_kernel_is_listed(family, count):
    """Every kernel and every index-width variant of one is compiled above."""
    module = MODULES[family]
    defined = {id(kernel) for kernel in _dispatchers(module)}
    assert len(defined) == count
    assert defined == {id(kernel) for kernel, _ in module.KERNELS.values()}
