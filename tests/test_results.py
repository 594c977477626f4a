"""Result schema 2: flat rows with parameter and condition columns, read back from schema 1
and 2 files alike; a CSV cut off mid-row is refused."""

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench.results import formats
from attnbench.results.paths import env_sidecar
from attnbench.results.read import read_rows
from attnbench.results.schema import (
    COLUMNS,
    SCHEMA_VERSION,
    Row,
    record,
    row_from_record,
    rows_frame,
)
from attnbench.results.sink import ResultSink

PLOTS = Path(__file__).resolve().parent.parent / "plots"
DATA = Path(__file__).resolve().parent / "data"  # result files kept as an older schema wrote them


def make_row(seq=64, metric="time_ms", value=1.5, **fields):
    fields = {"backend": "sdpa", "samples": [1.0, 1.5, 2.0], **fields}
    return Row(
        study="time",
        impl="torch",
        device="cpu",
        dtype="float32",
        mode="fwd",
        inputs="random",
        batch=1,
        heads=2,
        seq=seq,
        dim=8,
        metric=metric,
        value=value,
        unit="ms",
        p10=1.0,
        p90=2.0,
        count=3,
        **fields,
    )


def yoso_row(**fields):
    return make_row(
        backend="yoso:m=32,tau=8",
        params={"m": 32, "tau": 8, "samples": 4, "hash": "fast"},
        conditions={"load_before": 0.5, "load_after": 0.75, "cpu_mhz_before": 2400.0},
        grid_h=8,
        grid_w=8,
        method="perf_counter_ns",
        stable=True,
        spread=0.05,
        speedup=1.25,
        baseline="sdpa",
        case_id="c0ffee",
        **fields,
    )


def test_schema_columns_are_stable():
    assert SCHEMA_VERSION == 5
    assert COLUMNS[:3] == ["study", "backend", "impl"]
    assert {"metric", "value", "status", "reason", "samples", "schema_version"} <= set(COLUMNS)
    v2 = {"method", "grid_h", "grid_w", "stable", "spread", "speedup", "baseline", "case_id"}
    v2 |= {"fingerprint", "run_id", "device_name", "threads", "git_revision"}
    assert v2 <= set(COLUMNS)
    assert {"round_sizes", "speedup_low", "speedup_high"} <= set(COLUMNS)  # v4
    assert {"node", "worker", "hardware", "co_tenancy"} <= set(COLUMNS)  # v5
    assert "params" not in COLUMNS and "conditions" not in COLUMNS


def test_parameters_and_conditions_are_columns_of_their_own():
    flat = record(yoso_row())
    assert (flat["m"], flat["tau"], flat["hash"]) == (32, 8, "fast")
    assert flat["param_samples"] == 4  # `samples` is a fixed column
    assert flat["samples"] == [1.0, 1.5, 2.0]
    assert (flat["load_before"], flat["cpu_mhz_before"]) == (0.5, 2400.0)
    assert "params" not in flat and "conditions" not in flat
    assert list(flat)[: len(COLUMNS)] == COLUMNS


def test_csv_round_trip_keeps_every_column(tmp_path):
    csv = tmp_path / "r.csv"
    with ResultSink({"seed": 0}, csv) as sink:
        sink.add_case([yoso_row(), make_row(seq=128)])
    text = csv.read_text()
    assert '"[1.0, 1.5, 2.0]"' in text  # samples as a JSON list
    frame = read_rows(csv)
    assert list(frame.columns[: len(COLUMNS)]) == COLUMNS
    assert {"m", "tau", "hash", "param_samples", "load_before", "load_after"} <= set(frame)
    assert frame["samples"].tolist() == [[1.0, 1.5, 2.0]] * 2
    first = frame.iloc[0]
    assert (first["m"], first["grid_h"], first["method"], first["case_id"]) == (
        32,
        8,
        "perf_counter_ns",
        "c0ffee",
    )
    assert bool(first["stable"]) and first["speedup"] == 1.25
    assert math.isnan(frame.iloc[1]["m"])  # sdpa has no m

    back = row_from_record(frame.iloc[0].to_dict())
    want = yoso_row()
    assert back.params == want.params and back.conditions == want.conditions
    assert (back.samples, back.grid_w, back.backend) == (want.samples, 8, want.backend)
    assert row_from_record(frame.iloc[1].to_dict()).params == {}


def test_sink_leaves_complete_files_after_every_case(tmp_path):
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    with ResultSink({"seed": 0}, csv, js) as sink:
        assert not csv.exists() and not js.exists()  # nothing until the first case
        sink.add(make_row(64))
        assert len(pd.read_csv(csv)) == 1
        assert json.loads(env_sidecar(csv).read_text()) == {"seed": 0}  # with the first case
        sink.add_case([make_row(128), make_row(128, metric="peak_mib")])
        frame = read_rows(csv)
        assert list(frame.columns) == COLUMNS
        assert frame["seq"].tolist() == [64, 128, 128]
        assert frame["schema_version"].eq(SCHEMA_VERSION).all()
        doc = json.loads(js.read_text())
        assert doc["schema_version"] == SCHEMA_VERSION and doc["env"] == {"seed": 0}
        assert [r["seq"] for r in doc["rows"]] == [64, 128, 128]
        assert doc["rows"][0]["samples"] == [1.0, 1.5, 2.0]
    assert env_sidecar(csv).name == "r.env.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "r.env.json", "r.json"]


def test_appended_cases_are_the_bytes_of_the_whole_files(tmp_path):
    """Cases appended one by one, with a new parameter column (a whole rewrite) in between,
    leave the bytes that writing every record at once gives."""
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    with ResultSink({"seed": 0}, csv, js) as sink:
        sink.add_case([make_row(64, case_id="a"), make_row(64, "peak_mib", case_id="a")])
        sink.add_case([yoso_row()])  # new columns
        sink.add_case([make_row(128, value=None, stable=False, reason='a, "quoted"\nline')])
        sink.add_case([make_row(256, params={"m": 16}, case_id="c", samples=[0.1 + 0.2, 1e-7])])
    assert csv.read_text() == formats.csv_text(sink.records)
    assert js.read_text() == formats.json_text({"seed": 0}, sink.records)
    assert read_rows(csv)["seq"].tolist() == [64, 64, 64, 128, 256]


def test_json_round_trip(tmp_path):
    with ResultSink({}, None, tmp_path / "r.json") as sink:
        sink.add(yoso_row())
    frame = read_rows(tmp_path / "r.json")
    assert frame["value"].tolist() == [1.5] and frame["m"].tolist() == [32]
    assert frame["samples"].tolist() == [[1.0, 1.5, 2.0]]


def test_failed_rows_keep_empty_values(tmp_path):
    with ResultSink({}, tmp_path / "r.csv") as sink:
        sink.add(make_row(1 << 20, value=None, status="skipped", reason="needs ~4096.0 GiB"))
    frame = read_rows(tmp_path / "r.csv")
    assert frame["value"].isna().all() and frame["reason"][0] == "needs ~4096.0 GiB"


def test_old_style_string_samples_are_written_as_a_list():
    assert record(make_row(samples="1 2.5 3"))["samples"] == [1.0, 2.5, 3.0]


def test_read_rows_rejects_other_files(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not an attnbench result file"):
        read_rows(path)


# ------------------------------------------------------------------------ schema 1 files


def test_reads_a_committed_schema_1_csv():
    frame = read_rows(DATA / "schema1-scram-fig4.csv")  # a run written by schema 1
    assert list(frame.columns) == COLUMNS
    assert frame["schema_version"].eq(1).all()
    times = frame[frame["metric"] == "time_ms"]
    first = times.iloc[0]
    assert first["samples"] == [3.04266, 3.01067, 2.98683, 3.06318, 2.98769]
    assert (first["grid_h"], first["grid_w"], first["seq"]) == (32, 32, 1024)
    assert first["count"] == 5
    peaks = frame[frame["metric"] == "peak_mib"]
    assert peaks["method"].eq("vmhwm").all() and peaks["reason"].eq("").all()  # moved
    assert frame.loc[frame["metric"] == "first_call_ms", "samples"].map(len).eq(0).all()


def test_reads_a_schema_1_json_with_text_samples(tmp_path):
    v1_columns = (PLOTS / "cpu-time.csv").read_text().splitlines()[0].split(",")
    row = {c: v for c, v in record(make_row()).items() if c in v1_columns}
    row |= {"samples": "1 2 3", "reason": "trials use seeds 0..2", "schema_version": 1}
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema_version": 1, "env": {}, "rows": [row]}))
    frame = read_rows(path)
    assert frame["samples"].tolist() == [[1.0, 2.0, 3.0]]
    assert frame["method"].tolist() == ["trials use seeds 0..2"] and frame["reason"][0] == ""
    assert frame["grid_h"].isna().all() and frame["case_id"].tolist() == [""]


def test_plot_redraws_a_committed_schema_1_csv(tmp_path):
    out = tmp_path / "fig.png"
    result = CliRunner().invoke(cli.app, ["plot", str(PLOTS / "cpu-time.csv"), "--plot", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"


# ------------------------------------------------------------------------- cut-off CSVs


@pytest.fixture
def good_csv(tmp_path):
    path = tmp_path / "r.csv"
    with ResultSink({}, path) as sink:
        sink.add_case([make_row(64), make_row(128), make_row(256)])
    return path


def test_csv_cut_mid_row_is_refused(good_csv):
    text = good_csv.read_text()
    good_csv.write_text(text[: text.rindex("ms,")])  # inside the last row
    with pytest.raises(ValueError, match="truncated at line 4"):
        read_rows(good_csv)


def test_csv_cut_inside_the_samples_list_is_refused(good_csv):
    text = good_csv.read_text()
    good_csv.write_text(text[: text.rindex("[1.0, 1.5") + 5])
    with pytest.raises(ValueError, match="truncated at line 4"):
        read_rows(good_csv)


def test_short_row_in_the_middle_is_refused(good_csv):
    lines = good_csv.read_text().splitlines(keepends=True)
    lines[2] = "time,sdpa\n"
    good_csv.write_text("".join(lines))
    with pytest.raises(ValueError, match="line 3 has 2 of"):
        read_rows(good_csv)


def test_complete_csv_without_final_newline_is_read(good_csv):
    good_csv.write_text(good_csv.read_text().rstrip("\n"))
    assert read_rows(good_csv)["seq"].tolist() == [64, 128, 256]


def test_plot_of_a_truncated_csv_is_one_error_line(good_csv, tmp_path):
    text = good_csv.read_text()
    good_csv.write_text(text[:-20])
    out = tmp_path / "fig.png"
    result = CliRunner().invoke(cli.app, ["plot", str(good_csv), "--plot", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "truncated at line 4" in lines[0]
    assert not out.exists()


@pytest.mark.parametrize(("version", "fragment"), [("99", "schema_version 99"), ("x", "'x'")])
@pytest.mark.parametrize("command", ["plot", "compare"])
def test_a_schema_this_version_does_not_know_is_one_error_line(
    good_csv, tmp_path, version, fragment, command
):
    df = pd.read_csv(good_csv)
    df["schema_version"] = version
    df.to_csv(good_csv, index=False)
    with pytest.raises(ValueError, match=fragment):
        read_rows(good_csv)
    args = [str(good_csv), "--plot", str(tmp_path / "f.png")] if command == "plot" else []
    if command == "compare":
        args = [str(good_csv), str(good_csv)]
    result = CliRunner().invoke(cli.app, [command, *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], lines


def test_rows_frame_has_the_written_columns():
    frame = rows_frame([make_row(), yoso_row()])
    assert list(frame.columns[: len(COLUMNS)]) == COLUMNS and "m" in frame


@pytest.mark.parametrize("joined", [False, True], ids=["row-copied", "files-joined"])
@pytest.mark.parametrize("command", ["plot", "compare"])
def test_a_case_repeated_in_a_file_is_one_error_line(good_csv, tmp_path, joined, command):
    """plot and compare pooled a repeated case as one with twice the samples."""
    lines = good_csv.read_text().splitlines(keepends=True)
    if joined:  # a second run's rows of the same cases: another run id, same case ids
        df = pd.read_csv(good_csv)
        df = pd.concat([df, df.assign(run_id="other")])
        df.to_csv(good_csv, index=False)
    else:
        good_csv.write_text("".join([*lines, lines[2]]))
    with pytest.raises(ValueError, match="repeated row"):
        read_rows(good_csv)
    out = tmp_path / "f.png"
    args = [str(good_csv), "--plot", str(out)] if command == "plot" else [str(good_csv)] * 2
    result = CliRunner().invoke(cli.app, [command, *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "repeated row" in lines[0] and good_csv.name in lines[0], lines
    assert not out.exists()


def test_plot_on_a_full_disk_is_one_error_line_and_keeps_the_older_figure(
    good_csv, tmp_path, monkeypatch
):
    """plot --plot on a full disk ended in a traceback."""
    import errno

    from matplotlib.figure import Figure

    out = tmp_path / "fig.png"
    out.write_bytes(b"older figure")

    def full(self, fname, **kwargs):
        fname.write(b"half a figure")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Figure, "savefig", full)
    result = CliRunner().invoke(cli.app, ["plot", str(good_csv), "--plot", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert lines == [f"error: cannot write {out}: No space left on device"], lines
    assert out.read_bytes() == b"older figure"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png", "r.csv", "r.env.json"]


def test_one_rule_for_an_empty_cell():
    """Files, tables and the report agree on what is empty: NaN of any float type, NaT,
    None and pandas' NA; a list, a zero or an empty string is a value."""
    import numpy as np
    import pandas as pd

    from attnbench.results.schema import is_missing

    for empty in (None, pd.NA, pd.NaT, float("nan"), np.float32("nan"), np.float64("nan")):
        assert is_missing(empty), repr(empty)
    for value in ([], [1.0], 0, 0.0, "", "nan-ish", np.float32(1.0), True):
        assert not is_missing(value), repr(value)
