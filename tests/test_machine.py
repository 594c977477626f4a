"""`attnbench machine` and the ceilings behind it: measured on the real code path at sizes
shrunk by `limits.SCALE`, cached per machine fingerprint in $ATTNBENCH_CACHE_DIR and read
back; the computed peak's parser on sample /proc/cpuinfo texts; cache levels from a sysfs
tree; the GPU datasheet lookup. Nothing asserts on a rate's size, only on structure.
"""

from __future__ import annotations

import json
import math
import traceback
from types import SimpleNamespace

import numba
import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench.measure import ceilings, limits
from attnbench.measure.ceilings import Ceilings, Level, cache_dir, cache_path
from attnbench.measure.cpuinfo import FALLBACK_CACHES, KIB, MIB, cpu_caches, cpu_peak
from attnbench.measure.threads import set_threads
from attnbench.views.ceilings import ceilings_table

runner = CliRunner()
QUIET = {"load": 0.0, "cpu_mhz": None, "sched": None}
MEASURE = limits.measure  # the real one, for wrappers around it


@pytest.fixture(autouse=True)
def tiny(monkeypatch, tmp_path):
    """Every test: a cache of its own, tiny sizes, a quiet host (whatever it is doing), and
    torch's thread count restored."""
    monkeypatch.setenv(ceilings.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(limits, "SCALE", 1 / 512)
    monkeypatch.setattr(limits, "snapshot", lambda device: QUIET)
    monkeypatch.setattr(limits, "busy_now", lambda: None)
    monkeypatch.setattr(limits, "host_cpu", lambda: None)  # nor what other processes use
    monkeypatch.setattr(limits, "sweep_points", lambda *args: [])  # levels as sysfs says
    threads = torch.get_num_threads()
    yield tmp_path / "cache"
    set_threads(threads)


def refuse_to_measure(monkeypatch) -> None:
    def fail(*args, **kwargs):
        raise AssertionError("measured although the ceilings were cached")

    monkeypatch.setattr(limits, "measure", fail)


def count_measures(monkeypatch) -> list:
    calls = []

    def counted(*args, **kwargs):
        calls.append(args)
        return MEASURE(*args, **kwargs)

    monkeypatch.setattr(limits, "measure", counted)
    return calls


def test_measures_every_dtype_and_level_and_caches_them(tiny):
    steps: list[str] = []
    found = limits.load_or_measure("cpu", threads=1, on_step=steps.append)
    assert steps and any("GEMM" in s for s in steps) and any("DRAM" in s for s in steps)
    assert found.device == "cpu" and found.threads == 1 and found.device_name
    assert set(found.gemm_gflops) == set(limits.GEMM_DTYPES)
    assert all(rate > 0 and math.isfinite(rate) for rate in found.gemm_gflops.values())
    assert all(found.gemm_size[dtype] >= 16 for dtype in limits.GEMM_DTYPES)
    names = [level.name for level in found.levels]
    assert names[-1] == "DRAM" and names[0].startswith("L") and len(names) >= 2
    capacities = [level.capacity for level in found.levels]
    assert capacities == sorted(capacities) and len(set(capacities)) == len(capacities)
    assert math.isinf(capacities[-1]) and all(math.isfinite(c) for c in capacities[:-1])
    for level in found.levels:
        assert level.copy_gbs > 0 and level.triad_gbs > 0
        assert 0 < level.working_set < level.capacity
    assert found.level_for(1) is found.levels[0]
    assert found.computed["cores_used"] == 1
    assert found.computed["fma_units_assumed"] is True
    adds = found.add_gflops["float32"]
    assert adds > 0 and math.isfinite(adds) and found.add_peak("float32") == adds
    assert found.add_peak("bfloat16") is None  # no add kernel: the GEMM peak applies
    if found.computed.get("gflops_fp32"):  # adds left out as dead code would read far above
        assert adds < 2 * found.computed["gflops_fp32"]
    path = cache_path(found.fingerprint)
    assert path.parent == tiny and path.is_file()
    assert json.loads(path.read_text(), parse_constant=_refuse)["levels"][-1]["capacity"] is None


def _refuse(constant: str):
    raise ValueError(f"{constant} is not JSON")


def test_second_call_loads_the_cache_without_measuring(monkeypatch):
    first = limits.load_or_measure("cpu", threads=1)
    mtime = cache_path(first.fingerprint).stat().st_mtime_ns
    refuse_to_measure(monkeypatch)
    assert limits.load_or_measure("cpu", threads=1) == first
    assert cache_path(first.fingerprint).stat().st_mtime_ns == mtime


def test_remeasure_measures_and_rewrites_the_cache(monkeypatch):
    calls = count_measures(monkeypatch)
    first = limits.load_or_measure("cpu", threads=1)
    again = limits.load_or_measure("cpu", threads=1, remeasure=True)
    assert len(calls) == 2 and again.fingerprint == first.fingerprint
    assert ceilings.load(first.fingerprint) == again


def test_another_thread_count_is_another_fingerprint(monkeypatch):
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba's pool has one thread")
    calls = count_measures(monkeypatch)
    one = limits.load_or_measure("cpu", threads=1)
    two = limits.load_or_measure("cpu", threads=2)
    assert len(calls) == 2 and one.fingerprint != two.fingerprint and two.threads == 2
    assert cache_path(one.fingerprint).is_file() and cache_path(two.fingerprint).is_file()


def test_cache_dir_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(ceilings.CACHE_ENV, str(tmp_path / "elsewhere"))
    assert cache_dir() == tmp_path / "elsewhere"
    found = limits.load_or_measure("cpu", threads=1)
    assert (tmp_path / "elsewhere" / f"ceilings-{found.fingerprint}.json").is_file()


def test_unreadable_or_stale_cache_is_measured_again(monkeypatch):
    first = limits.load_or_measure("cpu", threads=1)
    path = cache_path(first.fingerprint)
    path.write_text("{not json")
    calls = count_measures(monkeypatch)
    limits.load_or_measure("cpu", threads=1)
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "version": -1}))
    limits.load_or_measure("cpu", threads=1)
    assert len(calls) == 2


def test_record_round_trips_through_json():
    record = _gpu_record()
    assert Ceilings.from_dict(json.loads(ceilings.to_json(record))) == record


# ---------------------------------------------------------------- computed peak

AVX512 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
cpu MHz\t\t: 3499.996
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512dq avx512bw

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
cpu MHz\t\t: 2900.000
physical id\t: 0
core id\t\t: 1
flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512dq avx512bw
"""

AVX2 = """processor\t: 0
model name\t: AMD EPYC 7B13
cpu MHz\t\t: 2450.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse sse2 fma sse4_1 avx avx2

processor\t: 1
model name\t: AMD EPYC 7B13
cpu MHz\t\t: 2450.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse sse2 fma sse4_1 avx avx2
"""

AARCH64 = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid
CPU implementer\t: 0x41

processor\t: 1
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid
CPU implementer\t: 0x41
"""


def test_computed_peak_avx512_takes_the_highest_clock():
    peak = cpu_peak(AVX512, threads=2)
    assert (peak["simd"], peak["fp32_lanes"], peak["fma_units"]) == ("avx512f", 16, 2)
    assert peak["cores"] == 2 and peak["cores_used"] == 2
    assert peak["clock_ghz"] == pytest.approx(3.499996)  # cpu MHz above the name's 2.90
    assert peak["clock_sources_ghz"]["model_name"] == pytest.approx(2.9)
    assert peak["gflops_fp32"] == pytest.approx(2 * 16 * 2 * 2 * 3.499996)


def test_computed_peak_avx2_counts_cores_not_hyperthreads():
    peak = cpu_peak(AVX2, threads=2, max_khz=3_500_000)
    assert (peak["simd"], peak["fp32_lanes"], peak["fma_units"]) == ("avx2", 8, 2)
    assert peak["cores"] == 1 and peak["cores_used"] == 1  # two threads of one core
    assert peak["clock_ghz"] == pytest.approx(3.5)
    assert peak["gflops_fp32"] == pytest.approx(1 * 8 * 2 * 2 * 3.5)


def test_computed_peak_aarch64_from_cpufreq():
    peak = cpu_peak(AARCH64, threads=4, max_khz=3_000_000)
    assert (peak["simd"], peak["fp32_lanes"], peak["fma_units"]) == ("asimd", 4, 2)
    assert peak["cores"] == 2 and peak["cores_used"] == 2  # 4 threads on 2 cores
    assert peak["gflops_fp32"] == pytest.approx(2 * 4 * 2 * 2 * 3.0)


def test_computed_peak_without_a_clock_has_its_inputs_but_no_value():
    peak = cpu_peak(AARCH64, threads=1)
    assert peak["clock_ghz"] is None and peak["gflops_fp32"] is None
    assert peak["fp32_lanes"] == 4 and peak["cores_used"] == 1
    assert cpu_peak("", threads=1)["simd"] == "scalar"


def test_cache_sizes_from_sysfs_and_fallback(tmp_path):
    entries = [
        ("index0", 1, "Data", "48K", "0,64"),
        ("index1", 1, "Instruction", "32K", "0,64"),
        ("index2", 2, "Unified", "2048K", "0,64"),
        ("index3", 3, "Unified", "105M", "0-31,64-95"),
    ]
    for name, level, kind, size, shared in entries:
        index = tmp_path / "cache" / name
        index.mkdir(parents=True)
        for key, value in (("level", level), ("type", kind), ("size", size)):
            (index / key).write_text(f"{value}\n")
        (index / "shared_cpu_list").write_text(shared + "\n")
    found = cpu_caches(tmp_path / "cache")
    assert found == [(1, 48 * KIB, 2), (2, 2 * MIB, 2), (3, 105 * MIB, 64)]
    assert cpu_caches(tmp_path / "absent") == list(FALLBACK_CACHES)


def test_levels_hold_private_caches_per_thread_and_shared_ones_once():
    caches = [(1, 48 * KIB, 2), (2, 2 * MIB, 2), (3, 105 * MIB, 64)]
    levels = limits.cpu_levels(8, caches, 128)  # 8 threads of 64 cores x 2 SMT, 2 sockets
    assert [name for name, _, _ in levels] == ["L1", "L2", "L3", "DRAM"]
    assert levels[0][1:] == (8 * 48 * KIB, 4 * 48 * KIB)
    assert levels[2][1] == 2 * 105 * MIB  # one L3 per socket, threads on both
    assert math.isinf(levels[3][1]) and levels[3][2] >= 2 * levels[2][2]
    single = limits.cpu_levels(1, [(1, 32 * KIB, 1), (3, 32 * MIB, 0)], 2)
    assert [capacity for _, capacity, _ in single[:2]] == [32 * KIB, 32 * MIB]


# ------------------------------------------------------------------------ GPU


@pytest.mark.parametrize(
    ("name", "product", "memory_tbs"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 3.35),
        ("NVIDIA H100 SXM5 80GB", "H100 SXM", 3.35),
        ("NVIDIA H100 PCIe", "H100 PCIe", 2.0),
        ("NVIDIA H200", "H200 SXM", 4.8),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB", 1.555),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB", 2.039),
    ],
)
def test_datasheet_of_known_gpus(name, product, memory_tbs):
    sheet = limits.datasheet(name)
    assert sheet["product"] == product and sheet["memory_tbs"] == memory_tbs
    assert sheet["source"] == "vendor datasheet"
    assert sheet["bf16_tflops"] == sheet["fp16_tflops"] > sheet["tf32_tflops"] > 0
    assert sheet["tf32_tflops"] > sheet["fp32_tflops"] > 0


@pytest.mark.parametrize(
    "name", ["NVIDIA GH200 480GB", "NVIDIA H100 NVL", "NVIDIA GeForce RTX 4090", "AMD EPYC"]
)
def test_datasheet_of_unknown_gpus_is_none(name):
    assert limits.datasheet(name) is None


def test_gpu_path_runs_its_torch_kernels_on_the_cpu(monkeypatch):
    """The CUDA measurement's own logic (sizes, L2 and HBM plan, copy/triad passes,
    datasheet), with its tensors on the CPU: only the device and NVML are not exercised."""
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", L2_cache_size=2 * MIB)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    gemm, sizes, levels, extra = limits._measure_cuda("cpu", lambda text: None)
    assert set(gemm) == set(limits.GEMM_DTYPES) and all(r > 0 for r in gemm.values())
    assert [level.name for level in levels] == ["L2", "HBM"]
    assert levels[0].capacity == 2 * MIB and levels[0].working_set == MIB
    assert all(level.copy_gbs > 0 and level.triad_gbs > 0 for level in levels)
    assert extra["datasheet"]["product"] == "H100 SXM"
    assert extra["clocks"] == {}  # the stand-in properties name no PCI bus


def _gpu_record() -> Ceilings:
    return Ceilings(
        device="cuda",
        device_name="NVIDIA H100 80GB HBM3",
        threads=1,
        fingerprint="0123456789ab",
        measured_at="2025-01-01T00:00:00+00:00",
        gemm_gflops={"float32": 50_000.0, "bfloat16": 700_000.0},
        levels=[
            Level("L2", 50 * MIB, 25 * MIB, 5000.0, 5500.0),
            Level("HBM", math.inf, 2**30, 3000, 3100),
        ],
        clocks={"source": "NVML", "sm_max_mhz": 1980, "sm_mhz": 1755, "memory_max_mhz": 2619},
        datasheet=limits.datasheet("NVIDIA H100 80GB HBM3"),
        gemm_size={"float32": 8192, "bfloat16": 8192},
    )


def test_table_shows_clocks_datasheet_and_shares():
    console = Console(record=True, width=200)
    console.print(ceilings_table(_gpu_record(), "/cache/ceilings-0123456789ab.json"))
    text = console.export_text()
    for needle in ("SM clock", "1980 MHz max", "datasheet bf16", "989.4 TFLOP/s", "H100 SXM"):
        assert needle in text
    assert "vendor datasheet" in text and "HBM / datasheet" in text and "93%" in text
    assert "computed fp32 peak" not in text and "ceilings-0123456789ab.json" in text


# ------------------------------------------------------------------------ CLI


def invoke(*args):
    return runner.invoke(cli.app, ["machine", *map(str, args)])


def assert_ok(result) -> None:
    detail = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
    assert result.exit_code == 0, f"{result.output}\n{detail}"


def test_machine_prints_the_table_and_writes_json(tmp_path, monkeypatch):
    out = tmp_path / "out.json"
    result = invoke("--device", "cpu", "--threads", 1, "--json", out)
    assert_ok(result)
    doc = json.loads(out.read_text(), parse_constant=_refuse)
    assert [level["name"] for level in doc["levels"]][-1] == "DRAM"
    assert all(level["copy_gbs"] > 0 and level["triad_gbs"] > 0 for level in doc["levels"])
    assert set(doc["gemm_gflops"]) == set(limits.GEMM_DTYPES) and doc["threads"] == 1
    for needle in ("GEMM float32", "DRAM triad", "computed fp32 peak", "cache file"):
        assert needle in result.stdout
    assert f"wrote {out}" in " ".join(result.stdout.split())
    assert cache_path(doc["fingerprint"]).is_file()
    refuse_to_measure(monkeypatch)
    assert_ok(invoke("--device", "cpu", "--threads", 1))
    calls = count_measures(monkeypatch)
    assert_ok(invoke("--device", "cpu", "--threads", 1, "--remeasure"))
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--json", "{tmp}/missing/out.json"], "--json"),
        (["--json", "{tmp}"], "--json"),
        (["--json", "{tmp}/out.txt"], "--json"),
        (["--threads", "0"], "--threads"),
        (["--device", "tpu"], "--device"),
    ],
)
def test_bad_input_is_one_error_line_and_writes_nothing(tmp_path, tiny, args, needle):
    before = sorted(tmp_path.rglob("*"))
    result = invoke(*(arg.format(tmp=tmp_path) for arg in args))
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert "Traceback" not in result.output
    assert sorted(tmp_path.rglob("*")) == before and not tiny.exists()
