"""Where outputs go, known without loading pandas or matplotlib, so output paths are
checked before any heavy import: the file a result path names, a CSV's environment record
beside it, and the suffixes a figure may take."""

from __future__ import annotations

import os
from pathlib import Path

PLOT_SUFFIXES = (".png", ".svg", ".pdf")  # matplotlib picks the format from the suffix


def output_target(path: Path) -> Path:
    """The file a result path names: a symbolic link's target (so a link and its target
    share one lock, and the link stays a link when the file is replaced), else the path."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def env_sidecar(csv_path: Path) -> Path:
    """The environment record written next to a CSV: results.csv -> results.env.json (next
    to the file a symbolic link names)."""
    return output_target(csv_path).with_suffix(".env.json")
