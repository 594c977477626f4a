"""Parsing of option values: size lists and ranges ("4096", "1k,4k", "512..16384"), grids,
counts, fractions, byte sizes, dtype and device names.

Everything here raises `UsageError` with a message that names the option, so the command
line prints it as one line and the Python API raises it, before any work starts. Every
number a user gives is bounded here: Python ints have no limit, but torch, numpy and numba
take C integers and fail deep inside a run (or take the machine down) when handed one too
large."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from attnbench.errors import UsageError

if TYPE_CHECKING:
    pass

_SUFFIX = {"": 1, "k": 1024, "m": 1024**2}
_NUMBER = re.compile(r"^\s*(\d+)\s*([km]?)\s*$", re.IGNORECASE | re.ASCII)
_GRID = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*$", re.IGNORECASE | re.ASCII)

# The most tokens, batch, heads or d: n x n (a dense map's entries) stays inside int64.
MAX_SIZE = 2**31 - 1
# The most repeats, warm-up calls, trials or seeds per input: more could never finish.
MAX_COUNT = 10**6
# torch.Generator.manual_seed, numpy's default_rng and the numba kernels all take 0..2**63-1.
MAX_SEED = 2**63 - 1

DTYPES = ("float32", "float64", "float16", "bfloat16")  # names of torch dtypes


def _number(text: str, option: str) -> int:
    match = _NUMBER.match(text)
    if not match:
        raise UsageError(f"{option}: cannot read {text.strip()!r} as a size (e.g. 4096, 4k)")
    value = int(match.group(1)) * _SUFFIX[match.group(2).lower()]
    if value <= 0:
        raise UsageError(f"{option}: sizes must be positive, got {text.strip()!r}")
    if value > MAX_SIZE:
        raise UsageError(f"{option}: {text.strip()} is above {MAX_SIZE}, the largest size")
    return value


# A range written another way than a..b: a...b, a-b, a:b, a to b.
_RANGE_TYPO = re.compile(r"([0-9][0-9a-zA-Z]*)\s*(?:\.{3,}|-|:|\s+to\s+)\s*([0-9][0-9a-zA-Z]*)")


def _check_range_typo(item: str, option: str) -> None:
    """Refuse a range written with ..., -, : or "to", suggesting the a..b it meant."""
    match = _RANGE_TYPO.fullmatch(item.strip())
    if match:
        start, end = match.groups()
        raise UsageError(
            f"{option}: cannot read {item.strip()!r}; did you mean {start}..{end}, "
            "the doubling range?"
        )


def parse_sizes(text: str, option: str) -> list[int]:
    """A comma list of sizes or doubling ranges: "4096", "1k,4k,16k", "512..16384", "8..128".

    A range a..b means a, 2a, 4a, ..., b, and b must be on that ladder: an end between two
    rungs is refused rather than silently dropped. Duplicates are dropped, order kept.
    """
    if text is None or not text.strip():
        raise UsageError(f"{option}: empty value")
    sizes: list[int] = []
    for item in text.split(","):
        if not item.strip():
            raise UsageError(f"{option}: empty item in {text!r}")
        _check_range_typo(item, option)
        if ".." in item:
            start_text, _, end_text = item.partition("..")
            start, end = _number(start_text, option), _number(end_text, option)
            if start > end:
                raise UsageError(f"{option}: range {item.strip()} is empty (start > end)")
            ladder = [start]
            while ladder[-1] < end:
                ladder.append(ladder[-1] * 2)
            if ladder[-1] != end:
                _off_the_ladder(item, option, ", ".join(map(str, ladder)))
            sizes += ladder
        else:
            sizes.append(_number(item, option))
    return list(dict.fromkeys(sizes))


def parse_grids(text: str, option: str) -> list[tuple[int, int]]:
    """Image sizes "HxW": "128x128", a list "32x32,64x48", or a doubling range "32x32..256x256"
    (each side that grows is doubled every step, up to the end, which both sides must reach
    together; "1x64..1x256" keeps H = 1). Duplicates are dropped, order kept."""
    if text is None or not text.strip():
        raise UsageError(f"{option}: empty value")
    grids: list[tuple[int, int]] = []
    for item in text.split(","):
        if not item.strip():
            raise UsageError(f"{option}: empty item in {text!r}")
        _check_range_typo(item, option)
        if ".." in item:
            start_text, _, end_text = item.partition("..")
            (h, w), (h_end, w_end) = _grid(start_text, option), _grid(end_text, option)
            if h > h_end or w > w_end:
                raise UsageError(f"{option}: range {item.strip()} is empty (start > end)")
            grow_h, grow_w = (2 if h < h_end else 1), (2 if w < w_end else 1)
            ladder = [(h, w)]
            while ladder[-1] != (h_end, w_end) and h * grow_h <= h_end and w * grow_w <= w_end:
                h, w = grow_h * h, grow_w * w
                ladder.append((h, w))
            if ladder[-1] != (h_end, w_end):
                rungs = ladder + [(grow_h * h, grow_w * w)]
                _off_the_ladder(item, option, ", ".join(f"{a}x{b}" for a, b in rungs))
            grids += ladder
        else:
            grids.append(_grid(item, option))
    return list(dict.fromkeys(grids))


def _off_the_ladder(item: str, option: str, ladder: str) -> None:
    raise UsageError(
        f"{option}: range {item.strip()} does not end on its doubling ladder ({ladder}); "
        "end it on a rung, or list the sizes with commas"
    )


def _grid(text: str, option: str) -> tuple[int, int]:
    match = _GRID.match(text)
    if not match or int(match.group(1)) * int(match.group(2)) < 1:
        raise UsageError(f"{option}: {text.strip()!r} is not a grid HxW of positive integers")
    height, width = int(match.group(1)), int(match.group(2))
    if height * width > MAX_SIZE:
        raise UsageError(
            f"{option}: {height}x{width} is {height * width} tokens, above {MAX_SIZE}, the most"
        )
    return height, width


def positive(value: int, option: str, most: int = MAX_SIZE) -> int:
    if value is None or value < 1:
        raise UsageError(f"{option}: must be a positive integer, got {value}")
    if value > most:
        raise UsageError(f"{option}: {value} is above {most}, the most it may be")
    return value


def non_negative(value: int, option: str, most: int = MAX_SIZE) -> int:
    if value is None or value < 0:
        raise UsageError(f"{option}: must be zero or more, got {value}")
    if value > most:
        raise UsageError(f"{option}: {value} is above {most}, the most it may be")
    return value


def check_seed(seed: int, trials: int = 1, mc_seeds: int = 1) -> int:
    """--seed such that every seed a study derives from it is in 0..MAX_SEED: trial t draws
    with seed + t, an image's colours with the next seed, and the Monte Carlo draws with seeds
    up to (seed + trials) * mc_seeds - 1. Negative seeds are refused: torch would wrap them
    modulo 2**64 while numpy rejects them, so one seed would not mean one draw everywhere."""
    # out-of-range counts are reported by their own checks, not as a seed error
    trials, mc_seeds = (min(max(count, 1), MAX_COUNT) for count in (trials, mc_seeds))
    most = min(MAX_SEED - trials, (MAX_SEED + 1) // mc_seeds - trials)
    if not 0 <= seed <= most:
        derived = "seed + 1" if trials == mc_seeds == 1 else f"(seed + {trials}) x {mc_seeds}"
        raise UsageError(
            f"--seed: {seed} is not in 0..{most}; seeds are 0..2**63 - 1 "
            f"and the study also draws with seeds up to {derived}"
        )
    return seed


def check_threads(threads: int | None, pooled: bool = False) -> int | None:
    """--threads in 1..numba's thread pool, sized at start-up by NUMBA_NUM_THREADS: torch
    would take more, but the numba kernels could not, and comparisons would not be alike.
    `pooled`: the threads are a Ray worker's, held against its own CPUs when it is planned."""
    if threads is None:
        return None
    if pooled:
        return positive(threads, "--threads")
    import numba  # lazily: importing numba is slow, and --threads is rarely given

    most = numba.config.NUMBA_NUM_THREADS
    if not 1 <= threads <= most:
        raise UsageError(
            f"--threads: {threads} is not in 1..{most} (numba's pool; "
            "the environment variable NUMBA_NUM_THREADS sets its size)"
        )
    return threads


def check_option_keys(keys, command, where: str) -> None:
    """Every key of a profile's [options] names a long option of `command` (a click command,
    so the list is the command's own): `help = true` or a typo is refused, not passed on."""
    valid = [opt[2:] for param in command.params for opt in param.opts if opt.startswith("--")]
    for key in keys:
        if str(key).replace("_", "-") not in valid:
            raise UsageError(
                f"{where}: {key!r} is not an option of `{command.name}`; valid: {', '.join(valid)}"
            )


def check_dtype_name(name: str) -> str:
    """--dtype checked by name alone, before torch is imported for `parse_dtype`."""
    if name.lower() not in DTYPES:
        raise UsageError(f"--dtype: unknown dtype {name!r}; valid: {', '.join(DTYPES)}")
    return name.lower()


def parse_dtype(name: str):
    """The torch dtype named `name` (torch is imported only when an option needs it)."""
    name = check_dtype_name(name)
    import torch

    return getattr(torch, name)


def check_device_name(name: str) -> str:
    """--device checked by name alone, before torch is imported for `resolve_device`."""
    if name.lower() not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device: unknown device {name!r}; valid: auto, cpu, cuda")
    return name.lower()


# Room left in a file name for the hidden temp and lock files written beside an output
# (".NAME.XXXXXXXX.tmp", ".NAME.lock", ".NAME.PID.tmp.png").


MAX_MIN_TIME_S = 3600.0  # an hour of samples per case: beyond it a typo, not a study


def parse_fraction(text: str, option: str, what: str = "a fraction") -> float:
    """ "10%" or "0.1" -> 0.1. A bare number is a fraction, so it must be below 1."""
    raw = str(text).strip()
    percent = raw.endswith("%")
    try:
        value = float(raw.removesuffix("%"))
    except ValueError:
        value = math.nan
    if percent:
        value /= 100
    if not math.isfinite(value) or value < 0 or (not percent and value >= 1):
        raise UsageError(f"{option}: expected {what} like 5% or 0.05, got {text!r}")
    return value


def check_min_time(seconds: float) -> float:
    """--min-time: seconds of timed samples per case, 0 (repeats alone) up to an hour."""
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_MIN_TIME_S):
        raise UsageError(f"--min-time: must be 0..{MAX_MIN_TIME_S:.0f} seconds, got {seconds}")
    return float(seconds)  # 0 and 0.0 are one setting, so one case id


MAX_LAYERS = 1024
MAX_MODEL_SIZE = 2**20
MAX_BATCH = 2**20
_BYTE_UNITS = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20}
_BYTE_UNITS |= {"g": 2**30, "gib": 2**30, "t": 2**40, "tib": 2**40}
MIN_BUDGET, MAX_BUDGET = 2**20, 2**50  # 1 MiB .. 1 PiB


def parse_bytes(text: str, option: str = "--memory-budget") -> int:
    """ "4GiB", "512MiB", "1.5g", "1048576" -> bytes (binary units), within 1 MiB..1 PiB."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _BYTE_UNITS:
        raise UsageError(f"{option}: cannot read {text!r} as an amount of memory (e.g. 4GiB)")
    value = float(match.group(1)) * _BYTE_UNITS[unit]
    if not MIN_BUDGET <= value <= MAX_BUDGET:
        raise UsageError(f"{option}: {text.strip()} is not in 1MiB..1024TiB")
    return int(value)


def sizes_text(value) -> str | None:
    """A list of lengths as the command line writes it: 4096, [1024, 4096] and "1k,4k"
    all read as the same --seq."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    return ",".join(str(item) for item in value)


def list_text(value) -> str:
    """A comma list as the command line writes it, from a string or a list of strings."""
    return value if isinstance(value, str) else ",".join(str(item) for item in value)


def backends_text(value, option: str = "--backends") -> str:
    """--backends as a comma list, its names and parameter names checked without torch
    (`backends.names`): a mistyped name is an error at once, not after torch loads."""
    from attnbench.backends.names import check_backend_names

    text = list_text(value)
    if text.strip():
        check_backend_names(text, option)
    return text


def parse_inputs(kind: str, batch: int, heads: int, dim: int, seqs, grids):
    """The --inputs source, checked against the lengths; a file's own shape replaces batch,
    heads and dim."""
    from attnbench.inputs import Inputs

    source = Inputs(kind, batch, heads, dim)
    if source.on_grid and grids is None:
        raise UsageError(f"--inputs {kind} is an image: give its size with --grid HxW")
    if grids is None:
        source.check_lengths(seqs)
    else:
        source.check_lengths([h * w for h, w in grids], "--grid")
    return source
