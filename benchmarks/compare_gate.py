"""How often `attnbench compare --fail-above` fails identical code, and whether it catches a
planted slowdown, on this machine.

    python benchmarks/compare_gate.py [--pairs 10] [--runs 1] [--rounds 5] [--fail-above 5%]

Each pair times the same command (`time --rounds R`) `runs` times for side A and `runs`
times for side B, interleaved (A, B, A, B, ...), so both sides see the same drift; then
compares A with B (identical code: the gate should pass) and A with B slowed by
`--slowdown` (every sample of B multiplied: the gate should fail). Prints one line per pair
and the two counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import typer

COMMAND = ["time", "--seq", "1024,2048", "--backends", "sdpa,yoso-32"]


def timed(path: Path, rounds: int) -> None:
    """One `attnbench time` run of COMMAND in `rounds` rounds into `path`."""
    argv = [sys.executable, "-m", "attnbench", *COMMAND, "--rounds", str(rounds)]
    argv += ["--csv", str(path)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def slowed(path: Path, out: Path, factor: float) -> None:
    """`path` with every time sample and median multiplied by `factor`."""
    frame = pd.read_csv(path)
    times = frame["metric"] == "time_ms"
    for column in ("value", "p10", "p90"):
        frame.loc[times, column] = frame.loc[times, column] * factor
    frame.loc[times, "samples"] = [
        json.dumps([s * factor for s in json.loads(text)]) for text in frame.loc[times, "samples"]
    ]
    frame.to_csv(out, index=False)


def gate_fails(a: str, b: str, fail_above: str) -> str:
    """The gate's FAIL line naming the failing cases, or "" when it passes."""
    argv = [sys.executable, "-m", "attnbench", "compare", a, b, "--fail-above", fail_above]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(done.stderr)
    lines = " ".join(done.stdout.split()).partition("FAIL: ")[2]
    return (lines or "FAIL") if done.returncode == 1 else ""


def main(
    pairs: int = 10,
    runs: int = 1,
    rounds: int = 5,
    fail_above: str = "5%",
    slowdown: float = 1.2,
    keep: Path = typer.Option(None, help="keep every run's CSV in this folder"),
) -> None:
    same_failed = planted_failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(pairs):
            folder = (keep or Path(tmp)) / f"pair{pair}"
            folder.mkdir(parents=True)
            for run in range(runs):
                for side in "ab":
                    timed(folder / f"{side}-{run}.csv", rounds)
                slowed(folder / f"b-{run}.csv", folder / f"slow-{run}.csv", slowdown)
            a, b, slow = (str(folder / f"{side}-*.csv") for side in ("a", "b", "slow"))
            same, planted = gate_fails(a, b, fail_above), gate_fails(a, slow, fail_above)
            same_failed += bool(same)
            planted_failed += bool(planted)
            verdicts = [f"FAIL ({failed})" if failed else "pass" for failed in (same, planted)]
            print(f"pair {pair}: identical {verdicts[0]}; {slowdown:g}x slower {verdicts[1]}")
    print(
        f"{runs} run(s) of {rounds} round(s) a side: "
        f"identical code failed the {fail_above} gate in {same_failed} of {pairs} pairs; "
        f"the planted {slowdown:g}x slowdown failed it in {planted_failed} of {pairs}"
    )


if __name__ == "__main__":
    typer.run(main)
