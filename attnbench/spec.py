"""Parsing of size lists and ranges ("4096", "1k,4k", "512..16384") and option checks.

Everything here raises `UsageError` with a message that names the option, so the CLI can
print it as one line before any work starts.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from attnbench.errors import UsageError

_SUFFIX = {"": 1, "k": 1024, "m": 1024**2}
_NUMBER = re.compile(r"^\s*(\d+)\s*([km]?)\s*$", re.IGNORECASE)

DTYPES = ("float32", "float64", "float16", "bfloat16")  # names of torch dtypes


def _number(text: str, option: str) -> int:
    match = _NUMBER.match(text)
    if not match:
        raise UsageError(f"{option}: cannot read {text.strip()!r} as a size (e.g. 4096, 4k)")
    value = int(match.group(1)) * _SUFFIX[match.group(2).lower()]
    if value <= 0:
        raise UsageError(f"{option}: sizes must be positive, got {text.strip()!r}")
    return value


def parse_sizes(text: str, option: str) -> list[int]:
    """A comma list of sizes or doubling ranges: "4096", "1k,4k,16k", "512..16384", "8..128".

    A range a..b means a, 2a, 4a, ... up to b. Duplicates are dropped, order kept.
    """
    if text is None or not text.strip():
        raise UsageError(f"{option}: empty value")
    sizes: list[int] = []
    for item in text.split(","):
        if not item.strip():
            raise UsageError(f"{option}: empty item in {text!r}")
        if ".." in item:
            start_text, _, end_text = item.partition("..")
            start, end = _number(start_text, option), _number(end_text, option)
            if start > end:
                raise UsageError(f"{option}: range {item.strip()} is empty (start > end)")
            value = start
            while value <= end:
                sizes.append(value)
                value *= 2
        else:
            sizes.append(_number(item, option))
    return list(dict.fromkeys(sizes))


def parse_grids(text: str, option: str) -> list[tuple[int, int]]:
    """Image sizes "HxW": "128x128", a list "32x32,64x48", or a doubling range "32x32..256x256"
    (each side that grows is doubled every step, up to the end; "1x64..1x256" keeps H = 1).
    Duplicates are dropped, order kept."""
    if text is None or not text.strip():
        raise UsageError(f"{option}: empty value")
    grids: list[tuple[int, int]] = []
    for item in text.split(","):
        if not item.strip():
            raise UsageError(f"{option}: empty item in {text!r}")
        if ".." in item:
            start_text, _, end_text = item.partition("..")
            (h, w), (h_end, w_end) = _grid(start_text, option), _grid(end_text, option)
            if h > h_end or w > w_end:
                raise UsageError(f"{option}: range {item.strip()} is empty (start > end)")
            grow_h, grow_w = (2 if h < h_end else 1), (2 if w < w_end else 1)
            while h <= h_end and w <= w_end:
                grids.append((h, w))
                if grow_h == grow_w == 1:
                    break
                h, w = grow_h * h, grow_w * w
        else:
            grids.append(_grid(item, option))
    return list(dict.fromkeys(grids))


def _grid(text: str, option: str) -> tuple[int, int]:
    height, x, width = text.strip().lower().partition("x")
    if not x or not height.isdigit() or not width.isdigit() or int(height) * int(width) < 1:
        raise UsageError(f"{option}: {text.strip()!r} is not a grid HxW of positive integers")
    return int(height), int(width)


def positive(value: int, option: str) -> int:
    if value is None or value < 1:
        raise UsageError(f"{option}: must be a positive integer, got {value}")
    return value


def non_negative(value: int, option: str) -> int:
    if value is None or value < 0:
        raise UsageError(f"{option}: must be zero or more, got {value}")
    return value


def parse_dtype(name: str):
    """The torch dtype named `name` (torch is imported only when an option needs it)."""
    if name.lower() not in DTYPES:
        raise UsageError(f"--dtype: unknown dtype {name!r}; valid: {', '.join(DTYPES)}")
    import torch

    return getattr(torch, name.lower())


def resolve_device(name: str) -> str:
    """'auto' picks cuda when a GPU is present; asking for cuda without one is a user error."""
    name = name.lower()
    if name not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device: unknown device {name!r}; valid: auto, cpu, cuda")
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU is available to PyTorch on this machine")
    return name


def output_path(path: Path | None, option: str, suffixes: tuple[str, ...]) -> Path | None:
    """Check an output path before any work: known suffix, then `writable_file`."""
    if path is None:
        return None
    path = Path(path)
    if path.suffix.lower() not in suffixes:
        raise UsageError(f"{option}: {path} must end in one of {', '.join(suffixes)}")
    return writable_file(path, option)


# Room left in a file name for the hidden temp and lock files written beside an output
# (".NAME.XXXXXXXX.tmp", ".NAME.lock", ".NAME.PID.tmp.png").
HIDDEN_NAME_ROOM = 20


def writable_file(path: Path, option: str) -> Path:
    """Check that a file can be written at `path` (an output or a sidecar such as
    results.env.json): existing directory, not a directory itself, a name the file system
    takes, and a probe file created and removed beside it. The probe is the real test:
    `os.access` says yes to root on /proc, /sys and read-only mounts."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    try:
        name_max = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    length = len(os.fsencode(path.name))
    if length + HIDDEN_NAME_ROOM > name_max:
        raise UsageError(
            f"{option}: file name {path.name[:40]}... is {length} bytes; "
            f"names here may have up to {name_max - HIDDEN_NAME_ROOM} bytes"
        )
    try:
        if not parent.is_dir():
            raise UsageError(f"{option}: directory {parent} does not exist")
        is_dir = path.is_dir()
    except OSError as exc:
        raise UsageError(f"{option}: {path} ({exc.strerror})") from None
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{option}: directory {parent} is not writable")
    if is_dir:
        raise UsageError(f"{option}: {path} is a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".attnbench-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"{option}: cannot create files in {parent} ({exc.strerror})") from None
    return path
