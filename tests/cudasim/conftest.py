"""Simulator tests need NUMBA_ENABLE_CUDASIM=1 before numba.cuda is imported, so they run
in their own pytest process (see the README's test command) and are skipped otherwise."""

import os

import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(autouse=True)
def _simulating():
    """Quick thread switches and one shared array per call site (`kernels.simulator`)."""
    from attnbench.kernels.simulator import simulating

    with simulating():
        yield
