"""`attnbench selftest` on the CPU: every check passes on a sound install, a kernel broken on
purpose fails its check by name with exit 1, and bad options are one `error:` line, exit 2."""

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from attnbench import cli
from attnbench.backends.registry import backend_classes
from attnbench.kernels.lsh import cpu
from attnbench.kernels.lsh.autograd import BACKWARDS
from attnbench.studies import selftest

runner = CliRunner()


def invoke(*args):
    return runner.invoke(cli.app, [str(a) for a in args])


def _checks(path) -> dict:
    return {row["name"]: row for row in json.loads(path.read_text())["checks"]}


def test_selftest_on_the_cpu_passes_every_check(tmp_path):
    out = tmp_path / "selftest.json"
    result = invoke("selftest", "--device", "cpu", "--json", out)
    assert result.exit_code == 0, result.output
    checks = _checks(out)
    assert not [name for name, row in checks.items() if row["status"] == "fail"]
    for backend in backend_classes():
        for dtype in ("float32", "bfloat16", "float16"):
            assert checks[f"{backend} {dtype}"]["status"] == "pass"
    for backward in BACKWARDS:
        assert checks[f"yoso backward={backward} numba-cpu gradients"]["status"] == "pass"
    assert checks["hash=fast codes: numba-cpu vs torch on the CPU"]["error"] == 0
    assert checks["CUDA events against the wall clock"]["status"] == "skipped"
    assert checks["NVML telemetry"]["detail"]
    assert json.loads(out.read_text())["compile_s"] >= 0


def _broken_cumulation(monkeypatch):
    """The CPU cumulation adds 0.5 to every output: wrong, yet finite and plausible."""
    real = cpu.cumulation

    def cumulation(*args):
        real(*args)
        args[-1][...] += 0.5

    monkeypatch.setattr(cpu, "cumulation", cumulation)


def test_a_broken_kernel_fails_its_check_by_name_with_exit_1(monkeypatch, tmp_path):
    _broken_cumulation(monkeypatch)
    out = tmp_path / "selftest.json"
    result = invoke("selftest", "--device", "cpu", "--quick", "--json", out)
    assert result.exit_code == 1, result.output
    failed = json.loads(out.read_text())["failed"]
    assert "yoso hash=fast numba-cpu forward" in failed
    assert "yoso hash=fast torch forward" not in failed
    assert "yoso hash=fast numba-cpu forward" in result.stderr.splitlines()[-1]


def test_a_broken_fast_hash_is_caught_bit_for_bit(monkeypatch):
    real = cpu.fast_codes

    def fast_codes(x, diags, tau, out):
        real(x, diags, tau, out)
        out[0, 0, 0] ^= 1

    monkeypatch.setattr(cpu, "fast_codes", fast_codes)
    rows = selftest.guarded("hash", lambda: _hash_rows())
    fast = next(row for row in rows if row.name.startswith("hash=fast"))
    assert fast.status == "fail" and fast.error == 1


def _hash_rows():
    from attnbench.studies.selftest.numeric import hash_checks

    return hash_checks(selftest.target("cpu", quick=True))


def test_a_check_that_raises_is_a_failed_row_naming_the_exception():
    def broken():
        raise RuntimeError("kernel launch failed")

    (row,) = selftest.guarded("yoso kernels", broken)
    assert (row.name, row.status) == ("yoso kernels", "fail")
    assert "RuntimeError: kernel launch failed" in row.detail


def test_a_nan_error_never_passes():
    assert selftest.measured("x", math.nan, 1.0).status == "fail"
    assert selftest.measured("x", 0.5, 1.0).status == "pass"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--device", "tpu"], "--device"),
        (["--json", "out.txt"], "--json"),
        (["--quick", "3"], ""),
    ],
)
def test_bad_options_are_one_error_line_exit_2(args, needle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("selftest", *args)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and needle in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_cuda_without_a_gpu_is_one_line_exit_2():
    result = invoke("selftest", "--device", "cuda")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: --device cuda")


def test_a_launch_handed_a_tensor_of_another_device_is_refused_before_the_kernel():
    """A draw on the host reaching a GPU launch would be copied inside the call: refused."""
    from attnbench.kernels.lsh import checks

    x = torch.zeros(2, 3, device="meta")
    with pytest.raises(ValueError, match="draws is on cpu, the kernel runs on meta"):
        checks.check_devices(x.device, draws=torch.zeros(2))
    checks.check_devices(x.device, draws=torch.zeros(2, device="meta"))


def test_index_width_is_32_bits_while_every_flat_index_fits():
    from attnbench.kernels.lsh.checks import index_bits

    assert index_bits(2**32 - 1) == 32
    assert index_bits(2**32) == 64
    assert index_bits(16 * 2**20 * 256) == 64  # G n m codes at n = 2^20, m = 256, G = 16
