"""`attnbench run PROFILE`: a study described in a TOML file, e.g. one of a paper's figures."""

import tomllib
from pathlib import Path

import typer
from typer.core import TyperGroup

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
    head = "Profiles in profiles/ (give the path: attnbench run profiles/NAME):"
    return head + "\n\n" + "\n".join(lines) if lines else ""


@core.app.command("run", epilog=_epilog())
def run_cmd(
    profile: Path = typer.Argument(
        ..., help="the path of a study file, e.g. profiles/yoso-fig8.toml"
    ),
) -> None:
    """Run a study described in a TOML profile (command + options), e.g. a paper's figure."""
    argv = profile_argv(profile)
    group = typer.main.get_command(core.app)
    try:  # the group's own main, not `OneLineErrors.main`: its errors come here to be named
        code = TyperGroup.main(group, args=argv, standalone_mode=False)
    except Exception as exc:  # a value the profile gave, named with the profile it came from
        if not isinstance(exc, UsageError) and not hasattr(exc, "format_message"):
            raise
        message = str(exc) if isinstance(exc, UsageError) else exc.format_message()
        raise UsageError(f"{profile}: {message}") from None
    if code:
        raise typer.Exit(code)


def profile_argv(profile: Path) -> list[str]:
    """`command = "error"` and an `[options]` table become `error --key value ...`."""
    if not profile.is_file():
        raise UsageError(f"{profile}: no such profile")
    doc = _read_toml(profile)
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
    _check_values(options, click_command, str(profile))
    argv = [command]
    for key, value in options.items():
        name = f"--{key.replace('_', '-')}"
        if isinstance(value, bool):  # a flag: `isolate = true` is --isolate, false --no-isolate
            argv += _flag(click_command, name, value, str(profile))
        else:
            argv += [name, str(value)]
    return argv


def _read_toml(profile: Path) -> dict:
    """The profile's TOML document; UsageError if it is not UTF-8 TOML, or nests so deep that
    the parser (which recurses once a level) gives up."""
    try:
        return tomllib.loads(profile.read_bytes().decode())
    except ValueError as exc:  # TOMLDecodeError, UnicodeDecodeError, an int of 5000 digits
        raise UsageError(f"{profile}: not valid TOML ({exc})") from None
    except RecursionError:
        raise UsageError(f"{profile}: not valid TOML (nested too deep)") from None
    except OSError as exc:
        raise UsageError(f"{profile}: cannot read ({exc.strerror or exc})") from None


def _check_values(options: dict, command, where: str) -> None:
    """Each option once, as text, a number or true/false (a flag: true or false only):
    `min-time` and `min_time` (or two names of one option) would both reach the command
    line, the later silently winning; a list, table or date has no command-line spelling,
    and str() of one is no value."""
    seen: dict[str, str] = {}
    for key, value in options.items():
        name = f"--{key.replace('_', '-')}"
        param = next(p for p in command.params if name in p.opts)
        if param.name in seen:
            raise UsageError(
                f"{where}: {seen[param.name]!r} and {key!r} are the same option ({name}); "
                "give it once"
            )
        seen[param.name] = key
        if not isinstance(value, str | int | float):  # bool is an int
            kind = "a table" if isinstance(value, dict) else f"a {type(value).__name__}"
            raise UsageError(f"{where}: {key} is {kind}; give text, a number or true/false")
        if getattr(param, "is_flag", False) and not isinstance(value, bool):
            raise UsageError(f"{where}: {key} is a flag: true or false, not {value!r}")


def _flag(command, name: str, on: bool, where: str) -> list[str]:
    """The arguments that turn the flag `name` on, or off (its --no- form)."""
    param = next(p for p in command.params if name in p.opts)
    if not getattr(param, "is_flag", False):
        raise UsageError(f"{where}: {name[2:]} takes a value, not true or false")
    return [name] if on else list(param.secondary_opts[:1])
