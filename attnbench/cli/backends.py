"""`attnbench backends`: what can be benchmarked."""

from attnbench.cli import core


@core.app.command()
def backends() -> None:
    """List the backends, their parameters and defaults, cost, devices and backward support."""
    from attnbench.backends import backend_classes
    from attnbench.views.tables import backends_table

    core.console.print(backends_table(backend_classes()))
