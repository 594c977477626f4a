"""Checks of options against the machine: output paths probed writable, inputs that fit in
memory, the device that --device auto means. Each raises `UsageError` naming the option,
before any work starts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from attnbench.api.parse import check_device_name
from attnbench.errors import UsageError
from attnbench.results.interrupts import deferred_interrupts

if TYPE_CHECKING:
    import torch

    from attnbench.inputs import Source


# The most tokens, batch, heads or d: n x n (a dense map's entries) stays inside int64.
# The most repeats, warm-up calls, trials or seeds per input: more could never finish.
# torch.Generator.manual_seed, numpy's default_rng and the numba kernels all take 0..2**63-1.


# A range written another way than a..b: a...b, a-b, a:b, a to b.


def check_inputs_fit(
    inputs: Source,
    layouts: list[tuple[int, tuple[int, int] | None]],
    dtype: torch.dtype | None = None,
    device: str = "cpu",
    batch: int | None = None,
    heads: int | None = None,
) -> None:
    """The largest case's q, k and v (and the image they are made from) fit in the memory free
    now, and every image resize is sensible: otherwise the sweep would fail late, or with a
    traceback, after the smaller cases ran. `batch` and `heads` (default: the inputs') are
    what the study repeats an image over; `dtype` defaults to float32."""
    import torch

    from attnbench.inputs.images import build_bytes
    from attnbench.measure.memory import available_bytes

    dtype = dtype or torch.float32
    if inputs.on_grid:
        for _, grid in layouts:
            inputs.check_grid(*grid)
    if device.startswith("cuda") and not torch.cuda.is_available():
        return  # a cluster's GPUs: its workers skip the cases that do not fit theirs
    n, grid = max(layouts, key=lambda layout: layout[0])
    batch, heads = batch or inputs.batch, heads or inputs.heads
    need = 3 * batch * heads * n * inputs.dim * dtype.itemsize
    if inputs.on_grid:
        need += build_bytes(*grid, inputs.dim)
    free = available_bytes(device)
    if need > free:
        size = f"--grid {grid[0]}x{grid[1]}" if grid else f"--seq {n}"
        shape = f"batch {batch} x heads {heads} x n {n} x d {inputs.dim}"
        raise UsageError(
            f"{size}: inputs alone need {byte_text(need)} (q, k, v of {shape}, "
            f"{str(dtype).removeprefix('torch.')}), {byte_text(free)} free on {device}"
        )


def byte_text(count: float) -> str:
    """Bytes in binary units, e.g. "7.5 TiB"."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if count < 1024 or unit == "PiB":
            break
        count /= 1024
    return f"{count:.1f} {unit}" if count < 1e5 else f"{count:.3g} {unit}"


def resolve_device(name: str, cluster_gpus: bool | None = None) -> str:
    """'auto' picks cuda when a GPU is present; asking for cuda without one is a user error.
    With `cluster_gpus` (a Ray cluster's), the cluster's GPUs count, not this machine's."""
    name = check_device_name(name)
    import torch

    gpus = torch.cuda.is_available() if cluster_gpus is None else cluster_gpus
    if name == "auto":
        return "cuda" if gpus else "cpu"
    if name == "cuda" and not gpus:
        where = "this machine" if cluster_gpus is None else "the Ray cluster"
        raise UsageError(f"--device cuda: no CUDA GPU is available to PyTorch on {where}")
    return name


def output_path(path: str | Path | None, option: str, suffixes: tuple[str, ...]) -> Path | None:
    """Check an output path (a Path or its text) before any work: known suffix, then
    `writable_file`."""
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
        with deferred_interrupts():  # no Ctrl-C or SIGTERM between creating and removing it
            fd, probe = tempfile.mkstemp(dir=parent, prefix=".attnbench-probe-")
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"{option}: cannot create files in {parent} ({exc.strerror})") from None
    return path


MIN_BUDGET, MAX_BUDGET = 2**20, 2**50  # 1 MiB .. 1 PiB


def check_outputs(csv: str | Path | None, json: str | Path | None, plot: str | Path | None):
    """The three output paths as Paths, each probed writable with the right suffix, and the
    CSV's environment record apart from the JSON."""
    from attnbench.results.paths import PLOT_SUFFIXES, env_sidecar

    paths = csv, json, plot = (
        output_path(csv, "--csv", (".csv",)),
        output_path(json, "--json", (".json",)),
        output_path(plot, "--plot", PLOT_SUFFIXES),
    )
    if csv is not None:
        writable_file(env_sidecar(csv), "--csv")
    if csv is not None and json is not None and env_sidecar(csv).resolve() == json.resolve():
        raise UsageError(f"--json: {json} is where --csv keeps its environment record")
    return paths
