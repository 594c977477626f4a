"""The backends listing (`attnbench backends`): a light view (rich alone, no torch or
pandas), so the command answers fast."""

from __future__ import annotations

from rich.table import Table


def backends_table(listing: list[dict]) -> Table:
    """A row per backend (`cli.backends.describe`): its name, then what it is, its parameters
    with their defaults, its cost, devices and backward, one per line, so the table reads in
    80 columns."""
    table = Table(title="attnbench backends", show_lines=True)
    table.add_column("name", no_wrap=True)
    table.add_column("what it is, parameters (defaults), cost, devices, backward")
    for b in listing:
        backward = "backward: yes" if b["backward"] else "no backward"
        devices = f"runs on {', '.join(b['devices'])}; {backward}"
        table.add_row(b["name"], "\n".join([b["summary"], b["params"], b["complexity"], devices]))
    return table
