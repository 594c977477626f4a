"""Where a numba kernel runs for a given tensor, and zero-copy tensor -> array views.

The choice is explicit and reported in result rows: "cuda" (a real GPU), "cuda-sim"
(numba's CUDA simulator, which runs kernels on the CPU thread by thread), or "cpu".
"""

from __future__ import annotations

import importlib
import os

import torch


def simulator_enabled() -> bool:
    """True when NUMBA_ENABLE_CUDASIM=1 was set before numba.cuda was imported."""
    from numba.cuda import config

    return bool(config.ENABLE_CUDASIM) or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


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


def kernel_module(family: str, target: str):
    """The kernels of `family` ("lsh", "patchmatch") for a target: its `cpu` module on the
    CPU, its `cuda` module on a GPU and under the simulator (imported only when needed)."""
    return importlib.import_module(
        f"attnbench.kernels.{family}.{'cpu' if target == 'cpu' else 'cuda'}"
    )


def contiguous(tensor: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Detached and C-contiguous in the dtype a kernel was compiled for (copied only if needed)."""
    return tensor.detach().to(dtype).contiguous()
