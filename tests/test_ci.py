""".ci/run must go red when any of its steps fails, the chained README command included.

The script runs in a scratch copy of the repository layout against stub `python3`, `pip`,
`pytest`, `ruff` and `lint-imports` commands whose exit codes each case sets, so no real
install happens.
"""

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# `python3 -m venv .venv` makes a .venv whose tools exit with the codes the case asks for.
STUB_PYTHON3 = """#!/usr/bin/env bash
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  for tool in pip python ruff lint-imports; do
    printf '#!/usr/bin/env bash\\nexec "%s" %s "$@"\\n' "$STUB_TOOL" "$tool" > "$3/bin/$tool"
    chmod +x "$3/bin/$tool"
  done
  exit 0
fi
exit 99
"""

# One stub for every tool of the venv: `tool args...` exits with the code set for it.
STUB_TOOL = """#!/usr/bin/env bash
tool=$1; shift
case "$tool $*" in
  "pip "*) exit "${FAIL_PIP:-0}" ;;
  "python -m pytest tests/cudasim"*) exit "${FAIL_SIM:-0}" ;;
  "python -m pytest"*) exit "${FAIL_PYTEST:-0}" ;;
  "ruff check"*) exit "${FAIL_RUFF:-0}" ;;
  "ruff format"*) exit "${FAIL_FORMAT:-0}" ;;
  "lint-imports"*) exit "${FAIL_LAYERS:-0}" ;;
esac
exit 98
"""


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def ci(tmp_path):
    """Run a copy of .ci/run with the stubs; returns a function of the failing steps."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    _executable(stubs / "python3", STUB_PYTHON3)
    tool = _executable(tmp_path / "tool", STUB_TOOL)

    def run(**failures: int) -> int:
        shutil.rmtree(tmp_path / ".venv", ignore_errors=True)
        env = {
            "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
            "STUB_TOOL": str(tool),
            **{f"FAIL_{step.upper()}": str(code) for step, code in failures.items()},
        }
        done = subprocess.run(
            ["bash", str(tmp_path / ".ci" / "run")], env=env, capture_output=True, timeout=60
        )
        return done.returncode

    return run


def test_ci_passes_when_every_step_passes(ci):
    assert ci() == 0


@pytest.mark.parametrize(
    "step, code",
    [
        ("pip", 1),
        ("pytest", 1),
        ("pytest", 5),
        ("sim", 1),
        ("ruff", 1),
        ("format", 1),
        ("layers", 1),
    ],
)
def test_ci_fails_when_a_step_fails(ci, step, code):
    assert ci(**{step: code}) != 0
