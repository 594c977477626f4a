"""The README opens with the two commands a new user runs; CI runs the second as written.
The commands the docs show exist and every README command runs (made small), and their
links resolve."""

import re
import shlex
from pathlib import Path

import pytest
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


# How each README command is made small: option -> small value (None: drop the option).
SMALL = {
    "--seq": "16,32", "--grid": "8x8", "--hashes": "8", "--repeats": "2", "--warmup": "0",
    "--min-time": "0", "--trials": "1", "--mc-seeds": "1", "--steps": "1", "--max-batch": "1",
    "--threads": "1", "--heads": "1", "--layers": "1", "--evals": "1", "--lengths": "256",
    "--tokens": "256", "--width": "16", "--hidden": "32",
}  # fmt: skip
# Options a command gets at a small value where its line leaves them at their defaults,
# which are sized for real runs (timed samples of 0.2 s, a model 4 layers deep).
ADDED = {
    "time": {"--repeats": "2", "--warmup": "0", "--min-time": "0"},
    "profile": {"--repeats": "2", "--warmup": "0", "--min-time": "0"},
    "train": {"--layers": "1", "--width": "16", "--heads": "1", "--hidden": "32"},
    "model": {"--layers": "1", "--width": "16", "--heads": "1", "--hidden": "32"},
}
# Per command, values other than SMALL's: a model case builds, trains and frees a whole
# encoder, so one length shows the command runs.
SMALL_FOR = {"model": {"--seq": "16"}}
HELD_OUT_BYTES = 2048  # `train` scores its models on this much of the held-out text


def small(words: list[str]) -> list[str]:
    """A README command line (`run PROFILE` expanded) with every size and count shrunk."""
    from attnbench.cli.run import profile_argv

    words = words[1:]  # without "attnbench"
    if words[0] == "run":
        words = profile_argv(ROOT / words[1]) + words[2:]
    values = SMALL | SMALL_FOR.get(words[0], {})
    out = []
    it = iter(words)
    for word in it:
        name, eq, value = word.partition("=")
        if name in values and name.startswith("--"):
            out += [name, values[name]]
            if not eq:
                next(it)
        else:
            out.append(word)
    for name, value in ADDED.get(out[0], {}).items():
        if name not in out:
            out += [name, value]
    return out


def _readme_lines() -> list[list[str]]:
    """Each `attnbench` command of the README's bash blocks (`a && b` gives two)."""
    found = []
    for words in _commands((ROOT / "README.md").read_text()):
        command = []
        for word in [*words, "&&"]:
            if word == "&&":
                found.append(command)
                command = []
            else:
                command.append(word)
    return found


def _models_installed() -> bool:
    from attnbench.errors import UsageError
    from attnbench.inputs import models

    try:
        models.model_dir("minilm")
    except UsageError:
        return False
    return True


@pytest.fixture(scope="module")
def readme_folder(tmp_path_factory):
    """The folder every README command runs in, in the README's order (later ones read
    what earlier ones wrote), with the q/k/v file one of them reads."""
    import numpy as np

    folder = tmp_path_factory.mktemp("readme")
    (folder / "plots").mkdir()
    arr = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    np.savez(folder / "my_qkv.npz", q=arr, k=arr, v=arr)
    return folder


def test_the_readme_shows_enough_commands():
    assert len(_readme_lines()) >= 20


@pytest.mark.parametrize(
    "words", _readme_lines(), ids=lambda words: " ".join(words[1:3]).replace("/", ":")
)
def test_every_readme_command_runs_at_a_small_size(readme_folder, monkeypatch, words):
    """A command the README shows that breaks fails here: each runs with its sizes and
    counts made small, one test each so none runs for long."""
    import torch
    from typer.testing import CliRunner

    monkeypatch.chdir(readme_folder)
    runner = CliRunner()
    argv = small(words)
    if argv[0] == "train":
        from attnbench.nn import corpus

        held_out = corpus.held_out_bytes()[:HELD_OUT_BYTES]
        monkeypatch.setattr(corpus, "held_out_bytes", lambda: held_out)
    if "cuda" in argv and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if any("model:" in w for w in argv) and not _models_installed():
        pytest.skip("needs the extra: attnbench[models]")
    if argv[0] == "compare":  # two runs to compare
        for name in argv[1:3]:
            time_argv = ["time", "--seq", "16", "--backends", "sdpa", "--repeats", "2"]
            result = runner.invoke(app, [*time_argv, "--min-time", "0", "--csv", name])
            assert result.exit_code == 0, result.output
    result = runner.invoke(app, argv)
    gate = (0, 1, 3)  # pass, fail or inconclusive: two tiny runs may be any of them
    assert result.exit_code in gate if argv[0] == "compare" else result.exit_code == 0, (
        f"{' '.join(words)}\n-> {' '.join(argv)}\n{result.output}"
    )
