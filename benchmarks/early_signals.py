"""Ctrl-C and SIGTERM in the first seconds of `attnbench time`, as an impatient user or a
job scheduler sends them: N tries at random delays over the import window (the interpreter
starting, the command line, then torch and numba importing), each signal SIGINT or SIGTERM
at random. Prints the tally: handled (exit 130/143 and the line `interrupted`), lost (exit
0), tracebacks, and deaths by the signal itself, split by whether any attnbench code had
run yet (before it, the interpreter's own start-up is all there is to interrupt).

    python benchmarks/early_signals.py [--tries 100] [--window 2.5] [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TIME = ["time", "--seq", "16", "--heads", "1", "--dim", "8", "--backends", "sdpa",
        "--device", "cpu", "--threads", "1", "--rounds", "1", "--repeats", "1",
        "--min-time", "0", "--warmup", "0"]  # fmt: skip
PACKAGE_FRAME = re.compile(r'File "[^"]*/attnbench/[^"]+\.py"')  # a frame of the package


def command() -> list[str]:
    """The console script beside this interpreter, else `python -m attnbench`."""
    script = Path(sys.executable).with_name("attnbench")
    if script.is_file():
        return [str(script)]
    found = shutil.which("attnbench")
    return [found] if found else [sys.executable, "-m", "attnbench"]


def outcome(sig: signal.Signals, code: int, err: str) -> str:
    handled = code == 128 + sig and err.strip().splitlines()[-1:] == ["interrupted"]
    broken = "Traceback" in err or "Fatal Python error" in err
    if handled and not broken:
        return "handled"
    if code == 0:
        return "lost (exit 0)"
    if broken:
        where = "in attnbench" if PACKAGE_FRAME.search(err) else "before attnbench ran"
        return f"traceback {where}"
    if code == -sig:
        return "killed by the signal, no line (before attnbench ran)"
    return f"exit {code}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=100)
    parser.add_argument("--window", type=float, default=2.5, help="latest delay, seconds")
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()
    rng = random.Random(opts.seed)
    tally: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(opts.tries):
            sig = rng.choice([signal.SIGINT, signal.SIGTERM])
            delay = rng.uniform(0.0, opts.window)
            proc = subprocess.Popen(
                [*command(), *TIME, "--csv", f"{tmp}/r{i}.csv"], cwd=tmp,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            time.sleep(delay)
            proc.send_signal(sig)
            _, err = proc.communicate()
            what = outcome(sig, proc.returncode, err)
            tally[f"{sig.name} {what}"] += 1
            if what != "handled":
                examples.setdefault(what, f"{sig.name} at {delay:.2f} s:\n{err[-600:]}")
            print(f"{i + 1:3d} {sig.name:7s} {delay:5.2f}s exit {proc.returncode:4d} {what}",
                  flush=True)  # fmt: skip
    print(f"\n{opts.tries} tries, delays 0-{opts.window} s:")
    for what, count in sorted(tally.items()):
        print(f"  {count:3d}  {what}")
    for what, text in examples.items():
        print(f"\n--- first {what}: {text}")


if __name__ == "__main__":
    main()
