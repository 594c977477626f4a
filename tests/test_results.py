import json

import pandas as pd
import pytest

from attnbench.results import COLUMNS, SCHEMA_VERSION, ResultSink, Row, env_sidecar, read_rows


def make_row(seq=64, metric="time_ms", value=1.5, **fields):
    return Row(
        study="time",
        backend="sdpa",
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
        samples="1 1.5 2",
        **fields,
    )


def test_schema_columns_are_stable():
    assert COLUMNS[:3] == ["study", "backend", "impl"]
    assert {"metric", "value", "status", "reason", "samples", "schema_version"} <= set(COLUMNS)


def test_sink_rewrites_complete_files_after_every_row(tmp_path):
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    sink = ResultSink({"seed": 0}, csv, js)
    sink.add(make_row(64))
    assert len(pd.read_csv(csv)) == 1
    sink.add(make_row(128))
    frame = read_rows(csv)
    assert list(frame.columns) == COLUMNS
    assert frame["seq"].tolist() == [64, 128]
    assert frame["schema_version"].eq(SCHEMA_VERSION).all()
    doc = json.loads(js.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION and doc["env"] == {"seed": 0}
    assert [r["seq"] for r in doc["rows"]] == [64, 128]
    assert json.loads(env_sidecar(csv).read_text()) == {"seed": 0}
    assert env_sidecar(csv).name == "r.env.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "r.env.json", "r.json"]


def test_json_round_trip(tmp_path):
    sink = ResultSink({}, None, tmp_path / "r.json")
    sink.add(make_row())
    assert read_rows(tmp_path / "r.json")["value"].tolist() == [1.5]


def test_failed_rows_keep_empty_values(tmp_path):
    sink = ResultSink({}, tmp_path / "r.csv")
    sink.add(make_row(1 << 20, value=None, status="skipped", reason="needs ~4096.0 GiB"))
    frame = read_rows(tmp_path / "r.csv")
    assert frame["value"].isna().all() and frame["reason"][0] == "needs ~4096.0 GiB"


def test_read_rows_rejects_other_files(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not an attnbench result file"):
        read_rows(path)
