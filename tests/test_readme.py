"""The README opens with the two commands a new user runs; CI runs the second as written."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_opens_with_two_commands():
    text = (ROOT / "README.md").read_text()
    assert text.index("```bash") < text.index("\n## ")  # before any section
    setup_and_run, setup_and_test = readme_commands()
    assert setup_and_run.endswith("attnbench time --seq 4096")
    assert "pytest" in setup_and_test and "NUMBA_ENABLE_CUDASIM=1" in setup_and_test


def test_ci_runs_the_readme_test_command():
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    test_command = readme_commands()[1]
    assert any(test_command in line and not line.lstrip().startswith("#") for line in ci_lines)
