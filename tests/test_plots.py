"""Figures render from tidy rows in every supported format and refuse bad input clearly."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from helpers import assert_figure_file, legend_texts, saved_figures, series
from matplotlib.colors import to_hex

from attnbench.results.paths import PLOT_SUFFIXES
from attnbench.results.read import read_rows
from attnbench.results.schema import Row, rows_frame
from attnbench.views.figures import case_parts, ok_rows
from attnbench.views.plots import error_figure, plot_results

SEQS = (256, 512, 1024)


def _row(study, backend, seq, metric, value, **kw) -> Row:
    base = dict(
        study=study,
        backend=backend,
        impl="torch",
        device="cpu",
        dtype="float32",
        mode="fwd",
        inputs="random",
        batch=2,
        heads=4,
        seq=seq,
        dim=64,
        metric=metric,
        value=value,
    )
    return Row(**{**base, **kw})


def _time_rows() -> list[Row]:
    rows = []
    for backend, scale in (("sdpa", 1.0), ("yoso:m=8,tau=8,seed=0", 0.5)):
        for seq in SEQS:
            t = scale * seq / 100
            rows.append(
                _row(
                    "time",
                    backend,
                    seq,
                    "time_ms",
                    t,
                    unit="ms",
                    p10=0.9 * t,
                    p90=1.2 * t,
                    count=10,
                )
            )
            rows.append(_row("time", backend, seq, "peak_mib", scale * seq / 10, unit="MiB"))
            rows.append(_row("time", backend, seq, "first_call_ms", 10 * t, unit="ms"))
    # Zero memory (not measured) must not break the log axis.
    rows.append(_row("time", "softmax", 256, "peak_mib", 0.0, unit="MiB"))
    rows.append(_row("time", "softmax", 256, "time_ms", 3.0, unit="ms"))
    rows.append(_row("time", "sdpa", 2048, "time_ms", None, status="oom", reason="out of memory"))
    return rows


def _error_rows(with_softmax: bool = True) -> list[Row]:
    rows = []
    for m in (32, 8, 16):
        backend = f"yoso:m={m},tau=8,seed=0"
        for seq in SEQS:
            rows.append(
                _row("error", backend, seq, "radian_vs_yoso_e", 1 / m, std=0.1 / m, count=5)
            )
            if with_softmax:
                rows.append(
                    _row("error", backend, seq, "radian_vs_softmax", 0.5 + 1 / m, std=0.05, count=5)
                )
                rows.append(
                    _row("error", backend, seq, "rel_frobenius_vs_softmax", 0.3, std=0.01, count=5)
                )
    return rows


def _drawn(monkeypatch, tmp_path, rows, suffix=".png", env=None):
    """The figure plot_results saves of `rows`, after checking it wrote its file."""
    saved = saved_figures(monkeypatch)
    path = tmp_path / f"figure{suffix}"
    plot_results(rows if isinstance(rows, pd.DataFrame) else rows_frame(rows), path, env)
    ((written, fig),) = saved
    assert written == path
    assert_figure_file(path)
    return fig


def _band(ax, color) -> tuple[float, float]:
    """The lowest and highest y of the shaded band drawn in `color` on `ax`."""
    (band,) = [c for c in ax.collections if to_hex(c.get_facecolor()[0]) == to_hex(color)]
    ys = [y for path in band.get_paths() for _, y in path.vertices]
    return min(ys), max(ys)


def _colours(ax) -> dict[str, str]:
    """label -> colour of each labelled line of `ax`."""
    return {
        line.get_label(): to_hex(line.get_color())
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }


CASE = "cpu · float32 · fwd · random inputs · batch×heads = 2×4 · dim = 64"


@pytest.mark.parametrize("suffix", PLOT_SUFFIXES)
def test_time_figure_every_format(monkeypatch, tmp_path, suffix):
    """Runtime and memory panels, a line per backend through its rows' medians, a p10-p90
    band per timed backend, the failed case and the dropped zero named."""
    fig = _drawn(monkeypatch, tmp_path, _time_rows(), suffix)
    assert [p.name for p in tmp_path.iterdir()] == [f"figure{suffix}"]  # no temp file left
    assert fig.get_suptitle() == f"Runtime and peak memory vs sequence length\n{CASE}"
    runtime, memory = fig.axes
    assert [runtime.get_title(), memory.get_title()] == ["runtime", "peak memory"]
    assert runtime.get_ylabel() == "time (ms), median with p10–p90 band"
    assert memory.get_ylabel() == "peak memory (MiB)"
    for ax in (runtime, memory):
        assert ax.get_xlabel() == "sequence length n"
        assert ax.get_xscale() == ax.get_yscale() == "log"
    seqs = [float(n) for n in SEQS]
    assert series(runtime) == {
        "yoso-8": (seqs, [0.5 * n / 100 for n in SEQS]),
        "sdpa": (seqs, [n / 100 for n in SEQS]),
        "softmax": ([256.0], [3.0]),
    }
    assert series(memory) == {  # softmax's 0 MiB is off the log axis, and said so
        "yoso-8": (seqs, [0.5 * n / 10 for n in SEQS]),
        "sdpa": (seqs, [n / 10 for n in SEQS]),
    }
    assert [t.get_text() for t in memory.texts] == ["1 point(s) ≤ 0 MiB not shown (log axis)"]
    colours = _colours(runtime)
    assert len(set(colours.values())) == 3
    assert _colours(memory) == {k: colours[k] for k in ("yoso-8", "sdpa")}  # same in each panel
    assert len(runtime.collections) == 2 and not memory.collections  # softmax has no p10/p90
    assert _band(runtime, colours["sdpa"]) == pytest.approx((0.9 * 2.56, 1.2 * 10.24))
    assert _band(runtime, colours["yoso-8"]) == pytest.approx((0.9 * 1.28, 1.2 * 5.12))
    assert legend_texts(fig) == ["yoso-8", "sdpa", "softmax", "out of memory"]


M_LABELS = ["m=8", "m=16", "m=32"]


@pytest.mark.parametrize("suffix", [".png", ".svg"])
@pytest.mark.parametrize("with_softmax", [True, False])
def test_error_figure(monkeypatch, tmp_path, suffix, with_softmax):
    """A panel per reference, a line per m through the rows' means with a ± std band, and
    the error-vs-m panel last."""
    fig = _drawn(monkeypatch, tmp_path, _error_rows(with_softmax), suffix)
    assert fig.get_suptitle() == f"Approximation error vs sequence length\n{CASE}"
    *by_n, by_m = fig.axes
    targets = ["YOSO-E", "exact softmax"] if with_softmax else ["YOSO-E"]
    assert [ax.get_title() for ax in by_n] == [f"vs {t}, mean ± std over trials" for t in targets]
    assert [ax.get_ylabel() for ax in by_n] == [f"mean angle to {t} (rad)" for t in targets]
    assert by_m.get_title() == "vs m, log-log, a line per n"
    assert by_m.get_xlabel() == "number of hashes m"
    seqs = [float(n) for n in SEQS]
    offsets = [0.0, 0.5] if with_softmax else [0.0]
    for ax, offset in zip(by_n, offsets, strict=True):
        assert ax.get_xlabel() == "sequence length n"
        assert series(ax) == {
            f"m={m}": (seqs, [offset + 1 / m] * len(SEQS)) for m in (8, 16, 32)
        }  # fmt: skip
        assert len(ax.collections) == 3  # a ± std band per line
        spread = 0.1 / 8 if offset == 0 else 0.05
        assert _band(ax, _colours(ax)["m=8"]) == pytest.approx(
            (offset + 1 / 8 - spread, offset + 1 / 8 + spread)
        )
    assert legend_texts(fig) == M_LABELS
    assert fig.legends[0].get_title().get_text() == "m=… stands for yoso:m=…,tau=8,seed=0"


def test_error_figure_with_only_softmax_rows(monkeypatch, tmp_path):
    """No angle to YOSO-E: one panel vs softmax, and no error-vs-m panel."""
    rows = [r for r in _error_rows() if r.metric != "radian_vs_yoso_e"]
    fig = _drawn(monkeypatch, tmp_path, rows)
    (ax,) = fig.axes
    assert ax.get_title() == "vs exact softmax, mean ± std over trials"
    assert ax.get_ylabel() == "mean angle to exact softmax (rad)"
    seqs = [float(n) for n in SEQS]
    assert series(ax) == {f"m={m}": (seqs, [0.5 + 1 / m] * len(SEQS)) for m in (8, 16, 32)}
    assert legend_texts(fig) == M_LABELS


def test_varying_case_columns_still_plot(monkeypatch, tmp_path):
    """A column that varies leaves the title and names each line's case in its label."""
    rows = _time_rows() + [_row("time", "sdpa", s, "time_ms", s / 50, dim=128) for s in SEQS]
    fig = _drawn(monkeypatch, tmp_path, rows)
    assert "dim" not in fig.get_suptitle() and "batch×heads = 2×4" in fig.get_suptitle()
    seqs = [float(n) for n in SEQS]
    lines = series(fig.axes[0])
    assert lines["sdpa (dim=128)"] == (seqs, [n / 50 for n in SEQS])
    assert lines["sdpa (dim=64)"] == (seqs, [n / 100 for n in SEQS])
    assert set(lines) == {"yoso-8 (dim=64)", "sdpa (dim=128)", "sdpa (dim=64)", "softmax (dim=64)"}
    assert legend_texts(fig) == [*lines, "out of memory"]


def _drawing(fig) -> tuple:
    """What a figure shows: its title, and each panel's titles, labels and lines."""
    panels = tuple(
        (ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), series(ax)) for ax in fig.axes
    )  # fmt: skip
    return fig.get_suptitle(), panels, legend_texts(fig)


def test_csv_round_trip(monkeypatch, tmp_path):
    """A figure drawn from a saved CSV is the one drawn from the rows themselves."""
    for name, rows in (("time", _time_rows()), ("error", _error_rows())):
        csv = tmp_path / f"{name}.csv"
        rows_frame(rows).to_csv(csv, index=False)
        direct = _drawing(_drawn(monkeypatch, tmp_path, rows, ".svg"))
        assert _drawing(_drawn(monkeypatch, tmp_path, read_rows(csv), ".svg")) == direct


def test_bad_extension(tmp_path):
    with pytest.raises(ValueError, match=r"\.png"):
        plot_results(rows_frame(_time_rows()), tmp_path / "time.jpg")
    assert not list(tmp_path.iterdir())


def test_mixed_studies(tmp_path):
    df = rows_frame(_time_rows() + _error_rows())
    with pytest.raises(ValueError, match="error, time"):
        plot_results(df, tmp_path / "mixed.png")


def test_only_failed_rows(tmp_path):
    rows = [_row("time", "sdpa", s, "time_ms", None, status="oom") for s in SEQS]
    rows.append(_row("time", "sdpa", 4096, "time_ms", 1.0, status="error"))
    with pytest.raises(ValueError, match="no successful rows to plot"):
        plot_results(rows_frame(rows), tmp_path / "failed.png")
    assert not list(tmp_path.iterdir())


def test_study_without_plottable_metric(tmp_path):
    rows = [_row("time", "sdpa", s, "first_call_ms", 1.0) for s in SEQS]
    with pytest.raises(ValueError, match="time_ms"):
        plot_results(rows_frame(rows), tmp_path / "time.png")


def test_legend_uses_the_registry_short_label():
    from attnbench.views.labels import short_labels

    spec = "yoso:m=32,tau=8,seed=0,hash=auto,resample=call,impl=numba,backward=proj,bound=256"
    labels, _ = short_labels([spec, "sdpa", "not-a-backend:x=1"])
    assert labels == {spec: "yoso-32", "sdpa": "sdpa", "not-a-backend:x=1": "not-a-backend:x=1"}


@pytest.mark.parametrize(
    ("inputs", "title"),
    [("random 16x16", "random image inputs"), ("image:camera 16x16", "image:camera inputs")],
)
def test_grid_inputs_in_the_title_without_their_size(inputs, title):
    """The grid is the x axis, not a case: one title part however many sizes there are."""
    rows = rows_frame(
        [
            _row("time", "sdpa", n, "time_ms", 1.0, inputs=inputs.replace("16x16", f"{h}x{h}"))
            for n, h in ((256, 16), (1024, 32))
        ]  # fmt: skip
    )
    parts, varying = case_parts(ok_rows(rows))
    assert title in parts and "inputs" not in varying


def _figure_of(monkeypatch, tmp_path, rows, env=None):
    """The figure plot_results saves of `rows`."""
    return _drawn(monkeypatch, tmp_path, rows, env=env)


def test_subtitle_names_device_threads_and_inputs(monkeypatch, tmp_path):
    rows = _time_rows()
    for r in rows:
        r.device_name, r.threads = "AMD EPYC", 2
    title = _figure_of(monkeypatch, tmp_path, rows)._suptitle.get_text()
    assert "cpu (AMD EPYC)" in title and "2 CPU threads" in title and "random inputs" in title


def test_subtitle_takes_device_and_threads_from_the_env_record(monkeypatch, tmp_path):
    env = {"device_name": "NVIDIA H100", "threads": 16}
    title = _figure_of(monkeypatch, tmp_path, _time_rows(), env)._suptitle.get_text()
    assert "cpu (NVIDIA H100)" in title and "16 CPU threads" in title


def test_skipped_and_oom_cases_are_marked_with_a_legend_entry(monkeypatch, tmp_path):
    rows = _time_rows()  # sdpa at 2048 ran out of memory
    rows.append(_row("time", "softmax", 2048, "time_ms", None, status="skipped", reason="big"))
    fig = _figure_of(monkeypatch, tmp_path, rows)
    runtime = fig.axes[0]
    marks = {
        line.get_marker(): list(line.get_xdata())
        for line in runtime.get_lines()
        if line.get_linestyle() == "None" and line.get_marker() in ("x", "+")
    }
    assert marks == {"+": [2048], "x": [2048]}
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "out of memory" in legend and "skipped (unsupported, or would not fit)" in legend
    assert 2048 in runtime.get_xticks()


def test_a_case_that_succeeded_on_a_rerun_is_not_marked(monkeypatch, tmp_path):
    rows = [r for r in _time_rows() if r.status == "ok"]
    rows.insert(0, _row("time", "sdpa", 512, "time_ms", None, status="oom"))
    fig = _figure_of(monkeypatch, tmp_path, rows)
    assert not [ln for ln in fig.axes[0].get_lines() if ln.get_marker() in ("x", "+")]
    assert "out of memory" not in [t.get_text() for t in fig.legends[0].get_texts()]


def test_grid_studies_label_the_x_axis_by_image_size(monkeypatch, tmp_path):
    rows = [
        _row("time", "sdpa", h * h, "time_ms", h / 10, inputs=f"blobs {h}x{h}", grid_h=h,
             grid_w=h)
        for h in (16, 32, 64)
    ]  # fmt: skip
    ax = _figure_of(monkeypatch, tmp_path, rows).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16x16", "32x32", "64x64"]
    assert "image size" in ax.get_xlabel()


def test_time_panel_marks_the_mean_of_the_kept_samples(monkeypatch, tmp_path):
    rows = [_row("time", "sdpa", n, "time_ms", 2.0, samples=[1.0, 2.0, 6.0]) for n in SEQS]
    fig = _figure_of(monkeypatch, tmp_path, rows)
    (dashes,) = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "_"]
    assert list(dashes.get_ydata()) == [3.0, 3.0, 3.0]


def test_time_table_shows_the_mean_of_the_kept_samples_beside_the_median():
    from rich.console import Console

    from attnbench.views.tables import time_table

    row = _row("time", "sdpa", 256, "time_ms", 2.0, p10=1.0, p90=6.0, samples=[1.0, 2.0, 6.0])
    console = Console(width=200, record=True)
    console.print(time_table(rows_frame([row]), "sdpa", 0.1))
    text = console.export_text()
    header = [ln.split() for ln in text.splitlines() if "backend" in ln][0]
    assert header[:4] == ["backend", "n", "median", "mean"]
    line = next(ln for ln in text.splitlines() if "256" in ln)
    assert line.split()[:6] == ["sdpa", "256", "2", "ms", "3", "ms"]  # median, mean


def test_error_figure_adds_error_vs_m_with_the_inverse_sqrt_line():
    rows = _error_rows() + [
        _row("error", f"yoso:m={m},tau=8,seed=0", SEQS[-1], "radian_slope_log2n_vs_yoso_e", 0.01)
        for m in (8, 16, 32)
    ]
    fig = error_figure(ok_rows(rows_frame(rows)))
    try:
        panel = fig.axes[2]  # after the panels vs YOSO-E and vs softmax
        assert panel.get_xscale() == "log" and panel.get_yscale() == "log"
        lines = {line.get_label(): line for line in panel.lines}
        assert set(lines) == {f"n={n}" for n in SEQS} | {"∝ 1/√m"}
        for n in SEQS:  # the rows' errors are 1/m at every n
            m, err = lines[f"n={n}"].get_data()
            assert list(m) == [8, 16, 32] and list(err) == [1 / 8, 1 / 16, 1 / 32]
        m, ref = lines["∝ 1/√m"].get_data()
        scaled = [y * x**0.5 for x, y in zip(m, ref, strict=True)]
        assert max(scaled) - min(scaled) < 1e-12  # c / sqrt(m)
        # the slope rows are no points of the panels vs n
        assert all(len(line.get_xdata()) == len(SEQS) for line in fig.axes[0].lines)
    finally:
        plt.close(fig)


def test_no_error_vs_m_panel_with_one_m():
    rows = [r for r in _error_rows(with_softmax=False) if r.backend.startswith("yoso:m=8,")]
    fig = error_figure(ok_rows(rows_frame(rows)))
    try:
        assert len(fig.axes) == 1
    finally:
        plt.close(fig)


def test_error_cases_that_did_not_run_are_marked(monkeypatch, tmp_path):
    rows = _error_rows(with_softmax=False)
    for seq, status in ((1024, "oom"), (2048, "error")):
        rows.append(_row("error", "yoso-e:tau=8", seq, "radian_vs_yoso_e", None, status=status))
    fig = _figure_of(monkeypatch, tmp_path, rows)
    marks = {
        line.get_marker(): list(line.get_xdata())
        for line in fig.axes[0].get_lines()
        if line.get_linestyle() == "None" and line.get_marker() in ("x", "+", "1")
    }
    assert marks and sorted(n for xs in marks.values() for n in xs) == [1024, 2048]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "out of memory" in legend


def test_unstable_points_are_drawn_hollow_and_named_in_the_legend(monkeypatch, tmp_path):
    """A run whose every case was flagged plotted as a clean result."""
    rows = [r for r in _time_rows() if r.status == "ok"]
    for r in rows:
        r.stable = not (r.metric == "time_ms" and r.backend == "sdpa" and r.seq == SEQS[-1])
    fig = _figure_of(monkeypatch, tmp_path, rows)
    hollow = [ln for ln in fig.axes[0].get_lines() if ln.get_markerfacecolor() == "white"]
    assert [list(ln.get_xdata()) for ln in hollow] == [[SEQS[-1]]]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(text.startswith("hollow: flagged unstable") for text in legend)
    for r in rows:
        r.stable = True
    fig = _figure_of(monkeypatch, tmp_path, rows)
    assert not [ln for ln in fig.axes[0].get_lines() if ln.get_markerfacecolor() == "white"]


def test_a_sequence_study_does_not_speak_of_images(monkeypatch, tmp_path):
    ax = _figure_of(monkeypatch, tmp_path, _time_rows()).axes[0]
    assert ax.get_xlabel() == "sequence length n"


@pytest.mark.parametrize(
    ("reasons", "words"),
    [
        (
            ["batch capped at --max-batch 2"] * 2,
            "batch 2: capped at --max-batch 2, not the largest",
        ),
        (["", ""], "largest batch that fits, batch 2"),
    ],
)
def test_model_figure_says_whether_the_batch_was_capped(monkeypatch, tmp_path, reasons, words):
    """The committed Fig. 7 said "largest batch that fits" while every row was capped."""
    rows = [
        _row("model", "sdpa", seq, "time_per_instance_ms", seq / 10.0, reason=reason,
             mode="train")
        for seq, reason in zip((512, 1024), reasons, strict=True)
    ]  # fmt: skip
    title = _figure_of(monkeypatch, tmp_path, rows)._suptitle.get_text()
    assert words in title


def test_model_figure_draws_an_unstable_time_hollow_and_names_it(monkeypatch, tmp_path):
    """A noise-dominated step time drawn like a clean one made time per instance seem to
    fall with n."""
    rows = [
        _row("model", "sdpa", seq, metric, seq / 10.0, mode="train",
             stable=None if metric == "peak_mib_per_instance" else seq != 1024)
        for seq in (512, 1024)
        for metric in ("time_per_instance_ms", "peak_mib_per_instance")
    ]  # fmt: skip
    fig = _figure_of(monkeypatch, tmp_path, rows)
    time_panel, memory_panel = fig.axes[:2]
    hollow = [ln for ln in time_panel.get_lines() if ln.get_markerfacecolor() == "white"]
    assert [list(ln.get_xdata()) for ln in hollow] == [[1024]]
    assert not [ln for ln in memory_panel.get_lines() if ln.get_markerfacecolor() == "white"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(text.startswith("hollow: flagged unstable") for text in legend)


def test_error_table_leaves_out_magnitude_errors_of_unit_row_backends():
    """YOSO's relative Frobenius and max-abs errors were printed as if they measured it."""
    from rich.console import Console

    from attnbench.views.tables import error_table

    yoso = "yoso:m=8,tau=8,seed=0"
    rows = [
        _row("error", yoso, 64, "radian_vs_softmax", 0.3, std=0.0),
        _row("error", yoso, 64, "rel_frobenius_vs_softmax", 0.9, std=0.0),
        _row("error", yoso, 64, "mc_bias_vs_softmax", 0.5, std=0.0),
        _row("error", "performer", 64, "rel_frobenius_vs_softmax", 0.4, std=0.0),
    ]
    console = Console(width=200, record=True)
    console.print(error_table(rows_frame(rows)))
    text = console.export_text()
    lines = [line for line in text.splitlines() if "│" in line]
    assert any("yoso-8" in line and "radian_vs_softmax" in line for line in lines)
    assert not any("yoso-8" in line and "_vs_softmax" in line and "radian" not in line
                   for line in lines)  # fmt: skip
    assert any("performer" in line and "rel_frobenius" in line for line in lines)
    assert "not shown for yoso-8: rel_frobenius, max_abs, mc_bias, mc_std" in text
