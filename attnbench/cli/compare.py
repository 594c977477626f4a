"""`attnbench compare`: two runs case by case, and a gate with three outcomes."""

import typer

from attnbench.cli import core


@core.app.command("compare")
def compare_cmd(
    a: str = typer.Argument(
        ...,
        help="the reference: a result file (CSV or JSON) of time or error, or a quoted glob "
        "of runs",
    ),
    b: str = typer.Argument(..., help="the result file(s) to judge against it, likewise"),
    fail_above: str = typer.Option(
        None,
        "--fail-above",
        help="the gate: exit 1 if a case's 95% interval lies above 1 and its ratio above "
        "1 + this (e.g. 5%): slower, or with error files worse; exit 3 (inconclusive) if "
        "any case could not be judged (unstable, no interval, crashed, oom, missing in B)",
    ),
    allow_unjudged: bool = typer.Option(
        False,
        "--allow-unjudged",
        help="with --fail-above: pass despite cases that could not be judged (they are "
        "still listed)",
    ),
    markdown: bool = typer.Option(False, "--markdown", help="print a Markdown table"),
) -> None:
    """Compare runs case by case: ratio of medians B/A with a 95% bootstrap interval.

    With two or more runs a side (files, or a glob: 'before-*.csv'), or runs in rounds
    (time --rounds), those are the units: the interval is Student's t over them, its spread
    from a bootstrap of runs, then rounds, then samples, so drift between runs and rounds is
    in it; with one run of one round a side it covers the noise within a run only.

    Two error files (attnbench error, gradient rows included) compare each error where lower
    is closer by the ratio of its trial means, the trials the interval's units: worse or
    better.

    With --fail-above it is a gate with three outcomes: pass (exit 0), fail (1), and
    inconclusive (3) when a case could not be judged, which --allow-unjudged turns into a
    pass that still names them."""
    from attnbench.api.compare import run_compare
    from attnbench.views import compare_text

    compared = run_compare(a, b, fail_above, allow_unjudged)
    if markdown:
        typer.echo(compare_text.render_markdown(compared.comparison) + "\n")
    else:
        core.console.print(compare_text.render_table(compared.comparison))
    for line in compare_text.summary(compared.comparison, compared.gate):
        typer.echo(line)
    if compared.exit_code:
        raise typer.Exit(compared.exit_code)
