"""The `attnbench` command line."""

from attnbench.cli.core import app, main

__all__ = ["app", "main"]
