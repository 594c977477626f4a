"""Helpers shared by test modules: running the CLI in-process, checking its outcome, and
capturing the figures the views save.

Test modules import these as `from helpers import ...`: tests/ is on sys.path through its
conftest.py under both `pytest` and `python -m pytest`.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from pathlib import Path

from typer.testing import CliRunner

import attnbench.cli.core as cli

runner = CliRunner()


def invoke(*args):
    """Run `attnbench ARGS...` in-process; each argument is passed as its str()."""
    return runner.invoke(cli.app, [str(a) for a in args])


def assert_ok(result) -> None:
    """Exit 0 and no traceback in the output; a failure shows the output and the exception."""
    detail = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
    assert result.exit_code == 0, f"{result.output}\n{detail}"
    assert "Traceback" not in result.output


def assert_one_line_error(result, needle: str = "") -> str:
    """Exit 2, stderr exactly one non-empty `error: ...` line, no traceback anywhere."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("error: ") and line[len("error: ") :].strip(), line
    assert "Traceback" not in result.output
    assert needle in line
    return line


# ----------------------------------------------------------------------------- figures

FIGURE_MODULES = ("attnbench.views.maps", "attnbench.views.pareto", "attnbench.views.plots",
                  "attnbench.views.training")  # fmt: skip
FILE_MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF"}


def saved_figures(monkeypatch) -> list:
    """A list that fills with (path, Figure) for each figure a view saves; the real save
    still writes the file. Patches `atomic_save` in every loaded attnbench.views module."""
    for name in FIGURE_MODULES:
        importlib.import_module(name)
    real = sys.modules["attnbench.views.figures"].atomic_save
    saved = []

    def save(fig, path):
        saved.append((Path(path), fig))
        real(fig, path)

    for name, module in list(sys.modules.items()):
        if name.startswith("attnbench.views") and getattr(module, "atomic_save", None) is real:
            monkeypatch.setattr(module, "atomic_save", save)
    return saved


def assert_figure_file(path: Path) -> None:
    """`path` holds a whole image in the format its suffix names."""
    data = Path(path).read_bytes()
    if path.suffix == ".svg":
        assert b"<svg" in data and data.rstrip().endswith(b"</svg>")
    else:
        assert data.startswith(FILE_MAGIC[path.suffix])


def legend_texts(fig) -> list[str]:
    """The texts of the figure's first figure-level legend."""
    return [t.get_text() for t in fig.legends[0].get_texts()]


def series(ax) -> dict[str, tuple[list, list]]:
    """label -> (x, y) of each labelled line of `ax` (matplotlib's "_child" lines left out)."""
    return {
        line.get_label(): ([float(x) for x in line.get_xdata()],
                           [float(y) for y in line.get_ydata()])
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }  # fmt: skip
