"""Measuring a call: wall time, peak memory, and the environment record kept with results."""


def is_cuda(device: str) -> bool:
    """True for a real GPU device ("cuda", "cuda:1"); the CUDA simulator runs on the CPU."""
    return device == "cuda" or device.startswith("cuda:")
