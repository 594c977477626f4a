"""SIGINT and SIGTERM from the first instruction of `attnbench` to its last: a real process,
signalled while its modules import, while it runs, and while it shuts down, ends with exit
code 130 or 143 and the one line `interrupted`, never a traceback and never exit 0.

The process is started with both signals blocked, as a careful launcher would start it, so a
signal sent before its handlers exist is held, not lost: each delay below then hits the
stage it names whatever the load of the machine, and no assertion depends on timing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SIGNALS = (signal.SIGINT, signal.SIGTERM)
CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
TIME = ["time", "--seq", "16", "--heads", "1", "--dim", "8", "--backends", "sdpa",
        "--device", "cpu", "--threads", "1", "--rounds", "1", "--repeats", "1",
        "--min-time", "0", "--warmup", "0"]  # fmt: skip


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    """`args` in a new process that starts with SIGINT and SIGTERM blocked (the mask
    survives exec); attnbench unblocks them once its handlers are in place."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        return subprocess.Popen(
            [sys.executable, *args], cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def assert_interrupted(proc: subprocess.Popen, sig: signal.Signals, err: str) -> None:
    assert proc.returncode == CODES[sig], err[-2000:]
    assert err.strip().splitlines()[-1:] == ["interrupted"], err[-2000:]
    assert "Traceback" not in err and err.count("interrupted") == 1, err[-2000:]


@pytest.mark.parametrize(
    ("sig", "delay_s"),
    [
        (signal.SIGINT, 0.0),
        (signal.SIGTERM, 0.0),
        (signal.SIGINT, 0.3),
        (signal.SIGTERM, 0.6),
        (signal.SIGINT, 1.0),
        (signal.SIGTERM, 1.5),
    ],  # fmt: skip
)
def test_a_signal_while_attnbench_starts_is_one_line_and_its_exit_code(tmp_path, sig, delay_s):
    proc = start(["-m", "attnbench", *TIME, "--csv", str(tmp_path / "r.csv")], tmp_path)
    time.sleep(delay_s)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert_interrupted(proc, sig, err)


AT_EXIT = """
import atexit, os, signal, sys
from attnbench.__main__ import main

def late_signal():
    if sys.argv[1] == "pending":  # sent after the last handler could run: held by the kernel
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
    os.kill(os.getpid(), signal.SIGTERM)

atexit.register(late_signal)
sys.argv = ["attnbench", "--version"]
main()
"""


@pytest.mark.parametrize("when", ["handled", "pending"])
def test_a_signal_while_attnbench_shuts_down_is_not_a_silent_exit_0(tmp_path, when):
    proc = start(["-c", textwrap.dedent(AT_EXIT), when], ROOT)
    out, err = proc.communicate(timeout=120)
    assert out.startswith("attnbench ")  # the command itself ran to its end
    assert_interrupted(proc, signal.SIGTERM, err)


def test_an_uninterrupted_run_exits_0_with_its_table(tmp_path):
    proc = start(["-m", "attnbench", *TIME, "--csv", str(tmp_path / "r.csv")], tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert "sdpa" in out and (tmp_path / "r.csv").is_file()
