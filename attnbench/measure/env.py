"""The reproducibility record written next to every result.

Every field is best effort: a missing library, GPU, driver or git checkout is recorded as
None (or "absent" for packages) instead of stopping a benchmark run.
"""

from __future__ import annotations

import importlib.metadata
import platform
import shlex
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import torch

from attnbench.measure import is_cuda
from attnbench.measure.allocator import allocator_setting
from attnbench.measure.timing import timer_name
from attnbench.results.schema import SCHEMA_VERSION

GIT_TIMEOUT_S = 5


def environment(device: str, threads: int, seed: int | None) -> dict:
    """Everything needed to tell whether two results were measured under the same conditions."""
    return {
        "schema_version": SCHEMA_VERSION,
        "attnbench": _version("attnbench", "unknown"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": _version("torch"),
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        "numba_cuda": _version("numba-cuda"),
        "torch_cuda": torch.version.cuda,
        "device": device,
        "device_name": _safe(lambda: _device_name(device)),
        "nvidia_driver": _safe(_nvidia_driver),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "numba_threads": _safe(_numba_threads),
        "allocator": allocator_setting(),
        "threads": threads,
        "seed": seed,
        "command": shlex.join(sys.argv),
        "git_revision": _git_revision(),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "timer": timer_name(device),
    }


def _numba_threads() -> int:
    import numba

    return numba.get_num_threads()


def _safe(get: Callable[[], object]) -> object:
    """The record must never be the reason a run fails, so any error becomes None."""
    try:
        return get()
    except Exception:
        return None


def _version(dist: str, missing: str = "absent") -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return missing


def _device_name(device: str) -> str | None:
    if is_cuda(device):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _nvidia_driver() -> str | None:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None  # no GPU or no driver on this machine
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()
    return version.decode() if isinstance(version, bytes) else version


def _git_revision() -> str | None:
    """The commit of the source tree attnbench was imported from, if it is a git checkout,
    with "+dirty" when the package's tracked files differ from it (results then come from
    code no commit holds)."""
    package_dir = Path(__file__).resolve().parent.parent
    head = _git(package_dir, "rev-parse", "HEAD")
    if not head:
        return None  # not a git checkout, or no commit yet
    changes = _git(package_dir, "status", "--porcelain", "--untracked-files=no", "--", ".")
    return head + "+dirty" if changes else head


def _git(cwd: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
