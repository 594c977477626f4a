"""Runs one case, or a group measured together, in this fresh process for
`executors.Isolated`: `python -m attnbench.run.worker CASE.pkl ROWS.json PARENT_PID`. The
cases, their measurement, the thread count and the allocator choice come pickled; the rows
of each case go back as JSON. Only a
crash of the process itself leaves no rows file. The worker dies with its parent, so a
killed run leaves no case measuring on."""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1  # prctl option: the signal this process gets when its parent dies


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux), and exit now if
    the parent `parent` died before that was set."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def main(job: str, out: str, parent: str) -> None:
    die_with_parent(int(parent))
    from attnbench.case import CaseInputs
    from attnbench.measure.allocator import steady_allocator
    from attnbench.measure.threads import set_threads
    from attnbench.run.executors import rows_to_json, run_case, run_cases
    from attnbench.run.placement import here

    cases, measure, threads, steady = pickle.loads(Path(job).read_bytes())
    if steady:
        steady_allocator()
    set_threads(threads)
    if len(cases) == 1:
        rows = [run_case(cases[0], measure, CaseInputs())]
    else:
        rows = run_cases(cases, measure, CaseInputs())
    for case_rows in rows:
        here("isolated", cases[0].device).stamp(case_rows)
    Path(out).write_text(rows_to_json(rows))


if __name__ == "__main__":
    main(*sys.argv[1:4])
