"""`attnbench selftest --device cuda --quick` under the simulator: the CUDA kernels' checks
run on tiny shapes and pass; what needs a real GPU is a skipped row with its reason."""

import json

from typer.testing import CliRunner

from attnbench import cli

runner = CliRunner()


def test_selftest_runs_the_cuda_checks_in_the_simulator(tmp_path):
    out = tmp_path / "selftest.json"
    result = runner.invoke(cli.app, ["selftest", "--device", "cuda", "--quick", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["kernels"] == "cuda-sim" and report["failed"] == []
    checks = {row["name"]: row for row in report["checks"]}
    simulated = [name for name in checks if "numba-cuda-sim" in name]
    assert len(simulated) >= 10
    assert all(checks[name]["status"] == "pass" for name in simulated)
    assert checks["hash=fast codes: numba-cuda-sim vs torch on the CPU"]["error"] == 0
    for name in ("CUDA events against the wall clock", "NVML telemetry"):
        assert checks[name]["status"] == "skipped" and checks[name]["detail"]


def test_cpu_under_the_simulator_is_one_error_line():
    result = runner.invoke(cli.app, ["selftest", "--device", "cpu"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: --device cpu")
