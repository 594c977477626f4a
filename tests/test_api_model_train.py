"""`attnbench.model` and `attnbench.train` as Python calls: the rows of their commands, the
commands' error texts as `UsageError`, files written only when asked, and the training
command's old spellings of its outputs (--log, --out) still working, each said deprecated.

Both studies are tiny (one layer, width 16); nothing asserts on timings. The training text
is replaced by a short one so evaluations take no time; training is seeded, so the losses
of the call and of the command agree exactly.
"""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import assert_ok, invoke

import attnbench
from attnbench.api.train import TrainingProgress
from attnbench.errors import UsageError
from attnbench.results.read import read_rows

MODEL = dict(seq=64, backends="softmax", layers=1, width=16, hidden=16, heads=2, steps=1,
             warmup=0, max_batch=2, memory_budget="64MiB")  # fmt: skip
TRAIN = dict(backends="softmax", steps=2, tokens=128, lengths=64, layers=1, width=16, heads=2,
             hidden=16, evals=1)  # fmt: skip
# the columns a run measures (times, memory, the host's state) or stamps (the run's id)
MEASURED = {"value", "p10", "p90", "std", "samples", "stable", "spread", "run_id", "cpu_wait",
            "load_before", "load_after", "cpu_mhz_before", "cpu_mhz_after", "co_tenancy",
            "seconds", "load1"}  # fmt: skip
TEXT = b"the quick brown fox jumps over the lazy dog. " * 40
HELD = b"a lazy dog and a quick fox. " * 10


def argv(options: dict) -> list[str]:
    return [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def small_text(monkeypatch):
    monkeypatch.setattr("attnbench.nn.corpus.training_bytes", lambda: TEXT)
    monkeypatch.setattr("attnbench.nn.corpus.held_out_bytes", lambda: HELD)


def same_rows(api: pd.DataFrame, cli: pd.DataFrame) -> None:
    """The rows agree on every column that is not measured (a file's empty cell: an empty
    text in memory)."""
    kept = [c for c in cli.columns if c not in MEASURED]
    assert list(api.columns) == list(cli.columns)
    left, right = (text(frame[kept]) for frame in (api, cli))
    pd.testing.assert_frame_equal(left, right)


def text(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.astype(object).where(frame.notna(), "").astype(str).reset_index(drop=True)


def test_model_call_gives_the_commands_rows_and_writes_nothing(workdir):
    rows = attnbench.model(**{**MODEL, "seq": [64], "backends": ["softmax"]})
    assert list(workdir.iterdir()) == []
    assert_ok(invoke("model", *argv(MODEL), "--csv", "m.csv"))
    command = read_rows("m.csv")
    same_rows(rows, command)
    batch = rows[rows["metric"] == "batch"]["value"]
    assert list(batch) == list(command[command["metric"] == "batch"]["value"]) == [2.0]


def test_model_executor_local_is_said_deprecated_once(workdir):
    result = invoke("model", *argv(MODEL), "--executor", "local")
    assert_ok(result)
    said = [line for line in result.stderr.splitlines() if "deprecated" in line]
    assert said == ["attnbench: --executor local is deprecated and goes in the next release; "
                    "use --executor in-process"]  # fmt: skip


def test_train_call_gives_the_commands_log_and_reports_its_progress(workdir, small_text):
    seen = []

    class Recorder(TrainingProgress):
        def backend(self, label, steps):
            seen.append(("backend", label, steps))

        def step(self, entry):
            seen.append(("step", entry["step"]))

        def ended(self, label, entries):
            seen.append(("ended", label, len(entries)))

    log = attnbench.train(**{**TRAIN, "lengths": [64]}, progress=Recorder())
    assert list(workdir.iterdir()) == []
    assert seen == [("backend", "softmax", 2), ("step", 1), ("step", 2), ("ended", "softmax", 2)]
    assert_ok(invoke("train", *argv(TRAIN), "--plot", "t.png"))
    command = pd.read_csv("train.csv")
    same_rows(log, command)
    for column in ("loss", "heldout_mask_loss", "heldout_accuracy"):  # seeded: equal
        pd.testing.assert_series_equal(log[column], command[column])


def test_the_log_is_rewritten_whole_as_each_backend_ends(workdir, small_text, monkeypatch):
    import attnbench.studies.train as study

    real, started = study.train, []

    def second_interrupted(run, *args):
        started.append(run.backend.spec)
        if len(started) == 2:
            raise KeyboardInterrupt
        return real(run, *args)

    monkeypatch.setattr(study, "train", second_interrupted)
    with pytest.raises(KeyboardInterrupt):
        attnbench.train(**{**TRAIN, "backends": "softmax,sdpa"}, csv="t.csv", checkpoint="m.pt")
    assert started == ["softmax", "sdpa"]
    assert sorted(p.name for p in workdir.iterdir()) == ["m-softmax.pt", "t.csv"]
    kept = pd.read_csv("t.csv")
    assert list(kept["backend"]) == ["softmax", "softmax"] and list(kept["step"]) == [1, 2]


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("model", {"width": 15, "heads": 2}),
        ("model", {"max_batch": 0}),
        ("model", {"memory_budget": "lots"}),
        ("model", {"executor": "dask"}),
        ("train", {"backends": "softmax,scram"}),
        ("train", {"width": 10, "heads": 3}),
        ("train", {"evals": 3, "steps": 2}),
        ("train", {"lr": -1.0}),
        ("train", {"tokens": 32}),
        ("train", {"checkpoint": "m.bin"}),
    ],
)
def test_a_bad_option_is_a_usage_error_with_the_commands_text(workdir, command, options):
    base = MODEL if command == "model" else TRAIN
    with pytest.raises(UsageError) as caught:
        getattr(attnbench, command)(**{**base, **options})
    result = invoke(command, *argv({**base, **options}))
    assert result.exit_code == 2 and result.stderr == f"error: {caught.value}\n"
    assert list(workdir.iterdir()) == []


def test_train_keeps_its_old_output_spellings_said_deprecated_once_each(workdir, small_text):
    result = invoke("train", *argv(TRAIN), "--log", "x.csv", "--out", "m.pt", "--plot", "t.png")
    assert_ok(result)
    said = [line for line in result.stderr.splitlines() if "deprecated" in line]
    assert said == [
        "attnbench: --out is deprecated and goes in the next release; use --checkpoint",
        "attnbench: --log is deprecated and goes in the next release; use --csv",
    ]
    assert sorted(p.name for p in workdir.iterdir()) == ["m.pt", "t.png", "x.csv"]
    assert [line for line in result.stdout.splitlines() if line.startswith("wrote")] == [
        "wrote m.pt", "wrote x.csv", "wrote t.png"
    ]  # fmt: skip


def test_train_writes_csv_and_checkpoint_by_their_names(workdir, small_text):
    result = invoke("train", *argv(TRAIN), "--csv", "y.csv", "--checkpoint", "c/m.pt")
    assert_ok(result)
    assert "deprecated" not in result.stderr
    assert (workdir / "c" / "m.pt").is_file() and (workdir / "train.png").is_file()
    assert list(pd.read_csv("y.csv")["step"]) == [1, 2]


def test_an_old_and_a_new_spelling_together_are_refused(workdir):
    result = invoke("train", *argv(TRAIN), "--log", "x.csv", "--csv", "y.csv")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == (
        "error: --log is the old name of --csv; give --csv alone"
    )
    assert list(workdir.iterdir()) == []
