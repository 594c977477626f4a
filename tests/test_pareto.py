"""Quality vs cost: the Pareto front, matching a time file with an error file, the command.

The end-to-end case runs real (tiny) time and error studies; nothing asserts on timings.
"""

from __future__ import annotations

import random

import pandas as pd
import pytest
from helpers import assert_figure_file, legend_texts, saved_figures, series
from matplotlib.colors import to_hex
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench.errors import UsageError
from attnbench.views.labels import backend_label
from attnbench.views.pareto import DEFAULT_METRIC, pareto_front, pareto_points, plot_pareto

runner = CliRunner()


def dominated_by_brute_force(points, i) -> bool:
    c, e = points[i]
    return any(
        (c2 <= c and e2 <= e) and (c2, e2) != (c, e) for j, (c2, e2) in enumerate(points) if j != i
    )


def test_front_of_a_known_set():
    costs = [1.0, 2.0, 3.0, 4.0, 2.5]
    errors = [0.9, 0.5, 0.6, 0.1, 0.5]
    # 3.0 loses to 2.0 (faster, closer); 2.5 ties 2.0 on error but is slower
    assert pareto_front(costs, errors) == [True, True, False, True, False]


def test_front_matches_the_definition_on_random_points():
    rng = random.Random(0)
    for _ in range(50):
        points = [(rng.choice([1, 2, 3, 4]), rng.choice([0.1, 0.2, 0.3])) for _ in range(7)]
        front = pareto_front(*map(list, zip(*points, strict=True)))
        assert front == [not dominated_by_brute_force(points, i) for i in range(len(points))]
        assert any(front)


def rows(study, metric, cases, **extra):
    """Result rows: (backend, seq, value) per case, one metric, status ok."""
    base = {"study": study, "metric": metric, "status": "ok", "batch": 1, "heads": 4, "dim": 64,
            "inputs": "clustered", "device": "cpu", "mode": "fwd", "dtype": "float32",
            "p10": None, "p90": None, "std": 0.0}  # fmt: skip
    return pd.DataFrame(
        [{**base, **extra, "backend": b, "seq": n, "value": v} for b, n, v in cases]
    )


TIMES = rows("time", "time_ms", [("a", 64, 1.0), ("b", 64, 2.0), ("c", 64, 3.0),
                                 ("a", 128, 2.0), ("b", 128, 5.0), ("d", 128, 9.0)])  # fmt: skip
ERRORS = rows("error", "radian_vs_softmax", [("a", 64, 0.5), ("b", 64, 0.1), ("c", 64, 0.2),
                                             ("a", 128, 0.6), ("b", 128, 0.1)])  # fmt: skip


def test_points_default_to_the_largest_shared_n_and_only_backends_in_both():
    points = pareto_points(TIMES, ERRORS)
    assert points["seq"].unique().tolist() == [128]
    assert points["backend"].tolist() == ["a", "b"]  # d has no error row
    assert points["front"].all()


def test_points_at_a_given_n_mark_the_dominated_backend():
    points = pareto_points(TIMES, ERRORS, seq=64).set_index("backend")
    assert points["time_ms"].to_dict() == {"a": 1.0, "b": 2.0, "c": 3.0}
    assert points["error"].to_dict() == {"a": 0.5, "b": 0.1, "c": 0.2}
    assert points["front"].to_dict() == {"a": True, "b": True, "c": False}


def test_cases_with_other_heads_do_not_match():
    other = rows("error", "radian_vs_softmax", [("a", 64, 0.5)], heads=2)
    with pytest.raises(UsageError, match="same batch, heads and dim"):
        pareto_points(TIMES, other, seq=64)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seq": 256}, "not in both files"),
        ({"metric": "captured_mass_vs_softmax"}, "lower is closer"),
        ({"metric": "radian"}, "lower is closer"),
        ({"metric": "tv_vs_softmax"}, "no successful tv_vs_softmax rows"),
    ],
)
def test_refuses_what_it_cannot_draw(kwargs, message):
    with pytest.raises(UsageError, match=message):
        pareto_points(TIMES, ERRORS, **kwargs)


def test_refuses_values_that_are_not_numbers_and_times_not_above_zero():
    """A text value once read as 'share no sequence length'; a time of 0 went on a log axis."""
    text = TIMES.astype({"value": object})
    text.loc[1, "value"] = "fast"
    with pytest.raises(UsageError, match="time_ms values that are not numbers .'fast' for b."):
        pareto_points(text, ERRORS)
    with pytest.raises(UsageError, match="a time of 0 ms for b; times must be above 0"):
        pareto_points(TIMES.assign(value=[1.0, 0.0, 3.0, 2.0, 5.0, 9.0]), ERRORS)


def test_refuses_several_cases_of_one_backend():
    twice = pd.concat([TIMES, TIMES.assign(mode="fwdbwd")])
    with pytest.raises(UsageError, match="several cases of"):
        pareto_points(twice, ERRORS, seq=64)


def test_the_figure_draws_each_point_with_its_bars_and_joins_the_front(tmp_path, monkeypatch):
    """A marker per backend at (median time, error) with its p10-p90 and ± std bars, blue
    circles on the front and grey squares off it, each named, the front a step line."""
    saved = saved_figures(monkeypatch)
    times = TIMES.assign(p10=TIMES["value"] * 0.8, p90=TIMES["value"] * 1.5)
    points = pareto_points(times, ERRORS.assign(std=0.01), seq=64)
    plot_pareto(points, tmp_path / "p.svg")
    ((path, fig),) = saved
    assert path == tmp_path / "p.svg"
    assert_figure_file(path)
    assert fig.get_suptitle().startswith("Approximation error vs runtime at n = 64\n")
    assert "cpu · float32 · fwd · clustered inputs" in fig.get_suptitle()
    (ax,) = fig.axes
    assert ax.get_xscale() == "log"
    assert ax.get_xlabel() == "time per call (ms), median with p10–p90 bar"
    assert ax.get_ylabel() == "mean angle to softmax, mean ± std over trials"
    drawn = {}
    for bars, text in zip(ax.containers, ax.texts, strict=True):
        marker, _, (xbar, ybar) = bars.lines
        ((x, y),) = marker.get_xydata()
        assert text.xy == (x, y)
        drawn[text.get_text()] = (x, y, marker.get_marker(), to_hex(marker.get_color()))
        assert xbar.get_segments()[0].ravel() == pytest.approx([0.8 * x, y, 1.5 * x, y])
        assert ybar.get_segments()[0].ravel() == pytest.approx([x, y - 0.01, x, y + 0.01])
    blue, grey = to_hex("C0"), to_hex("0.55")
    assert drawn == {
        "a": (1.0, 0.5, "o", blue), "b": (2.0, 0.1, "o", blue), "c": (3.0, 0.2, "s", grey),
    }  # fmt: skip
    front = "Pareto front (no backend both faster and closer)"
    assert series(ax) == {front: ([1.0, 2.0], [0.5, 0.1])}
    assert legend_texts(fig) == [front]  # no point is unstable: no hollow entry


BACKENDS = "softmax,yoso-8,performer:features=8,longformer:window=4,linformer:k=8"
SMALL = ["--heads", "1", "--dim", "8", "--inputs", "clustered", "--backends", BACKENDS]


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pareto")
    time_csv, error_csv = tmp / "t.csv", tmp / "e.csv"
    for args in (
        ["time", "--seq", "16,32", "--repeats", "2", "--min-time", "0", "--warmup", "1",
         "--csv", time_csv],
        ["error", "--seq", "32", "--trials", "2", "--mc-seeds", "2", "--csv", error_csv],
    ):  # fmt: skip
        result = runner.invoke(cli.app, [str(a) for a in args + SMALL])
        assert result.exit_code == 0, result.output
    return time_csv, error_csv


def test_pareto_command_draws_every_backend_in_both_files(studies, tmp_path, monkeypatch):
    time_csv, error_csv = studies
    png = tmp_path / "p.png"
    saved = saved_figures(monkeypatch)
    result = runner.invoke(cli.app, ["pareto", str(time_csv), str(error_csv), "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert_figure_file(png)
    assert "n=32" in result.output
    for label in ("softmax", "yoso-8", "performer", "longformer", "linformer"):
        assert label in result.output
    points = pareto_points(pd.read_csv(time_csv), pd.read_csv(error_csv))
    assert len(points) == 5
    exact = points.set_index("backend").loc["softmax", "error"]
    assert exact < 1e-5 and points["error"].max() > 0.01  # the approximations do differ
    ((path, fig),) = saved
    assert path == png
    assert fig.get_suptitle().startswith("Approximation error vs runtime at n = 32\n")
    drawn = {t.get_text(): t.xy for t in fig.axes[0].texts}
    expected = {backend_label(b): (t, e) for b, t, e in
                points[["backend", "time_ms", "error"]].itertuples(index=False)}  # fmt: skip
    assert drawn.keys() == expected.keys()
    assert all(drawn[label] == pytest.approx(expected[label]) for label in expected)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.csv", "{e}"], "no such file"),
        (["{t}", "{e}", "--n", "16"], "not in both files"),
        (["{t}", "{e}", "--metric", "captured_mass_vs_softmax"], "lower is closer"),
        (["{t}", "{e}", "--plot", "p.txt"], "p.txt"),
    ],
)
def test_pareto_mistakes_are_one_line_errors(studies, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    time_csv, error_csv = studies
    argv = [a.format(t=time_csv, e=error_csv) for a in args]
    result = runner.invoke(cli.app, ["pareto", *argv])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_a_point_whose_time_was_flagged_unstable_is_drawn_hollow(tmp_path, monkeypatch):
    saved = saved_figures(monkeypatch)
    times = TIMES.assign(stable=[True, False, True, True, True, True])  # b at n=64
    points = pareto_points(times, ERRORS, seq=64)
    assert points.set_index("backend")["unstable"].to_dict() == {"a": False, "b": True, "c": False}
    plot_pareto(points, tmp_path / "p.png")
    ((_, fig),) = saved
    ax = fig.axes[0]
    faces = {line.get_markerfacecolor() for line in ax.get_lines() if len(line.get_xdata())}
    assert "white" in faces
    assert any(label.startswith("hollow: flagged unstable") for label in legend_texts(fig))
    right = ax.get_xlim()[1]
    assert right >= 2 * points["time_ms"].max()  # room for the last label


def test_a_magnitude_error_leaves_out_backends_with_unit_output_rows():
    """YOSO's outputs are unit rows: its relative Frobenius error against softmax is no
    measure of closeness, so it is not drawn as one."""
    yoso = "yoso:m=8,tau=8,seed=0"
    times = rows("time", "time_ms", [("sdpa", 64, 1.0), (yoso, 64, 0.5), ("performer", 64, 0.7)])
    metric = "rel_frobenius_vs_softmax"
    errors = rows("error", metric, [("sdpa", 64, 0.0), (yoso, 64, 0.9), ("performer", 64, 0.3)])
    points = pareto_points(times, errors, metric=metric)
    assert points["backend"].tolist() == ["performer", "sdpa"]
    assert points.attrs["inapplicable"] == [yoso]
    radian = errors.assign(metric="radian_vs_softmax")
    assert yoso in pareto_points(times, radian)["backend"].tolist()
    with pytest.raises(UsageError, match="does not apply to"):
        pareto_points(times[times["backend"] == yoso], errors, metric=metric)


def test_a_zero_error_point_is_drawn_whole_inside_the_axes(tmp_path, monkeypatch):
    """An exact backend (sdpa, error 0) was drawn on the frame's bottom edge, half cut off."""
    saved = saved_figures(monkeypatch)
    times = rows("time", "time_ms", [("sdpa", 64, 1.0), ("a", 64, 0.5), ("b", 64, 0.7)])
    errors = rows("error", DEFAULT_METRIC, [("sdpa", 64, 0.0), ("a", 64, 0.9), ("b", 64, 0.3)])
    plot_pareto(pareto_points(times, errors), tmp_path / "p.png")
    ((_, fig),) = saved
    fig.canvas.draw()
    ax = fig.axes[0]
    marker = next(ln for ln in ax.get_lines() if list(ln.get_ydata()) == [0.0])
    radius = marker.get_markersize() / 2 * fig.dpi / 72  # points to pixels
    _, y = ax.transData.transform((1.0, 0.0))
    assert y - radius >= ax.get_window_extent().y0
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_position()[1] < 0]
    assert all(label == "" for label in labels)  # no negative error on the axis
