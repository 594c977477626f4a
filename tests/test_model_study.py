"""The whole-model study (YOSO Fig. 7): the encoder, the batch search, its rows and its command.

Models are tiny (one layer, width 16) so the file runs in seconds; nothing asserts on timings.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench.api.parse import parse_bytes
from attnbench.backends import get_backend
from attnbench.run import runner
from attnbench.run.worker import HEADROOM, classify
from attnbench.studies import model as study

TINY = study.ModelConfig(layers=1, width=16, hidden=32, heads=2, vocab=32)
TINY_ARGS = ["--layers", "1", "--width", "16", "--hidden", "32", "--heads", "2", "--steps", "1"]


def spec(backends="softmax", seqs=(16,), **kw) -> study.ModelStudy:
    kw = {"steps": 1, "warmup": 0, "max_batch": 4, **kw}
    return study.ModelStudy(
        seqs=list(seqs), backends=[get_backend(b) for b in backends.split(",")], config=TINY, **kw
    )


def test_encoder_maps_ids_to_vocabulary_logits():
    trainer = study.Trainer(TINY, get_backend("softmax"), 16, "cpu", seed=0)
    ids, targets = trainer.batch(3)
    assert ids.shape == targets.shape == (3, 16)
    assert trainer.model(ids).shape == (3, 16, TINY.vocab)


def test_a_training_step_changes_every_trained_weight_and_lowers_the_loss():
    trainer = study.Trainer(TINY, get_backend("softmax"), 16, "cpu", seed=0)
    before = {k: p.detach().clone() for k, p in trainer.model.named_parameters()}
    ids, targets = trainer.batch(2)
    losses = [float(trainer.step(ids, targets)) for _ in range(5)]
    changed = [k for k, p in trainer.model.named_parameters() if not torch.equal(before[k], p)]
    assert set(changed) == set(before)  # attention, feed-forward, norms and embeddings
    assert losses[-1] < losses[0]


def test_the_encoder_is_pre_ln_with_the_backend_as_its_attention():
    calls = []
    backend = get_backend("softmax")
    trainer = study.Trainer(TINY, backend, 8, "cpu", seed=0)
    block = trainer.model.blocks[0]
    block.attention.backend = lambda q, k, v: calls.append(q.shape) or backend(q, k, v)
    x = torch.randn(2, 8, TINY.width)
    expected = x + block.attention(block.norm1(x))
    expected = expected + block.ff(block.norm2(expected))
    torch.testing.assert_close(block(x), expected)
    assert calls[0] == (2, TINY.heads, 8, TINY.width // TINY.heads)


@pytest.mark.parametrize(("budget", "largest"), [(3760, 37), (6450, 64), (150, 1), (149, 0)])
def test_batch_search_finds_the_largest_batch_within_a_linear_memory(budget, largest):
    tried = []

    def fits(batch):
        tried.append(batch)
        return 100 * batch + 50 <= budget

    assert study.search_batch(fits, 64) == largest
    assert tried[: min(len(tried), 6)] == [1, 2, 4, 8, 16, 32][: min(len(tried), 6)]
    assert len(tried) <= 2 * math.log2(64) + 1


def test_fit_measures_a_step_against_the_budget(monkeypatch):
    trainer = study.Trainer(TINY, get_backend("softmax"), 8, "cpu", seed=0)
    monkeypatch.setattr(study, "step_bytes", lambda _, batch: (100 * batch + 50, "fake"))
    fit = study.Fit(trainer, budget=3760)
    assert study.search_batch(fit, 64) == 37
    assert fit.measured[37] == 3750 and fit.method == "fake"


def test_an_out_of_memory_at_a_batch_is_caught_and_the_search_backs_off(monkeypatch):
    trainer = study.Trainer(TINY, get_backend("softmax"), 8, "cpu", seed=0)

    def step_bytes(_, batch):
        if batch >= 12:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 9 GB")
        return batch, "fake"

    monkeypatch.setattr(study, "step_bytes", step_bytes)
    assert study.search_batch(study.Fit(trainer, budget=2**30), 64) == 11


def test_any_other_failure_in_a_step_is_not_taken_for_a_full_memory(monkeypatch):
    trainer = study.Trainer(TINY, get_backend("softmax"), 8, "cpu", seed=0)
    monkeypatch.setattr(study, "step_bytes", lambda *_: (_ for _ in ()).throw(ValueError("bad")))
    with pytest.raises(ValueError):
        study.Fit(trainer, budget=2**30)(1)


def test_rows_carry_the_batch_and_per_instance_values_are_per_batch_element(monkeypatch):
    monkeypatch.setattr(study, "step_bytes", lambda _, batch: (batch * 2**20 + 2**20, "fake"))
    rows = [r for rs in runner.run(spec(memory_budget=3 * 2**20 + 2**20)) for r in rs]
    by = {r.metric: r for r in rows}
    assert set(by) == set(study.METRICS)
    assert all(r.status == "ok" and r.batch == 3 and r.study == "model" for r in rows)
    assert by["batch"].value == 3
    assert by["time_per_instance_ms"].value == pytest.approx(by["step_ms"].value / 3)
    assert by["peak_mib_per_instance"].value == pytest.approx(by["peak_mib"].value / 3)
    assert by["peak_mib"].value == pytest.approx(4)
    assert by["step_ms"].count == 1 and len(by["step_ms"].samples) == 1


@pytest.mark.parametrize(("max_batch", "chosen"), [(4, 3), (3, 3)])
def test_the_reported_peak_is_the_searchs_measurement_and_within_the_budget(
    monkeypatch, max_batch, chosen
):
    """A step measured again at the chosen batch may peak higher than the search saw; the
    row keeps the measurement that admitted the batch, so it never exceeds the budget."""
    calls = []

    def noisy_step_bytes(_, batch):
        first = batch not in calls
        calls.append(batch)
        return (batch + 1) * 2**20 if first else 6 * 2**20, "fake"

    monkeypatch.setattr(study, "step_bytes", noisy_step_bytes)
    budget = 4.5 * 2**20  # batch 3 peaks at 4 MiB, batch 4 at 5 MiB
    rows = [
        r for rs in runner.run(spec(memory_budget=int(budget), max_batch=max_batch)) for r in rs
    ]
    by = {r.metric: r for r in rows}
    assert by["batch"].value == chosen and by["batch"].status == "ok"
    assert by["peak_mib"].value * 2**20 <= budget
    assert by["peak_mib"].value == pytest.approx(chosen + 1)  # the search's, not a re-run's
    assert by["peak_mib_per_instance"].value == pytest.approx((chosen + 1) / chosen)
    assert by["peak_mib"].method == "fake"
    capped = "batch capped at --max-batch 3" if max_batch == chosen else ""
    assert all(by[m].reason == capped for m in study.METRICS)


def test_a_real_step_is_measured_and_batch_one_too_big_is_an_oom_row():
    rows = [r for rs in runner.run(spec(memory_budget=1000)) for r in rs]
    assert len(rows) == 1 and rows[0].status == "oom"
    assert "batch 1 does not fit" in rows[0].reason
    rows = [r for rs in runner.run(spec(max_batch=2)) for r in rs]
    by = {r.metric: r for r in rows}
    assert by["batch"].value == 2 and by["peak_mib"].value > 0
    assert "capped" in by["batch"].reason


def test_the_default_budget_is_the_free_memory_with_the_runners_headroom(monkeypatch):
    monkeypatch.setattr(study, "available_bytes", lambda _: 10 * 2**20)
    monkeypatch.setattr(study, "step_bytes", lambda _, batch: (batch * 2**20, "fake"))
    rows = [r for rs in runner.run(spec(max_batch=64)) for r in rs]
    assert {r.metric: r for r in rows}["batch"].value == int(HEADROOM * 10)


def test_a_backend_without_backward_is_skipped_with_the_reason():
    rows = [r for rs in runner.run(spec("softmax,scram")) for r in rs]
    scram = [r for r in rows if r.backend.startswith("scram")]
    assert len(scram) == 1 and scram[0].status == "skipped"
    assert "no backward" in scram[0].reason
    assert {r.status for r in rows if r.backend == "softmax"} == {"ok"}


def test_the_search_is_reported_while_it_runs(monkeypatch):
    monkeypatch.setattr(study, "step_bytes", lambda _, batch: (batch, "fake"))
    seen = []
    searched = spec(memory_budget=2**20, max_batch=5)
    searched.report = seen.append
    list(runner.run(searched))
    assert any("batch 4 fits, trying 5" in text for text in seen)


@pytest.mark.parametrize(
    ("samples", "wait", "stable"),
    [
        ([10.0, 10.2, 9.9, 10.1], 0.0, True),
        ([10.0, 15.0, 7.0, 12.0], 0.0, False),  # spread above 10 %
        ([10.0, 10.2, 9.9, 10.1], 0.3, False),  # steady, but waiting for a CPU
        ([10.0], None, None),  # one step: no spread to judge
        ([10.0], 0.3, False),
    ],
)
def test_stability_is_judged_as_the_time_study_judges_it(samples, wait, stable):
    verdict = study.stability(samples, {"cpu_wait": wait}, max_spread=0.10)
    assert verdict["stable"] is stable
    assert verdict["conditions"] == {"cpu_wait": wait}
    assert (verdict["spread"] is None) == (len(samples) == 1)


def test_time_rows_carry_spread_conditions_and_a_verdict(monkeypatch):
    """Noisy step times read `ok` and made the time per instance fall with n in one run."""
    monkeypatch.setattr(study, "step_bytes", lambda _, batch: (batch, "fake"))
    rows = [r for rs in runner.run(spec(steps=3, memory_budget=2**20)) for r in rs]
    by = {r.metric: r for r in rows}
    for metric in ("time_per_instance_ms", "step_ms"):
        assert isinstance(by[metric].stable, bool) and by[metric].spread >= 0
        assert {"cpu_wait", "load_before", "load_after"} <= set(by[metric].conditions)
    for metric in ("batch", "peak_mib", "peak_mib_per_instance"):
        assert by[metric].stable is None and by[metric].spread is None


def test_max_spread_is_a_setting_only_when_not_the_default():
    """Case ids of runs made before the verdict existed stay the same, so they resume."""
    assert "max_spread" not in spec().cases[0].settings
    assert spec(max_spread=0.25).cases[0].settings["max_spread"] == 0.25


def invoke(*args):
    return CliRunner().invoke(cli.app, [str(a) for a in args])


def test_cli_writes_csv_table_and_plot(tmp_path):
    csv, png = tmp_path / "m.csv", tmp_path / "m.png"
    args = ["model", "--seq", "16,32", "--backends", "softmax,sdpa", *TINY_ARGS]
    result = invoke(*args, "--max-batch", "4", "--warmup", "0", "--csv", csv, "--plot", png)
    assert result.exit_code == 0, result.output
    df = pd.read_csv(csv)
    assert set(df["metric"]) == set(study.METRICS) and (df["status"] == "ok").all()
    assert sorted(set(df["seq"])) == [16, 32] and set(df["mode"]) == {"train"}
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "time / instance" in result.stdout
    # resumed: every case is complete, nothing runs again, the same rows come back
    again = invoke(*args, "--max-batch", "4", "--warmup", "0", "--csv", csv, "--resume")
    assert again.exit_code == 0, again.output
    assert len(pd.read_csv(csv)) == len(df)
    # the saved rows redraw the same figure
    assert invoke("plot", csv, "-o", tmp_path / "again.svg").exit_code == 0


def test_cli_marks_noisy_steps_unstable_in_the_table_the_csv_and_a_warning(tmp_path, monkeypatch):
    steps = iter([10.0, 20.0, 5.0] * 10)
    monkeypatch.setattr(study, "_timed_step", lambda *_: next(steps))
    csv = tmp_path / "m.csv"
    args = ["model", "--seq", "16", "--backends", "softmax", *TINY_ARGS, "--steps", "3"]
    result = invoke(*args, "--max-batch", "2", "--warmup", "0", "--csv", csv)
    assert result.exit_code == 0, result.output
    assert "unstable" in result.stdout
    assert "warning: 1 case(s) unstable" in result.stderr and "more --steps" in result.stderr
    df = pd.read_csv(csv)
    timed = df[df["metric"].isin(["time_per_instance_ms", "step_ms"])]
    assert not timed["stable"].astype(bool).any() and (timed["spread"] > 0.1).all()
    assert "cpu_wait" in df


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--memory-budget", "lots"], "--memory-budget"),
        (["--memory-budget", "12"], "--memory-budget"),
        (["--memory-budget", "3PiB"], "--memory-budget"),
        (["--width", "15"], "multiple of --heads"),
        (["--max-batch", "0"], "--max-batch"),
        (["--steps", "0"], "--steps"),
        (["--layers", "0"], "--layers"),
        (["--backends", "nope"], "unknown backend"),
        (["--seq", "0"], "--seq"),
        (["--max-spread", "lots"], "--max-spread"),
    ],
)
def test_bad_options_exit_2_with_one_line(args, needle):
    result = invoke("model", "--seq", "16", *TINY_ARGS, *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]


def test_memory_budgets_read_in_binary_units():
    assert parse_bytes("4GiB") == 4 * 2**30
    assert parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("1.5g") == 3 * 2**29


def test_classify_names_the_cpu_allocator_failure_oom():
    """The search relies on the runner's verdict for what counts as out of memory."""
    exc = RuntimeError("DefaultCPUAllocator: can't allocate memory")
    assert classify(exc)[0] == "oom"
