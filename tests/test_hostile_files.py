"""Malformed result files and profiles, in every command that reads them: one `error:` line
naming the file and the problem, exit code 2, no traceback, and the file left as it was.

Each bad value once ended in a traceback (a TypeError from `[{}]` in samples, an
OverflowError from `[1e400]` in round sizes or from a 400-digit seq, a RecursionError from
JSON or TOML nested 200 000 deep) or was read as if it were a measurement. The variants
are made from one small valid run's CSV and JSON, each with one value replaced.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import NamedTuple

import pytest
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench.results.read import read_rows
from attnbench.run import procedure

runner = CliRunner()

SIZE = ["--seq", "16", "--heads", "1", "--dim", "4"]
TIME = ["time", *SIZE, "--backends", "softmax", "--repeats", "2", "--warmup", "0"]
ERROR = ["error", *SIZE, "--backends", "softmax", "--hashes", "8", "--trials", "1"]
ERROR += ["--mc-seeds", "1", "--inputs", "random"]
HUGE = str(10**400)
DEEP = "[" * 5000 + "]" * 5000
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
HOSTILE = "__hostile__"


@pytest.fixture(autouse=True)
def no_ceilings(monkeypatch):
    """The machine's ceilings are no part of reading a file: not measured here."""
    monkeypatch.setattr(procedure, "_ceilings", lambda *args, **kwargs: None)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A small valid time run, as CSV and JSON, made once for the module."""
    folder = tmp_path_factory.mktemp("good")
    paths = {"csv": folder / "good.csv", "json": folder / "good.json"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(procedure, "_ceilings", lambda *args, **kwargs: None)
        args = [*TIME, "--min-time", "0", "--rounds", "2"]
        args += ["--csv", str(paths["csv"]), "--json", str(paths["json"])]
        result = runner.invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    return paths


class Bad(NamedTuple):
    """One value of the first row (a time_ms row with samples and round sizes) replaced:
    `cell` its text in a CSV, `fragment` its JSON text in a JSON row (None: that format
    has no bad spelling of it); `needle` is what the error line says."""

    id: str
    column: str
    cell: str | None
    fragment: str | None
    needle: str


def _bad(id_, column, cell, fragment=None, needle=None) -> Bad:
    return Bad(id_, column, cell, cell if fragment is None else fragment, needle or column)


FIELDS = [
    # samples: a flat list of finite numbers
    _bad("samples-object-in-list", "samples", "[{}]"),
    _bad("samples-nested-list", "samples", "[[1, 2]]"),
    _bad("samples-overflow", "samples", "[1e400]"),
    _bad("samples-negative-overflow", "samples", "[1.0, -1e400]"),
    _bad("samples-infinity", "samples", "[Infinity]"),
    _bad("samples-huge-int", "samples", f"[{HUGE}]"),
    _bad("samples-text-item", "samples", '["x"]'),
    _bad("samples-bool-item", "samples", "[true]"),
    _bad("samples-null-item", "samples", "[null]"),
    _bad("samples-object", "samples", '{"a": 1}'),
    _bad("samples-cut-list", "samples", "[1, 2", '"[1, 2"'),
    _bad("samples-deep", "samples", DEEP, needle="nested"),
    _bad("samples-v1-junk", "samples", "1.5 2 abc", '"1.5 2 abc"'),
    _bad("samples-bool", "samples", "true"),
    # round sizes: positive whole numbers adding up to the samples
    _bad("sizes-overflow", "round_sizes", "[1e400]"),
    _bad("sizes-negative", "round_sizes", "[-1]"),
    _bad("sizes-zero", "round_sizes", "[0]"),
    _bad("sizes-fraction", "round_sizes", "[1.5]"),
    _bad("sizes-huge-int", "round_sizes", f"[{HUGE}]"),
    _bad("sizes-above-int64", "round_sizes", f"[{2**63}]"),
    _bad("sizes-text", "round_sizes", '["a"]'),
    _bad("sizes-object-in-list", "round_sizes", "[{}]"),
    _bad("sizes-nested", "round_sizes", "[[1]]"),
    _bad("sizes-not-adding-up", "round_sizes", "[1, 2, 3]"),
    _bad("sizes-sum-above-int64", "round_sizes", f"[{2**62}, {2**62}, {2**62}]"),
    _bad("sizes-scalar", "round_sizes", "7"),
    # whole numbers within int64
    _bad("seq-huge", "seq", HUGE),
    _bad("seq-negative", "seq", "-16"),
    _bad("seq-fraction", "seq", "16.5"),
    _bad("seq-text", "seq", "abc", '"abc"'),
    _bad("seq-overflow", "seq", "1e400"),
    _bad("seq-above-int64", "seq", str(2**63)),
    _bad("seq-bool", "seq", "True", "true"),
    _bad("seq-empty", "seq", "", "null"),
    _bad("batch-huge", "batch", HUGE),
    _bad("heads-negative", "heads", "-1"),
    _bad("dim-text", "dim", "x", '"x"'),
    _bad("count-uint64", "count", str(2**64 - 1)),
    _bad("threads-huge", "threads", HUGE),
    _bad("co-tenancy-negative", "co_tenancy", "-5"),
    _bad("grid-fraction", "grid_h", "1.5"),
    _bad("schema-version-huge", "schema_version", HUGE),
    _bad("schema-version-future", "schema_version", "99"),
    _bad("schema-version-text", "schema_version", "x", '"x"'),
    # finite numbers
    _bad("value-overflow", "value", "1e400"),
    _bad("value-negative-overflow", "value", "-1e400"),
    _bad("value-infinity", "value", "inf", "Infinity"),
    _bad("value-huge-int", "value", HUGE),
    _bad("value-text", "value", "abc", '"abc"'),
    _bad("value-list", "value", "[1]"),
    _bad("value-bool", "value", "True", "true"),
    _bad("p10-text", "p10", "x", '"x"'),
    _bad("speedup-overflow", "speedup", "1e400"),
    _bad("spread-huge-int", "spread", HUGE),
    # everything else: filled in where a row needs it, plain values
    _bad("status-object", "status", None, '{"ok": true}'),
    _bad("status-empty", "status", "", '""'),
    _bad("status-list", "status", None, '["ok"]'),
    _bad("backend-empty", "backend", "", '""'),
    _bad("backend-object", "backend", None, '{"a": 1}'),
    _bad("study-list", "study", "", "[]"),
    _bad("metric-null", "metric", "", "null"),
    _bad("stable-maybe", "stable", "maybe", '"maybe"'),
    _bad("param-huge-int", "m", HUGE),
    _bad("param-overflow", "m", "1e400"),
    _bad("param-list", "m", None, "[1, 2]"),
    _bad("param-object", "m", None, '{"deep": {"er": 1}}'),
    _bad("condition-infinity", "load_before", "inf", "Infinity"),
    _bad("reason-object", "reason", None, '{"a": 1}'),
]


def csv_variant(good: Path, bad: Bad) -> bytes:
    rows = list(csv.reader(io.StringIO(good.read_text())))
    if bad.column not in rows[0]:
        rows = [rows[0] + [bad.column], *(row + [""] for row in rows[1:])]
    rows[1][rows[0].index(bad.column)] = bad.cell
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def json_variant(good: Path, bad: Bad) -> bytes:
    doc = json.loads(good.read_text())
    doc["rows"][0][bad.column] = HOSTILE
    return json.dumps(doc).replace(json.dumps(HOSTILE), bad.fragment, 1).encode()


def _swap(old: str, new: str):
    return lambda text: text.replace(old, new, 1)


# whole files: (id, suffix, bytes or a function of the good file's text, needle)
FILES = [
    ("binary", ".csv", PNG, "not UTF-8"),
    ("binary", ".json", PNG, "not UTF-8"),
    ("bad-utf8-in-a-cell", ".csv", _swap(",ok,", ",o\udcffk,"), "not UTF-8"),
    ("nul-byte", ".csv", _swap(",ok,", ",o\x00k,"), "NUL"),
    ("empty", ".csv", b"", "empty"),
    ("empty", ".json", b" \n", "empty"),
    ("field-above-csv-limit", ".csv", _swap(",ok,", f",{'o' * 200_000},"), "limit"),
    ("cut-short", ".csv", lambda text: text[:-20], "truncated"),
    ("nested-200k", ".json", "[" * 200_000 + "]" * 200_000, "nested"),
    ("rows-nested-200k", ".json", '{"rows": ' + "[" * 200_000 + "]" * 200_000 + "}", "nested"),
    ("objects-nested-100k", ".json", '{"a": ' * 100_000 + "1" + "}" * 100_000, "nested"),
    ("env-nested-100", ".json", _swap('"env": ', f'"x": {DEEP[4900:5100]}, "env": '), "nested"),
    ("int-of-5000-digits", ".json", _swap('"seq": 16', f'"seq": 1{"0" * 5000}'), "not valid JSON"),
    ("not-json", ".json", "{rows: [", "not valid JSON"),
    ("top-level-list", ".json", "[1, 2]", "not an attnbench result file"),
    ("rows-of-numbers", ".json", '{"rows": [1, 2]}', "not an attnbench result file"),
    ("nan-document", ".json", "NaN", "not an attnbench result file"),
]


def file_variant(good: dict[str, Path], suffix: str, content) -> bytes:
    if callable(content):
        content = content(good[suffix[1:]].read_text())
    if isinstance(content, str):
        return content.encode("utf-8", "surrogateescape")
    return content


# --------------------------------------------------------------------------- the commands


def _resume(study):
    return lambda bad, tmp, good: [*study, f"--{bad.suffix[1:]}", str(bad), "--resume"]


def _run(bad, tmp, good):
    options = ['seq = "16"', 'backends = "softmax"', "repeats = 2", "warmup = 0", "heads = 1"]
    options += ["dim = 4", "resume = true", f"{bad.suffix[1:]} = {json.dumps(str(bad))}"]
    profile = tmp / "resume.toml"
    profile.write_text("\n".join(['command = "time"', "[options]", *options]) + "\n")
    return ["run", str(profile)]


COMMANDS = {  # the arguments that make each command read the file `bad`
    "time-resume": _resume(TIME),
    "error-resume": _resume(ERROR),
    "compare": lambda bad, tmp, good: ["compare", str(good[bad.suffix[1:]]), str(bad)],
    "plot": lambda bad, tmp, good: ["plot", str(bad), "-o", f"{tmp}/fig.png"],
    "pareto": lambda bad, tmp, good: ["pareto", str(bad), str(good["csv"])],
    "report": lambda bad, tmp, good: ["report", "--plots", str(bad.parent), "-o", f"{tmp}/reports"],
    "run": _run,
}
CSV_ONLY = {"report"}  # report reads the CSVs of a folder


def assert_refused(result, path: Path, before: bytes, needle: str, name: str | None = None):
    """Exit code 2, one `error:` line naming the file and saying `needle`, no traceback,
    the file as it was."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert (name or path.name) in errors[0] and needle in errors[0], errors[0]
    assert "Traceback" not in result.output
    assert path.read_bytes() == before


def refuse(command: str, bad: Path, content: bytes, tmp: Path, good: dict, needle: str):
    bad.write_bytes(content)
    result = runner.invoke(cli.app, COMMANDS[command](bad, tmp, good))
    assert_refused(result, bad, content, needle)
    assert not (tmp / "fig.png").exists() and not (tmp / "reports").exists()


def _hostile_path(tmp: Path, suffix: str) -> Path:
    """Where the bad file goes: a folder of its own, named as report's yoso.md reads."""
    folder = tmp / "plots"
    folder.mkdir(exist_ok=True)
    return folder / f"yoso-hostile{suffix}"


# the values an adversary's files held, and one of each other kind: read by every command
EVERY_COMMAND = {
    "samples-object-in-list", "samples-nested-list", "samples-deep", "sizes-overflow",
    "seq-huge", "value-text", "value-overflow", "param-list",
}  # fmt: skip


def _formats(bad: Bad) -> list[str]:
    return [f for f in ("csv", "json") if (bad.cell if f == "csv" else bad.fragment) is not None]


FIELD_CASES = [
    pytest.param(command, fmt, bad, id=f"{command}-{fmt}-{bad.id}")
    for bad in FIELDS
    for fmt in _formats(bad)
    for command in (COMMANDS if bad.id in EVERY_COMMAND else ["compare"])
    if fmt == "csv" or command not in CSV_ONLY
]


@pytest.mark.parametrize(("command", "fmt", "bad"), FIELD_CASES)
def test_a_bad_value_is_one_error_line(good, tmp_path, command, fmt, bad):
    content = csv_variant(good["csv"], bad) if fmt == "csv" else json_variant(good["json"], bad)
    path = _hostile_path(tmp_path, f".{fmt}")
    refuse(command, path, content, tmp_path, good, bad.needle)


FILE_CASES = [
    pytest.param(command, suffix, content, needle, id=f"{command}-{suffix[1:]}-{id_}")
    for id_, suffix, content, needle in FILES
    for command in COMMANDS
    if suffix == ".csv" or command not in CSV_ONLY
]


@pytest.mark.parametrize(("command", "suffix", "content", "needle"), FILE_CASES)
def test_a_bad_file_is_one_error_line(good, tmp_path, command, suffix, content, needle):
    path = _hostile_path(tmp_path, suffix)
    refuse(command, path, file_variant(good, suffix, content), tmp_path, good, needle)


def test_the_good_files_are_read(good):
    """The variants above differ from a file every reader takes by one value."""
    for path in good.values():
        frame = read_rows(path)
        assert (frame["metric"] == "time_ms").any() and len(frame["samples"].iloc[0]) >= 2


def test_a_trial_without_a_value_is_still_read(good, tmp_path):
    """NaN in samples is how a writer's json.dumps records a trial with no value."""
    doc = json.loads(good["json"].read_text())
    doc["rows"][0].update(samples=[1.0, float("nan")], round_sizes=[])
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(doc))
    assert read_rows(path)["samples"].iloc[0][0] == 1.0


# ------------------------------------------------------------------------------- report


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("foo.csv", PNG, "no CSV here belongs to a report"),
        ("notes.csv", b"a,b\n1,2\n", "no CSV here belongs to a report"),
        ("yoso-binary.csv", PNG, "not UTF-8"),
        ("yoso-empty.csv", b"", "empty"),
        ("yoso-header-only.csv", None, "no rows"),
        ("yoso-table-header-only.csv", b"a,b\n", "no rows"),
        ("scram-nul.csv", b"a,b\n1,\x002\n", "NUL"),
        ("field-latin1.csv", "a,b\n1,caf\xe9\n".encode("latin-1"), "not UTF-8"),
    ],
)
def test_report_refuses_a_csv_it_cannot_table_and_writes_nothing(
    good, tmp_path, name, content, needle
):
    """report wrote its five Markdown files with no tables from a binary CSV."""
    plots, out = tmp_path / "plots", tmp_path / "reports"
    plots.mkdir()
    out.mkdir()
    (out / "yoso.md").write_text("the older report\n")
    if content is None:  # a result file's header alone
        content = good["csv"].read_bytes().partition(b"\n")[0] + b"\n"
    path = plots / name
    path.write_bytes(content)
    result = runner.invoke(cli.app, ["report", "--plots", str(plots), "--out", str(out)])
    where = str(plots) if "belongs" in needle else name
    assert_refused(result, path, content, needle, name=where)
    assert [p.name for p in out.iterdir()] == ["yoso.md"]
    assert (out / "yoso.md").read_text() == "the older report\n"


# ------------------------------------------------------------------------------ profiles

TIME_OPTIONS = ['seq = "16"', 'backends = "softmax"', "repeats = 2", "warmup = 0"]


def _profile(*options: str, command: str = '"time"') -> str:
    return "\n".join([f"command = {command}", "[options]", *TIME_OPTIONS, *options]) + "\n"


PROFILES = [
    ("arrays-nested-100k", _profile("heads = " + "[" * 100_000 + "]" * 100_000), "nested"),
    ("tables-nested-5k", _profile("heads = " + "{a = " * 5000 + "1" + "}" * 5000), "nested"),
    ("command-nested-100k", "command = " + "[" * 100_000 + "]" * 100_000 + "\n", "nested"),
    ("min-time-twice", _profile("min-time = 1", "min_time = 2"), "same option"),
    ("min-time-quoted-twice", _profile('"min-time" = 1', '"min_time" = 1'), "same option"),
    ("key-twice", _profile('seq = "32"'), "not valid TOML"),
    ("value-list", _profile("heads = [1, 2]"), "list"),
    ("value-table", _profile("[options.dim]", "a = 1"), "table"),
    ("value-date", _profile("heads = 1979-05-27"), "date"),
    ("value-time", _profile("heads = 07:32:00"), "time"),
    ("int-of-5000-digits", _profile("heads = 1" + "0" * 5000), "not valid TOML"),
    ("int-above-int64", _profile(f"heads = {2**63}"), "--heads"),
    ("float-infinity", _profile("min-time = inf"), "--min-time"),
    ("float-nan", _profile("min-time = nan"), "--min-time"),
    ("options-array-of-tables", 'command = "time"\n[[options]]\nseq = "16"\n', "[options]"),
    ("command-number", _profile(command="5"), "`command`"),
    ("binary", PNG, "not valid TOML"),
    ("latin1", _profile("# caf\udce9"), "not valid TOML"),
    ("nul-byte", _profile('heads = "\x00"'), "not valid TOML"),
    ("flag-as-text", _profile('resume = "yes"'), "resume"),
]


@pytest.mark.parametrize(
    ("content", "needle"), [p[1:] for p in PROFILES], ids=[p[0] for p in PROFILES]
)
def test_a_bad_profile_is_one_error_line(tmp_path, content, needle):
    profile = tmp_path / "hostile.toml"
    data = content if isinstance(content, bytes) else content.encode("utf-8", "surrogateescape")
    profile.write_bytes(data)
    result = runner.invoke(cli.app, ["run", str(profile)])
    assert_refused(result, profile, data, needle)


def test_a_case_id_that_looks_like_a_number_is_read_as_text(good, tmp_path):
    """pandas read the hex digest 1e999 as infinity, so a resumed run did not find the case."""
    text = good["csv"].read_text()
    case_id = read_rows(good["csv"])["case_id"].iloc[0]
    path = tmp_path / "ids.csv"
    path.write_text(text.replace(case_id, "1e999"))
    assert read_rows(path)["case_id"].eq("1e999").all()
