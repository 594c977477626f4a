"""The table `attnbench selftest` prints: one row per check, its status, the measured error
against its tolerance, and what it compared or why it was skipped."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

STYLES = {"pass": "green", "fail": "bold red", "skipped": "yellow"}


def _number(value: float | None) -> str:
    if value is None:
        return ""
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.2g}"


def selftest_table(report) -> Table:
    """A `studies.selftest.Report` as a table; the caption counts the statuses and gives
    the seconds of the checks and, apart, of numba's compile."""
    env = report.environment
    where = env.get("gpu") or env.get("cpu") or report.target.device
    versions = ", ".join(f"{k} {env[k]}" for k in ("torch", "numba", "numba-cuda") if k in env)
    table = Table(
        title=escape(f"attnbench selftest: {where} (kernels: {env['kernels']}; {versions})")
    )
    for column in ("check", "status", "error", "tolerance", "detail"):
        table.add_column(column, justify="right" if column in ("error", "tolerance") else "left")
    for check in report.checks:
        status = f"[{STYLES[check.status]}]{check.status}[/]"
        table.add_row(
            escape(check.name),
            status,
            _number(check.error),
            _number(check.tolerance),
            escape(check.detail),
        )
    counts = {s: sum(c.status == s for c in report.checks) for s in STYLES}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    compile_s = "" if report.compile_s is None else f"; numba compile {report.compile_s:.1f} s"
    table.caption = f"{summary}; checks {report.checks_s:.1f} s{compile_s}"
    return table
