"""`attnbench compare`: verdicts on synthetic runs with seeded noise, the regression gate, both
result schemas, the Markdown output and the one-line errors.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench.api.parse import parse_fraction
from attnbench.errors import UsageError
from attnbench.results.schema import Row, rows_frame
from attnbench.views import compare
from attnbench.views.compare import compare_files, parse_samples, ratio_interval

runner = CliRunner()
SEQS = (256, 512, 1024)
BACKENDS = ("softmax", "sdpa")


def samples(median: float, n: int, noise: float, rng: np.random.Generator) -> list[float]:
    return list(median * np.exp(rng.normal(0.0, noise, n)))


def time_rows(
    seed: int, scale: float = 1.0, noise: float = 0.03, n: int = 30, seqs=SEQS, status=None
) -> list[Row]:
    """time_ms rows of a fake run; `status` maps (backend, seq) to a failure status."""
    rng = np.random.default_rng(seed)
    rows = []
    for backend in BACKENDS:
        for seq in seqs:
            common = dict(study="time", backend=backend, impl="torch", device="cpu")
            common |= dict(dtype="float32", mode="fwd", inputs="random", batch=1, heads=4)
            common |= dict(seq=seq, dim=64, metric="time_ms", unit="ms")
            bad = (status or {}).get((backend, seq))
            if bad:
                rows.append(Row(**common, status=bad, reason="out of memory"))
                continue
            kept = samples(scale * seq / 100, n, noise, rng)
            value = float(np.median(kept))
            text = " ".join(f"{s:.6g}" for s in kept)
            rows.append(Row(**common, value=value, count=n, samples=text))
            rows.append(Row(**(common | dict(metric="peak_mib")), value=seq * 1.0, count=1))
    return rows


V1_COLUMNS = [
    "study", "backend", "impl", "device", "dtype", "mode", "inputs", "batch", "heads", "seq",
    "dim", "metric", "value", "unit", "p10", "p90", "std", "count", "samples", "status",
    "reason", "schema_version",
]  # fmt: skip


def write_v1(path: Path, rows: list[Row]) -> Path:
    """Schema 1 as it was written: these columns only, samples space-separated."""
    frame = rows_frame(rows)
    frame["samples"] = [" ".join(f"{x:.6g}" for x in parse_samples(r.samples)) for r in rows]
    frame["schema_version"] = 1
    frame[V1_COLUMNS].to_csv(path, index=False)
    return path


def v2_records(rows: list[Row]) -> list[dict]:
    """Schema 2 rows: samples as a list, grid and parameter columns, run metadata."""
    records = []
    for r in rows:
        record = asdict(r) | {"schema_version": 2, "method": "", "grid_h": None, "grid_w": None}
        record["samples"] = parse_samples(r.samples)
        record |= {"run_id": "r1", "device_name": "cpu", "threads": 2, "stable": True}
        records.append(record)
    return records


def write_v2_csv(path: Path, rows: list[Row]) -> Path:
    frame = pd.DataFrame(v2_records(rows))
    frame["samples"] = [json.dumps(s) for s in frame["samples"]]
    frame.to_csv(path, index=False)
    return path


def write_v2_json(path: Path, rows: list[Row]) -> Path:
    doc = {"schema_version": 2, "env": {}, "rows": v2_records(rows)}
    path.write_text(json.dumps(doc))
    return path


def invoke(*args):
    return runner.invoke(cli.app, ["compare", *map(str, args)])


def assert_one_line_error(result, needle: str = "") -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert needle in lines[0]
    assert "Traceback" not in result.output


def verdicts(tmp_path: Path, a: list[Row], b: list[Row]) -> list[str]:
    comparison = compare_files(write_v1(tmp_path / "a.csv", a), write_v1(tmp_path / "b.csv", b))
    return [c.verdict for c in comparison.changes]


def test_samples_of_both_schemas_and_json():
    assert parse_samples("1.5 2 2.5") == [1.5, 2.0, 2.5]
    assert parse_samples("[1.5, 2.0, 2.5]") == [1.5, 2.0, 2.5]
    assert parse_samples([1.5, 2.0]) == [1.5, 2.0]
    assert parse_samples(np.array([3.0, float("nan")])) == [3.0]
    assert parse_samples("") == parse_samples(None) == parse_samples(float("nan")) == []


def parse_threshold(text: str) -> float:
    """What `attnbench compare --fail-above TEXT` makes of its threshold."""
    return parse_fraction(text, "--fail-above", "a slowdown")


@pytest.mark.parametrize("text, value", [("5%", 0.05), ("0.05", 0.05), ("12.5 %", 0.125)])
def test_threshold_as_percent_or_fraction(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["abc", "-5%", "5", "1", "nan", "inf%", "", "%"])
def test_bad_threshold_is_refused(text):
    with pytest.raises(UsageError, match="--fail-above"):
        parse_threshold(text)


def test_interval_is_seeded_and_holds_the_true_ratio():
    rng = np.random.default_rng(1)
    a, b = samples(10.0, 40, 0.05, rng), samples(13.0, 40, 0.05, rng)
    low, high = ratio_interval(a, b, seed=3)
    assert (low, high) == ratio_interval(a, b, seed=3)
    assert low < 1.3 < high
    assert high - low < 0.2


def test_interval_has_the_width_of_a_95_percent_interval():
    """Against the normal approximation: the median's standard error is 1.2533 sigma / sqrt(n)."""
    rng = np.random.default_rng(0)
    n, sigma = 400, 0.05
    halves = []
    for seed in range(20):
        a, b = samples(1.0, n, sigma, rng), samples(1.0, n, sigma, rng)
        low, high = ratio_interval(a, b, seed=seed)
        halves.append((np.log(high) - np.log(low)) / 2)
    expected = 1.96 * np.sqrt(2) * 1.2533 * sigma / np.sqrt(n)
    assert np.mean(halves) == pytest.approx(expected, rel=0.1)


def test_same_distribution_is_no_change(tmp_path):
    assert verdicts(tmp_path, time_rows(seed=1), time_rows(seed=2)) == ["same"] * 6
    result = invoke(tmp_path / "a.csv", tmp_path / "b.csv", "--fail-above", "5%")
    assert result.exit_code == 0, result.output
    assert "6 same" in result.output and "PASS:" in result.output
    assert "slower" not in result.output.split("6 same")[0]


def test_planted_slowdown_fails_the_gate(tmp_path):
    assert verdicts(tmp_path, time_rows(seed=1), time_rows(seed=2, scale=1.2)) == ["slower"] * 6
    result = invoke(tmp_path / "a.csv", tmp_path / "b.csv", "--fail-above", "5%")
    assert result.exit_code == 1, result.output
    fail = [line for line in result.output.splitlines() if line.startswith("FAIL")]
    assert len(fail) == 1 and fail[0].count("x;") == 5 and "n=1024" in fail[0]
    assert invoke(tmp_path / "a.csv", tmp_path / "b.csv").exit_code == 0  # no gate, no failure


def test_small_significant_slowdown_passes_a_larger_threshold(tmp_path):
    """2 % slower with little noise is significant, yet within a 5 % threshold."""
    a, b = time_rows(seed=1, noise=0.002), time_rows(seed=2, scale=1.02, noise=0.002)
    assert verdicts(tmp_path, a, b) == ["slower"] * 6
    assert invoke(tmp_path / "a.csv", tmp_path / "b.csv", "--fail-above", "5%").exit_code == 0
    assert invoke(tmp_path / "a.csv", tmp_path / "b.csv", "--fail-above", "0.01").exit_code == 1


def test_noisy_slowdown_is_not_significant(tmp_path):
    a, b = time_rows(seed=1, noise=0.5, n=5), time_rows(seed=2, scale=1.2, noise=0.5, n=5)
    assert "slower" not in verdicts(tmp_path, a, b)
    assert invoke(tmp_path / "a.csv", tmp_path / "b.csv", "--fail-above", "5%").exit_code == 0


def test_speedup_is_faster(tmp_path):
    assert verdicts(tmp_path, time_rows(seed=1), time_rows(seed=2, scale=0.8)) == ["faster"] * 6
    assert invoke(tmp_path / "a.csv", tmp_path / "b.csv", "--fail-above", "5%").exit_code == 0


def test_cases_in_one_file_only_are_listed(tmp_path):
    a = time_rows(seed=1, seqs=(256, 512))
    b = time_rows(seed=2, seqs=(512, 1024), status={("sdpa", 512): "oom"})
    write_v1(tmp_path / "a.csv", a)
    write_v1(tmp_path / "b.csv", b)
    result = invoke(tmp_path / "a.csv", tmp_path / "b.csv", "--fail-above", "5%")
    assert result.exit_code == 3, result.output  # A's n=256 and sdpa n=512 were not judged
    lines = result.output.splitlines()
    assert "only in A: softmax n=256; sdpa n=256" in lines
    assert "not judged (missing in B): softmax n=256; sdpa n=256" in lines
    assert "not judged (oom): sdpa n=512" in lines
    assert "new in B, no reference: softmax n=1024; sdpa n=1024" in lines
    assert "only in B: softmax n=1024; sdpa n=1024" in lines
    assert "not ok in a file: sdpa n=512 (A ok, B oom)" in lines
    assert "1 same" in result.output


@pytest.mark.parametrize("writer, name", [(write_v2_csv, "b.csv"), (write_v2_json, "b.json")])
def test_schema_1_against_schema_2(tmp_path, writer, name):
    a = write_v1(tmp_path / "a.csv", time_rows(seed=1))
    b = writer(tmp_path / name, time_rows(seed=2, scale=1.2))
    assert [c.verdict for c in compare_files(a, b).changes] == ["slower"] * 6
    assert [c.verdict for c in compare_files(b, b).changes] == ["same"] * 6
    assert invoke(a, b, "--fail-above", "10%").exit_code == 1


def test_markdown_table(tmp_path):
    write_v1(tmp_path / "a.csv", time_rows(seed=1))
    write_v1(tmp_path / "b.csv", time_rows(seed=2, scale=1.2, seqs=(256, 512)))
    result = invoke(tmp_path / "a.csv", tmp_path / "b.csv", "--markdown")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split("|")[1:-1] == [
        " backend ",
        " case ",
        " A median ms ",
        " B median ms ",
        " B/A ",
        " 95% CI ",
        " verdict ",
    ]
    assert lines[1] == "|---|---|---:|---:|---:|---:|---|"
    body = lines[2:6]
    assert all(line.startswith("| ") and line.count("|") == 8 for line in body)
    assert body[0].startswith("| softmax | n=256 | 2.56") and body[0].endswith("| **slower** |")
    assert lines[6] == ""  # the table ends before the plain summary lines
    assert "only in A: softmax n=1024; sdpa n=1024" in lines


def test_one_sample_is_compared_without_interval(tmp_path):
    write_v1(tmp_path / "a.csv", time_rows(seed=1, n=1))
    write_v1(tmp_path / "b.csv", time_rows(seed=2, n=1, scale=2.0))
    result = invoke(tmp_path / "a.csv", tmp_path / "b.csv", "--fail-above", "5%")
    assert result.exit_code == 3, result.output  # a 2x ratio without an interval: not judged
    assert "6 no CI" in result.output and "fewer than 2 samples" in result.output
    assert "INCONCLUSIVE" in result.output and "6 no interval" in result.output


def test_bad_files_are_one_line_errors(tmp_path):
    good = write_v1(tmp_path / "a.csv", time_rows(seed=1))
    assert_one_line_error(invoke(good, tmp_path / "missing.csv"), "no such file")
    assert_one_line_error(invoke(tmp_path, good), "no such file")
    (tmp_path / "other.csv").write_text("x,y\n1,2\n")
    assert_one_line_error(invoke(good, tmp_path / "other.csv"), "not an attnbench result")
    (tmp_path / "broken.json").write_text("{not json")
    assert_one_line_error(invoke(tmp_path / "broken.json", good), "cannot read results")
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00garbage")
    assert_one_line_error(invoke(good, tmp_path / "binary.csv"), "cannot read results")
    timed = [r for r in time_rows(1) if r.metric == "time_ms"]
    errors = [Row(**(asdict(r) | {"study": "error", "metric": "radian"})) for r in timed]
    write_v1(tmp_path / "error.csv", errors)
    assert_one_line_error(invoke(good, tmp_path / "error.csv"), "no time_ms rows")
    bad_samples = rows_frame(time_rows(seed=1)).assign(samples="[1.0, oops")
    bad_samples.to_csv(tmp_path / "samples.csv", index=False)
    assert_one_line_error(invoke(good, tmp_path / "samples.csv"), "cannot read results")


def test_bad_threshold_is_one_line_error(tmp_path):
    good = write_v1(tmp_path / "a.csv", time_rows(seed=1))
    assert_one_line_error(invoke(good, good, "--fail-above", "five"), "--fail-above")
    assert_one_line_error(invoke(good, good, "--fail-above", "5"), "--fail-above")


# ------------------------------------------------------------------ runs as the unit


def _runs(tmp_path, name: str, scales: list[float], seed: int) -> str:
    """One file per run, each run `scale` times slower as a whole (drift between runs)."""
    for i, scale in enumerate(scales):
        write_v2_csv(tmp_path / f"{name}-{i}.csv", time_rows(seed=seed + i, scale=scale))
    return str(tmp_path / f"{name}-*.csv")


def test_drift_between_runs_widens_the_interval_of_several_runs(tmp_path):
    """Identical code, runs drifting by 30 %: one run a side calls it faster or slower;
    two or more runs a side resample the runs and call it the same."""
    a = _runs(tmp_path, "a", [1.0, 1.3, 1.0], seed=1)
    b = _runs(tmp_path, "b", [1.3, 1.0, 1.3], seed=10)
    pooled = compare_files(a, b)
    assert all(c.by_runs for c in pooled.changes)
    assert {c.verdict for c in pooled.changes} == {"same"}
    single = compare_files(tmp_path / "a-0.csv", tmp_path / "b-0.csv")
    assert {c.verdict for c in single.changes} == {"slower"}  # drift read as a change
    widths = [c.high - c.low for c in pooled.changes]
    assert min(widths) > max(c.high - c.low for c in single.changes)


def test_a_real_slowdown_still_shows_across_drifting_runs(tmp_path):
    a = _runs(tmp_path, "a", [1.0, 1.05, 0.97], seed=1)
    b = _runs(tmp_path, "b", [1.5, 1.55, 1.45], seed=10)
    result = invoke(a, b, "--fail-above", "20%")
    assert result.exit_code == 1, result.output
    assert "resamples of runs, then rounds, then samples" in " ".join(result.output.split())
    assert "FAIL: significantly slower by more than 20%" in result.output


def test_one_run_a_side_says_its_interval_is_within_run_noise_only(tmp_path):
    a = write_v2_csv(tmp_path / "a.csv", time_rows(seed=1))
    b = write_v2_csv(tmp_path / "b.csv", time_rows(seed=2))
    result = invoke(a, b)
    assert result.exit_code == 0, result.output
    assert "intervals cover the noise within a run only" in " ".join(result.output.split())


def test_a_glob_that_matches_nothing_is_one_error_line(tmp_path):
    good = write_v2_csv(tmp_path / "a.csv", time_rows(seed=1))
    assert_one_line_error(invoke(good, tmp_path / "nope-*.csv"), "no file matches")


def test_a_case_flagged_unstable_is_not_judged_and_never_passes_silently(tmp_path):
    """compare printed "faster *" for a case both runs had flagged unstable."""
    a_rows, b_rows = v2_records(time_rows(seed=1)), v2_records(time_rows(seed=2, scale=1.3))
    for record in a_rows:
        if record["backend"] == "sdpa" and record["seq"] == 512:
            record["stable"] = False
    for name, records in (("a", a_rows), ("b", b_rows)):
        frame = pd.DataFrame(records)
        frame["samples"] = [json.dumps(s) for s in frame["samples"]]
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
    comparison = compare_files(tmp_path / "a.csv", tmp_path / "b.csv")
    shaky = [c for c in comparison.changes if c.unstable]
    assert [(c.key["backend"], c.key["seq"], c.verdict, c.unstable) for c in shaky] == [
        ("sdpa", "512", "unstable", "A")
    ]
    result = invoke(tmp_path / "a.csv", tmp_path / "b.csv", "--fail-above", "40%")
    text = " ".join(result.output.split())
    assert "flagged unstable by its run: sdpa n=512 (in A)" in text
    assert "not judged (flagged unstable): sdpa n=512" in text
    assert result.exit_code == 3, result.output  # 1.3x is within 40 %, but n=512 unjudged
    result = invoke(tmp_path / "a.csv", tmp_path / "b.csv", "--fail-above", "10%")
    assert result.exit_code == 1, result.output  # its interval lies wholly above 1.1: fails
    assert "sdpa n=512 1.3" in " ".join(result.output.split()).partition("FAIL:")[2]


# ------------------------------------------------------------------ error studies

ERRORS = {  # metric -> a typical trial mean; grad_cos is higher-is-closer, so not compared
    "radian_vs_softmax": 0.2,
    "grad_rel_dq_vs_softmax": 0.8,
    "grad_bias_dk_vs_softmax": 0.3,
    "mc_std_vs_softmax": 0.15,
    "grad_cos_dq_vs_softmax": 0.7,
}


def error_rows(seed: int, scale: dict | float = 1.0, trials: int = 5, noise=0.03) -> list[Row]:
    """An error study's rows (`attnbench error --mode fwdbwd`): value the mean of the trials,
    samples each trial's; `scale` multiplies every metric, or the metrics a dict names."""
    rng = np.random.default_rng(seed)
    rows = []
    for backend in BACKENDS:
        for seq in SEQS[:1]:
            for metric, mean in ERRORS.items():
                factor = scale.get(metric, 1.0) if isinstance(scale, dict) else scale
                kept = samples(factor * mean, trials, noise, rng)
                common = dict(study="error", backend=backend, impl="torch", device="cpu")
                common |= dict(dtype="float32", mode="fwdbwd", inputs="clustered", batch=1)
                common |= dict(heads=4, seq=seq, dim=32, metric=metric, unit="")
                value, count = float(np.mean(kept)), len(kept)
                rows.append(Row(**common, value=value, count=count, samples=json.dumps(kept)))
    return rows


def error_files(tmp_path: Path, a: list[Row], b: list[Row]) -> tuple[Path, Path]:
    return write_v2_csv(tmp_path / "a.csv", a), write_v2_csv(tmp_path / "b.csv", b)


@pytest.fixture
def fewer_resamples(monkeypatch):
    """The error tests' verdicts are clear-cut: 400 resamples a case keep them quick."""
    monkeypatch.setattr(compare, "RESAMPLES", 400)


def test_larger_errors_are_worse_and_fail_the_gate(tmp_path, fewer_resamples):
    a, b = error_files(tmp_path, error_rows(seed=1), error_rows(seed=2, scale=1.5))
    comparison = compare_files(a, b)
    assert comparison.study == "error" and len(comparison.changes) == 8
    assert {c.verdict for c in comparison.changes} == {"worse"}
    assert all(c.by_runs and 1.4 < c.ratio < 1.6 for c in comparison.changes)
    result = invoke(a, b, "--fail-above", "5%")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert any("A mean" in line and "B mean" in line for line in lines)
    assert "8 worse: ratio of trial means B/A" in result.output
    fail = [line for line in lines if line.startswith("FAIL")]
    assert len(fail) == 1 and "significantly worse by more than 5%" in fail[0]
    assert fail[0].count("x;") == 7 and "softmax n=256 grad_rel_dq_vs_softmax 1." in fail[0]
    assert "not compared (higher is closer, or not an error): grad_cos_dq_vs_softmax" in lines
    assert invoke(b, a, "--fail-above", "5%").exit_code == 0  # smaller errors are better
    assert {c.verdict for c in compare_files(b, a).changes} == {"better"}


def test_identical_error_files_are_not_worse_and_pass(tmp_path, fewer_resamples):
    a, b = error_files(tmp_path, error_rows(seed=1), error_rows(seed=1))
    assert {c.verdict for c in compare_files(a, b).changes} == {"same"}
    result = invoke(a, b, "--fail-above", "5%", "--markdown")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].startswith("| backend | case | A mean | B mean |")
    assert "worse" not in result.output.split("8 same")[0]
    assert "PASS: every case judged, none significantly worse by more than 5%" in result.output


def test_a_gradient_error_alone_is_judged(tmp_path, fewer_resamples):
    """Only dQ's one-call error grows: that case is worse, every other error the same."""
    scale = {"grad_rel_dq_vs_softmax": 2.0}
    a, b = error_files(tmp_path, error_rows(seed=1), error_rows(seed=2, scale=scale))
    changes = compare_files(a, b).changes
    verdict = {(c.key["backend"], c.key["seq"], c.key["metric"]): c.verdict for c in changes}
    worse = {key for key, v in verdict.items() if v == "worse"}
    assert worse == {(bk, str(n), "grad_rel_dq_vs_softmax") for bk in BACKENDS for n in SEQS[:1]}
    assert set(verdict.values()) == {"worse", "same"}
    result = invoke(a, b, "--fail-above", "50%")
    assert result.exit_code == 1, result.output
    (fail,) = [line for line in result.output.splitlines() if line.startswith("FAIL")]
    assert fail.count("grad_rel_dq_vs_softmax") == 2 and fail.count("x;") == 1


def test_a_single_trial_gets_no_interval(tmp_path):
    a, b = error_files(tmp_path, error_rows(seed=1, trials=1), error_rows(2, 2.0, trials=1))
    assert {c.verdict for c in compare_files(a, b).changes} == {"no CI"}
    result = invoke(a, b, "--fail-above", "5%")
    assert result.exit_code == 3, result.output
    assert "8 no CI" in result.output and "fewer than 2 trials in a file" in result.output


def test_a_time_file_against_an_error_file_is_one_line_error(tmp_path):
    timed = write_v2_csv(tmp_path / "time.csv", time_rows(seed=1))
    errors = write_v2_csv(tmp_path / "error.csv", error_rows(seed=1))
    assert_one_line_error(invoke(timed, errors), "compare two files of one study")
    assert_one_line_error(invoke(errors, timed, "--fail-above", "5%"), "time_ms rows")
    write_v2_csv(tmp_path / "runs-1.csv", error_rows(seed=2))
    (tmp_path / "runs-0.csv").write_bytes(timed.read_bytes())
    assert_one_line_error(invoke(timed, tmp_path / "runs-*.csv"), "must be of one study")


# ------------------------------------------------------------------ the gate's three outcomes


def unstable_records(rows: list[Row], which=lambda record: True) -> list[dict]:
    records = v2_records(rows)
    for record in records:
        record["stable"] = not which(record)
    return records


def write_records(path: Path, records: list[dict]) -> Path:
    frame = pd.DataFrame(records)
    frame["samples"] = [json.dumps(s) for s in frame["samples"]]
    frame.to_csv(path, index=False)
    return path


def test_a_planted_slowdown_flagged_unstable_still_fails(tmp_path):
    """A 2x slowdown whose interval (about 1.98-2.02) lies wholly beyond the threshold
    passed when its run had flagged it unstable: noise cannot make an interval that tight."""
    a = write_records(tmp_path / "a.csv", unstable_records(time_rows(seed=1)))
    b = write_records(tmp_path / "b.csv", unstable_records(time_rows(seed=2, scale=2.0)))
    result = invoke(a, b, "--fail-above", "5%")
    assert result.exit_code == 1, result.output
    assert result.output.count("x;") == 5 and "FAIL:" in result.output


def test_every_case_unstable_and_unchanged_is_inconclusive_not_pass(tmp_path):
    a = write_records(tmp_path / "a.csv", unstable_records(time_rows(seed=1)))
    b = write_records(tmp_path / "b.csv", unstable_records(time_rows(seed=2)))
    result = invoke(a, b, "--fail-above", "5%")
    assert result.exit_code == 3, result.output
    assert "INCONCLUSIVE" in result.output and "6 not judged (6 flagged unstable)" in result.output
    allowed = invoke(a, b, "--fail-above", "5%", "--allow-unjudged")
    assert allowed.exit_code == 0, allowed.output
    assert "6 not judged, allowed by --allow-unjudged" in allowed.output


def test_an_unstable_slowdown_inside_the_threshold_is_not_judged(tmp_path):
    """Noisy (10 %) samples of a 1.1x slowdown: the interval reaches below 1.2, so the gate
    at 20 % can neither pass nor fail it."""
    a = write_records(tmp_path / "a.csv", unstable_records(time_rows(seed=1, noise=0.1)))
    b = write_records(tmp_path / "b.csv", unstable_records(time_rows(seed=2, noise=0.1, scale=1.1)))
    assert invoke(a, b, "--fail-above", "20%").exit_code == 3


@pytest.mark.parametrize("status", ["crashed", "oom", "error", "skipped", "exploded"])
def test_a_file_whose_every_case_failed_is_inconclusive(tmp_path, status):
    a = write_v2_csv(tmp_path / "a.csv", time_rows(seed=1))
    every = {(backend, seq): status for backend in BACKENDS for seq in SEQS}
    b_records = v2_records(time_rows(seed=2, status=every))
    b = write_records(tmp_path / "b.csv", b_records)
    result = invoke(a, b, "--fail-above", "5%")
    assert result.exit_code == 3, result.output
    cause = "unknown status" if status == "exploded" else status
    assert f"not judged ({cause}): softmax n=256;" in result.output
    assert "6 not judged" in result.output


def test_a_file_missing_half_the_cases_is_inconclusive(tmp_path):
    a = write_v2_csv(tmp_path / "a.csv", time_rows(seed=1))
    b = write_v2_csv(tmp_path / "b.csv", [r for r in time_rows(seed=2) if r.backend == "sdpa"])
    result = invoke(a, b, "--fail-above", "5%")
    assert result.exit_code == 3, result.output
    assert "3 not judged (3 missing in B)" in result.output


def test_cases_skipped_on_both_sides_are_not_unjudged(tmp_path):
    """A case neither run supports has nothing to judge; only B's new cases are named."""
    skipped = {("sdpa", 1024): "skipped"}
    a = write_v2_csv(tmp_path / "a.csv", time_rows(seed=1, status=skipped))
    b = write_v2_csv(tmp_path / "b.csv", time_rows(seed=2, status=skipped))
    result = invoke(a, b, "--fail-above", "5%")
    assert result.exit_code == 0, result.output
    assert "PASS: every case judged" in result.output


def test_allow_unjudged_needs_the_gate(tmp_path):
    good = write_v2_csv(tmp_path / "a.csv", time_rows(seed=1))
    assert_one_line_error(invoke(good, good, "--allow-unjudged"), "--allow-unjudged")
