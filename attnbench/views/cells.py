"""The text of a table cell, one rule per kind of value, for the terminal's tables (`tables`,
rich) and the docs' Markdown tables (`report`) alike, so the same value reads the same in both.

A cell is plain text: the terminal escapes it as rich markup and may colour it, Markdown
escapes `|`. An empty cell is decided by `results.schema.is_missing` alone (the rule every
reader uses) and reads MISSING. The one difference the media keep is a status's reason:
whole in the terminal, its first sentence in a document (`status(row, brief=True)`).
"""

from __future__ import annotations

from attnbench.results.schema import is_missing

MISSING = "–"
UNSTABLE = "unstable"  # what the terminal's status says of a case the study judged unstable
OVER = "!"  # after a rate that reads above 100 % of its roofline bound
_BRIEF = 60  # the longest status reason a document's table shows


def number(value) -> str:
    """Three significant digits, no exponent for the values a study reports."""
    if is_missing(value):
        return MISSING
    value = float(value)
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) < 1e-3:
        return f"{value:.1e}"
    return f"{value:.3g}"


def count(value) -> str:
    """A whole number (a batch), also when its column is float (a row lacked one)."""
    return MISSING if is_missing(value) else str(int(float(value)))


def ms(value) -> str:
    """A time given in ms, with its unit: "27.7 ms", and seconds from 1000 ms up: "1.5 s"."""
    if is_missing(value):
        return MISSING
    value = float(value)
    return f"{value / 1000:.3g} s" if value >= 1000 else f"{number(value)} ms"


def interval(low, high) -> str:
    """LOW – HIGH UNIT of two times in ms (p10 – p90), both ends in the unit of the upper
    one, so the two read against each other."""
    if is_missing(low) or is_missing(high):
        return MISSING
    unit, scale = ("s", 1000.0) if float(high) >= 1000 else ("ms", 1.0)
    return f"{number(float(low) / scale)} – {number(float(high) / scale)} {unit}"


def speedup(value, low=None, high=None) -> str:
    """A speed-up, "4×", with its 95 % interval when one is given: "4× (3.5 – 4.5)"."""
    if is_missing(value):
        return MISSING
    text = f"{float(value):.3g}×"
    if is_missing(low) or is_missing(high):
        return text
    return f"{text} ({float(low):.3g} – {float(high):.3g})"


def percent(fraction) -> str:
    """A fraction as whole percent: a stage's share of a call, a spread, a CPU wait."""
    return MISSING if is_missing(fraction) else f"{float(fraction):.0%}"


def mib(value) -> str:
    """Memory in MiB (the column's header names the unit)."""
    return number(value)


def mean_std(value, std) -> str:
    """An error over trials, "0.4 ± 0.01": mean ± std (a slope ± its standard error)."""
    return number(value) if is_missing(std) else f"{number(value)} ± {number(std)}"


def bound(row) -> str:
    """% of the roofline bound a row reaches, and which bound: "72.3 % compute"; OVER after
    it where the row reads above its bound."""
    pct = row.get("bound_pct")
    if is_missing(pct):
        return MISSING
    name = "" if is_missing(row.get("bound")) else str(row["bound"])
    return f"{number(pct)} % {name}" + (f" {OVER}" if over_bound(row) else "")


def over_bound(row) -> bool:
    """The row reads above 100 % of its bound (its `over_bound` names the likely cause)."""
    cause = row.get("over_bound")
    return not is_missing(cause) and bool(str(cause))


def status(row, brief: bool = False) -> str:
    """ "ok", else the status and its reason: "oom (out of memory at batch 1)". `brief`: the
    reason's first sentence, cut to 60 characters (a document's table)."""
    if row["status"] == "ok":
        return "ok"
    reason = "" if is_missing(row.get("reason")) else str(row["reason"])
    if brief:
        reason = reason.split(". ")[0]
        reason = reason if len(reason) <= _BRIEF else reason[: _BRIEF - 3] + "..."
    return f"{row['status']} ({reason})" if reason else str(row["status"])


def unstable(row) -> bool:
    """An ok case the study judged unstable (stable False; None: not judged)."""
    stable = row.get("stable")
    return row["status"] == "ok" and not is_missing(stable) and not bool(stable)


def size(row) -> str:
    """A row's size: its image H×W, else its n."""
    if not is_missing(row.get("grid_h")) and not is_missing(row.get("grid_w")):
        return f"{int(row['grid_h'])}×{int(row['grid_w'])}"
    return count(row.get("seq"))


def size_header(frame) -> str:
    """The size column's header: "image" when any row is an image, else "n"."""
    return "image" if any(not is_missing(h) for h in frame.get("grid_h", ())) else "n"


def markdown_table(header: list[str], rows: list[list[str]], right: list[bool]) -> list[str]:
    """A GitHub-flavoured Markdown table of cells; `|` inside a cell is escaped."""
    esc = [[c.replace("|", "\\|") for c in r] for r in [header, *rows]]
    lines = ["| " + " | ".join(esc[0]) + " |"]
    lines.append("| " + " | ".join("---:" if r else "---" for r in right) + " |")
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return lines
