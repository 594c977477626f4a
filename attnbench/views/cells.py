"""How the report writes a number in a table cell (an empty one: `results.schema.is_missing`)."""

from __future__ import annotations

from attnbench.results.schema import is_missing


def number(value) -> str:
    """Three significant digits, no exponent for the values a study reports."""
    if is_missing(value):
        return "–"
    value = float(value)
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) < 1e-3:
        return f"{value:.1e}"
    return f"{value:.3g}"


def size(row) -> str:
    """A row's size: its image HxW, else its n."""
    if not is_missing(row.get("grid_h")) and not is_missing(row.get("grid_w")):
        return f"{int(row['grid_h'])}×{int(row['grid_w'])}"
    return str(int(row["seq"]))


def size_header(frame) -> str:
    """The size column's header: "image" when any row is an image, else "n"."""
    return "image" if frame["grid_h"].notna().any() else "n"


def markdown_table(header: list[str], rows: list[list[str]], right: list[bool]) -> list[str]:
    """A GitHub-flavoured Markdown table; `|` inside a cell is escaped."""
    esc = [[c.replace("|", "\\|") for c in r] for r in [header, *rows]]
    lines = ["| " + " | ".join(esc[0]) + " |"]
    lines.append("| " + " | ".join("---:" if r else "---" for r in right) + " |")
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return lines
