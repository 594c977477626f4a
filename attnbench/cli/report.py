"""`attnbench report`: Markdown tables of the committed result CSVs for the docs."""

from pathlib import Path

import typer

from attnbench.api.probes import writable_file
from attnbench.cli import core
from attnbench.errors import UsageError


@core.app.command("report")
def report_cmd(
    plots: Path = typer.Option(Path("plots"), "--plots", help="folder of result CSVs"),
    out: Path = typer.Option(Path("docs/results"), "--out", "-o", help="folder to write into"),
) -> None:
    """Write Markdown tables of the result CSVs (yoso.md, scram.md, field.md) for the docs."""
    from attnbench.views.report import REPORTS, report_for, write_reports

    if not plots.is_dir():
        raise UsageError(f"{plots}: no such folder")
    if not any(plots.glob("*.csv")):
        raise UsageError(f"{plots}: no result CSVs to report on (the reports would be empty)")
    if not any(report_for(path.name) for path in plots.glob("*.csv")):
        prefixes = ", ".join(f"{p}*" for names in REPORTS.values() for p in names)
        raise UsageError(
            f"{plots}: no CSV here belongs to a report (their names start {prefixes}); "
            "the reports would be empty"
        )
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out: {out} is not a folder")
    if not out.exists():  # as every other output: the folder it goes in must exist
        writable_file(out, "--out")
    try:
        written = write_reports(plots, out)
    except ValueError as exc:
        raise UsageError(f"cannot read results ({exc})") from None
    except OSError as exc:
        raise UsageError(f"{out}: cannot write ({exc.strerror or exc})") from None
    for path in written:
        core.console.print(f"wrote {path}")
