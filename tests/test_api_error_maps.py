"""`attnbench.error` and `attnbench.maps` as Python calls: the rows the commands give, the
commands' error texts, and maps' figure named --plot (--out still works, said once to be
deprecated)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from helpers import assert_figure_file, assert_ok, invoke, saved_figures

import attnbench
from attnbench.api.error import check_tau
from attnbench.api.maps import COLOURS, SCALES
from attnbench.errors import UsageError
from attnbench.results.read import read_rows
from attnbench.results.schema import is_missing

ERROR_TINY = ["--seq", "64", "--hashes", "8", "--trials", "1", "--mc-seeds", "1", "--dim", "8"]
ERROR_TINY += ["--heads", "1"]
MAPS_TINY = ["--grid", "1x16", "--dim", "4", "--backends", "softmax,yoso-e"]
# what differs between two runs of the same cases: when, where and by whom they ran
RUN_COLUMNS = ("run_id", "fingerprint", "worker", "node", "host", "hardware", "co_tenancy")
RUN_WORDS = ("time", "duration", "timestamp", "worker", "host")


def comparable(frame) -> list[dict]:
    """Each row's columns that two runs of the same seeded cases share, empty cells (and
    empty texts) as None and lists as tuples."""
    columns = [
        c for c in frame.columns
        if c not in RUN_COLUMNS and not any(word in c for word in RUN_WORDS)
    ]  # fmt: skip
    return [
        {c: _plain(value) for c, value in zip(columns, row, strict=True)}
        for row in frame[columns].itertuples(index=False)
    ]


def _plain(value):
    if isinstance(value, list | tuple):
        return tuple(float(x) for x in value)
    if is_missing(value) or value == "":  # a CSV's empty text cell
        return None
    return value.item() if hasattr(value, "item") else value


@pytest.fixture(scope="module")
def error_runs(tmp_path_factory):
    """The tiny error study from the command (its CSV read back) and from the API."""
    csv = tmp_path_factory.mktemp("error") / "e.csv"
    assert_ok(invoke("error", *ERROR_TINY, "--csv", csv))
    frame = attnbench.error(seq=[64], hashes=[8], trials=1, mc_seeds=1, dim=8, heads=1)
    return read_rows(csv), frame


def test_error_gives_the_rows_of_the_command(error_runs):
    cli_rows, api_rows = (comparable(frame) for frame in error_runs)
    assert len(api_rows) == len(cli_rows) > 0
    assert set(api_rows[0]) == set(cli_rows[0])
    for api, cli in zip(api_rows, cli_rows, strict=True):
        for column, value in api.items():
            if isinstance(value, float) and isinstance(cli[column], float):
                assert value == pytest.approx(cli[column], rel=1e-9, abs=0), column
            else:
                assert value == cli[column], column
    assert {row["status"] for row in api_rows} == {"ok"}
    assert {row["metric"] for row in api_rows} >= {"radian_vs_yoso_e"}


def test_error_writes_files_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    attnbench.error(seq="64", hashes="8", trials=1, mc_seeds=1, dim=8, heads=1)
    assert list(tmp_path.iterdir()) == []


def test_maps_gives_one_row_per_backend_with_the_map_the_command_draws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    saved = saved_figures(monkeypatch)
    assert_ok(invoke("maps", *MAPS_TINY, "--scale", "raw", "--plot", tmp_path / "m.png"))
    ((_, fig),) = saved
    drawn = [np.asarray(im.get_array()) for ax in fig.axes for im in ax.get_images()]
    frame = attnbench.maps(grid="1x16", dim=4, backends=["softmax", "yoso-e"])
    assert len(saved) == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["m.png"]
    assert list(frame["backend"].str.partition(":")[0]) == ["softmax", "yoso-e"]
    assert (frame["status"] == "ok").all() and (frame["metric"] == "attention_map").all()
    assert len(drawn) == len(frame) == 2
    for amap, image in zip(frame["array"], drawn, strict=True):
        assert amap.shape == (16, 16)
        np.testing.assert_array_equal(amap, image)
    np.testing.assert_allclose(frame["array"][0].sum(-1), np.ones(16), rtol=1e-6)  # softmax


def test_maps_draws_its_figure_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    saved = saved_figures(monkeypatch)
    attnbench.maps(grid="1x16", dim=4, backends="softmax", query=(0, 3))
    assert saved == [] and list(tmp_path.iterdir()) == []
    frame = attnbench.maps(grid="2x8", backends="softmax", query="1,3", plot="q.svg")
    assert_figure_file(tmp_path / "q.svg") and frame["array"][0].shape == (2, 8)


ERROR_MISTAKES = [
    (dict(seq="abc"), ["--seq", "abc"]),
    (dict(trials=0), ["--trials", "0"]),
    (dict(backends="softmax,nosuch"), ["--backends", "softmax,nosuch"]),
    (dict(tau=25), ["--tau", "25"]),
    (dict(mode="sideways"), ["--mode", "sideways"]),
    (dict(seq="64", grid="8x8"), ["--seq", "64", "--grid", "8x8"]),
    (dict(executor="nowhere"), ["--executor", "nowhere"]),
    (dict(resume=True), ["--resume"]),
    (dict(reference="nosuch"), ["--reference", "nosuch"]),
]
MAPS_MISTAKES = [
    (dict(scale="sum"), ["--scale", "sum"]),
    (dict(colour="sqrt"), ["--colour", "sqrt"]),
    (dict(grid="4x4,8x8"), ["--grid", "4x4,8x8"]),
    (dict(query="3"), ["--query", "3"]),
    (dict(grid="8x8", query="8,0"), ["--grid", "8x8", "--query", "8,0"]),
    (dict(backends="nosuch"), ["--backends", "nosuch"]),
    (dict(plot="m.txt"), ["--plot", "m.txt"]),
]


@pytest.mark.parametrize(
    ("command", "options", "args"),
    [("error", *case) for case in ERROR_MISTAKES] + [("maps", *case) for case in MAPS_MISTAKES],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_a_mistake_is_the_command_s_error_text(tmp_path, monkeypatch, command, options, args):
    """The API raises the UsageError the command prints as `error: <text>`, exit 2, and
    neither writes a file."""
    monkeypatch.chdir(tmp_path)
    tiny = ERROR_TINY if command == "error" else MAPS_TINY
    result = invoke(command, *tiny, *args)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    call = getattr(attnbench, command)
    kwargs = dict(seq="64", hashes="8", trials=1, mc_seeds=1, dim=8, heads=1)
    if command == "maps":
        kwargs = dict(grid="1x16", dim=4, backends="softmax,yoso-e")
    with pytest.raises(UsageError) as raised:
        call(**{**kwargs, **options})
    assert line == f"error: {' '.join(str(raised.value).split())}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "text", ["8", "1", "24", "auto", "AUTO", "0", "25", "-1", "x", "\uff13", ""]
)
def test_tau_is_read_before_torch_as_the_yoso_backends_read_it(text):
    from attnbench.backends.registry import tau_param

    try:
        expected = tau_param().parse(text)
    except ValueError as exc:
        with pytest.raises(UsageError, match=r"^--tau: bad value ") as raised:
            check_tau(text)
        assert str(raised.value) == f"--tau: bad value {text!r} ({exc})"
    else:
        assert check_tau(text) == expected


def test_the_figure_options_are_the_figure_s():
    from attnbench.views import maps

    assert (SCALES, COLOURS) == (maps.SCALES, maps.COLOURS)


@pytest.mark.parametrize("flag", ["--out", "-o", "--plot"])
def test_maps_names_its_figure_plot_and_out_still_works(tmp_path, flag):
    figure = tmp_path / "x.png"
    result = invoke("maps", *MAPS_TINY, flag, figure)
    assert_ok(result)
    assert_figure_file(figure)
    notices = [line for line in result.stderr.splitlines() if "deprecated" in line]
    if flag == "--plot":
        assert notices == []
    else:
        assert notices == [
            "attnbench: --out is deprecated and goes in the next release; use --plot"
        ]
    assert f"wrote {figure}" in " ".join(result.stdout.split())


def test_maps_refuses_out_and_plot_together(tmp_path):
    result = invoke("maps", *MAPS_TINY, "--out", tmp_path / "a.png", "--plot", tmp_path / "b.png")
    assert (
        result.exit_code == 2
        and "--out is the old name of --plot; give --plot alone" in result.stderr
    )
    assert list(tmp_path.iterdir()) == []


def test_error_isolate_is_deprecated_for_executor_isolated(tmp_path):
    csv = tmp_path / "e.csv"
    result = invoke("error", *ERROR_TINY, "--isolate", "--csv", csv)
    assert_ok(result)
    assert "--isolate is deprecated" in result.stderr
    assert set(read_rows(csv)["worker"].str.partition("/")[0]) == {"isolated"}
    assert not math.isnan(read_rows(csv)["value"].iloc[0])


def test_mistakes_are_reported_before_torch_loads():
    """A mistyped option costs no torch, numba, pandas or matplotlib import."""
    calls = ["error(seq='abc')", "error(tau=0)", "error(mode='x')", "error(csv='r.txt')"]
    calls += ["maps(scale='sum')", "maps(query='3')", "maps(plot='m.txt')"]
    script = "\n".join(
        [
            "import sys, attnbench",
            *(f"try: attnbench.{call}\nexcept attnbench.UsageError: pass" for call in calls),
            "print([m for m in ('torch', 'numba', 'pandas', 'matplotlib') if m in sys.modules])",
        ]
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
