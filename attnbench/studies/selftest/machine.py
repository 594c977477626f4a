"""selftest's machine checks: the timer, NVML, the cached machine ceilings, and the
versions the report names.

The timer is checked against what it should read: the CPU clock's resolution, a busy loop
of known length, and on a GPU CUDA events against the wall clock around a sleep kernel.
A check that needs a real GPU is a skipped row, with the reason, elsewhere.
"""

from __future__ import annotations

import importlib.metadata
import time

from attnbench.studies.selftest.target import Check, Target, measured, skipped

RESOLUTION_S = 1e-6  # the CPU clock must resolve a microsecond
BUSY_MS = 2.0  # length of the known busy loop
TIMER_SPREAD = 0.5  # relative error allowed on the busy loop: the host may be loaded
SLEEP_MS = 50.0  # length of the CUDA sleep kernel
EVENTS_SPREAD = 0.1  # CUDA events against the wall clock around the same sleep
NO_GPU = "needs a real GPU"


def groups(target: Target) -> list[tuple[str, object]]:
    return [
        ("CPU timer", cpu_timer_checks),
        ("CUDA timer", lambda: [cuda_timer_check(target)]),
        ("NVML", lambda: [nvml_check(target)]),
        ("machine ceilings", lambda: [ceilings_check(target)]),
    ]


def environment(target: Target) -> dict:
    """Versions and the device the report was made on."""
    import numba
    import torch

    env = {
        "torch": torch.__version__,
        "numba": numba.__version__,
        "numba-cuda": _version("numba-cuda"),
        "attnbench": _version("attnbench"),
        "kernels": target.kernels,
    }
    if target.gpu:
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    else:
        from attnbench.measure.cpuinfo import model_name

        env["cpu"] = model_name()
    return env


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def cpu_timer_checks() -> list[Check]:
    """The clock's stated resolution, and `time_call` reading a busy loop of BUSY_MS."""
    from attnbench.measure.timing import time_call

    resolution = time.get_clock_info("perf_counter").resolution
    rows = [
        measured(
            "CPU timer resolution (s)",
            resolution,
            RESOLUTION_S,
            "time.perf_counter's stated resolution",
        )
    ]
    timing = time_call(lambda: _busy(BUSY_MS), "cpu", repeats=5, warmup=1, min_time_s=0)
    error = abs(timing.median - BUSY_MS) / BUSY_MS
    detail = f"a {BUSY_MS:g} ms busy loop read as {timing.median:.3f} ms (median)"
    rows.append(measured("CPU timer on a known busy loop", error, TIMER_SPREAD, detail))
    return rows


def cuda_timer_check(target: Target) -> Check:
    """CUDA events and the wall clock around one sleep kernel of about SLEEP_MS agree."""
    name = "CUDA events against the wall clock"
    if not target.gpu:
        return skipped(name, NO_GPU)
    import torch

    cycles = 1_000_000
    events = _sleep_ms(cycles)[0]  # first launch, and the clock's cycles per ms
    cycles = int(cycles * SLEEP_MS / max(events, 1e-3))
    events, wall = _sleep_ms(cycles)
    error = abs(events - wall) / wall
    detail = f"sleep kernel: events {events:.2f} ms, wall clock {wall:.2f} ms"
    torch.cuda.synchronize()
    return measured(name, error, EVENTS_SPREAD, detail)


def _sleep_ms(cycles: int) -> tuple[float, float]:
    """(events ms, wall ms) of one `torch.cuda._sleep(cycles)`."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    wall = time.perf_counter()
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    wall = (time.perf_counter() - wall) * 1000
    return start.elapsed_time(end), wall


def nvml_check(target: Target) -> Check:
    """NVML reads the GPU's clocks, power, temperature and throttle reasons, or the reason
    it cannot."""
    name = "NVML telemetry"
    if not target.gpu:
        return skipped(name, NO_GPU)
    try:
        import pynvml
    except ImportError:
        return skipped(name, "pynvml is not installed (pip install nvidia-ml-py)")
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        return Check(name, "fail", detail=f"NVML does not start: {exc}")
    from attnbench.measure.telemetry import GpuTelemetry

    telemetry = GpuTelemetry(target.device)
    telemetry.start()
    readings = telemetry.stop(calls=1)
    wanted = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "throttle_reasons")
    missing = [key for key in wanted if readings.get(key) is None]
    shown = ", ".join(f"{key} {readings.get(key)}" for key in wanted)
    if missing:
        return Check(name, "fail", detail=f"unread: {', '.join(missing)}; {shown}")
    return Check(name, "pass", detail=shown)


def ceilings_check(target: Target) -> Check:
    """The ceilings `attnbench machine` cached for this machine, read, never measured here
    (measuring takes minutes)."""
    name = "machine ceilings"
    if target.simulated:
        return skipped(name, "the simulator is no machine to measure")
    from attnbench.measure.ceilings import load
    from attnbench.measure.limits import _fingerprint
    from attnbench.measure.threads import set_threads

    ceilings = load(_fingerprint(target.device, set_threads(None)))
    if ceilings is None:
        return skipped(name, f"not measured here yet: `attnbench machine --device {target.device}`")
    fp32 = ceilings.gemm_gflops.get("float32")
    levels = ", ".join(f"{level.name} {level.gbs:,.0f} GB/s" for level in ceilings.levels)
    bad = [level.name for level in ceilings.levels if not level.gbs > 0] + (
        [] if fp32 and fp32 > 0 else ["GEMM float32"]
    )
    detail = f"GEMM float32 {fp32 or 0:,.0f} GFLOP/s; {levels}; measured {ceilings.measured_at}"
    return Check(name, "fail" if bad else "pass", detail=detail)
