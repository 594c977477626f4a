"""`attnbench compare`'s output: the table of changes (rich or Markdown) and the summary
lines with the gate's verdict, from a `compare.Comparison`; they compute nothing new."""

from __future__ import annotations

from rich.table import Table

from attnbench.views.compare import TIME, VERDICTS, Comparison
from attnbench.views.gate import FAIL, INCONCLUSIVE, Gate
from attnbench.views.intervals import LEVEL, RESAMPLES
from attnbench.views.labels import backend_label

_SHORT = {"seq": "n", "batch": "B", "heads": "H", "dim": "d", "grid_h": "h", "grid_w": "w"}


def _case_text(key: dict, columns: list[str]) -> str:
    values = [(c, key.get(c, "")) for c in columns]
    return " ".join(f"{_SHORT[c]}={v}" if c in _SHORT else v for c, v in values if v)


def _name(key: dict, columns: list[str]) -> str:
    return f"{backend_label(key['backend'])} {_case_text(key, columns)}"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:g}%"


def _rows(comparison: Comparison) -> list[tuple[str, ...]]:
    columns = comparison.varying()
    rows = []
    number = "{:.3f}" if comparison.study == TIME else "{:.4g}"  # errors span decades
    for c in comparison.changes:
        rows.append(
            (
                backend_label(c.key["backend"]),
                _case_text(c.key, columns),
                number.format(c.a_center),
                number.format(c.b_center),
                f"{c.ratio:.3f}",
                "-" if c.low is None else f"{c.low:.3f}-{c.high:.3f}",
                c.verdict,
            )
        )
    return rows


HEADERS = ("backend", "case", "A median ms", "B median ms", "B/A", "95% CI", "verdict")
ERROR_HEADERS = ("backend", "case", "A mean", "B mean", "B/A", "95% CI", "verdict")
LEFT = ("backend", "case", "verdict")
STYLES = {"slower": "bold red", "faster": "bold green", "no CI": "yellow", "unstable": "yellow"}
STYLES |= {"worse": "bold red", "better": "bold green"}


def _headers(comparison: Comparison) -> tuple[str, ...]:
    return HEADERS if comparison.study == TIME else ERROR_HEADERS


def render_table(comparison: Comparison, title: str = "attnbench compare (B vs A)") -> Table:
    """A rich table; a significant verdict is coloured and marked with `*`."""
    table = Table(title=title)
    for h in _headers(comparison):
        table.add_column(h, justify="left" if h in LEFT else "right")
    for *cells, verdict in _rows(comparison):
        mark = " *" if verdict in VERDICTS[comparison.study] else ""
        style = STYLES.get(verdict)
        table.add_row(*cells, f"[{style}]{verdict}{mark}[/]" if style else verdict)
    return table


def render_markdown(comparison: Comparison) -> str:
    """A GitHub-flavoured Markdown table; a significant verdict is bold."""
    headers = _headers(comparison)
    lines = ["| " + " | ".join(headers) + " |"]
    lines.append("|" + "|".join("---" if h in LEFT else "---:" for h in headers) + "|")
    for *cells, verdict in _rows(comparison):
        if verdict in VERDICTS[comparison.study]:
            verdict = f"**{verdict}**"
        lines.append("| " + " | ".join((*cells, verdict)) + " |")
    return "\n".join(lines)


def summary(comparison: Comparison, gate: Gate | None = None) -> list[str]:
    """Plain lines that follow the table: cases not compared, counts, and the gate's verdict
    (`gate`, when `--fail-above` asked for one)."""
    columns = comparison.varying()
    lines = []
    groups = {"only in A": [], "only in B": [], "not ok in a file": []}
    for m in comparison.missing:
        name = _name(m.key, columns)
        if not m.b_status:
            groups["only in A"].append(name if m.a_status == "ok" else f"{name} ({m.a_status})")
        elif not m.a_status:
            groups["only in B"].append(name if m.b_status == "ok" else f"{name} ({m.b_status})")
        else:
            groups["not ok in a file"].append(f"{name} (A {m.a_status}, B {m.b_status})")
    lines += [f"{title}: {'; '.join(names)}" for title, names in groups.items() if names]
    counts: dict[str, int] = {}
    for c in comparison.changes:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    tally = ", ".join(f"{n} {v}" for v, n in counts.items()) or "no case in both files"
    if comparison.study == TIME:
        lines += _time_method(comparison, tally, counts)
    else:
        lines += _error_method(comparison, tally, counts)
    shaky = [f"{_name(c.key, columns)} (in {c.unstable})" for c in comparison.changes if c.unstable]
    if shaky:
        lines.append(f"flagged unstable by its run: {'; '.join(shaky)}")
    if gate is not None:
        lines += gate_lines(comparison, gate)
    return lines


def gate_lines(comparison: Comparison, gate: Gate) -> list[str]:
    """The gate's outcome, first word PASS, FAIL or INCONCLUSIVE, with the cases it failed
    and those it could not judge by cause."""
    columns = comparison.varying()
    limit = _percent(gate.threshold)
    worse = VERDICTS[comparison.study][0]
    lines = [
        f"not judged ({cause}): {'; '.join(_name(k, columns) for k in keys)}"
        for cause, keys in gate.unjudged.items()
    ]
    if gate.new:
        lines.append(f"new in B, no reference: {'; '.join(_name(k, columns) for k in gate.new)}")
    unjudged = gate.count_unjudged()
    if gate.outcome == FAIL:
        names = "; ".join(f"{_name(c.key, columns)} {c.ratio:.3f}x" for c in gate.failed)
        lines.append(f"FAIL: significantly {worse} by more than {limit}: {names}")
    elif gate.outcome == INCONCLUSIVE:
        causes = ", ".join(f"{len(keys)} {cause}" for cause, keys in gate.unjudged.items())
        lines.append(
            f"INCONCLUSIVE: no case significantly {worse} by more than {limit}, but "
            f"{unjudged} not judged ({causes}); rerun on a quiet host, or pass "
            "--allow-unjudged to accept them"
        )
    elif unjudged:
        lines.append(
            f"PASS: no case significantly {worse} by more than {limit}; {unjudged} not "
            "judged, allowed by --allow-unjudged"
        )
    else:
        lines.append(f"PASS: every case judged, none significantly {worse} by more than {limit}")
    return lines


def _time_method(comparison: Comparison, tally: str, counts: dict[str, int]) -> list[str]:
    """How the ratios of medians and their intervals were made, and what they miss."""
    lines = []
    by_runs = [c.by_runs for c in comparison.changes]
    if by_runs and all(by_runs):
        how = (
            f"t interval over runs or rounds, its spread from {RESAMPLES} hierarchical "
            "bootstrap resamples of runs, then rounds, then samples"
        )
    else:
        how = f"bootstrap interval ({RESAMPLES} resamples of samples)"
    lines.append(
        f"{tally}: ratio of medians B/A with a {LEVEL:.0%} {how}; significant when the "
        "interval excludes 1"
    )
    if any(c.by_runs and 1 in (len(c.a), len(c.b)) for c in comparison.changes):
        lines.append(
            "one run on a side: its rounds are the units, so the intervals hold the drift "
            "between rounds but not an offset between the two runs' processes; give each "
            "side two or more runs (files or a glob) to include it"
        )
    if by_runs and not all(by_runs):
        lines.append(
            "one run of one round on a side: its intervals cover the noise within a run only, "
            "not the drift between runs; give each side two or more runs (files or a glob) "
            "or rounds (time --rounds)"
        )
    if counts.get("no CI"):
        lines.append("no CI: fewer than 2 samples in a file, medians compared without an interval")
    return lines


def _error_method(comparison: Comparison, tally: str, counts: dict[str, int]) -> list[str]:
    """How the ratios of trial means and their intervals were made, and the metrics left
    out (a ratio of cosines or captured masses is no ratio of errors)."""
    lines = [
        f"{tally}: ratio of trial means B/A (errors: above 1 is worse) with a {LEVEL:.0%} t "
        f"interval over the trials (over the files, with two or more a side), its spread "
        f"from {RESAMPLES} bootstrap resamples; significant when the interval excludes 1"
    ]
    if counts.get("no CI"):
        lines.append(
            "no CI: fewer than 2 trials in a file, or a mean error of 0, means compared "
            "without an interval"
        )
    if comparison.skipped:
        lines.append(
            "not compared (higher is closer, or not an error): " + ", ".join(comparison.skipped)
        )
    return lines
