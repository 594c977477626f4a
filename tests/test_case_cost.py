"""What a case and a mistake cost beyond the work asked for: a bad option is refused before
torch and numba load, a run without --plot never loads matplotlib, and the peak-memory
measurement stays exact without a full garbage collection per case."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.measure.memory import peak_memory

MIB = 1024 * 1024
ROOT = Path(__file__).parents[1]


def run_app(*args: str, watch: tuple[str, ...]) -> dict:
    """Run `attnbench ARGS` through CliRunner in a fresh interpreter: its exit code, its
    error output, and which of `watch` (module names) were imported by the end."""
    code = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from attnbench.cli import app\n"
        f"result = CliRunner().invoke(app, {list(args)!r})\n"
        "print(json.dumps({'code': result.exit_code, 'output': result.output,\n"
        f"    'loaded': sorted(m for m in {list(watch)!r} if m in sys.modules)}}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "args, message",
    [
        (("--seq", "abc"), "--seq"),
        (("--repeats", "-1"), "--repeats"),
        (("--warmup", "-1"), "--warmup"),
        (("--dtype", "float8"), "--dtype"),
        (("--device", "tpu"), "--device"),
        (("--max-spread", "2"), "--max-spread"),
        (("--seed", "-1"), "--seed"),
    ],
)
def test_a_bad_time_option_is_refused_before_torch_and_numba_load(args, message):
    result = run_app("time", *args, watch=("torch", "numba", "scipy"))
    assert result["code"] == 2
    assert message in result["output"]
    assert result["loaded"] == []


def test_a_bad_profile_option_is_refused_before_torch_loads():
    result = run_app("profile", "--seq", "1..x", watch=("torch", "numba"))
    assert result["code"] == 2 and "--seq" in result["output"]
    assert result["loaded"] == []


def test_a_time_run_without_plot_never_imports_matplotlib():
    args = ("time", "--seq", "16", "--backends", "softmax", "--repeats", "1", "--warmup", "0")
    args += ("--heads", "1", "--dim", "4", "--rounds", "1", "--min-time", "0")
    result = run_app(*args, watch=("matplotlib", "torch"))
    assert result["code"] == 0, result["output"]
    assert result["loaded"] == ["torch"]  # the study ran, and drew nothing


def test_importing_the_figure_toolkit_does_not_import_matplotlib():
    code = (
        "import sys\n"
        "from attnbench.views.figures import PLOT_SUFFIXES\n"
        "print('matplotlib' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.strip() == "False"


def test_figure_toolkit_gives_pyplot_on_use():
    from attnbench.views import figures

    assert figures.plt.get_backend().lower() == "agg"
    fig, axes = figures.new_figure(1, "t", [])
    figures.plain_log_ticks(axes[0].yaxis)
    figures.plt.close(fig)


@pytest.mark.parametrize("device", ["cpu"])
def test_no_garbage_collection_runs_during_a_measured_call(device):
    seen = []
    assert gc.isenabled()
    peak_memory(lambda: seen.append(gc.isenabled()), device)
    assert seen == [False]
    assert gc.isenabled()


def test_old_garbage_does_not_hide_a_calls_allocation():
    """Garbage in the oldest generation is not collected before the call; it stays
    allocated, so the call's 64 MiB still show in full."""
    cycle = [bytearray(64 * MIB)]
    cycle.append(cycle)
    gc.collect()  # the cycle, still referenced, moves to the oldest generation
    del cycle  # now garbage that only a full collection frees

    def allocate():
        block = bytearray(64 * MIB)
        block[::4096] = b"x" * len(block[::4096])  # touch every page
        return block

    try:
        peak = peak_memory(allocate, "cpu")
    finally:
        gc.collect()
    assert peak.bytes >= 60 * MIB
