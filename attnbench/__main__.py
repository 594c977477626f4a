"""`python -m attnbench`: the same command line as the `attnbench` script, for a checkout
that is on the path but not installed."""

from attnbench.cli import main

main()
