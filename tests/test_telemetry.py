"""NVML telemetry through a fake pynvml: readings, unit conversions, missing counters, no GPU."""

import sys
import types

import pytest

from attnbench.measure.telemetry import GpuTelemetry, decode_throttle_reasons

NOT_SUPPORTED = 3
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13


class FakeNvml(types.ModuleType):
    """A pynvml with two GPUs whose readings are set per test; `fail` names calls that raise.

    The energy counter moves by `energy_step_mj` at every read, so the delta is known.
    """

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(value)
            self.value = value

    def __init__(self):
        super().__init__("pynvml")
        self.fail: dict[str, int] = {}
        self.log: list[str] = []
        self.energy_mj = 10_000
        self.energy_step_mj = 600
        self.reasons = 0x4 | 0x20
        self.open = 0

    def _call(self, name: str) -> None:
        self.log.append(name)
        if name in self.fail:
            raise self.NVMLError(self.fail[name])

    def nvmlInit(self):
        self._call("nvmlInit")
        self.open += 1

    def nvmlShutdown(self):
        self._call("nvmlShutdown")
        self.open -= 1

    def nvmlDeviceGetHandleByIndex(self, index):
        self._call("nvmlDeviceGetHandleByIndex")
        if index > 1:
            raise self.NVMLError(2)  # invalid argument
        return f"gpu{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self._call("nvmlDeviceGetHandleByUUID")
        return {"GPU-1111": "gpu1"}[uuid]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self._call("nvmlDeviceGetTotalEnergyConsumption")
        self.energy_mj += self.energy_step_mj
        return self.energy_mj

    def nvmlDeviceGetClockInfo(self, handle, clock):
        self._call("nvmlDeviceGetClockInfo")
        return {self.NVML_CLOCK_SM: 1980, self.NVML_CLOCK_MEM: 2619}[clock]

    def nvmlDeviceGetPowerUsage(self, handle):
        self._call("nvmlDeviceGetPowerUsage")
        return 351_500  # mW

    def nvmlDeviceGetTemperature(self, handle, sensor):
        self._call("nvmlDeviceGetTemperature")
        assert sensor == self.NVML_TEMPERATURE_GPU
        return 55 if handle == "gpu0" else 71

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        self._call("nvmlDeviceGetCurrentClocksEventReasons")
        return self.reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        self._call("nvmlDeviceGetCurrentClocksThrottleReasons")
        return self.reasons


@pytest.fixture
def nvml(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


def _read(device: str, calls: int = 3) -> dict:
    telemetry = GpuTelemetry(device)
    telemetry.start()
    return telemetry.stop(calls)


def test_readings_and_units(nvml):
    assert _read("cuda:0", calls=3) == {
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "power_w": 351.5,
        "temperature_c": 55,
        "throttle_reasons": "sw_power_cap+sw_thermal",
        "energy_mj_per_call": 200.0,  # one 600 mJ step between start and stop, over 3 calls
    }
    assert nvml.open == 0  # every init is shut down


def test_energy_counter_is_read_around_the_calls(nvml):
    telemetry = GpuTelemetry("cuda:0")
    telemetry.start()
    assert nvml.log == [
        "nvmlInit",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetTotalEnergyConsumption",
    ]
    nvml.energy_mj += 9_000  # the calls
    assert telemetry.stop(calls=10)["energy_mj_per_call"] == pytest.approx(960.0)
    assert nvml.log[3] == "nvmlDeviceGetTotalEnergyConsumption"  # first thing after the calls


def test_no_gpu_gives_nothing_and_never_raises(nvml):
    nvml.fail["nvmlInit"] = LIBRARY_NOT_FOUND
    assert _read("cuda") == {}


def test_cpu_device_does_not_touch_nvml(nvml):
    assert _read("cpu") == {}
    assert _read("cuda-sim") == {}
    assert nvml.log == []


def test_without_pynvml_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    assert _read("cuda:0") == {}


def test_stop_without_start(nvml):
    assert GpuTelemetry("cuda:0").stop(5) == {}


def test_unsupported_energy_counter_leaves_the_other_readings(nvml):
    nvml.fail["nvmlDeviceGetTotalEnergyConsumption"] = NOT_SUPPORTED
    reading = _read("cuda:0")
    assert reading["energy_mj_per_call"] is None
    assert (reading["sm_clock_mhz"], reading["power_w"], reading["temperature_c"]) == (
        1980,
        351.5,
        55,
    )
    assert nvml.open == 0


def test_every_reading_unsupported(nvml):
    for name in dir(FakeNvml):
        if name.startswith("nvmlDeviceGet") and "Handle" not in name:
            nvml.fail[name] = NOT_SUPPORTED
    reading = _read("cuda:0")
    assert set(reading) == {
        "sm_clock_mhz",
        "mem_clock_mhz",
        "power_w",
        "temperature_c",
        "throttle_reasons",
        "energy_mj_per_call",
    }
    assert all(value is None for value in reading.values())


def test_older_driver_without_clocks_event_reasons(nvml):
    nvml.fail["nvmlDeviceGetCurrentClocksEventReasons"] = FUNCTION_NOT_FOUND
    nvml.reasons = 0x8
    assert _read("cuda:0")["throttle_reasons"] == "hw_slowdown"
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in nvml.log


def test_zero_calls_give_no_energy_per_call(nvml):
    assert _read("cuda:0", calls=0)["energy_mj_per_call"] is None


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0, "none"),
        (0x1, "gpu_idle"),
        (0x4, "sw_power_cap"),
        (0x8 | 0x40, "hw_slowdown+hw_thermal"),
        (0x20 | 0x80 | 0x100, "sw_thermal+hw_power_brake+display_clock"),
        (0x2 | 0x1000, "applications_clocks+0x1000"),
    ],
)
def test_throttle_reasons_decoded(mask, names):
    assert decode_throttle_reasons(mask) == names


@pytest.mark.parametrize(
    ("visible", "device", "temperature"),
    [
        (None, "cuda:1", 71),  # no mask: torch and NVML number alike
        ("1", "cuda:0", 71),  # torch's cuda:0 is NVML's GPU 1
        ("1,0", "cuda:1", 55),
        (" 0 , 1 ", "cuda:1", 71),
        ("GPU-1111", "cuda:0", 71),
    ],
)
def test_torch_index_maps_through_cuda_visible_devices(
    nvml, monkeypatch, visible, device, temperature
):
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert _read(device)["temperature_c"] == temperature


@pytest.mark.parametrize(
    ("visible", "device"),
    [("0", "cuda:1"), ("MIG-4b2f5c1e", "cuda:0"), ("5", "cuda:0")],  # beyond the mask, MIG, none
)
def test_unmappable_device_gives_nothing(nvml, monkeypatch, visible, device):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert _read(device) == {}
    assert nvml.open == 0
