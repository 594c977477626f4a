"""`attnbench report`: Markdown tables of the committed result CSVs for the docs."""

from pathlib import Path

import typer

from attnbench.api.probes import writable_file
from attnbench.cli import core, options
from attnbench.errors import UsageError

DEFAULT_RESULTS = Path("plots")


@core.app.command("report")
def report_cmd(
    ctx: typer.Context,
    results: Path | None = typer.Option(
        None, "--results", help=f"folder of result CSVs (default: {DEFAULT_RESULTS})"
    ),
    out: Path = typer.Option(Path("docs/results"), "--out", "-o", help="folder to write into"),
    plots: Path | None = typer.Option(None, "--plots", hidden=True, help="deprecated: --results"),
) -> None:
    """Write Markdown tables of the result CSVs (yoso.md, scram.md, field.md) for the docs."""
    from attnbench.views.report import REPORTS, report_for, write_reports

    results = options.renamed(ctx, "--plots", plots, "--results", results)
    results = results or DEFAULT_RESULTS
    if not results.is_dir():
        raise UsageError(f"{results}: no such folder")
    if not any(results.glob("*.csv")):
        raise UsageError(f"{results}: no result CSVs to report on (the reports would be empty)")
    if not any(report_for(path.name) for path in results.glob("*.csv")):
        prefixes = ", ".join(f"{p}*" for names in REPORTS.values() for p in names)
        raise UsageError(
            f"{results}: no CSV here belongs to a report (their names start {prefixes}); "
            "the reports would be empty"
        )
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out: {out} is not a folder")
    if not out.exists():  # as every other output: the folder it goes in must exist
        writable_file(out, "--out")
    try:
        written = write_reports(results, out)
    except ValueError as exc:
        raise UsageError(f"cannot read results ({exc})") from None
    except OSError as exc:
        raise UsageError(f"{out}: cannot write ({exc.strerror or exc})") from None
    for path in written:
        core.console.print(f"wrote {path}")
