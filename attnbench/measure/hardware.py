"""What names the hardware a case ran on, in any process on any machine: the physical GPU's
UUID, or the CPU's model name.

A CUDA index names no GPU: each process numbers the GPUs its CUDA_VISIBLE_DEVICES lists, and
a scheduler such as Ray sets that list per worker, so cuda:0 is another GPU in each worker.
NVML numbers every GPU of the machine and knows each one's UUID; the telemetry's mapping
from a torch index to an NVML device is used here too.
"""

from __future__ import annotations

import platform
import socket

from attnbench.measure import is_cuda
from attnbench.measure.cpuinfo import model_name
from attnbench.measure.telemetry import _nvml_handle, _torch_index


def hardware(device: str) -> str:
    """The GPU's UUID ("GPU-..."; "" where NVML cannot tell) or the CPU's model name."""
    if is_cuda(device):
        return gpu_uuid(_torch_index(device)) or ""
    return model_name()


def device_name(device: str) -> str:
    """The GPU's name, or the CPU's model name."""
    if is_cuda(device):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return model_name()


def gpu_uuid(torch_index: int) -> str | None:
    """The UUID of the GPU this process calls cuda:`torch_index`, through NVML; None without
    pynvml, a driver, or a safe mapping (a MIG instance)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        handle = _nvml_handle(pynvml, torch_index)
        uuid = None if handle is None else pynvml.nvmlDeviceGetUUID(handle)
    except pynvml.NVMLError:
        uuid = None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    return uuid.decode() if isinstance(uuid, bytes) else uuid


def node_name() -> str:
    """This machine's host name."""
    return socket.gethostname() or platform.node()
