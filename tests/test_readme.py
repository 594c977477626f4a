"""The README opens with the two commands a new user runs; CI runs the second as written.
The commands the docs show exist, and their links resolve."""

import re
import shlex
from pathlib import Path

import typer

from attnbench.cli import app

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


def _commands(text: str) -> list[list[str]]:
    """The `attnbench …` lines of a document's bash blocks, split into words."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line.split("#", 1)[0]) if "attnbench " in line else []
            if words and words[0] == "attnbench":
                lines.append(words)
    return lines


def test_documented_commands_and_options_exist():
    """Every `attnbench CMD --option` in the README and the guide names a real command and
    option, and every profile it runs exists, so the docs cannot name what the CLI lacks."""
    commands = typer.main.get_command(app).commands
    for doc in ("README.md", "docs/guide.md"):
        found = _commands((ROOT / doc).read_text())
        assert found or doc != "README.md"
        for words in found:
            assert words[1] in commands, f"{doc}: no command {words[1]!r}"
            options = {o for p in commands[words[1]].params for o in p.opts}
            for word in words[2:]:
                if word.startswith("-"):
                    assert word.split("=")[0] in options, f"{doc}: {words[1]} has no {word}"
            if words[1] == "run":
                assert (ROOT / words[2]).is_file(), f"{doc}: no profile {words[2]}"


def test_local_links_resolve():
    """Every relative link and image in the README and docs/ points at a file that exists."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.name}: broken link {target}"


def test_readme_stays_short():
    """The README is the short tour; option reference and history live in docs/."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
