"""attnbench maps: dense attention maps of several backends on the same inputs."""

import numpy as np
import pytest
import torch
from helpers import assert_figure_file, saved_figures
from typer.testing import CliRunner

from attnbench import get_backend
from attnbench.backends import Backend
from attnbench.cli import app
from attnbench.inputs import Inputs
from attnbench.run.runner import run
from attnbench.studies.maps import MapsStudy


def attention_maps(spec, failed=None):
    """label -> map of every backend that drew one; the others' status rows go to `failed`."""
    maps = {}
    for row in (row for rows in run(spec) for row in rows):
        if row.status == "ok":
            maps[get_backend(row.backend).label] = row.array
        elif failed is not None:
            failed.append(row)
    return maps


def test_full_maps_and_one_query_maps_agree():
    backends = [get_backend("softmax"), get_backend("yoso-16")]
    blobs = Inputs("blobs", 1, 1, 3)
    full = attention_maps(MapsStudy(backends, inputs=blobs, grid=(6, 7)))
    one = attention_maps(MapsStudy(backends, inputs=blobs, grid=(6, 7), query=(2, 5)))
    assert set(full) == set(one) == {"softmax", "yoso-16"}
    assert full["softmax"].shape == (42, 42) and one["softmax"].shape == (6, 7)
    for label in full:
        assert torch.equal(one[label].flatten(), full[label][2 * 7 + 5])
    assert torch.allclose(full["softmax"].sum(-1), torch.ones(42, dtype=torch.float64))


def test_maps_command_writes_the_figure(tmp_path, monkeypatch):
    """A panel per backend, lettered, each one query's map over the 8x8 key image with the
    query marked, on one colour scale with a labelled bar."""
    saved = saved_figures(monkeypatch)
    out = tmp_path / "m.png"
    result = CliRunner().invoke(
        app, ["maps", "--backends", "softmax,yoso-e", "--grid", "8x8", "--query", "3,4",
              "--inputs", "image:coins", "--plot", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert_figure_file(out)
    ((path, fig),) = saved
    assert path == out
    assert "each row normalised to sum 1" in fig.get_suptitle()
    panels = [ax for ax in fig.axes if ax.get_images()]
    assert [ax.get_title() for ax in panels] == ["(a) softmax", "(b) yoso-e"]
    for ax in panels:
        (image,) = ax.get_images()
        weights = np.asarray(image.get_array())
        assert weights.shape == (8, 8) and weights.sum() == pytest.approx(1.0)  # one query
        (query,) = ax.get_lines()
        assert (query.get_marker(), list(query.get_xydata()[0])) == ("x", [4.0, 3.0])
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("key x", "key y")
    (bar,) = [ax for ax in fig.axes if not ax.get_images()]
    assert bar.get_ylabel() == "share of the row's weight"
    assert len({im.get_clim() for ax in panels for im in ax.get_images()}) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--query", "8,0", "--grid", "8x8"], "outside the 8x8 grid"),
        (["--query", "3"], "--query: expected y,x"),
        (["--grid", "128x128"], "at most 4096 tokens"),
        (["--grid", "4x4,8x8"], "one grid"),
        (["--inputs", "image:nope"], "unknown image"),
        (["--plot", "OUT/m.txt"], "--plot"),
        (["--scale", "sum"], "--scale: unknown scale 'sum'"),
        (["--colour", "sqrt"], "--colour: unknown colour scale 'sqrt'"),
    ],
)
def test_maps_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    args = [a.replace("OUT", str(tmp_path)) for a in args]  # a later --plot wins
    result = CliRunner().invoke(app, ["maps", "--plot", str(tmp_path / "m.png"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


class NoMap(Backend):
    name = "test-no-map"

    def forward(self, q, k, v, mask=None):
        return v


def test_a_backend_without_a_map_gets_a_status_row_and_the_others_are_drawn():
    failed = []
    blobs = Inputs("blobs", 1, 1, 3)
    spec = MapsStudy([NoMap(), get_backend("softmax")], inputs=blobs, grid=(4, 4))
    maps = attention_maps(spec, failed)
    assert list(maps) == ["softmax"]
    (row,) = failed
    assert (row.backend, row.status) == ("test-no-map", "error")
    assert row.reason == "NotImplementedError: test-no-map has no dense attention map"


@pytest.mark.parametrize(("source", "grid"), [("svd:camera", (1, 128)), ("three-blobs", (8, 8))])
def test_figure_inputs_draw_maps(source, grid):
    spec = MapsStudy([get_backend("softmax")], inputs=Inputs(source, 1, 1, 4), grid=grid)
    (amap,) = attention_maps(spec).values()
    n = grid[0] * grid[1]
    assert amap.shape == (n, n)
    assert torch.allclose(amap.sum(-1), torch.ones(n, dtype=torch.float64))


def _drawn(tmp_path, monkeypatch, maps: dict, **kwargs):
    """The figure plot_maps draws of `maps` (label -> map), with a failed row between."""
    from attnbench.results.schema import Row
    from attnbench.views import maps as figure

    saved = saved_figures(monkeypatch)
    case = dict(study="maps", impl="torch", device="cpu", dtype="float32", mode="fwd",
                inputs="blobs", batch=1, heads=1, seq=64, dim=4,
                metric="attention_map")  # fmt: skip
    rows = [Row(backend=label, array=amap, **case) for label, amap in maps.items()]
    rows.insert(1, Row(backend="c", status="error", reason="no map", **case))  # no panel
    figure.plot_maps(rows, "t", tmp_path / "m.png", **kwargs)
    ((path, fig),) = saved
    assert_figure_file(path)
    images = [im for ax in fig.axes for im in ax.get_images()]
    (bar,) = [ax for ax in fig.axes if ax.get_ylabel() and not ax.get_images()]
    return fig, images, bar.get_ylabel()


def test_raw_map_panels_share_one_colour_scale_and_a_labelled_bar(tmp_path, monkeypatch):
    maps = {"a": torch.rand(8, 8, dtype=torch.float64) * 0.2, "b": torch.rand(8, 8) * 0.9}
    fig, images, label = _drawn(tmp_path, monkeypatch, maps, scale="raw")
    assert len(images) == 2
    top = max(float(m.max()) for m in maps.values())
    assert all(im.get_clim() == (0.0, top) for im in images)
    assert label == "weight as the backend gives it"
    assert "raw weights" in fig.get_suptitle()
    titles = [ax.get_title() for ax in fig.axes if ax.get_images()]
    assert titles == ["(a) a", "(b) b"]


def test_maps_draw_each_row_as_its_share_by_default(tmp_path, monkeypatch):
    """YOSO's raw E (rows summing far above 1) looked brighter than softmax on one scale;
    its rows divided by their sums are the distribution YOSO applies."""
    e = torch.rand(8, 8, dtype=torch.float64) * 0.5 + 0.3
    e[3] = 0.0  # a row with no collision stays 0
    soft = torch.softmax(torch.randn(8, 8, dtype=torch.float64), -1)
    fig, images, label = _drawn(tmp_path, monkeypatch, {"yoso-e": e, "softmax": soft})
    drawn = [np.asarray(im.get_array()) for im in images]
    expected = (e / e.sum(-1, keepdim=True)).nan_to_num(0.0).numpy()
    np.testing.assert_allclose(drawn[0], expected)
    np.testing.assert_allclose(drawn[1], soft.numpy())
    assert label == "share of the row's weight"
    assert "each row normalised to sum 1" in fig.get_suptitle()


@pytest.mark.parametrize(("colour", "norm", "words"), [
    ("log", "LogNorm", ", log scale"), ("p99", "Normalize", ", clipped at p99 = "),
])  # fmt: skip
def test_colour_scales_are_shared_and_named_on_the_bar(tmp_path, monkeypatch, colour, norm, words):
    maps = {"a": torch.rand(8, 8, dtype=torch.float64), "b": torch.rand(8, 8) ** 4}
    _, images, label = _drawn(tmp_path, monkeypatch, maps, scale="raw", colour=colour)
    assert {type(im.norm).__name__ for im in images} == {norm}
    assert len({im.get_clim() for im in images}) == 1
    assert words in label
    top = max(float(m.max()) for m in maps.values())
    low, high = images[0].get_clim()
    if colour == "log":
        assert (low, high) == pytest.approx((top / 1000, top))
    else:
        everything = np.concatenate([m.numpy().ravel() for m in maps.values()])
        assert (low, high) == pytest.approx((0.0, np.percentile(everything, 99)))


def test_maps_draw_a_file_and_refuse_a_grid_longer_than_it(tmp_path):
    """A file's first H x W tokens are drawn; a longer grid once drew its 64 tokens under a
    1x128 title."""
    qkv = tmp_path / "qkv.npz"
    arr = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    np.savez(qkv, q=arr, k=arr, v=arr)
    out = tmp_path / "m.png"
    args = ["maps", "--backends", "softmax", "--inputs", str(qkv), "--plot", str(out)]
    result = CliRunner().invoke(app, [*args, "--grid", "8x8"])
    assert result.exit_code == 0, result.output
    assert_figure_file(out)
    out.unlink()
    result = CliRunner().invoke(app, [*args, "--grid", "1x128"])
    assert result.exit_code == 2, result.output
    assert "--grid: 128 is longer than the 64 tokens in qkv.npz" in result.output
    assert not out.exists()
