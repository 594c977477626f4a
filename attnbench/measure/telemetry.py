"""GPU clocks, power, temperature, throttle reasons and energy per call, read through NVML.

Power readings are averaged by the driver over about a second, too long for one call, so
energy comes from the total-energy counter read before and after the calls, divided by their
count. The other readings are taken just after the calls. Telemetry never fails a run: on a
CPU device, without pynvml or without an NVIDIA driver it is empty, and a reading that the
GPU does not support is None.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from attnbench.measure import is_cuda

THROTTLE_REASONS = {  # bits of nvmlDeviceGetCurrentClocksEventReasons
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clock",
    0x200: "board_limit",
    0x400: "reliability",
}
THROTTLE_READERS = (  # the newer name first; drivers before the renaming know only the older
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)


class GpuTelemetry:
    """Read NVML around one case: `start()` just before the calls, `stop(calls)` just after."""

    def __init__(self, device: str):
        self.device = device
        self._nvml = None
        self._handle = None
        self._energy_mj: float | None = None

    def start(self) -> None:
        self._handle = None
        if not is_cuda(self.device):
            return
        try:
            import pynvml
        except ImportError:
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:
            return  # no driver or no GPU
        handle = _read(pynvml, _nvml_handle, pynvml, _torch_index(self.device))
        if handle is None:
            _shutdown(pynvml)
            return
        self._nvml, self._handle = pynvml, handle
        self._energy_mj = _read(pynvml, pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)

    def stop(self, calls: int) -> dict:
        """The case's readings (keys below), or {} when `start` found no GPU to read."""
        nvml, handle = self._nvml, self._handle
        if handle is None:
            return {}
        self._handle = None
        try:
            energy_mj = _read(nvml, nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
            sm_mhz = _read(nvml, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
            mem_mhz = _read(nvml, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM)
            power_mw = _read(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
            temperature = _read(
                nvml, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
            )
            reasons = _throttle_reasons(nvml, handle)
        finally:
            _shutdown(nvml)
        per_call = None
        if energy_mj is not None and self._energy_mj is not None and calls > 0:
            per_call = (energy_mj - self._energy_mj) / calls
        return {
            "sm_clock_mhz": sm_mhz,
            "mem_clock_mhz": mem_mhz,
            "power_w": None if power_mw is None else power_mw / 1000,
            "temperature_c": temperature,
            "throttle_reasons": None if reasons is None else decode_throttle_reasons(reasons),
            "energy_mj_per_call": per_call,
        }


def decode_throttle_reasons(mask: int) -> str:
    """Names of the set bits joined by '+', "none" for 0; an unknown bit is named in hex."""
    if mask == 0:
        return "none"
    names = []
    for bit in range(mask.bit_length()):
        if mask & (1 << bit):
            names.append(THROTTLE_REASONS.get(1 << bit, hex(1 << bit)))
    return "+".join(names)


def _torch_index(device: str) -> int:
    """The torch index of `device`; "cuda" means the current device."""
    import torch

    index = torch.device(device).index
    if index is None:
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
    return index


def _nvml_handle(nvml, torch_index: int):
    """NVML numbers every GPU; torch numbers those CUDA_VISIBLE_DEVICES lists, in its order.

    Entries may be indices or full UUIDs; for anything else (MIG instances) there is no
    safe mapping, and None means no telemetry rather than another GPU's.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return nvml.nvmlDeviceGetHandleByIndex(torch_index)
    entries = [entry.strip() for entry in visible.split(",")]
    if torch_index >= len(entries):
        return None
    entry = entries[torch_index]
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    if entry.startswith("GPU-"):
        return nvml.nvmlDeviceGetHandleByUUID(entry)
    return None


def _throttle_reasons(nvml, handle) -> int | None:
    """The current reasons bitmask from the first reader this driver supports."""
    for name in THROTTLE_READERS:
        reader = getattr(nvml, name, None)
        value = None if reader is None else _read(nvml, reader, handle)
        if value is not None:
            return value
    return None


def _read(nvml, reader: Callable, *args):
    """One NVML reading, None where the GPU or driver does not support it."""
    try:
        return reader(*args)
    except nvml.NVMLError:
        return None


def _shutdown(nvml) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError:
        pass
