"""benchmarks/straightforward.py: each plain torch version computes what its backend computes,
with the backend's own draws, so timing one against the other compares like with like.

Tolerances: in float64 the two differ only by the order of floating-point operations, so they
agree to 1e-12 on outputs of order one. In float32 (what the benchmark times) they agree to
1e-5, about a hundred float32 ulps (eps = 1.2e-7) on outputs of order one: the largest gap is
Performer's, whose exponents are shifted by different stabilisers (each cancels in the ratio),
so each feature's exp is rounded from a differently rounded argument. Another seed or a window
two narrower moves the outputs by far more than that (checked below), so the tolerance admits
rounding and nothing else. YOSO-C keeps its convolution weights in float32 and YOSO computes
in float32, so it is compared in float32 only.
"""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from attnbench import get_backend
from attnbench.inputs import random_qkv
from attnbench.measure.threads import set_threads

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "straightforward.py"
spec = importlib.util.spec_from_file_location("straightforward", SCRIPT)
straightforward = importlib.util.module_from_spec(spec)
spec.loader.exec_module(straightforward)

SPECS = straightforward.SPECS
TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-5}
# Each backend with one setting changed: a different draw, or a narrower window.
OTHER = {
    "nystromformer": SPECS["nystromformer"] + ",seed=1",
    "linformer": SPECS["linformer"] + ",seed=1",
    "performer": SPECS["performer"] + ",seed=1",
    "reformer": SPECS["reformer"] + ",seed=1",
    "longformer": "longformer:window=510",
    "yoso-c": SPECS["yoso-c"] + ":seed=1",
}


def qkv(n, dtype, b=2, h=3, d=64):
    return [x.to(dtype) for x in random_qkv(b, h, n, d, seed=1)]


def outputs(ours, q, k, v):
    """(ours, plain) from fresh instances: the first call of each draws from the seed."""
    plain = straightforward.plain_call(ours, q, k, v)
    with torch.no_grad():
        return ours(q, k, v), plain()


@pytest.mark.parametrize(
    ("name", "dtype"),
    [(name, torch.float32) for name in SPECS]
    + [(name, torch.float64) for name in SPECS if name != "yoso-c"],  # YOSO computes in fp32
)
def test_plain_version_gives_the_backends_output(name, dtype):
    q, k, v = qkv(512, dtype)
    ours, plain = outputs(get_backend(SPECS[name]), q, k, v)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(plain, ours, rtol=tol, atol=tol)


@pytest.mark.parametrize("window", [64, 128, 256])
def test_plain_longformer_at_other_windows(window):
    q, k, v = qkv(512, torch.float64)
    ours, plain = outputs(get_backend(f"longformer:window={window}"), q, k, v)
    torch.testing.assert_close(plain, ours, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(SPECS))
def test_the_tolerance_rejects_another_draw_or_window(name):
    q, k, v = qkv(512, torch.float32)
    _, plain = outputs(get_backend(SPECS[name]), q, k, v)
    with torch.no_grad():
        other = get_backend(OTHER[name])(q, k, v)
    assert (plain - other).abs().max() > 100 * TOLERANCE[torch.float32]


@pytest.fixture
def keep_threads():
    """The script sets torch's and numba's thread counts; put them back for later tests."""
    threads = torch.get_num_threads()
    yield
    set_threads(threads)


def test_script_writes_one_row_per_backend_and_length(tmp_path, keep_threads):
    csv = tmp_path / "straightforward.csv"
    args = ["--seq", "512", "--heads", "2", "--rounds", "2", "--block", "1", "--threads", "1"]
    result = CliRunner().invoke(straightforward.app, [*args, "--csv", str(csv)])
    assert result.exit_code == 0, result.output
    df = pd.read_csv(csv)
    assert list(df.columns) == [
        "backend", "seq", "ours_ms", "ours_p10", "ours_p90",
        "plain_ms", "plain_p10", "plain_p90", "ratio", "device", "threads",
    ]  # fmt: skip
    assert list(df.backend) == list(SPECS) and set(df.seq) == {512}
    assert (df.ratio - df.ours_ms / df.plain_ms).abs().max() < 1e-12
    assert set(df.device) == {"cpu"} and set(df.threads) == {1}


@pytest.mark.parametrize(
    "args", [["--seq", "1000"], ["--backend", "nope"]], ids=["length", "backend"]
)
def test_bad_options_exit_2_without_a_csv(tmp_path, args):
    csv = tmp_path / "straightforward.csv"
    result = CliRunner().invoke(straightforward.app, [*args, "--csv", str(csv)])
    assert result.exit_code == 2
    assert not csv.exists()
