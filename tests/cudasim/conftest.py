"""Simulator tests need NUMBA_ENABLE_CUDASIM=1 before numba.cuda is imported, so they run
in their own pytest process (see the README's test command) and are skipped otherwise."""

import os

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    collect_ignore_glob = ["test_*.py"]
