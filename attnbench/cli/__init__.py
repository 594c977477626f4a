"""The `attnbench` command line: each module registers one group of commands on the app in
`core`; no math and no row building here — options are parsed into a study, the study's
rows are shown by the views."""

from attnbench.cli import (  # noqa: F401 (commands)
    backends,
    files,
    machine,
    profiles,
    profiling,
    quality,
    selftest,
    speed,
    training,
)
from attnbench.cli.core import app, main

__all__ = ["app", "main"]
