"""Runs one case in this fresh process for `executors.Isolated`:
`python -m attnbench.run.worker CASE.pkl ROWS.json`. The case, its measurement, the thread
count and the allocator choice come pickled; the rows go back as JSON. Only a crash of the
process itself leaves no rows file."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path


def main(job: str, out: str) -> None:
    from attnbench.measure.allocator import steady_allocator
    from attnbench.measure.threads import set_threads
    from attnbench.run.executors import CaseInputs, rows_to_json, run_case

    case, measure, threads, steady = pickle.loads(Path(job).read_bytes())
    if steady:
        steady_allocator()
    set_threads(threads)
    rows = run_case(case, measure, CaseInputs())
    Path(out).write_text(rows_to_json(rows))


if __name__ == "__main__":
    main(*sys.argv[1:3])
