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
    head = "Shipped profiles (attnbench run NAME, or by path: attnbench run profiles/NAME):"
    return head + "\n\n" + "\n".join(lines) if lines else ""


@core.app.command("run", epilog=_epilog())
def run_cmd(
    profile: Path = typer.Argument(
        ...,
        help="a shipped profile's name (yoso-fig8) or a study file's path, "
        "e.g. profiles/yoso-fig8.toml",
    ),
    sets: list[str] | None = typer.Option(
        None,
        "--set",
        metavar="KEY=VALUE",
        help="override an option of the profile, named as in its options table "
        "(a flag: true or false); repeatable, e.g. --set seq=1k --set csv=out.csv",
    ),
) -> None:
    """Run a study described in a TOML profile (command + options), e.g. a paper's figure."""
    overrides = parse_sets(sets or [])
    profile = find_profile(profile)
    argv = profile_argv(profile, overrides)
    group = typer.main.get_command(core.app)
    try:  # the group's own main, not `OneLineErrors.main`: its errors come here to be named
        code = TyperGroup.main(group, args=argv, standalone_mode=False)
    except Exception as exc:  # a value the profile gave, named with the profile it came from
        if not isinstance(exc, UsageError) and not hasattr(exc, "format_message"):
            raise
        message = str(exc) if isinstance(exc, UsageError) else exc.format_message()
        source = f"{profile} with --set" if overrides else str(profile)
        source = "--set" if _names_a_set_option(exc, message, overrides) else source
        raise UsageError(f"{source}: {message}") from None
    if code:
        raise typer.Exit(code)


def find_profile(profile: Path) -> Path:
    """`profile` when it is a file; otherwise a bare name (`yoso-fig8`, `yoso-fig8.toml`) is
    the shipped profile of that name, so a figure runs from any folder. A file of that name
    here wins: what the user can see beside them is what runs."""
    if profile.is_file() or len(profile.parts) != 1:
        return profile  # profile_argv says when it is no file
    name = profile.name if profile.name.endswith(".toml") else f"{profile.name}.toml"
    if not SHIPPED.is_dir():  # an install without the source checkout's profiles/
        raise UsageError(
            f"{profile}: no such profile (looked in {Path.cwd()} and for shipped profiles "
            f"in {SHIPPED}, which this install lacks)"
        )
    if (SHIPPED / name).is_file():
        return SHIPPED / name
    names = ", ".join(path.stem for path in sorted(SHIPPED.glob("*.toml")))
    raise UsageError(f"{profile}: no such profile here, nor a shipped one; shipped: {names}")


def parse_sets(sets: list[str]) -> list[tuple[str, str]]:
    """Each `--set KEY=VALUE` as (key, value), split at the first `=` so a value may hold
    one; refused before the profile is read, so a malformed override never runs anything."""
    pairs = []
    for text in sets:
        key, eq, value = text.partition("=")
        if not eq:
            raise UsageError(f"--set {text!r}: give KEY=VALUE, e.g. --set seq=1k")
        if not key.strip():
            raise UsageError(f"--set {text!r}: no option name before '='")
        pairs.append((key.strip(), value))
    return pairs


def profile_argv(profile: Path, overrides: list[tuple[str, str]] = ()) -> list[str]:
    """`command = "error"` and an `[options]` table become `error --key value ...`; each
    override (key, text) replaces the profile's value of that option or adds it, as text
    the command parses itself, so every check of the command applies to it."""
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
    from attnbench.api.parse import check_option_keys

    click_command = typer.main.get_command(core.app).commands[command]
    check_option_keys(options, click_command, str(profile))
    _check_values(options, click_command, str(profile))
    options = _override(options, overrides, click_command)
    argv = [command]
    for key, value in options.items():
        name = f"--{key.replace('_', '-')}"
        if isinstance(value, bool):  # a flag: `isolate = true` is --isolate, false --no-isolate
            argv += _flag(click_command, name, value, str(profile))
        else:
            argv += [name, str(value)]
    return argv


def _override(options: dict, overrides: list[tuple[str, str]], command) -> dict:
    """`options` with each override in place of the profile's value for its option, under
    either spelling (`min-time`, `min_time`); one option set twice is refused, as in a
    profile. A flag's text is true or false, made the bool a profile would give."""
    from attnbench.api.parse import check_option_keys

    check_option_keys([key for key, _ in overrides], command, "--set")
    merged = dict(options)
    given: dict[str, str] = {}
    for key, text in overrides:
        param = _param(command, key)
        if param.name in given:
            raise UsageError(
                f"--set: {given[param.name]!r} and {key!r} are the same option "
                f"(--{key.replace('_', '-')}); give it once"
            )
        given[param.name] = key
        for old in [old for old in merged if _param(command, old) is param]:
            del merged[old]
        value: str | bool = text
        if getattr(param, "is_flag", False):
            if text.lower() not in ("true", "false"):
                raise UsageError(f"--set {key}: a flag: true or false, not {text!r}")
            value = text.lower() == "true"
        merged[key] = value
    return merged


def _names_a_set_option(exc: Exception, message: str, overrides) -> bool:
    """Whether a command's error is about an option that --set gave (click names the
    option in `exc.param`, attnbench's own checks start the message with it), so the error
    points at the command line rather than at a profile that does not hold the value."""
    set_opts = {f"--{key.replace('_', '-')}" for key, _ in overrides}
    param = getattr(exc, "param", None)
    named = set(param.opts) if param is not None else {message.split(":")[0].split(" ")[0]}
    return bool(named & set_opts)


def _param(command, key: str):
    """The click parameter of the long option `key` (without dashes, `-` or `_`)."""
    name = f"--{key.replace('_', '-')}"
    return next(p for p in command.params if name in p.opts)


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
        param = _param(command, key)
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
