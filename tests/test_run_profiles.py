"""`attnbench run PROFILE --set KEY=VALUE` and profiles run by their bare name: an override
reaches the command as the command line would give it, a bad one is one `error:` line
before anything runs, and `run yoso-fig8` finds the shipped profile from any folder."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import typer
from helpers import assert_ok, assert_one_line_error, invoke, runner

import attnbench.cli.core as cli
from attnbench.cli import run as profiles
from attnbench.run import procedure

ROOT = Path(__file__).parents[1]
TINY = [
    'command = "time"',
    "[options]",
    'seq = "16"',
    "heads = 1",
    "dim = 4",
    'backends = "softmax"',
    "repeats = 2",
    "warmup = 0",
    "min-time = 0",
]


@pytest.fixture(autouse=True)
def no_ceilings(monkeypatch):
    """The machine's ceilings are no part of what a profile runs: not measured here."""
    monkeypatch.setattr(procedure, "_ceilings", lambda *args, **kwargs: None)


def _write(folder: Path, *extra: str, name: str = "tiny.toml") -> Path:
    path = folder / name
    path.write_text("\n".join([*TINY, *extra]) + "\n")
    return path


def test_set_overrides_what_runs(tmp_path, monkeypatch):
    """Each override replaces the profile's value (csv, seq) or adds one (heads as
    `heads`, min_time under the other spelling), and the rows show it."""
    monkeypatch.chdir(tmp_path)
    profile = _write(tmp_path, 'csv = "profile.csv"')
    out = tmp_path / "override.csv"
    sets = [f"csv={out}", "seq=16,32", "heads=2", "min_time=0"]
    result = invoke("run", profile, *[arg for s in sets for arg in ("--set", s)])
    assert_ok(result)
    assert not (tmp_path / "profile.csv").exists()
    rows = pd.read_csv(out)
    assert sorted(set(rows["seq"])) == [16, 32]
    assert (rows["heads"] == 2).all() and (rows["dim"] == 4).all()


@pytest.mark.parametrize(
    ("profile_flag", "value", "expected"),
    [(None, "true", True), ("isolate = true", "false", False), ("isolate = false", "TRUE", True)],
)
def test_set_turns_a_flag_on_or_off(tmp_path, profile_flag, value, expected):
    profile = _write(tmp_path, *([profile_flag] if profile_flag else []))
    argv = profiles.profile_argv(profile, profiles.parse_sets([f"isolate={value}"]))
    assert argv.count("--isolate") + argv.count("--no-isolate") == 1
    command = typer.main.get_command(cli.app).commands["time"]
    assert command.make_context("time", argv[1:]).params["isolate"] is expected


def test_a_flag_set_reaches_the_command_and_its_checks(tmp_path):
    """--resume with no output file is the time command's own refusal, named as --set's."""
    result = invoke("run", _write(tmp_path), "--set", "resume=true")
    assert_one_line_error(result, "--set: --resume: give the --csv or --json file")


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["seq"], "--set 'seq': give KEY=VALUE"),
        (["=16"], "--set '=16': no option name before '='"),
        ([" =16"], "no option name before '='"),
        (["sek=16"], "--set: 'sek' is not an option of `time`; valid: "),
        (["no-isolate=true"], "'no-isolate' is not an option of `time`"),
        (["isolate=yes"], "--set isolate: a flag: true or false, not 'yes'"),
        (["min-time=0", "min_time=1"], "are the same option (--min-time); give it once"),
        (["heads=abc"], "--set: Invalid value for '--heads'"),
        (["seq=abc"], "--set: --seq: cannot read 'abc'"),
        (["seq=16", "seq"], "give KEY=VALUE"),
        (["backends=--help"], "tiny.toml with --set: unknown backend '--help'"),
    ],
    ids=lambda x: "|".join(x) if isinstance(x, list) else None,
)
def test_a_bad_set_is_one_error_line_and_runs_nothing(tmp_path, monkeypatch, sets, needle):
    monkeypatch.chdir(tmp_path)
    profile = _write(tmp_path, 'csv = "out.csv"')
    result = invoke("run", profile, *[arg for s in sets for arg in ("--set", s)])
    assert_one_line_error(result, needle)
    assert [p.name for p in tmp_path.iterdir()] == ["tiny.toml"]


def test_an_unknown_set_reads_like_an_unknown_profile_option(tmp_path):
    from_file = invoke("run", _write(tmp_path, "sek = 1"))
    from_set = invoke("run", _write(tmp_path, name="ok.toml"), "--set", "sek=1")
    in_file = assert_one_line_error(from_file).partition(": ")[2]
    in_set = assert_one_line_error(from_set).partition(": ")[2]
    assert in_file.partition(": ")[2] == in_set.partition(": ")[2]


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A shipped-profiles folder holding tiny.toml (writing here.csv), and a separate
    current folder, so only the bare-name lookup can find the profile."""
    folder = tmp_path / "shipped"
    folder.mkdir()
    _write(folder, 'csv = "here.csv"')
    (folder / "other.toml").write_text("# other: another\n" + "\n".join(TINY) + "\n")
    monkeypatch.setattr(profiles, "SHIPPED", folder)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


@pytest.mark.parametrize("name", ["tiny", "tiny.toml"])
def test_a_bare_name_runs_the_shipped_profile(shipped, name):
    assert_ok(invoke("run", name, "--set", "seq=32"))
    assert set(pd.read_csv(shipped / "here.csv")["seq"]) == {32}


def test_a_file_here_wins_over_a_shipped_profile_of_that_name(shipped):
    _write(shipped, 'csv = "local.csv"')
    assert_ok(invoke("run", "tiny.toml"))
    assert (shipped / "local.csv").exists() and not (shipped / "here.csv").exists()


def test_an_unknown_bare_name_lists_the_shipped_ones(shipped):
    line = assert_one_line_error(invoke("run", "nope"), "nope: no such profile")
    assert line.endswith("shipped: other, tiny")
    assert list(shipped.iterdir()) == []


def test_a_path_that_is_no_file_is_not_looked_up(shipped):
    assert_one_line_error(invoke("run", "sub/tiny.toml"), "sub/tiny.toml: no such profile")


def test_without_a_shipped_folder_a_bare_name_says_where_it_looked(shipped, monkeypatch):
    missing = shipped.parent / "no-profiles"
    monkeypatch.setattr(profiles, "SHIPPED", missing)
    line = assert_one_line_error(invoke("run", "tiny"), "tiny: no such profile")
    assert str(Path.cwd()) in line and str(missing) in line


def test_the_real_shipped_profiles_resolve_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    found = profiles.find_profile(Path("yoso-fig8"))
    assert found == ROOT / "profiles" / "yoso-fig8.toml"
    argv = profiles.profile_argv(found, [("seq", "16"), ("csv", "x.csv")])
    assert argv[argv.index("--seq") + 1] == "16" and argv[argv.index("--csv") + 1] == "x.csv"


def test_run_help_gives_both_forms_and_set():
    result = runner.invoke(cli.app, ["run", "--help"], terminal_width=200)
    assert_ok(result)
    text = " ".join(result.output.split())
    assert "a shipped profile's name (yoso-fig8)" in text
    assert "e.g. profiles/yoso-fig8.toml" in text and "--set" in text
