"""The commands that read result files: `plot`, `pareto`, `compare` and `report`."""

from pathlib import Path

import typer

from attnbench.cli import core, options, shared
from attnbench.cli.parse import writable_file
from attnbench.errors import UsageError


@core.app.command("plot")
def plot_cmd(
    results: Path = typer.Argument(
        ..., help="a CSV or JSON written by time, error, model or profile, or train's log"
    ),
    out: options.Out = None,
) -> None:
    """Redraw a study's figure from a saved result file, or a training log's held-out
    [MASK] loss against steps and time.

    The figure goes to --out, by default the result file with the suffix .png."""
    from attnbench.cli.parse import output_path
    from attnbench.views.figures import PLOT_SUFFIXES
    from attnbench.views.plots import plot_results

    if not results.is_file():
        raise UsageError(f"{results}: no such file")
    out = output_path(out or results.with_suffix(".png"), "--out", PLOT_SUFFIXES)
    from attnbench.views.training import is_training_log, parity_plot, read_log

    if is_training_log(results):
        try:
            log = read_log(results)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        parity_plot(log, out, f"attnbench train: {results.name}")
        core.console.print(f"wrote {out}")
        return
    plot_results(shared.read_results(results), out, shared.run_env(results))
    core.console.print(f"wrote {out}")


@core.app.command("pareto")
def pareto_cmd(
    time_file: Path = typer.Argument(..., help="a CSV or JSON written by time"),
    error_file: Path = typer.Argument(..., help="a CSV or JSON written by error"),
    seq: int = typer.Option(None, "--seq", help="the n compared (default: the largest in both)"),
    metric: str = typer.Option(
        "radian_vs_softmax", "--metric", help="the error drawn, e.g. rel_frobenius_vs_softmax"
    ),
    out: options.Out = None,
) -> None:
    """Quality vs cost: each backend's error against its runtime at one n, Pareto front marked.

    Prints the table; --out also draws the figure."""
    from attnbench.cli.parse import output_path
    from attnbench.views.figures import PLOT_SUFFIXES
    from attnbench.views.labels import backend_label
    from attnbench.views.pareto import pareto_points, plot_pareto, render_table, unmatched

    for path in (time_file, error_file):
        if not path.is_file():
            raise UsageError(f"{path}: no such file")
    frames = [shared.read_results(path) for path in (time_file, error_file)]
    if out is not None:
        out = output_path(out, "--out", PLOT_SUFFIXES)
    points = pareto_points(*frames, seq=seq, metric=metric)
    core.console.print(render_table(points, metric))
    dropped = points.attrs.get("inapplicable", [])
    missing = [b for b in unmatched(*frames, points) if b not in dropped]
    if missing:
        typer.echo(f"in one file only, not drawn: {', '.join(missing)}")
    if dropped:
        names = ", ".join(backend_label(b) for b in dropped)
        typer.echo(f"{metric} does not apply to {names} (unit output rows), not drawn")
    if out is not None:
        plot_pareto(points, out, metric, shared.run_env(time_file))
        core.console.print(f"wrote {out}")


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
    from attnbench.cli.parse import parse_fraction
    from attnbench.views import compare, compare_text, gate

    threshold = None  # a share, as parse_fraction reads it
    if fail_above is not None:
        threshold = parse_fraction(fail_above, "--fail-above", "a slowdown")
    elif allow_unjudged:
        raise UsageError("--allow-unjudged: only with --fail-above (it relaxes the gate)")
    comparison = compare.compare_files(a, b)
    verdict = None if threshold is None else gate.judge(comparison, threshold, allow_unjudged)
    if markdown:
        typer.echo(compare_text.render_markdown(comparison) + "\n")
    else:
        core.console.print(compare_text.render_table(comparison))
    for line in compare_text.summary(comparison, verdict):
        typer.echo(line)
    if verdict is not None and verdict.exit_code:
        raise typer.Exit(verdict.exit_code)


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
