"""`attnbench run PROFILE`: a study described in a TOML file, e.g. one of a paper's figures."""

import tomllib
from pathlib import Path

import typer

from attnbench.cli import core
from attnbench.errors import UsageError

PROFILE_COMMANDS = ("time", "error", "maps", "model", "profile")


@core.app.command("run")
def run_cmd(
    profile: Path = typer.Argument(..., help="a study file from profiles/, e.g. yoso-fig8.toml"),
) -> None:
    """Run a study described in a TOML profile (command + options), e.g. a paper's figure."""
    argv = profile_argv(profile)
    code = typer.main.get_command(core.app).main(args=argv, standalone_mode=False)
    if code:
        raise typer.Exit(code)


def profile_argv(profile: Path) -> list[str]:
    """`command = "error"` and an `[options]` table become `error --key value ...`."""
    if not profile.is_file():
        raise UsageError(f"{profile}: no such profile")
    try:
        doc = tomllib.loads(profile.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{profile}: not valid TOML ({exc})") from None
    command = doc.get("command")
    if command not in PROFILE_COMMANDS:
        valid = ", ".join(f'"{c}"' for c in PROFILE_COMMANDS)
        raise UsageError(f"{profile}: `command` must be one of {valid}, got {command!r}")
    options = doc.get("options", {})
    if not isinstance(options, dict):
        raise UsageError(f"{profile}: [options] must be a table of option = value")
    from attnbench.cli.parse import check_option_keys

    check_option_keys(options, typer.main.get_command(core.app).commands[command], str(profile))
    argv = [command]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv
