"""The `attnbench` application: the Typer app every command module registers on, the
consoles, and the rule that every user mistake is one line `error: ...` and exit code 2.

torch, numba, pandas and matplotlib are imported inside the commands that need them, so
`--help` and `--version` answer at once.
"""

from __future__ import annotations

import importlib.metadata
import sys

import typer
from rich.console import Console
from typer.core import TyperGroup, TyperOption

from attnbench.errors import UsageError
from attnbench.results.interrupts import Terminated, announce_interrupt, sigterm_as_interrupt

console = Console(width=None if sys.stdout.isatty() else 140)  # no wrapping in logs
progress_console = Console(stderr=True)


# The order `attnbench --help` lists the commands in: studies first, then result files.
COMMANDS = (
    "backends", "selftest", "machine", "time", "profile", "model", "train", "error", "maps",
    "pareto", "plot", "compare", "report",
)  # fmt: skip


class OneLineErrors(TyperGroup):
    """Turns option-parsing errors and UsageError into one line on stderr and exit code 2."""

    def list_commands(self, ctx) -> list[str]:
        names = super().list_commands(ctx)
        return sorted(names, key=lambda name: (COMMANDS + (name,)).index(name))

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        try:
            with sigterm_as_interrupt() as sigterm:
                code = super().main(*args, standalone_mode=False, **kwargs)
            if code == 130:  # typer turns Ctrl-C into exit code 130 without a word
                announce_interrupt()
                code = 143 if sigterm.received else 130  # 128 + SIGTERM, as a shell reports
        except UsageError as exc:
            code = _one_line_error(str(exc))
        except (typer.Abort, KeyboardInterrupt) as exc:
            announce_interrupt()
            code = 143 if isinstance(exc, Terminated) else 130
        except Exception as exc:
            if not hasattr(exc, "format_message"):  # not an option-parsing error: a real bug
                raise
            code = _one_line_error(exc.format_message())
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


def _one_line_error(message: str) -> int:
    if message.strip():  # empty when click has already shown the help instead
        typer.echo(f"error: {' '.join(message.split())}", err=True)
    return 2


_typed = TyperOption.display_type_rich


def _untyped_flags(option: TyperOption, ctx) -> str | None:
    """Help shows no value type for a flag (--help, --version, --isolate): it takes none.
    Typer shows `<bool>` there, which reads as if the flag took a value."""
    return None if option.is_flag else _typed(option, ctx)


TyperOption.display_type_rich = _untyped_flags

app = typer.Typer(
    cls=OneLineErrors,
    help="Benchmark and profile attention mechanisms: runtime, peak memory, approximation error.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        try:
            version = importlib.metadata.version("attnbench")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        typer.echo(f"attnbench {version}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """Benchmark and profile attention mechanisms: runtime, peak memory, approximation error."""


def main() -> None:
    app()


def progress_bar():
    """The run's progress on stderr (`views.progress`), for the API's `progress`."""
    from attnbench.views.progress import ProgressBar

    return ProgressBar(progress_console)


def report_finished(finished, max_spread: float | None = None, metric: str | None = None,
                    remedy: str | None = None) -> None:  # fmt: skip
    """After a study's table: the warning naming its unstable cases (`max_spread` given),
    then each file written."""
    if max_spread is not None:
        from attnbench.views.tables import unstable_warning

        extra = () if metric is None else (metric, remedy)
        warning = unstable_warning(finished.frame, max_spread, *extra)
        if warning:
            typer.echo(warning, err=True)
    for path in (*finished.outcome.written, finished.plot):
        if path is not None:
            console.print(f"wrote {path}")
