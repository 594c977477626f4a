"""Edited or cut training logs in `plot` and `report`: one `error:` line naming the file,
exit code 2, no traceback, the log unchanged and nothing written.

A log with the held-out column but a missing or non-numeric column ended in a KeyError
deep in the figure or the report. The variants are the committed parity log's first rows,
each with one thing broken.
"""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench.views.training import NUMBERS, SCORES

runner = CliRunner()
LOG = Path(__file__).resolve().parents[1] / "plots" / "train-parity.csv"


def _good() -> pd.DataFrame:
    log = pd.read_csv(LOG)
    evaluated = log.dropna(subset=["heldout_mask_loss"]).index
    return log.loc[: evaluated[1]].copy()  # two evaluations of the first backend


def _text(frame: pd.DataFrame) -> str:
    out = io.StringIO()
    frame.to_csv(out, index=False)
    return out.getvalue()


def _variants() -> list:
    good = _good()
    cases = []
    for column in ("backend", *NUMBERS, *SCORES):
        cases.append(pytest.param(_text(good.drop(columns=[column])), id=f"no-{column}"))
    for column in NUMBERS:
        for value in ("fast", "inf", "-1", "nan", ""):
            bad = good.astype({column: object})
            bad.loc[bad.index[0], column] = value
            cases.append(pytest.param(_text(bad), id=f"{column}-{value or 'empty'}"))
    last = good.dropna(subset=["heldout_mask_loss"]).index[-1]
    for column in SCORES[1:]:
        for value in ("inf", "high", ""):
            bad = good.astype({column: object})
            bad.loc[last, column] = value
            cases.append(pytest.param(_text(bad), id=f"{column}-{value or 'empty'}"))
    no_scores = good.copy()
    no_scores["heldout_mask_loss"] = float("nan")
    cases.append(pytest.param(_text(no_scores), id="no-evaluation"))
    cases.append(pytest.param(_text(good.iloc[:0]), id="header-only"))
    cases.append(pytest.param(_text(good)[:-200] + '"\n', id="cut-in-a-quote"))
    return cases


def _refused(result, path: Path, before: bytes) -> None:
    assert result.exit_code == 2, result.output
    assert (
        "Traceback" not in result.output
        and result.exception is None
        or isinstance(result.exception, SystemExit)
    )
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and path.name in errors[0], result.output
    assert path.read_bytes() == before


@pytest.mark.parametrize("text", _variants())
def test_plot_refuses_a_broken_training_log(tmp_path, text):
    path = tmp_path / "train-log.csv"
    path.write_text(text)
    before = path.read_bytes()
    _refused(runner.invoke(cli.app, ["plot", str(path)]), path, before)
    assert not (tmp_path / "train-log.png").exists()


LOGS = [case for case in _variants() if case.id != "no-heldout_mask_loss"]  # else a table


@pytest.mark.parametrize("text", LOGS[:12])
def test_report_refuses_a_broken_training_log(tmp_path, text):
    plots, out = tmp_path / "plots", tmp_path / "out"
    plots.mkdir()
    path = plots / "train-log.csv"
    path.write_text(text)
    before = path.read_bytes()
    result = runner.invoke(cli.app, ["report", "--plots", str(plots), "--out", str(out)])
    _refused(result, path, before)
    assert not out.exists()


def test_the_committed_log_is_drawn(tmp_path):
    path = tmp_path / "train-log.csv"
    path.write_text(_text(_good()))
    result = runner.invoke(cli.app, ["plot", str(path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "train-log.png").stat().st_size > 0
