"""The Python API: the guide's example runs as written, and `time` and `profile` give the
command's rows and the command's errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import attnbench
from attnbench import cli
from attnbench.results.read import read_rows
from attnbench.results.schema import is_missing

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"
TINY = dict(seq=64, backends="softmax,sdpa", rounds=1, repeats=1, warmup=0, min_time=0)
# what differs between two runs of one case: times, the run's own identity, the host's state
VARYING = re.compile(
    r"value|p10|p90|std|samples|spread|stable|speedup|share|gflops|gbs|bound|cpu_|load_"
    r"|run_id|worker|co_tenancy|count|round_sizes|method|reason|intensity"
)


def from_python_example() -> str:
    section = GUIDE.read_text().split("## From Python", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_guides_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    exec(compile(from_python_example(), "guide: From Python", "exec"), {})  # noqa: S102
    out = capsys.readouterr().out
    assert "yoso:m=32" in out and "sdpa" in out
    assert "does not end on its doubling ladder" in out
    assert list(tmp_path.iterdir()) == []  # nothing written unless asked


def fixed_columns(frame):
    """The columns two runs of one case share, as text, an empty cell (NaN, NA) as None."""
    keep = [c for c in frame.columns if not VARYING.search(c)]
    frame = frame[keep].astype(object).map(lambda cell: None if is_missing(cell) else str(cell))
    return frame.sort_values(["backend", "metric"]).reset_index(drop=True)


@pytest.mark.parametrize("study", ["time", "profile"])
def test_the_api_gives_the_commands_rows(study, tmp_path):
    csv = tmp_path / "cli.csv"
    args = [study, "--seq", "64", "--backends", "softmax,sdpa", "--repeats", "1",
            "--warmup", "0", "--min-time", "0", "--csv", str(csv)]  # fmt: skip
    if study == "time":
        args += ["--rounds", "1"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    options = dict(TINY)
    if study == "profile":
        options.pop("rounds")
    frame = getattr(attnbench, study)(**options)
    api, command = fixed_columns(frame), fixed_columns(read_rows(csv))
    assert list(api.columns) == list(command.columns)
    assert api.equals(command)


@pytest.mark.parametrize(
    "options",
    [
        {"seq": "abc"},
        {"repeats": 0},
        {"max_spread": "lots"},
        {"executor": "local"},
        {"csv": "no-such-folder/r.csv"},
        {"mode": "sideways"},
    ],
)
def test_an_api_error_is_the_commands_error_line(options, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(attnbench.UsageError) as raised:
        attnbench.time(**options)
    flag, value = next(iter(options.items()))
    if flag == "executor":  # the command still takes `local` (deprecated): a new bad name
        assert "unknown executor 'local'" in str(raised.value)
        flag, value = "executor", "nowhere"
        with pytest.raises(attnbench.UsageError) as raised:
            attnbench.time(executor=value)
    result = CliRunner().invoke(cli.app, ["time", "--" + flag.replace("_", "-"), str(value)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {raised.value}"


def test_deprecated_executor_spellings_work_and_say_so_once(tmp_path):
    args = ["time", "--seq", "64", "--backends", "softmax", "--baseline", "softmax",
            "--rounds", "1", "--repeats", "1", "--warmup", "0", "--min-time", "0"]  # fmt: skip
    for old, new in (
        (["--isolate"], "--executor isolated"),
        (["--executor", "local"], "--executor in-process"),
    ):
        result = CliRunner().invoke(cli.app, args + old)
        assert result.exit_code == 0, result.output
        notices = [line for line in result.stderr.splitlines() if "deprecated" in line]
        assert notices == [f"attnbench: {' '.join(old)} is deprecated and goes in the next "
                           f"release; use {new}"]  # fmt: skip
