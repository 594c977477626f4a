"""A machine's measured limits (its roofline ceilings), cached per machine.

Absolute rates mean little across hosts of the same kind (memory bandwidth varies several
times between them), so a run's throughput is set against limits measured on its own host:
the peak GEMM rate per dtype at the run's thread count, and copy and triad bandwidth at
working sets that sit in each memory level, and the rate of plain vector adds (the ceiling of
work with no multiply to fuse into an FMA). They are measured once per machine fingerprint
(`measure.limits.measure`) and kept as JSON in the user cache directory, with what the host
was doing meanwhile (`provenance`): a record measured on a busy host is provisional.

A cache file is checked before use (`problem`), since every % of bound divides by it: a
file another version wrote, or one edited, truncated or poisoned (a rate of 1e-9 or NaN, a
level slower than the one below it) is measured again rather than trusted.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

CACHE_ENV = "ATTNBENCH_CACHE_DIR"  # overrides the platform's user cache directory
CEILINGS_VERSION = 3  # 3: provenance (load, CPU wait, provisional), levels from a sweep
# A measured fp32 GEMM rate outside [computed / GEMM_BELOW, computed x GEMM_ABOVE] is not this
# machine's: the computed peak is cores x SIMD width x FMA x clock, so no sound measurement
# beats it by half again, and none that a benchmark can use is fifty times below it.
GEMM_BELOW, GEMM_ABOVE = 50.0, 1.5
GEMM_OTHER_ABOVE = 64.0  # other dtypes (bf16 matrix units) over the fp32 computed peak
MIN_GFLOPS = 0.05  # below this no dtype is measured, whatever the computed peak
LEVEL_SLACK = 1.1  # a level may read this much faster than the one before it (noise)


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
    provenance: dict = field(default_factory=dict)

    @property
    def provisional(self) -> bool:
        """Measured on a busy host (`measure.limits` says what busy is): usable for this
        run, measured again on the next quiet one."""
        return bool(self.provenance.get("provisional"))

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
        """The record of `as_dict` (any version: a run's environment keeps older ones);
        keys it does not know are left out."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in doc.items() if k in names}
        level_names = {f.name for f in fields(Level)}
        values["levels"] = [
            Level(
                **{
                    **{k: v for k, v in level.items() if k in level_names},
                    "capacity": _capacity(level["capacity"]),
                }
            )
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
    """The cached ceilings of this fingerprint; None when absent, unreadable, stale or bad."""
    return read(fingerprint)[0]


def read(fingerprint: str) -> tuple[Ceilings | None, str | None]:
    """(the cached ceilings, None), or (None, why the file cannot be used); (None, None)
    when there is no file. Never raises: a file is only ever measured again."""
    path = cache_path(fingerprint)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"unreadable ({exc.__class__.__name__})"
    try:
        doc = json.loads(text)
    except RecursionError:
        return None, "nested too deeply to be a ceilings record"
    except ValueError:
        return None, "not valid JSON"
    why = problem(doc, fingerprint)
    if why is not None:
        return None, why
    try:
        return Ceilings.from_dict(doc), None
    except (TypeError, ValueError, KeyError) as exc:  # problem() should have said
        return None, f"not a ceilings record ({exc})"


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


# ------------------------------------------------------------------ checking a file


def problem(doc, fingerprint: str) -> str | None:
    """Why `doc` (parsed JSON) is not a sound ceilings record of `fingerprint`; None if it
    is. Types, finite positive rates, GEMM within a factor of the computed peak (GEMM_BELOW,
    GEMM_ABOVE), levels growing in capacity and not slower than the level after them."""
    if not isinstance(doc, dict):
        return f"holds {type(doc).__name__}, not a ceilings record"
    if doc.get("version") != CEILINGS_VERSION:
        return f"written by another attnbench (version {_short(doc.get('version'))})"
    if doc.get("fingerprint") != fingerprint:
        return "another machine's fingerprint"
    for key in ("device", "device_name", "measured_at"):
        if not isinstance(doc.get(key), str):
            return f"{key}: not text"
    threads = doc.get("threads")
    if not _is_int(threads) or threads < 1:
        return f"threads: {_short(threads)} is not a thread count"
    for key in ("computed", "clocks", "datasheet", "gemm_size", "add_gflops", "provenance"):
        if not isinstance(doc.get(key, {}), dict):
            return f"{key}: not a mapping"
    return (
        _provenance_problem(doc.get("provenance", {}))
        or _rates_problem(doc)
        or _levels_problem(doc.get("levels"))
    )


def _provenance_problem(record: dict) -> str | None:
    """The fields the tables print have the types they print."""
    for key in ("load_before", "load_after", "cpu_wait", "others_share", "seconds"):
        value = record.get(key)
        if value is not None and not (_is_rate(value) or value == 0):
            return f"provenance {key}: {_short(value)} is not a reading"
    if not _is_int(record.get("cpus", 1)) or not isinstance(record.get("busy", ""), str):
        return "provenance: cpus or busy of the wrong type"
    if not isinstance(record.get("provisional", False), bool):
        return "provenance provisional: not true or false"
    swept = record.get("swept_levels", [])
    if not isinstance(swept, list) or not all(isinstance(name, str) for name in swept):
        return "provenance swept_levels: not a list of level names"
    return None


def _rates_problem(doc: dict) -> str | None:
    gemm = doc.get("gemm_gflops")
    if not isinstance(gemm, dict) or "float32" not in gemm:
        return "gemm_gflops: no float32 rate"
    rates = [(f"GEMM {k}", v) for k, v in gemm.items()]
    rates += [(f"vector adds {k}", v) for k, v in doc.get("add_gflops", {}).items()]
    for name, value in rates:
        if not _is_rate(value) or value < MIN_GFLOPS:
            return f"{name}: {_short(value)} GFLOP/s is no rate"
    peak = doc.get("computed", {}).get("gflops_fp32")
    if not _is_rate(peak):
        return None
    for name, value in gemm.items():
        fp32 = name == "float32"
        above = GEMM_ABOVE if fp32 or name == "float64" else GEMM_OTHER_ABOVE
        low = peak / GEMM_BELOW if fp32 else 0.0
        if not low <= value <= above * peak:
            return (
                f"GEMM {name}: {value:.4g} GFLOP/s against a computed fp32 peak of "
                f"{peak:.4g} (outside {low:.3g}..{above * peak:.4g})"
            )
    return None


def _levels_problem(levels) -> str | None:
    if not isinstance(levels, list) or not levels:
        return "levels: none"
    last_capacity, last_gbs = 0.0, math.inf
    for index, level in enumerate(levels):
        if not isinstance(level, dict) or not isinstance(level.get("name"), str):
            return f"levels[{index}]: not a memory level"
        name = level["name"]
        final = index == len(levels) - 1
        capacity = level.get("capacity")
        if final != (capacity is None):
            return f"{name}: only the last level is unbounded"
        if not final and (not _is_rate(capacity) or capacity <= last_capacity):
            return f"{name}: capacity {_short(capacity)} does not grow"
        for key in ("working_set", "copy_gbs", "triad_gbs"):
            if not _is_rate(level.get(key)):
                return f"{name} {key}: {_short(level.get(key))} is not a positive number"
        gbs = max(level["copy_gbs"], level["triad_gbs"])
        if gbs > last_gbs * LEVEL_SLACK:
            return f"{name}: {gbs:.4g} GB/s, faster than the level before it"
        last_capacity, last_gbs = capacity or math.inf, gbs
    return None


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_rate(value) -> bool:
    """A finite positive number (JSON allows NaN and Infinity; bool is no number)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."
