"""A machine's measured limits (its roofline ceilings), cached per machine.

Absolute rates mean little across hosts of the same kind (memory bandwidth varies several
times between them), so a run's throughput is set against limits measured on its own host:
the peak GEMM rate per dtype at the run's thread count, and copy and triad bandwidth at
working sets that sit in each memory level, and the rate of plain vector adds (the ceiling of
work with no multiply to fuse into an FMA). They are measured once per machine fingerprint
(`measure.limits.measure`) and kept as JSON in the user cache directory.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

CACHE_ENV = "ATTNBENCH_CACHE_DIR"  # overrides the platform's user cache directory
CEILINGS_VERSION = 2


@dataclass(frozen=True)
class Level:
    """One memory level: `capacity` bytes it holds for the run (private caches times the
    threads that use them), and the bandwidths measured at a working set inside it."""

    name: str  # "L1", "L2", "L3", "DRAM"; on a GPU "L2", "HBM"
    capacity: float  # bytes; inf for the last level
    working_set: float  # bytes the bandwidth was measured at
    copy_gbs: float  # a = b: bytes read + written per second / 1e9
    triad_gbs: float  # a = b + s c

    @property
    def gbs(self) -> float:
        """The level's ceiling: the better of the two kernels."""
        return max(self.copy_gbs, self.triad_gbs)


@dataclass(frozen=True)
class Ceilings:
    """What this machine can do, measured: `gemm_gflops` per dtype name (reached with square
    matrices of `gemm_size` rows), `add_gflops` the rate of SIMD adds per dtype where
    measured (the CPU's float32), `levels` from the smallest; `computed` holds the
    theoretical peak worked out from the core count, SIMD width and clock, `clocks` the
    GPU's NVML clocks and `datasheet` its vendor peaks (labelled as such: not measured
    here)."""

    device: str
    device_name: str
    threads: int
    fingerprint: str
    measured_at: str
    gemm_gflops: dict[str, float]
    levels: list[Level]
    computed: dict = field(default_factory=dict)
    clocks: dict = field(default_factory=dict)
    datasheet: dict = field(default_factory=dict)
    gemm_size: dict[str, int] = field(default_factory=dict)
    add_gflops: dict[str, float] = field(default_factory=dict)

    def peak(self, dtype: str) -> float | None:
        """Measured GEMM GFLOP/s for `dtype` ("float32"), float32's when not measured."""
        return self.gemm_gflops.get(dtype, self.gemm_gflops.get("float32"))

    def add_peak(self, dtype: str) -> float | None:
        """Measured SIMD adds per second (G) for `dtype`; None where not measured (a GPU,
        or a dtype without an add kernel), and then work without multiplies is set against
        the GEMM peak like the rest."""
        return self.add_gflops.get(dtype)

    def level_for(self, nbytes: float) -> Level:
        """The smallest level that holds `nbytes`; the last one when none does."""
        for level in self.levels:
            if nbytes <= level.capacity:
                return level
        return self.levels[-1]

    def as_dict(self) -> dict:
        """Plain JSON: the last level's infinite capacity is written as null."""
        doc = {"version": CEILINGS_VERSION, **asdict(self)}
        for level in doc["levels"]:
            if not math.isfinite(level["capacity"]):
                level["capacity"] = None
        return doc

    @classmethod
    def from_dict(cls, doc: dict) -> Ceilings:
        values = {k: v for k, v in doc.items() if k != "version"}
        values["levels"] = [
            Level(**{**level, "capacity": _capacity(level["capacity"])})
            for level in values["levels"]
        ]
        return cls(**values)


def _capacity(value: float | None) -> float:
    return math.inf if value is None else float(value)


def machine_fingerprint(device: str, device_name: str, threads: int, versions: dict) -> str:
    """12 hex digits naming this host, device and thread count: limits measured under any
    other are not reused."""
    text = json.dumps(
        [
            platform.node(),
            platform.machine(),
            device,
            device_name,
            threads,
            os.cpu_count(),
            versions,
        ],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def cache_dir() -> Path:
    """$ATTNBENCH_CACHE_DIR, else the platform's user cache directory for attnbench."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    import platformdirs

    return Path(platformdirs.user_cache_dir("attnbench"))


def cache_path(fingerprint: str) -> Path:
    return cache_dir() / f"ceilings-{fingerprint}.json"


def load(fingerprint: str) -> Ceilings | None:
    """The cached ceilings of this fingerprint; None when absent, unreadable or stale."""
    path = cache_path(fingerprint)
    try:
        doc = json.loads(path.read_text())
        if doc.get("version") != CEILINGS_VERSION:
            return None
        return Ceilings.from_dict(doc)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def to_json(ceilings: Ceilings) -> str:
    """The record as strict JSON (no NaN or Infinity, which other readers refuse)."""
    return json.dumps(ceilings.as_dict(), indent=1, allow_nan=False)


def save(ceilings: Ceilings) -> Path:
    """Write atomically, so a reader never sees half a file."""
    from attnbench.results.formats import atomic_write

    path = cache_path(ceilings.fingerprint)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, to_json(ceilings))
    return path
