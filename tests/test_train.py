"""Training the byte-level masked language model with any backend (`attnbench train`), its
held-out evaluation and baselines, its checkpoint, and `--inputs model:yoso-mlm`, which reads
a YOSO-trained model's Q, K, V."""

from __future__ import annotations

import math
from functools import partial

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import attnbench.cli.core as cli
import attnbench.inputs.trained as trained
from attnbench.backends import get_backend
from attnbench.errors import UsageError
from attnbench.inputs import Inputs
from attnbench.nn.corpus import held_out_bytes, training_bytes
from attnbench.nn.mlm import (
    MASK,
    MaskedLM,
    MLMConfig,
    checkpoint_bytes,
    expected_attention,
    load,
    sinusoids,
)
from attnbench.studies.train import (
    EVAL_SEED,
    HeldOut,
    Training,
    mask_bytes,
    position_kinds,
    score,
    seen_in_training,
    train,
)

TINY = MLMConfig(layers=2, width=32, hidden=32, heads=2, positions=128)
TEXT = b"the quick brown fox jumps over the lazy dog. " * 40
HELD = b"a lazy dog and a quick fox. " * 10


def tiny_run(steps: int = 40, backend: str = "yoso:m=8,tau=8,seed=3", **kw) -> Training:
    return Training(backend=get_backend(backend), config=TINY, steps=steps, tokens=256,
                    lengths=(32, 64), lr=3e-3, warmup=5, evals=1, **kw)  # fmt: skip


def test_masking_follows_bert():
    ids = torch.randint(256, (64, 256), generator=torch.Generator().manual_seed(0))
    inputs, targets = mask_bytes(ids, torch.Generator().manual_seed(1))
    masked = targets >= 0
    assert 0.13 < masked.float().mean() < 0.17
    assert torch.equal(targets[masked], ids[masked])
    assert torch.equal(inputs[~masked], ids[~masked])  # unmasked bytes are left alone
    as_mask = (inputs[masked] == MASK).float().mean()
    kept = (inputs[masked] == ids[masked]).float().mean()
    assert 0.76 < as_mask < 0.84 and 0.07 < kept < 0.14


def test_tiny_training_loss_falls_and_is_seeded():
    model, log = train(tiny_run(), TEXT, HELD)
    losses = [entry["loss"] for entry in log]
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5
    assert 0 < log[-1]["heldout_accuracy"] <= 1 and "heldout_accuracy" not in log[-2]
    _, again = train(tiny_run(), TEXT, HELD)
    assert [entry["loss"] for entry in again] == losses


# the backends of the training-parity profile, and the rest of those with a backward
TRAINABLE = [
    "softmax", "sdpa", "yoso:m=8,tau=8,backward=proj", "yoso:m=8,tau=8,backward=pairs",
    "yoso:m=8,tau=8,backward=star", "yoso:m=8,tau=8,backward=lsh", "yoso-e:tau=8",
    "nystromformer:landmarks=8", "performer:features=16", "linformer:k=16", "reformer",
    "longformer:window=8", "sparse-fixed",
]  # fmt: skip


@pytest.mark.parametrize("backend", TRAINABLE)
def test_every_backend_with_a_backward_trains(backend):
    _, log = train(tiny_run(steps=3, backend=backend), TEXT, HELD)
    assert all(math.isfinite(entry["loss"]) for entry in log)
    assert math.isfinite(log[-1]["heldout_mask_loss"]) and log[-1]["seconds"] > 0


class Copier(torch.nn.Module):
    """Logits that put all but a little weight on the input byte (MASK: on byte 0)."""

    def forward(self, ids):
        logits = torch.zeros(*ids.shape, 257)
        logits.scatter_(-1, torch.where(ids == MASK, 0, ids)[..., None], 10.0)
        return logits


def test_score_counts_each_kind_and_the_baselines_by_hand():
    text, held_text = b"aab" * 50, b"abcab" * 40  # "a" most frequent; "c" never trained on
    held = HeldOut.of(text, held_text)
    assert held.most_frequent == ord("a") and not held.seen.any()  # no chunk seen
    got = score(Copier(), held, 50)
    # score masks window by window with EVAL_SEED's generator; redo it the same way
    gen = torch.Generator().manual_seed(EVAL_SEED)
    rows = [mask_bytes(w[None], gen) for w in held.ids.view(-1, 50)]
    inputs = torch.cat([r[0] for r in rows]).view(-1)
    targets = torch.cat([r[1] for r in rows]).view(-1)
    kinds = position_kinds(inputs, targets)
    counts = {k: int(w.sum()) for k, w in kinds.items()}
    assert min(counts.values()) > 0
    high = math.log(math.exp(10.0) + 256) - 10.0  # loss where the copied byte is the target
    low = math.log(math.exp(10.0) + 256)  # loss elsewhere
    assert got["kept_accuracy"] == 1.0 and got["random_accuracy"] == 0.0
    assert got["kept_loss"] == pytest.approx(high, rel=1e-4)
    assert got["random_loss"] == pytest.approx(low, rel=1e-5)
    mask_targets = targets[kinds["mask"]]
    assert got["mask_accuracy"] == 0.0  # byte 0 never occurs
    assert got["mask_loss"] == pytest.approx(low, rel=1e-5)
    counts_text = torch.bincount(torch.tensor(list(text)), minlength=256).double() + 1
    unigram = -(counts_text / counts_text.sum()).log()[mask_targets].mean()
    assert got["unigram_mask_loss"] == pytest.approx(float(unigram))
    share_a = float((mask_targets == ord("a")).double().mean())
    assert got["unigram_mask_accuracy"] == pytest.approx(share_a)
    masked = targets >= 0
    guess = torch.where(inputs == MASK, ord("a"), inputs)
    assert got["copy_accuracy"] == pytest.approx(float((guess == targets)[masked].double().mean()))
    assert got["seen_share"] == 0.0 and got["scored"] == int(masked.sum())


def test_held_out_text_seen_in_training_is_left_out():
    held_text = b"x" * 32 + b"never seen in training, this..." + b"tail"
    seen = seen_in_training(held_text, b"abc" + b"x" * 40 + b"tail")
    assert seen[:32].all() and not seen[32:64].any() and seen[64:].all()
    held = HeldOut.of(b"x" * 40 + b"y", b"x" * 64)  # every chunk seen: nothing is scored
    assert score(Copier(), held, 32)["seen_share"] == 1.0


def test_expected_attention_is_yoso_e():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=gen) for _ in range(3))
    yoso_e = get_backend("yoso-e:tau=8")
    torch.testing.assert_close(expected_attention(q, k, v, tau=8), yoso_e(q, k, v))


def test_sinusoids_are_defined_at_every_length():
    table = sinusoids(4096, 8)
    assert table.shape == (4096, 8) and torch.isfinite(table).all()
    torch.testing.assert_close(table[:, 1::2] ** 2 + table[:, 0::2] ** 2, torch.ones(4096, 4))


@pytest.fixture
def checkpoint(tmp_path, monkeypatch):
    """A tiny trained model's checkpoint, read by model:yoso-mlm; returns (path, model)."""
    model, log = train(tiny_run(steps=6), TEXT, HELD)
    path = tmp_path / "tiny.pt"
    path.write_bytes(checkpoint_bytes(model, {"steps": 6}))
    monkeypatch.setattr(trained, "CHECKPOINT", path)
    return path, model


def test_checkpoint_reproduces_the_models_qkv(checkpoint):
    path, model = checkpoint
    model.set_attention(partial(expected_attention, tau=TINY.tau))
    text = torch.frombuffer(bytearray(held_out_bytes()), dtype=torch.uint8).long()
    n, seed = 96, 2
    ids = text[(seed * n + torch.arange(n)) % len(text)][None]
    want = model.qkv(ids, 1)
    got = Inputs("model:yoso-mlm:layer=1", 1, 1, 1).draw(n, seed, None)
    assert [t.shape for t in got] == [(1, 2, n, 16)] * 3
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
    one = Inputs("model:yoso-mlm:layer=1,head=1", 1, 1, 1).draw(n, seed, None)
    torch.testing.assert_close(one[0], want[0][:, 1:2])
    reloaded, facts = load(path)
    assert facts == {"steps": 6} and isinstance(reloaded, MaskedLM)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("model:yoso-mlm:layer=2", "layer must be 0..1"),
        ("model:yoso-mlm:head=2", "head must be 0..1"),
        ("model:yoso-mlm:depth=1", "bad option"),
    ],
)
def test_bad_layer_or_head_is_a_usage_error(checkpoint, kind, message):
    with pytest.raises(UsageError, match=message):
        Inputs(kind, 1, 1, 1)


def test_committed_checkpoint_is_the_parity_runs_yoso_model_and_learned_context():
    from pathlib import Path

    model, facts = load(trained.CHECKPOINT)
    # trained with YOSO's default backward, in the committed training-parity run
    assert facts["backend"] == get_backend("yoso:m=32,tau=8").spec
    assert facts["command"] == "attnbench run profiles/train-parity.toml"
    log = pd.read_csv(Path(__file__).resolve().parents[1] / "plots" / "train-parity.csv")
    last = log[log["backend"] == facts["backend"]].iloc[-1]
    assert facts["heldout_mask_loss"] == pytest.approx(last["heldout_mask_loss"])
    # context, not copying: half a nat below the unigram model at [MASK] positions
    assert facts["heldout_mask_loss"] < facts["heldout_unigram_mask_loss"] - 0.5
    assert model.config.rotary and model.config.width // model.config.heads == 64
    q, k, v = Inputs("model:yoso-mlm", 1, 1, 1).make(4096, 0, torch.float32, "cpu")
    assert q.shape == (1, 2, 4096, 64) and torch.isfinite(q).all()


@pytest.mark.parametrize(
    "args",
    [
        ["--inputs", "model:yoso-mlm", "--seq", "8192"],
        ["--inputs", "model:yoso-mlm:layer=4", "--seq", "64"],
        ["--inputs", "model:yoso-mlm:head=2", "--seq", "64"],
    ],
)
def test_cli_refuses_lengths_and_layers_the_model_lacks(args, tmp_path):
    result = CliRunner().invoke(
        cli.app, ["error", "--hashes", "8", *args, "--csv", str(tmp_path / "e.csv")]
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert not (tmp_path / "e.csv").exists()


def test_error_study_reads_the_trained_model(checkpoint, tmp_path):
    result = CliRunner().invoke(
        cli.app,
        ["error", "--inputs", "model:yoso-mlm", "--seq", "32,64", "--hashes", "8",
         "--trials", "1", "--mc-seeds", "1", "--csv", str(tmp_path / "e.csv")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(tmp_path / "e.csv")
    assert set(rows["seq"]) == {32, 64} and (rows["dim"] == 16).all()
    assert rows["inputs"].str.contains("contiguous text").all()


TRAIN_ARGS = ["--steps", "3", "--evals", "1", "--lengths", "32,64", "--tokens", "128",
              "--layers", "1", "--width", "16", "--heads", "1", "--hidden", "16"]  # fmt: skip


@pytest.fixture
def small_text(monkeypatch):
    monkeypatch.setattr("attnbench.nn.corpus.training_bytes", lambda: TEXT)
    monkeypatch.setattr("attnbench.nn.corpus.held_out_bytes", lambda: HELD)


def test_train_command_writes_checkpoint_log_and_plot(tmp_path, small_text):
    out, log, plot = tmp_path / "m.pt", tmp_path / "log.csv", tmp_path / "loss.png"
    args = ["--checkpoint", str(out), "--csv", str(log), "--plot", str(plot)]
    result = CliRunner().invoke(cli.app, ["train", *TRAIN_ARGS, *args])
    assert result.exit_code == 0, result.output
    assert "unigram" in result.output and plot.stat().st_size > 0
    frame = pd.read_csv(log)
    assert list(frame["step"]) == [1, 2, 3] and list(frame["n"]) == [32, 64, 32]
    model, facts = load(out)
    assert facts["steps"] == 3 and facts["training_bytes"] == len(TEXT)
    assert model.config.layers == 1 and model.config.rotary


def test_train_command_sets_backends_side_by_side(tmp_path, small_text):
    log, plot = tmp_path / "log.csv", tmp_path / "parity.png"
    out = tmp_path / "m.pt"
    result = CliRunner().invoke(
        cli.app,
        ["train", *TRAIN_ARGS, "--backends", "softmax,yoso:m=8,tau=8,backward=pairs",
         "--checkpoint", str(out), "--csv", str(log), "--plot", str(plot)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(log)
    assert list(frame["backend"].unique()) == [
        "softmax",
        get_backend("yoso:m=8,tau=8,backward=pairs").spec,
    ]
    assert (frame.groupby("backend")["step"].max() == 3).all()
    softmax_model, facts = load(tmp_path / "m-softmax.pt")
    assert facts["backend"] == "softmax" and softmax_model.config.tau is None
    assert len(list(tmp_path.glob("m-yoso-*.pt"))) == 1 and plot.stat().st_size > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "scram"], "has no backward pass"),
        (["--backends", "softmax,scram-mh"], "has no backward pass"),
        (["--lengths", "8192"], "at most 4096"),
        (["--width", "10", "--heads", "3"], "multiple of --heads"),
        (["--checkpoint", "model.bin"], "must end in"),
    ],
)
def test_train_command_refuses_bad_options(args, message, tmp_path):
    result = CliRunner().invoke(cli.app, ["train", *TRAIN_ARGS, *args], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.splitlines()) == 1


def test_interrupted_training_writes_nothing(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("attnbench.studies.train.train", interrupted)
    out = tmp_path / "m.pt"
    result = CliRunner().invoke(cli.app, ["train", *TRAIN_ARGS, "--checkpoint", str(out),
                                          "--csv", str(tmp_path / "l.csv"), "--plot",
                                          str(tmp_path / "p.png")])  # fmt: skip
    assert result.exit_code == 130
    assert list(tmp_path.iterdir()) == []


def test_corpus_holds_out_documentation_it_never_trains_on():
    held = held_out_bytes()
    assert len(held) > 3 * 4096  # three trials of the longest Fig. 8 input
    assert held not in training_bytes()


def _log_rows(backend: str, losses: list[float], step_seconds: float) -> list[dict]:
    """A training log's rows: an evaluation every step, the given held-out [MASK] losses."""
    scores = {"heldout_mask_accuracy": 0.5, "heldout_random_accuracy": 0.1,
              "heldout_kept_accuracy": 0.9, "heldout_unigram_mask_loss": 3.2,
              "heldout_unigram_mask_accuracy": 0.25, "heldout_copy_accuracy": 0.3,
              "heldout_seen_share": 0.18}  # fmt: skip
    return [
        {"backend": backend, "step": i + 1, "loss": 1.0, "seconds": (i + 1) * step_seconds,
         "threads": 2, "load1": 2.0, "heldout_mask_loss": loss, **scores}
        for i, loss in enumerate(losses)
    ]  # fmt: skip


def test_parity_table_times_each_backend_to_the_yoso_target(tmp_path):
    from attnbench.views.training import parity_table, target_loss, training_section

    log = pd.DataFrame(
        _log_rows("sdpa", [2.7, 2.0, 1.5], 3.0)
        + _log_rows("yoso:m=8,backward=proj", [3.0, 2.8, 2.6], 1.0)
        + _log_rows("yoso:m=8,backward=pairs", [2.9, 2.4, 2.2], 2.0)
    )
    # the worst of the YOSO runs' best losses: every YOSO run reaches it
    assert target_loss(log) == 2.6
    header, rows, _ = parity_table(log)
    reach = {row[0]: row[header.index("s to it")] for row in rows}
    steps = {row[0]: row[header.index("steps to 2.600")] for row in rows}
    assert steps == {"`sdpa`": "2", "`yoso:m=8,backward=proj`": "3",
                     "`yoso:m=8,backward=pairs`": "2"}  # fmt: skip
    assert reach == {"`sdpa`": "6", "`yoso:m=8,backward=proj`": "3",
                     "`yoso:m=8,backward=pairs`": "4"}  # fmt: skip
    assert [row[header.index("s/step")] for row in rows] == ["3.000", "1.000", "2.000"]
    path = tmp_path / "train-x.csv"
    log.to_csv(path, index=False)
    text = "\n".join(training_section(path))
    assert "unigram model 3.200" in text and "18.0%" in text


def test_plot_redraws_a_training_log(tmp_path):
    log = pd.DataFrame(_log_rows("sdpa", [2.7, 2.0], 3.0) + _log_rows("yoso:m=8", [3.0, 2.6], 1.0))
    path = tmp_path / "train-x.csv"
    log.to_csv(path, index=False)
    result = CliRunner().invoke(cli.app, ["plot", str(path), "--out", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p.png").stat().st_size > 0


def test_a_time_budget_stops_a_run_early_and_scores_it_there():
    _, log = train(tiny_run(steps=10, backend="softmax", max_seconds=0.0), TEXT, HELD)
    assert len(log) == 1 and "heldout_mask_loss" in log[0]
    _, whole = train(tiny_run(steps=10, backend="softmax"), TEXT, HELD)
    assert whole[0]["loss"] == log[0]["loss"]  # the same schedule, step for step


def test_train_step_cost_benchmark_times_each_backward(checkpoint, tmp_path, small_text):
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "train_step_cost.py"
    spec = importlib.util.spec_from_file_location("train_step_cost", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path, _ = checkpoint
    csv = tmp_path / "cost.csv"
    result = CliRunner().invoke(
        module.app,
        ["--checkpoint", str(path), "--backends", "yoso:m=8,tau=8,backward=proj,softmax",
         "--rounds", "2", "--n", "32", "--batch", "2", "--threads", "1", "--csv", str(csv)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(csv)
    assert len(rows) == 2 and (rows["median_s"] > 0).all() and rows["vs_first"].iloc[0] == 1.0
