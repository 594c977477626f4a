"""`attnbench.compare` as a Python call: the rows `attnbench compare` prints, the gate's
exit codes, the command's error texts. plot and pareto name their figure --plot, pareto its
length --n and report the folder it reads --results; each old spelling still works and says
once that it is deprecated."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from typer.testing import CliRunner

import attnbench
from attnbench import cli
from attnbench.api.compare import run_compare
from attnbench.errors import UsageError
from attnbench.views.labels import backend_label

runner = CliRunner()
TINY = dict(seq=64, backends="softmax,sdpa", rounds=2, repeats=2, warmup=0, min_time=0)


def invoke(*args):
    return runner.invoke(cli.app, [str(a) for a in args])


def rewrite(source, target, samples: list[float], drop: str | None = None):
    """`source`'s rows with each time_ms row's samples set to `samples` (one per round),
    flagged stable, and the backend `drop` left out: a run whose verdicts are known."""
    frame = pd.read_csv(source)
    if drop is not None:
        frame = frame[frame["backend"] != drop]
    timed = frame["metric"] == "time_ms"
    frame.loc[timed, "samples"] = json.dumps(samples)
    frame.loc[timed, "value"] = float(pd.Series(samples).median())
    frame.loc[timed, "round_sizes"] = json.dumps([1] * len(samples))
    frame.loc[timed, "stable"] = True
    frame.to_csv(target, index=False)
    return target


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real tiny runs, and runs made from the first whose gate outcome is known:
    steady, three times slower, and steady without sdpa."""
    folder = tmp_path_factory.mktemp("compare")
    a, b = folder / "a.csv", folder / "b.csv"
    attnbench.time(**TINY, csv=a)
    attnbench.time(**TINY, csv=b)
    steady = rewrite(a, folder / "steady.csv", [1.0, 1.02])
    slow = rewrite(a, folder / "slow.csv", [3.0, 3.06])
    partial = rewrite(a, folder / "partial.csv", [1.0, 1.02], drop="sdpa")
    return dict(a=a, b=b, steady=steady, slow=slow, partial=partial)


def markdown_rows(output: str) -> list[list[str]]:
    """The cells of each case row of `compare --markdown`'s table."""
    lines = [line for line in output.splitlines() if line.startswith("| ")][1:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


@pytest.mark.parametrize(("a", "b"), [("a", "b"), ("steady", "slow"), ("b", "a")])
def test_the_frame_holds_what_the_command_prints(runs, a, b):
    result = invoke("compare", runs[a], runs[b], "--markdown")
    assert result.exit_code == 0, result.output
    frame = attnbench.compare(runs[a], runs[b])
    printed = markdown_rows(result.stdout)
    assert len(printed) == len(frame) == 2
    for cells, row in zip(printed, frame.itertuples(), strict=True):
        backend, case, a_value, b_value, ratio, interval, verdict = cells
        assert backend == backend_label(row.backend) and f"n={row.seq}" in case
        assert (a_value, b_value) == (f"{row.a:.3f}", f"{row.b:.3f}")
        assert ratio == f"{row.ratio:.3f}"
        assert interval == ("-" if math.isnan(row.low) else f"{row.low:.3f}-{row.high:.3f}")
        assert verdict.strip("*") == row.verdict
    assert frame["gate"].isna().all() and frame.attrs["outcome"] is None


@pytest.mark.parametrize(
    ("a", "b", "extra", "code"),
    [
        ("steady", "steady", [], 0),
        ("steady", "slow", [], 1),
        ("steady", "partial", [], 3),
        ("steady", "partial", ["--allow-unjudged"], 0),
        ("a", "b", [], None),  # real runs: whatever the gate says, both say it
        ("a", "b", ["--allow-unjudged"], None),
    ],
)
def test_the_gate_exit_code_is_the_api_verdict(runs, a, b, extra, code):
    result = invoke("compare", runs[a], runs[b], "--fail-above", "5%", *extra)
    compared = run_compare(runs[a], runs[b], "5%", allow_unjudged=bool(extra))
    assert result.exit_code == compared.exit_code == compared.gate.exit_code
    assert compared.frame.attrs["outcome"] == compared.gate.outcome
    assert code is None or result.exit_code == code
    if code == 1:
        assert set(compared.frame["gate"]) == {"fail"}
        assert set(compared.frame["verdict"]) == {"slower"}
    if a == b:
        assert set(compared.frame["gate"]) == {"pass"}
    assert result.stdout.splitlines()[-1].split(":")[0] == compared.gate.outcome.upper()


def cli_error(*args) -> str:
    """The one `error: ...` line of a command that refused, without its prefix."""
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    return line.removeprefix("error: ")


@pytest.mark.parametrize(
    ("b", "options"),
    [
        ("missing.csv", {}),
        ("a", {"fail_above": "five"}),
        ("a", {"fail_above": "5"}),
        ("a", {"allow_unjudged": True}),
    ],
)
def test_api_errors_are_the_commands(runs, tmp_path, b, options):
    other = runs.get(b, tmp_path / b)
    flags = []
    if "fail_above" in options:
        flags += ["--fail-above", options["fail_above"]]
    if options.get("allow_unjudged"):
        flags.append("--allow-unjudged")
    expected = cli_error("compare", runs["a"], other, *flags)
    with pytest.raises(UsageError) as raised:
        attnbench.compare(runs["a"], other, **options)
    assert " ".join(str(raised.value).split()) == expected


@pytest.fixture(scope="module")
def errors(runs):
    path = runs["a"].parent / "e.csv"
    args = ["error", "--seq", "64", "--backends", "softmax,sdpa", "--trials", "1"]
    result = invoke(*args, "--mc-seeds", "1", "--csv", path)
    assert result.exit_code == 0, result.output
    return path


def deprecation_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if "is deprecated" in line]


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (["plot", "{a}", "-o", "{out}/f.png"], ["plot", "{a}", "--plot", "{out}/f.png"], "-o"),
        (["plot", "{a}", "--out", "{out}/f.png"], ["plot", "{a}", "--plot", "{out}/f.png"], "-o"),
        (
            ["pareto", "{a}", "{e}", "--out", "{out}/f.png"],
            ["pareto", "{a}", "{e}", "--plot", "{out}/f.png"],
            "--out",
        ),
        (["pareto", "{a}", "{e}", "--seq", "64"], ["pareto", "{a}", "{e}", "--n", "64"], "--seq"),
        (
            ["report", "--plots", "{results}", "-o", "{out}"],
            ["report", "--results", "{results}", "-o", "{out}"],
            "--plots",
        ),
    ],
    ids=["plot-o", "plot-out", "pareto-out", "pareto-seq", "report-plots"],
)
def test_old_spellings_work_and_say_once_they_are_deprecated(
    runs, errors, tmp_path, old, new, said
):
    results = tmp_path / "results"
    results.mkdir()
    (results / "yoso-tiny.csv").write_bytes(runs["a"].read_bytes())
    names = dict(a=runs["a"], e=errors, results=results)
    for spelling, words in (("old", old), ("new", new)):
        out = tmp_path / spelling
        out.mkdir()
        result = invoke(*(w.format(out=out, **names) for w in words))
        assert result.exit_code == 0, result.output
        warned = deprecation_lines(result)
        if spelling == "old":
            assert len(warned) == 1 and said in warned[0], result.stderr
        else:
            assert warned == [], result.stderr
        if "f.png" in " ".join(words):
            assert (out / "f.png").stat().st_size > 0
        if words[0] == "report":
            assert (out / "yoso.md").is_file()


@pytest.mark.parametrize(
    "args",
    [
        ["plot", "{a}", "--plot", "f.png", "-o", "g.png"],
        ["pareto", "{a}", "{a}", "--n", "64", "--seq", "64"],
        ["report", "--results", "{out}", "--plots", "{out}"],
    ],
)
def test_old_and_new_spelling_together_are_refused(runs, tmp_path, args):
    line = cli_error(*(w.format(a=runs["a"], out=tmp_path) for w in args))
    assert "is the old name of" in line
    assert list(tmp_path.iterdir()) == []


def test_help_shows_only_the_new_spellings():
    for command, shown, hidden in (
        ("plot", "--plot", "--out"),
        ("pareto", "--n", "--seq"),
        ("report", "--results", "--plots"),
    ):
        text = invoke(command, "--help").stdout
        assert shown in text and hidden not in text
