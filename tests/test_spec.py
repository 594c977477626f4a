import pytest

from attnbench.errors import UsageError
from attnbench.spec import output_path, parse_sizes


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4096", [4096]),
        ("1k,4k,16k", [1024, 4096, 16384]),
        ("8..128", [8, 16, 32, 64, 128]),
        ("64..4096", [64, 128, 256, 512, 1024, 2048, 4096]),
        ("512..16384", [512, 1024, 2048, 4096, 8192, 16384]),
        ("1k..4k", [1024, 2048, 4096]),
        ("100..1000", [100, 200, 400, 800]),
        ("8..8", [8]),
        ("64, 32,64", [64, 32]),
        ("32..128,256", [32, 64, 128, 256]),
        ("1m", [1024**2]),
    ],
)
def test_parse_sizes(text, expected):
    assert parse_sizes(text, "--seq") == expected


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("128..8", "empty"),
        ("abc", "cannot read"),
        ("", "empty"),
        ("   ", "empty"),
        ("0", "positive"),
        ("-4", "cannot read"),
        ("4,,8", "empty item"),
        ("8..", "cannot read"),
        ("1.5k", "cannot read"),
        ("0..8", "positive"),
    ],
)
def test_parse_sizes_rejects(text, fragment):
    with pytest.raises(UsageError, match=fragment) as info:
        parse_sizes(text, "--hashes")
    assert str(info.value).startswith("--hashes")


def test_output_path_checks(tmp_path):
    assert output_path(tmp_path / "r.csv", "--csv", (".csv",)) == tmp_path / "r.csv"
    assert output_path(None, "--csv", (".csv",)) is None
    with pytest.raises(UsageError, match="does not exist"):
        output_path(tmp_path / "missing" / "r.csv", "--csv", (".csv",))
    with pytest.raises(UsageError, match="must end in"):
        output_path(tmp_path / "r.txt", "--csv", (".csv",))
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(UsageError, match="is a directory"):
        output_path(tmp_path / "d.csv", "--csv", (".csv",))


def test_parse_grids():
    from attnbench.spec import parse_grids

    assert parse_grids("128x128", "--grid") == [(128, 128)]
    assert parse_grids("32x32..256x256", "--grid") == [(32, 32), (64, 64), (128, 128), (256, 256)]
    assert parse_grids("8x16, 5X7,8x16", "--grid") == [(8, 16), (5, 7)]
    assert parse_grids("1x64..1x256", "--grid") == [(1, 64), (1, 128), (1, 256)]


@pytest.mark.parametrize("text", ["", "128", "0x4", "4x", "ax4", "64x64..32x32", "4x4,,8x8"])
def test_parse_grids_rejects_nonsense_in_one_line(text):
    from attnbench.spec import parse_grids

    with pytest.raises(UsageError, match="--grid"):
        parse_grids(text, "--grid")
