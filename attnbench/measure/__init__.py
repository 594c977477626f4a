"""Measuring a call: wall time, peak memory, and the environment record kept with results.

This module imports nothing heavy, so the command line can show its defaults without torch.
"""

DEFAULT_MIN_TIME_S = 0.2  # seconds of timed samples per case, at least: fast calls get many
DEFAULT_MAX_SPREAD = 0.10  # IQR / median above this marks a case unstable


def is_cuda(device: str) -> bool:
    """True for a real GPU device ("cuda", "cuda:1"); the CUDA simulator runs on the CPU."""
    return device == "cuda" or device.startswith("cuda:")
