"""`time --rounds`: the backends of a length take turns, and speed-ups come from the paired
per-round ratios, so a drift of the machine that moves every backend of a round alike
cancels. The clock here is a fake one that drifts, so what is asserted is arithmetic on
known times, not a timing of this machine."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from attnbench.backends import get_backend
from attnbench.cli import app
from attnbench.measure import timing
from attnbench.measure.rounds import paired_speedup, round_medians, split
from attnbench.measure.timing import Timer
from attnbench.run import runner
from attnbench.studies.time import TimeStudy
from attnbench.views import compare, compare_text

TINY = ["--seq", "16", "--heads", "1", "--dim", "8", "--min-time", "0", "--warmup", "1"]
COST_MS = {0: 1.0, 1: 2.0}  # the first backend timed (the baseline, sdpa) and the second


class DriftingClock:
    """Stands in for `timing._time_cpu`: a call of the k-th backend timed takes COST_MS[k]
    times a drift that grows with every measurement, as a machine slowly slowing would."""

    def __init__(self, drift_per_call: float):
        self.calls = 0
        # each timed function, in the order first seen; held, so that a later function
        # cannot take a freed one's id and its cost
        self.order: list = []
        self.drift = drift_per_call

    def __call__(self, fn, loops: int) -> float:
        if not any(seen is fn for seen in self.order):
            self.order.append(fn)
        self.calls += 1
        index = next(i for i, seen in enumerate(self.order) if seen is fn)
        return COST_MS[index] * (1 + self.drift * self.calls)


def speedups(monkeypatch, rounds: int, drift: float = 0.01) -> pd.DataFrame:
    monkeypatch.setattr(timing, "_time_cpu", DriftingClock(drift))
    spec = TimeStudy(
        seqs=[16], backends=[get_backend("sdpa"), get_backend("softmax")], heads=1, dim=8,
        repeats=10, warmup=0, min_time=0.0, baseline=get_backend("sdpa"), rounds=rounds,
    )  # fmt: skip
    rows = [row for case in runner.run(spec) for row in case]
    times = [r for r in rows if r.metric == "time_ms"]
    return pd.DataFrame([vars(r) for r in times]).set_index(pd.Index([r.backend for r in times]))


def test_rounds_cancel_a_drift_that_biases_backends_timed_one_after_the_other(monkeypatch):
    """softmax costs twice sdpa here: a speed-up of 0.5. Timed in turn, softmax's samples
    all come after sdpa's, when the machine has slowed, and its speed-up reads low."""
    alone = speedups(monkeypatch, rounds=1).loc["softmax"]
    paired = speedups(monkeypatch, rounds=5).loc["softmax"]
    assert alone["speedup"] < 0.47  # the drift taken for a difference between backends
    assert paired["speedup"] == pytest.approx(0.5, rel=0.03)
    assert abs(paired["speedup"] - 0.5) < abs(alone["speedup"] - 0.5) / 3
    assert paired["speedup_low"] < paired["speedup"] < paired["speedup_high"]
    assert alone["speedup_low"] is None  # no rounds, no paired interval


def test_each_round_keeps_its_share_of_repeats_and_the_rows_say_so(monkeypatch):
    rows = speedups(monkeypatch, rounds=4, drift=0.0)
    for _, row in rows.iterrows():
        assert row["round_sizes"] == [3, 3, 3, 3]  # ceil(10 / 4) samples a round
        assert row["count"] == len(row["samples"]) == 12
    # no drift: every round gives the same ratio, and the interval closes on it
    assert rows.loc["softmax", "speedup_low"] == pytest.approx(0.5)
    assert rows.loc["softmax", "speedup_high"] == pytest.approx(0.5)
    assert rows.loc["sdpa", "speedup"] == pytest.approx(1.0)


def test_the_order_within_a_round_is_random_and_seeded(monkeypatch):
    def orders(seed: int) -> list[list[int]]:
        visits: list[int] = []
        made: list[Timer] = []
        monkeypatch.setattr(Timer, "rewarm", lambda self: visits.append(self.name))
        monkeypatch.setattr(Timer, "__init__", lambda self, *a, **k: _fake_timer(self, made))
        spec = TimeStudy(
            seqs=[16], heads=1, dim=8, repeats=1, min_time=0.0, rounds=8, seed=seed,
            backends=[get_backend(b) for b in ("sdpa", "softmax", "yoso-e")],
            baseline=get_backend("sdpa"),
        )  # fmt: skip
        list(runner.run(spec))
        return [visits[i : i + 3] for i in range(0, len(visits), 3)]

    first, again, other = orders(0), orders(0), orders(1)
    assert first == again  # the same seed, the same order
    assert len({tuple(r) for r in first}) > 1  # not one fixed order every round
    assert first != other
    assert all(sorted(r) == sorted(first[0]) for r in first)  # each backend once a round


def _fake_timer(self, made: list[Timer]):
    """A Timer that times nothing (every sample the same); named by the order timers are
    made in, which is the order of the cases (0: sdpa, the baseline, first)."""
    self.name = len(made)
    made.append(self)
    self.samples, self.round_sizes, self.max_spread = [], [], 0.1
    self.first_ms, self.warmup_calls, self.loops, self.settled = 1.0, 0, 1, True
    self.timer, self.extra_calls = timing.CPU_TIMER, 0
    self.measure = lambda loops: 1.0


def test_a_case_that_fails_leaves_the_rounds_and_the_others_go_on(monkeypatch):
    """softmax raises from its third call on: an error row; sdpa and yoso-e end ok."""
    from attnbench.backends.softmax import Softmax

    calls = {"n": 0}
    real = Softmax.forward

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] >= 3:
            raise RuntimeError("kernel fault")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Softmax, "forward", failing)
    spec = TimeStudy(
        seqs=[16], heads=1, dim=8, repeats=2, warmup=0, min_time=0.0, rounds=3,
        backends=[get_backend(b) for b in ("sdpa", "softmax", "yoso-e")],
        baseline=get_backend("sdpa"),
    )  # fmt: skip
    rows = [r for case in runner.run(spec) for r in case if r.metric == "time_ms"]
    status = {r.backend.split(":")[0]: (r.status, r.reason) for r in rows}
    assert status["softmax"] == ("error", "RuntimeError: kernel fault")
    assert status["sdpa"][0] == status["yoso-e"][0] == "ok"


def test_isolated_rounds_run_a_length_in_one_worker(tmp_path):
    out = tmp_path / "r.csv"
    args = ["time", *TINY, "--backends", "sdpa,softmax", "--rounds", "3", "--repeats", "3"]
    result = CliRunner().invoke(app, [*args, "--executor", "isolated", "--csv", str(out)])
    assert result.exit_code == 0, result.output
    times = pd.read_csv(out).query("metric == 'time_ms'")
    assert (times["status"] == "ok").all()
    assert times["round_sizes"].map(json.loads).map(len).eq(3).all()
    assert times["speedup_low"].notna().all()
    assert "(95%" in result.output and "CI)" in result.output  # a narrow table wraps it


@pytest.mark.parametrize("bad", ["0", "-2", "x"])
def test_bad_rounds_are_one_error_line(bad):
    result = CliRunner().invoke(app, ["time", *TINY, "--rounds", bad])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) <= 3 and "rounds" in result.output and "Traceback" not in result.output


def test_split_and_paired_speedup_arithmetic():
    assert split([1, 2, 3, 4, 5], [2, 3]) == [[1, 2], [3, 4, 5]]
    assert split([1, 2], []) == [[1, 2]]
    with pytest.raises(ValueError):
        split([1, 2, 3], [2, 2])
    assert round_medians([1, 3, 10, 20, 30], [2, 3]) == [2.0, 20.0]
    # ratios 2 and 8: geometric mean 4; t(0.975, 1) = 12.706 times the log ratios' standard
    # error, log(8 / 2) / 2 = 0.693
    speedup, low, high = paired_speedup([2.0, 8.0], [1.0, 1.0])
    assert speedup == pytest.approx(4.0)
    assert math.log(high / speedup) == pytest.approx(12.7062 * math.log(4) / 2, rel=1e-4)
    assert low * high == pytest.approx(speedup**2)
    assert paired_speedup([3.0], [1.5]) == (2.0, None, None)


def test_spread_in_rounds_is_the_noise_within_them():
    """Two steady rounds, the second twice as slow: pooled, their spread would be large."""
    steady = timing.Timing([10, 10.1, 20, 20.2], 1.0, 0, 1, True, "t", 0.1, [2, 2])
    assert steady.spread == pytest.approx(0.05 / 10.05) and steady.stable  # each round's IQR
    pooled = timing.Timing([10, 10.1, 20, 20.2], 1.0, 0, 1, True, "t", 0.1)
    assert pooled.spread > 0.4 and not pooled.stable
    # rounds of one sample say nothing of the noise within a round: all samples judge
    single = timing.Timing([10, 20, 10, 20], 1.0, 0, 1, True, "t", 0.1, [1, 1, 1, 1])
    assert single.spread == pytest.approx(_iqr([10, 20, 10, 20]) / 15) and not single.stable


def _iqr(samples: list[float]) -> float:
    q25, q75 = np.percentile(samples, [25, 75])
    return float(q75 - q25)


def test_compare_takes_rounds_as_units(tmp_path):
    """One run a side, in rounds that drift: the interval resamples the rounds, so the same
    code measured while the machine drifted is not called a change."""
    rng = np.random.default_rng(0)
    levels = [1.0, 1.3, 0.9, 1.2, 1.05]

    def side(name: str, shift: int) -> str:
        rounds = [list(lv * (1 + 0.01 * rng.standard_normal(20))) for lv in np.roll(levels, shift)]
        samples = [s for r in rounds for s in r]
        frame = pd.DataFrame([{
            "study": "time", "backend": "sdpa", "impl": "torch", "device": "cpu",
            "dtype": "float32", "mode": "fwd", "inputs": "random", "batch": 1, "heads": 1,
            "seq": 64, "dim": 8, "metric": "time_ms", "value": float(np.median(samples)),
            "unit": "ms", "samples": json.dumps(samples), "status": "ok", "stable": True,
            "round_sizes": json.dumps([20] * 5), "schema_version": 4,
        }])  # fmt: skip
        path = tmp_path / f"{name}.csv"
        frame.to_csv(path, index=False)
        return str(path)

    comparison = compare.compare_files(side("a", 0), side("b", 2))
    (change,) = comparison.changes
    assert change.by_runs and [len(r) for r in change.a[0]] == [20] * 5
    assert change.low < 1.0 < change.high  # drift between rounds is in the interval
    lines = " ".join(compare_text.summary(comparison))
    assert "runs, then rounds, then samples" in lines and "one run on a side" in lines
    pooled_low, pooled_high = compare.ratio_interval(
        [s for r in change.a[0] for s in r], [s for r in change.b[0] for s in r]
    )
    assert change.high - change.low > pooled_high - pooled_low


def test_a_backend_added_on_resume_gets_an_unpaired_speedup(tmp_path):
    """The baseline's rounds were run before: the new backend's cannot be paired with them,
    so its speed-up is the ratio of medians, without an interval, and nothing is re-run."""
    out = tmp_path / "r.csv"
    base = ["time", *TINY, "--rounds", "2", "--repeats", "2", "--csv", str(out)]
    assert CliRunner().invoke(app, [*base, "--backends", "sdpa"]).exit_code == 0
    first = pd.read_csv(out).query("metric == 'time_ms'")
    result = CliRunner().invoke(app, [*base, "--backends", "sdpa,softmax", "--resume"])
    assert result.exit_code == 0, result.output
    times = pd.read_csv(out).query("metric == 'time_ms'").set_index("backend")
    assert times.loc["sdpa", "samples"] == first["samples"].iloc[0]  # kept, not re-run
    softmax = times.loc["softmax"]
    assert softmax["speedup"] == pytest.approx(times.loc["sdpa", "value"] / softmax["value"])
    assert math.isnan(softmax["speedup_low"])


def test_the_interval_over_few_rounds_is_calibrated():
    """Five rounds a side, each shifted by its own drift (sd 5 %): for identical code a 95 %
    interval may exclude 1 about 5 % of the time, and a real 20 % slowdown must still show."""
    rng = np.random.default_rng(1)

    def side(factor: float = 1.0) -> list[list[list[float]]]:
        drifts = factor * np.exp(0.05 * rng.standard_normal(5))
        return [[list(10 * d * (1 + 0.01 * rng.standard_normal(8))) for d in drifts]]

    def excludes_one(b_factor: float) -> bool:
        seed = int(rng.integers(1 << 30))
        low, high = compare.runs_interval(side(), side(b_factor), resamples=200, seed=seed)
        return not low <= 1.0 <= high

    trials = 60
    assert sum(excludes_one(1.0) for _ in range(trials)) <= 6  # about 3 of 60 expected
    assert sum(excludes_one(1.2) for _ in range(trials)) >= 0.8 * trials
