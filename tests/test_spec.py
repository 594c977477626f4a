import pytest

from attnbench.api.parse import parse_grids, parse_sizes
from attnbench.api.probes import output_path
from attnbench.errors import UsageError


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4096", [4096]),
        ("1k,4k,16k", [1024, 4096, 16384]),
        ("8..128", [8, 16, 32, 64, 128]),
        ("64..4096", [64, 128, 256, 512, 1024, 2048, 4096]),
        ("512..16384", [512, 1024, 2048, 4096, 8192, 16384]),
        ("1k..4k", [1024, 2048, 4096]),
        ("100..800", [100, 200, 400, 800]),
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
        ("1000..5000", r"does not end on its doubling ladder \(1000, 2000, 4000, 8000\)"),
        ("256..300", r"ladder \(256, 512\)"),
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
    from attnbench.api.parse import parse_grids

    assert parse_grids("128x128", "--grid") == [(128, 128)]
    assert parse_grids("32x32..256x256", "--grid") == [(32, 32), (64, 64), (128, 128), (256, 256)]
    assert parse_grids("8x16, 5X7,8x16", "--grid") == [(8, 16), (5, 7)]
    assert parse_grids("1x64..1x256", "--grid") == [(1, 64), (1, 128), (1, 256)]


@pytest.mark.parametrize("text", ["", "128", "0x4", "4x", "ax4", "64x64..32x32", "4x4,,8x8"])
def test_parse_grids_rejects_nonsense_in_one_line(text):
    from attnbench.api.parse import parse_grids

    with pytest.raises(UsageError, match="--grid"):
        parse_grids(text, "--grid")


# ------------------------------------------------------------------------------ bounds


def test_sizes_and_grids_are_bounded_to_int32_tokens():
    from attnbench.api.parse import MAX_SIZE, parse_grids

    assert parse_sizes(str(MAX_SIZE), "--seq") == [MAX_SIZE]
    assert parse_grids("46340x46340", "--grid") == [(46340, 46340)]  # just below 2**31
    for text in (str(MAX_SIZE + 1), "2048m", "16..99999999999999999999999"):
        with pytest.raises(UsageError, match=r"^--seq: .* is above 2147483647"):
            parse_sizes(text, "--seq")
    with pytest.raises(UsageError, match="65536x65536 is 4294967296 tokens"):
        parse_grids("65536x65536", "--grid")


@pytest.mark.parametrize("text", ["\u0663", "\uff18", "4\u0663"])
def test_sizes_are_ascii_digits(text):
    """str.isdigit and \\d accept other scripts' digits; a size is written in ASCII."""
    from attnbench.api.parse import parse_grids

    with pytest.raises(UsageError, match="--seq"):
        parse_sizes(text, "--seq")
    with pytest.raises(UsageError, match="--grid"):
        parse_grids(f"{text}x4", "--grid")


def test_positive_and_non_negative_have_an_upper_bound():
    from attnbench.api.parse import MAX_SIZE, non_negative, positive

    assert positive(MAX_SIZE, "--dim") == MAX_SIZE
    assert non_negative(0, "--warmup", 10) == 0
    assert non_negative(10, "--warmup", 10) == 10
    with pytest.raises(UsageError, match=r"^--dim: 2147483648 is above 2147483647"):
        positive(MAX_SIZE + 1, "--dim")
    with pytest.raises(UsageError, match=r"^--warmup: 11 is above 10"):
        non_negative(11, "--warmup", 10)


def test_seed_bounds_leave_room_for_the_seeds_a_study_derives():
    from attnbench.api.parse import MAX_SEED, check_seed

    assert check_seed(0) == 0
    assert check_seed(MAX_SEED - 1) == MAX_SEED - 1  # image colours use seed + 1
    most = 2**63 // 8 - 3  # (seed + 3) * 8 - 1 must stay within 2**63 - 1
    assert check_seed(most, trials=3, mc_seeds=8) == most
    for seed, trials, mc_seeds in ((-1, 1, 1), (MAX_SEED, 1, 1), (10**30, 1, 1), (most + 1, 3, 8)):
        with pytest.raises(UsageError, match=r"^--seed: "):
            check_seed(seed, trials, mc_seeds)
    # counts out of range are left to their own checks, not reported as a seed error
    assert check_seed(0, trials=10**30, mc_seeds=-5) == 0


def test_threads_are_bounded_by_numba_s_pool(monkeypatch):
    import numba

    from attnbench.api.parse import check_threads

    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 4)
    assert check_threads(None) is None
    assert check_threads(1) == 1 and check_threads(4) == 4
    for threads in (0, -1, 5, 10**30):
        with pytest.raises(UsageError, match=r"^--threads: .* is not in 1\.\.4"):
            check_threads(threads)


def _free(monkeypatch, free: int) -> None:
    monkeypatch.setattr("attnbench.measure.memory.available_bytes", lambda device: free)


def test_inputs_must_fit_in_free_memory(monkeypatch):
    import torch

    from attnbench.api.probes import check_inputs_fit
    from attnbench.inputs import Inputs

    source = Inputs("random", 1, 4, 64)
    layouts = [(256, None), (1024, None), (512, None)]
    need = 3 * 4 * 1024 * 64 * 4  # q, k, v of the longest case: 3 MiB
    _free(monkeypatch, need)
    check_inputs_fit(source, layouts)  # exactly enough
    _free(monkeypatch, need - 1)
    with pytest.raises(UsageError, match=r"^--seq 1024: inputs alone need 3\.0 MiB .*float32"):
        check_inputs_fit(source, layouts)
    _free(monkeypatch, 2 * need - 1)
    with pytest.raises(UsageError, match=r"need 6\.0 MiB .*float64\), 6\.0 MiB free on cpu"):
        check_inputs_fit(source, layouts, torch.float64)


def test_image_inputs_count_the_repeats_and_the_image_they_are_built_from(monkeypatch):
    from attnbench.api.probes import check_inputs_fit
    from attnbench.inputs import Inputs
    from attnbench.inputs.images import build_bytes

    source = Inputs("blobs", 1, 1, 4)
    need = 3 * 2 * 3 * 1024 * 4 * 4 + build_bytes(32, 32, 4)  # repeated over batch 2, heads 3
    _free(monkeypatch, need)
    check_inputs_fit(source, [(1024, (32, 32))], batch=2, heads=3)
    _free(monkeypatch, need - 1)
    with pytest.raises(UsageError, match=r"^--grid 32x32: inputs alone need"):
        check_inputs_fit(source, [(1024, (32, 32))], batch=2, heads=3)


def test_a_photograph_is_stretched_at_most_max_upscale_times_per_side():
    from attnbench.inputs import check_resize
    from attnbench.inputs.images import MAX_UPSCALE, image_shape

    height, width = image_shape("coffee")
    check_resize("image:coffee", MAX_UPSCALE * height, MAX_UPSCALE * width)
    check_resize("image:coffee", 1, 1)
    check_resize("blobs", 10**6, 1)  # blobs are drawn at any size
    for grid in ((MAX_UPSCALE * height + 1, 1), (1, MAX_UPSCALE * width + 1)):
        with pytest.raises(UsageError, match="coffee is 400x600 pixels"):
            check_resize("image:coffee", *grid)
    with pytest.raises(UsageError, match="unknown image"):
        check_resize("image:nope", 4, 4)


@pytest.mark.parametrize(
    "count, text",
    [(0, "0.0 B"), (1536, "1.5 KiB"), (7.5 * 2**40, "7.5 TiB"), (3 * 2**50, "3.0 PiB")],
)
def test_byte_text(count, text):
    from attnbench.api.probes import byte_text

    assert byte_text(count) == text


def test_profile_keys_are_checked_against_the_command_s_own_options():
    import typer

    from attnbench.api.parse import check_option_keys
    from attnbench.cli import app

    commands = typer.main.get_command(app).commands
    check_option_keys(["seq", "mc_seeds", "mc-seeds", "csv"], commands["error"], "p.toml")
    with pytest.raises(
        UsageError, match=r"^p\.toml: 'help' is not an option of `time`; valid: seq"
    ):
        check_option_keys(["seq", "help"], commands["time"], "p.toml")
    with pytest.raises(UsageError, match="'mc_seeds' is not an option of `time`"):
        check_option_keys(["mc_seeds"], commands["time"], "p.toml")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("32x32..128x128", [(32, 32), (64, 64), (128, 128)]),
        ("1x64..1x256", [(1, 64), (1, 128), (1, 256)]),
        ("32x64..128x256", [(32, 64), (64, 128), (128, 256)]),
        ("16x16..16x16", [(16, 16)]),
    ],
)
def test_parse_grid_ranges(text, expected):
    assert parse_grids(text, "--grid") == expected


@pytest.mark.parametrize(
    "text, ladder",
    [("32x32..100x100", "32x32, 64x64, 128x128"), ("32x32..256x128", "128x128, 256x256")],
)
def test_a_grid_range_must_end_on_its_ladder(text, ladder):
    with pytest.raises(UsageError, match="does not end on its doubling ladder") as info:
        parse_grids(text, "--grid")
    assert ladder in str(info.value)
