"""The `attnbench` command line: each module registers the command it is named after on the app in
`core`; no math and no row building here — options are parsed into a study, the study's
rows are shown by the views."""

from attnbench.cli import (  # noqa: F401 (commands)
    backends,
    compare,
    error,
    machine,
    maps,
    model,
    pareto,
    plot,
    profile,
    report,
    run,
    selftest,
    time,
    train,
)
from attnbench.cli.core import app, main

__all__ = ["app", "main"]
