"""`attnbench run PROFILE`: a study described in a TOML file, e.g. one of a paper's figures."""

import tomllib
from pathlib import Path

import typer

from attnbench.cli import core
from attnbench.errors import UsageError

PROFILE_COMMANDS = ("time", "error", "maps", "model", "profile", "train")
PROFILE_KEYS = ("command", "options")
# The profiles that come with attnbench, beside the package in a source checkout.
SHIPPED = Path(__file__).resolve().parents[2] / "profiles"


def shipped_profiles(folder: Path = SHIPPED, width: int = 76) -> list[str]:
    """ "NAME: what it runs" for each profile in `folder`, what it runs being its first
    comment line up to a colon, cut to fit `width` characters."""
    lines = []
    for path in sorted(folder.glob("*.toml")):
        first = path.read_text().partition("\n")[0].lstrip("# ").strip()
        line = f"{path.name}: {first.partition(': ')[0]}"
        lines.append(line if len(line) <= width else line[: width - 1] + "…")
    return lines


def _epilog() -> str:
    lines = shipped_profiles()
    return "Profiles in profiles/:\n\n" + "\n".join(lines) if lines else ""


@core.app.command("run", epilog=_epilog())
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
    unknown = sorted(set(doc) - set(PROFILE_KEYS))
    if unknown:
        valid = ", ".join(PROFILE_KEYS)
        raise UsageError(f"{profile}: unknown key {unknown[0]!r} (a profile has: {valid})")
    command = doc.get("command")
    if command not in PROFILE_COMMANDS:
        valid = ", ".join(f'"{c}"' for c in PROFILE_COMMANDS)
        raise UsageError(f"{profile}: `command` must be one of {valid}, got {command!r}")
    options = doc.get("options", {})
    if not isinstance(options, dict):
        raise UsageError(f"{profile}: [options] must be a table of option = value")
    from attnbench.cli.parse import check_option_keys

    click_command = typer.main.get_command(core.app).commands[command]
    check_option_keys(options, click_command, str(profile))
    argv = [command]
    for key, value in options.items():
        name = f"--{key.replace('_', '-')}"
        if isinstance(value, bool):  # a flag: `isolate = true` is --isolate, false --no-isolate
            argv += _flag(click_command, name, value, str(profile))
        else:
            argv += [name, str(value)]
    return argv


def _flag(command, name: str, on: bool, where: str) -> list[str]:
    """The arguments that turn the flag `name` on, or off (its --no- form)."""
    param = next(p for p in command.params if name in p.opts)
    if not getattr(param, "is_flag", False):
        raise UsageError(f"{where}: {name[2:]} takes a value, not true or false")
    return [name] if on else list(param.secondary_opts[:1])
