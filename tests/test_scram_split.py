"""benchmarks/scram_split.py refuses inputs it cannot make with one line and exit code 2."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "scram_split.py"


def _app():
    spec = importlib.util.spec_from_file_location("scram_split", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app


@pytest.mark.parametrize(
    ("inputs", "needle"), [("image:nope", "unknown image"), ("f.npz", "is a file")]
)
def test_bad_inputs_are_one_line_and_exit_2(tmp_path, inputs, needle):
    np.savez(tmp_path / "f.npz", **{key: np.ones((16, 3), np.float32) for key in "qkv"})
    path = tmp_path / inputs if inputs.endswith(".npz") else inputs
    csv = tmp_path / "split.csv"
    result = CliRunner().invoke(_app(), ["--grid", "4", "--inputs", str(path), "--csv", str(csv)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert not csv.exists()
