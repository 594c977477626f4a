"""Numbers out of range, in every command: one `error:` line, exit code 2, nothing written.

Each of these once reached torch, numpy, numba or scikit-image and ended in a traceback,
killed the process (too many threads), or ran for ever. Sizes are chosen so that the
inputs need terabytes or more, so the outcome does not depend on where the test runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import attnbench.cli.core as cli

runner = CliRunner()

HUGE = "99999999999999999999999"  # above int64: overflows inside torch and numpy
TIME = [
    "time", "--backends", "softmax", "--repeats", "1", "--warmup", "0",
    "--heads", "1", "--dim", "4", "--csv", "r.csv",
]  # fmt: skip
ERROR = [
    "error", "--hashes", "8", "--trials", "1", "--mc-seeds", "1",
    "--heads", "1", "--dim", "4", "--inputs", "random", "--csv", "r.csv",
]  # fmt: skip
MAPS = ["maps", "--grid", "4x4", "--backends", "softmax", "--dim", "4", "--plot", "m.png"]
CAMERA = ("--inputs", "image:camera")
BLOBS = ("--inputs", "blobs")
BIG_D = ("--dim", "1024")
PROFILE = ['seq = "16"', 'backends = "softmax"', "repeats = 1", "warmup = 0", 'csv = "r.csv"']


def _case(id_, args, needle):
    return pytest.param(args, needle, id=id_)


def _time(*args):
    return [*TIME, *args]


def _error(*args):
    return [*ERROR, *args]


def _maps(*args):
    return [*MAPS, *args]


BAD = [
    # sizes without bounds: above int32 tokens, or inputs no machine holds
    _case("time-seq-1e10", _time("--seq", "10000000000"), "--seq:"),
    _case("time-seq-above-int64", _time("--seq", HUGE), "--seq:"),
    _case("time-seq-range-end-huge", _time("--seq", f"16..{HUGE}"), "--seq:"),
    _case("time-seq-inputs-too-big", _time("--seq", "1000000000", *BIG_D), "need"),
    _case("time-seq-unicode-digit", _time("--seq", "\u0663"), "--seq:"),
    _case("time-batch-1e9", _time("--batch", "1000000000", "--dim", "64"), "need"),
    _case("time-batch-above-int64", _time("--batch", HUGE), "--batch:"),
    _case("time-heads-1e9", _time("--heads", "1000000000", "--dim", "64"), "need"),
    _case("time-dim-1e9", _time("--dim", "1000000000", "--seq", "4096"), "need"),
    _case("time-dim-above-int64", _time("--dim", HUGE), "--dim:"),
    _case("time-grid-camera-65536", _time("--grid", "65536x65536", *CAMERA), "tokens"),
    _case("time-grid-camera-stretched", _time("--grid", "16384x128", *CAMERA), "stretch"),
    _case("time-grid-blobs-too-big", _time("--grid", "40000x40000", *BLOBS, *BIG_D), "need"),
    # seeds without bounds
    _case("time-seed-above-int64", _time("--seed", HUGE), "--seed:"),
    _case("time-seed-negative", _time("--seed", "-1"), "--seed:"),
    _case("time-seed-very-negative", _time("--seed", f"-{HUGE}"), "--seed:"),
    _case("time-seed-int64-max", _time("--seed", str(2**63 - 1)), "--seed:"),
    # thread counts without bounds (1e9 aborts the process in the OpenMP runtime)
    _case("time-threads-100000", _time("--threads", "100000"), "--threads:"),
    _case("time-threads-1e9", _time("--threads", "1000000000"), "--threads:"),
    _case("time-threads-above-int64", _time("--threads", HUGE), "--threads:"),
    # counts without bounds: a run that could never finish
    _case("time-repeats-huge", _time("--repeats", HUGE), "--repeats:"),
    _case("time-warmup-huge", _time("--warmup", HUGE), "--warmup:"),
    # the same in `error`
    _case("error-seq-1e10", _error("--seq", "10000000000"), "--seq:"),
    _case("error-seq-above-int64", _error("--seq", HUGE), "--seq:"),
    _case("error-seq-inputs-too-big", _error("--seq", "1000000000", *BIG_D), "need"),
    _case("error-batch-1e9", _error("--batch", "1000000000", "--dim", "64"), "need"),
    _case("error-heads-above-int64", _error("--heads", HUGE), "--heads:"),
    _case("error-dim-1e9", _error("--dim", "1000000000", "--seq", "4096"), "need"),
    _case("error-seed-above-int64", _error("--seed", HUGE), "--seed:"),
    _case("error-seed-negative", _error("--seed", "-1"), "--seed:"),
    _case("error-mc-seeds-overflow", _error("--seed", str(2**62), "--mc-seeds", "8"), "x 8"),
    _case("error-threads-100000", _error("--threads", "100000"), "--threads:"),
    _case("error-grid-blobs-1e10", _error("--grid", "100000x100000", *BLOBS), "tokens"),
    _case("error-grid-camera-65536", _error("--grid", "65536x65536", *CAMERA), "tokens"),
    _case("error-grid-blobs-too-big", _error("--grid", "40000x40000", *BLOBS, *BIG_D), "need"),
    _case("error-trials-huge", _error("--trials", "1000000000"), "--trials:"),
    _case("error-mc-seeds-huge", _error("--mc-seeds", HUGE), "--mc-seeds:"),
    _case("error-hashes-above-int64", _error("--hashes", HUGE), "--hashes:"),
    _case("yoso-seed-above-int64", _time("--backends", f"yoso:seed={HUGE}"), "bad seed"),
    _case("yoso-backward-unknown", _time("--backends", "yoso:backward=fast"), "bad backward"),
    _case("yoso-bound-zero", _time("--backends", "yoso-32:backward=star,bound=0"), "bad bound"),
    _case("yoso-bound-negative", _time("--backends", "yoso:bound=-4"), "bad bound"),
    _case("scram-iterations-huge", _time("--backends", "scram:T=99999999"), "bad T"),
    _case("scram-separation-above-int64", _error("--backends", f"scram:L={HUGE}"), "bad L"),
    # and in `maps`
    _case("maps-seed-above-int64", _maps("--seed", HUGE, "--inputs", "random"), "--seed:"),
    _case("maps-seed-negative-blobs", _maps("--seed", "-1", "--inputs", "blobs"), "--seed:"),
    _case("maps-dim-1e9", _maps("--dim", "1000000000", "--grid", "64x64"), "need"),
    _case("maps-dim-above-int64", _maps("--dim", HUGE), "--dim:"),
    _case("maps-grid-65536", _maps("--grid", "65536x65536"), "tokens"),
    # a profile whose [options] hold a key that is not an option of its command
    _case("run-help-key", ["run", "help.toml"], "'help'"),
    _case("run-unknown-key", ["run", "typo.toml"], "'sequence'"),
    _case("run-option-of-another-command", ["run", "error_repeats.toml"], "'repeats'"),
    _case("run-key-with-dashes", ["run", "dashes.toml"], "'--seq'"),
]  # fmt: skip


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    time_profile = ['command = "time"', "[options]", *PROFILE]
    (tmp_path / "help.toml").write_text("\n".join([*time_profile, "help = true"]) + "\n")
    (tmp_path / "typo.toml").write_text("\n".join([*time_profile, 'sequence = "16"']) + "\n")
    (tmp_path / "dashes.toml").write_text("\n".join([*time_profile[:2], '"--seq" = "16"']) + "\n")
    error = ['command = "error"', "[options]", 'seq = "16"', "repeats = 1", 'csv = "r.csv"']
    (tmp_path / "error_repeats.toml").write_text("\n".join(error) + "\n")
    return tmp_path


def files_under(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


@pytest.mark.parametrize(("args", "needle"), BAD)
def test_out_of_range_is_one_error_line_exit_2_and_writes_nothing(workdir, args, needle):
    before = files_under(workdir)
    result = runner.invoke(cli.app, args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert needle in lines[0]
    assert "Traceback" not in result.output
    assert files_under(workdir) == before


def test_the_profile_key_error_lists_the_command_s_own_options(workdir):
    line = runner.invoke(cli.app, ["run", "help.toml"]).stderr.strip()
    for option in ("seq", "grid", "batch", "repeats", "threads", "csv"):
        assert option in line
    assert "mc-seeds" not in line  # an option of `error`, not of `time`


def test_the_largest_seed_and_thread_count_still_run(workdir):
    """The bounds are inclusive: the largest seed a study can use, numba's whole pool."""
    import numba
    import torch

    threads = numba.config.NUMBA_NUM_THREADS
    args = _time("--seq", "16", "--seed", str(2**63 - 2), "--threads", str(threads))
    before = torch.get_num_threads(), numba.get_num_threads()
    try:
        result = runner.invoke(cli.app, args)
    finally:
        torch.set_num_threads(before[0])
        numba.set_num_threads(before[1])
    assert result.exit_code == 0, result.output
    assert (workdir / "r.csv").is_file()
