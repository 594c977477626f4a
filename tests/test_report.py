"""The result tables in docs/results are generated from plots/ and cannot drift from them."""

from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.views.report import render_report, report_for, write_reports

ROOT = Path(__file__).resolve().parent.parent


def test_committed_reports_match_the_csvs(tmp_path):
    written = write_reports(ROOT / "plots", tmp_path)
    assert [p.name for p in written] == ["yoso.md", "scram.md", "field.md", "gpu.md", "training.md"]
    for path in written:
        committed = ROOT / "docs" / "results" / path.name
        assert path.read_bytes() == committed.read_bytes(), (
            f"docs/results/{path.name} is stale: run `attnbench report`"
        )


def test_files_go_to_their_paper():
    assert report_for("yoso-fig8-clustered.csv") == "yoso.md"
    assert report_for("cpu-time.csv") == "yoso.md"
    assert report_for("scram-fig4.csv") == "scram.md"
    assert report_for("field-pareto-time.csv") == "field.md"
    assert report_for("gpu-h200-time-float32-fwd.csv") == "gpu.md"
    assert report_for("train-parity.csv") == "training.md"
    assert report_for("other.csv") is None


def _time_rows(seq, backend, value, status="ok", reason=""):
    base = dict(study="time", backend=backend, impl="torch", device="cpu", dtype="float32")
    base.update(mode="fwd", inputs="random", batch=1, heads=1, seq=seq, dim=8, unit="ms")
    time = dict(base, metric="time_ms", value=value, p10=value * 0.9, p90=value * 1.1)
    peak = dict(base, metric="peak_mib", value=2.0, unit="MiB")
    return [dict(r, status=status, reason=reason) for r in (time, peak)]


def test_synthetic_time_table(tmp_path):
    rows = (
        _time_rows(64, "sdpa", 4.0)
        + _time_rows(64, "yoso-32", 1.0)
        + _time_rows(128, "sdpa", float("nan"), "oom", "out of memory. Tried more")
    )
    pd.DataFrame(rows).to_csv(tmp_path / "yoso-mine.csv", index=False)
    (tmp_path / "unrelated.csv").write_text("a,b\n1,2\n")
    text = render_report("yoso.md", sorted(tmp_path.glob("*.csv")))
    assert "## yoso-mine" in text
    assert "| `yoso-32` | 64 | 1 ms | 0.9 – 1.1 ms | 4× | 2 | ok |" in text
    assert "| `sdpa` | 128 | – | – | – | – | oom (out of memory) |" in text
    assert "unrelated" not in text  # not a yoso-* file
    assert render_report("scram.md", sorted(tmp_path.glob("*.csv"))).count("|") == 0


def test_growth_exponent_is_the_log_log_slope_of_the_lengths_that_ran(tmp_path):
    rows = []
    for n in (256, 1024, 4096):
        rows += _time_rows(n, "quadratic", 1e-4 * n**2)
        rows += _time_rows(n, "linear", 0.5 * n * (1.2 if n == 1024 else 1.0))
    rows += _time_rows(16384, "quadratic", float("nan"), "oom", "out of memory")
    rows += _time_rows(256, "once", 3.0)
    pd.DataFrame(rows).to_csv(tmp_path / "field-grow.csv", index=False)
    text = render_report("field.md", [tmp_path / "field-grow.csv"])
    assert "| `quadratic` | random | 256 – 4096 | 3 | 2.00 |" in text  # the oom row is left out
    assert "| `linear` | random | 256 – 4096 | 3 | 1.00 |" in text  # a middle bump tilts nothing
    assert "| `once` | random |" not in text  # one length: no growth to fit


def test_synthetic_error_table_and_cli(tmp_path):
    plots = tmp_path / "plots"
    plots.mkdir()
    row = dict(study="error", backend="yoso:m=8", seq=64, inputs="clustered", status="ok")
    rows = [
        dict(row, metric="radian_vs_yoso_e", value=0.4, std=0.01),
        dict(row, seq=128, metric="radian_vs_yoso_e", value=0.41, std=0.02),
    ]
    pd.DataFrame(rows).to_csv(plots / "yoso-fig8-x.csv", index=False)
    result = CliRunner().invoke(app, ["report", "--results", str(plots), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "yoso.md").read_text()
    assert "| `yoso:m=8` | 64 | 0.4 ± 0.01 | ok |" in text
    assert "| `yoso:m=8` | 128 | 0.41 ± 0.02 | ok |" in text
    missing = CliRunner().invoke(app, ["report", "--results", str(tmp_path / "none")])
    assert missing.exit_code == 2


def test_a_truncated_result_file_is_an_error_not_skipped(tmp_path):
    plots = tmp_path / "plots"
    plots.mkdir()
    rows = _time_rows(64, "sdpa", 4.0)
    text = pd.DataFrame(rows).to_csv(index=False)
    (plots / "scram-cut.csv").write_text(text[: text.rindex(",")])  # last row cut short
    result = CliRunner().invoke(app, ["report", "--results", str(plots), "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "truncated" in result.output


def test_report_refuses_what_would_write_nothing_true(tmp_path):
    """No CSVs: refused (the reports would be emptied), old reports untouched; a folder
    inside a missing one: refused as for every output; an unreadable CSV is named."""
    plots, out = tmp_path / "plots", tmp_path / "docs"
    plots.mkdir()
    out.mkdir()
    (out / "yoso.md").write_text("kept")
    cases = [
        (["--results", str(plots), "--out", str(out)], "no result CSVs"),
        (["--results", str(plots), "--out", str(tmp_path / "a" / "b")], "does not exist"),
    ]
    for args, fragment in cases:
        if fragment == "does not exist":
            pd.DataFrame(_time_rows(64, "sdpa", 4.0)).to_csv(plots / "yoso-t.csv", index=False)
        result = CliRunner().invoke(app, ["report", *args])
        lines = result.stderr.splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and fragment in lines[0], lines
    assert (out / "yoso.md").read_text() == "kept"
    assert not (tmp_path / "a").exists()
    (plots / "yoso-bin.csv").write_bytes(b"\xff\xfe\x00 not text")
    result = CliRunner().invoke(app, ["report", "--results", str(plots), "--out", str(out)])
    assert result.exit_code == 2 and "yoso-bin.csv" in result.stderr, result.stderr


def test_synthetic_model_table(tmp_path):
    base = dict(study="model", backend="yoso-32", seq=512, inputs="random", mode="train")
    rows = [
        dict(base, metric="time_per_instance_ms", value=125.0, status="ok"),
        dict(base, metric="peak_mib_per_instance", value=40.5, status="ok"),
        dict(base, metric="step_ms", value=1000.0, status="ok"),
        dict(base, metric="batch", value=8, status="ok"),
        dict(base, backend="softmax", metric="time_per_instance_ms", value=None,
             status="oom", reason="out of memory at batch 1"),
    ]  # fmt: skip
    pd.DataFrame(rows).to_csv(tmp_path / "yoso-fig7-x.csv", index=False)
    text = render_report("yoso.md", sorted(tmp_path.glob("*.csv")))
    assert "| backend | n | batch | time / instance | peak MiB / instance | step | status |" in text
    assert "| `yoso-32` | 512 | 8 | 125 ms | 40.5 | 1 s | ok |" in text
    assert "| `softmax` | 512 | – | – | – | – | oom (out of memory at batch 1) |" in text


def _slope_rows(inputs, slopes):
    base = dict(study="error", impl="numba", device="cpu", dtype="float32", mode="fwd")
    base.update(batch=1, heads=1, seq=4096, dim=8, unit="rad per doubling of n", status="ok")
    return [
        dict(
            base,
            backend=f"yoso:m={m}",
            inputs=inputs,
            m=m,
            value=value,
            std=0.01,
            metric="radian_slope_log2n_vs_yoso_e",
        )  # fmt: skip
        for m, value in slopes.items()
    ]


def test_fig8_slopes_side_by_side_and_script_tables(tmp_path):
    pd.DataFrame(_slope_rows("random", {8: 0.5, 32: 0.25})).to_csv(
        tmp_path / "yoso-a.csv", index=False
    )
    pd.DataFrame(_slope_rows("clustered", {8: -0.125})).to_csv(tmp_path / "yoso-b.csv", index=False)
    (tmp_path / "yoso-why.csv").write_text("inputs,n,share\nrandom,64,0.123456\n")
    text = render_report("yoso.md", sorted(tmp_path.glob("*.csv")))
    section = text[text.index("## Fig. 8 slopes side by side") :]
    assert "| m | `yoso-a` | `yoso-b` |" in section
    assert "| 8 | 0.5 ± 0.01 | -0.125 ± 0.01 |" in section
    assert "| 32 | 0.25 ± 0.01 | – |" in section
    assert "## yoso-why" in text and "| random | 64 | 0.123 |" in text
    one = render_report("yoso.md", [tmp_path / "yoso-a.csv"])
    assert "side by side" not in one  # nothing to set beside a single file


def test_no_committed_stage_reads_above_its_bound():
    """Above 100 % of a roofline bound means a wrong input to the model (ceilings measured
    under load, a cost model that overcounts), never a stage that beat the machine."""
    for path in sorted((ROOT / "plots").glob("*.csv")):
        frame = pd.read_csv(path, low_memory=False)
        if "bound_pct" in frame:
            worst = pd.to_numeric(frame["bound_pct"], errors="coerce").max()
            assert not worst > 100.0, f"{path.name}: a stage at {worst:.0f} % of its bound"
