"""Where a numba kernel runs for a given tensor, and zero-copy tensor -> array views.

The choice is explicit and reported in result rows: "cuda" (a real GPU), "cuda-sim"
(numba's CUDA simulator, which runs kernels on the CPU thread by thread), or "cpu".
"""

from __future__ import annotations

import os
import types

import torch

GPU_THREADS_PER_BLOCK = 128
# The simulator runs one OS thread per CUDA thread: small blocks waste fewer of them.
SIM_THREADS_PER_BLOCK = 32


def simulator_enabled() -> bool:
    """True when NUMBA_ENABLE_CUDASIM=1 was set before numba.cuda was imported."""
    from numba.cuda import config

    return bool(config.ENABLE_CUDASIM) or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def threads_per_block() -> int:
    return SIM_THREADS_PER_BLOCK if simulator_enabled() else GPU_THREADS_PER_BLOCK


def kernel_helpers(module) -> dict:
    """A module's njit helpers as CUDA kernels call them: the compiled ones on a GPU; under
    the simulator plain-Python copies whose calls to each other also go to the copies, since
    the simulator's array views cannot enter CPU-compiled code (and `.py_func` alone would
    still call the compiled versions of nested helpers)."""
    if not simulator_enabled():
        return dict(vars(module))
    from numba.core.dispatcher import Dispatcher

    namespace = dict(vars(module))
    for name, value in vars(module).items():
        if isinstance(value, Dispatcher):
            f = value.py_func
            namespace[name] = types.FunctionType(
                f.__code__, namespace, name, f.__defaults__, f.__closure__
            )
    return namespace


def kernel_target(tensor: torch.Tensor) -> str:
    """'cuda' for GPU tensors; for CPU tensors 'cuda-sim' under the simulator, else 'cpu'."""
    return device_target(tensor.device)


def device_target(device: str | torch.device) -> str:
    """The kernel target for tensors on `device` ("cpu", "cuda", "cuda:1", ...)."""
    if torch.device(device).type == "cuda":
        return "cuda"
    return "cuda-sim" if simulator_enabled() else "cpu"


def as_array(tensor: torch.Tensor):
    """A view numba can index without copying: a CUDA array on the GPU, numpy on the CPU.

    The simulator has no `as_cuda_array` and is fastest with plain numpy arrays.
    """
    if tensor.is_cuda:
        from numba import cuda

        return cuda.as_cuda_array(tensor.detach())
    return tensor.detach().numpy()


def contiguous(tensor: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Detached and C-contiguous in the dtype a kernel was compiled for (copied only if needed)."""
    return tensor.detach().to(dtype).contiguous()
