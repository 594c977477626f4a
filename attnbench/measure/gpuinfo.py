"""What NVML and the vendor's data sheets tell about a GPU: its clocks, and its peaks.

Both only annotate the measured ceilings: NVML may be absent, and a data sheet is the
vendor's number, never this machine's.
"""

from __future__ import annotations

import re


def nvml_clocks(props) -> dict:
    """Maximum and current SM and memory clocks (MHz) from NVML; {} when NVML cannot tell."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return {}
    try:
        bus = getattr(props, "pci_bus_id", None)
        if bus is None:
            return {}
        domain, slot = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(f"{domain:08X}:{bus:02X}:{slot:02X}.0")
        clocks = {"source": "NVML"}
        for label, kind in (("sm", pynvml.NVML_CLOCK_SM), ("memory", pynvml.NVML_CLOCK_MEM)):
            clocks[f"{label}_max_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(handle, kind)
            clocks[f"{label}_mhz"] = pynvml.nvmlDeviceGetClockInfo(handle, kind)
        return clocks
    except Exception:
        return {}
    finally:
        pynvml.nvmlShutdown()


# Dense (no sparsity) tensor-core and FP32 TFLOP/s and memory TB/s, from NVIDIA's data
# sheets; the pattern is matched against torch's device name, lowercased.
DATASHEETS = (
    (r"\bh200\b(?!.*\bnvl\b)", "H200 SXM", 67.0, 494.7, 989.4, 989.4, 4.8),
    (r"\bh100\b.*\bpcie\b", "H100 PCIe", 51.2, 378.0, 756.0, 756.0, 2.0),
    (r"\bh100\b.*(sxm|\bhbm3\b)", "H100 SXM", 67.0, 494.7, 989.4, 989.4, 3.35),
    (r"\ba100\b.*\bsxm.*80gb", "A100 SXM 80GB", 19.5, 156.0, 312.0, 312.0, 2.039),
    (r"\ba100\b.*\bsxm.*40gb", "A100 SXM 40GB", 19.5, 156.0, 312.0, 312.0, 1.555),
)


def datasheet(name: str) -> dict | None:
    """The vendor's peaks for a GPU named `name` ("NVIDIA H100 80GB HBM3"); None if unknown."""
    for pattern, product, *values in DATASHEETS:
        if re.search(pattern, name.lower()):
            keys = ("fp32_tflops", "tf32_tflops", "bf16_tflops", "fp16_tflops", "memory_tbs")
            return {
                "product": product,
                **dict(zip(keys, values, strict=True)),
                "source": "vendor datasheet",
            }
    return None
