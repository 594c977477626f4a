"""The executors, one vocabulary from the option to the rows: `in-process`, `isolated` and
`ray` are the names `--executor` takes, the names registered, and the kind each row's
`worker` column records; Ray loads only when its executor is built."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import attnbench
from attnbench.api import where
from attnbench.backends import get_backend
from attnbench.case import Case
from attnbench.errors import UsageError
from attnbench.inputs import Inputs
from attnbench.results.read import read_rows
from attnbench.run import executors, runner
from attnbench.run.ray_executor import RayPool
from attnbench.run.study import Cases, Measure, case_row

NAMES = ["in-process", "isolated", "ray"]
TINY = dict(seq=64, heads=1, dim=8, device="cpu", backends="softmax", rounds=1, repeats=1,
            warmup=0, min_time=0)  # fmt: skip


def nothing(case, inputs):
    return []


def counted(case, inputs):
    return [case_row(case, "total", value=float(case.n))]


MEASURE = Measure(nothing, "total")


def make_case(backend: str, n: int) -> Case:
    return Case("test", get_backend(backend), Inputs("random", 1, 1, 4), n, None, 1, 1, 4,
                "float32", "cpu")  # fmt: skip


class Handing(executors.Pool):
    """A pool that measures nothing: each case's row comes back from its `sweep`."""

    def __init__(self, measure, threads=None, steady=False):
        self.measure = measure

    def sweep(self, units):
        for index, unit in enumerate(units):
            for place, case in enumerate(unit.cases):
                yield index, place, [case_row(case, "total", value=-1.0)]


class NotAPool(executors.InProcess):
    """An executor with a method of a pool's name: still handed its cases one by one."""

    def sweep(self, units):
        raise AssertionError("not a pool")


def test_the_registry_holds_the_three_executors_the_option_names():
    assert list(executors.EXECUTORS) == NAMES
    assert list(where.EXECUTORS) == NAMES


def test_each_executor_says_whether_it_is_a_pool():
    assert not executors.InProcess.pooled and not executors.Isolated.pooled
    assert RayPool.pooled


@pytest.mark.parametrize(("executor", "value"), [(Handing, -1.0), (NotAPool, 16.0)])
def test_the_runner_hands_whole_groups_to_what_says_it_is_a_pool(executor, value):
    study = Cases([make_case("sdpa", 16), make_case("softmax", 16)], Measure(counted, "total"))
    rows = [row for rows in runner.run(study, executor=executor) for row in rows]
    assert [(r.backend, r.value) for r in rows] == [("sdpa", value), ("softmax", value)]


@pytest.mark.parametrize("executor", ["in-process", "isolated"])
def test_rows_name_the_executor_that_measured_them(executor):
    rows = attnbench.time(**TINY, executor=executor)
    kinds = {worker.partition("/")[::2] for worker in rows["worker"]}
    assert {kind for kind, _ in kinds} == {executor}
    pids = {int(pid) for _, pid in kinds}
    assert (pids == {os.getpid()}) == (executor == "in-process")


def test_a_file_whose_rows_say_local_still_reads_and_resumes(tmp_path):
    """An older file names the run's own process `local/PID`: it reads, and a resumed run
    keeps those rows."""
    out = tmp_path / "time.csv"
    attnbench.time(**TINY, csv=out)
    out.write_text(out.read_text().replace("in-process/", "local/"))
    assert read_rows(out)["worker"].str.startswith("local/").all()
    resumed = attnbench.time(**TINY, csv=out, resume=True)
    assert resumed["worker"].str.startswith("local/").all()  # the rows kept, not measured again


def test_importing_the_executors_does_not_import_ray():
    code = "import sys, attnbench.run.executors; print('ray' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize(
    "unknown",
    [
        lambda: executors.executor_for("nowhere"),
        lambda: runner.run(Cases([], MEASURE), executor="nowhere"),
        lambda: attnbench.time(**TINY, executor="nowhere"),
    ],
)
def test_an_unknown_executor_is_a_usage_error_naming_the_three(unknown):
    with pytest.raises(UsageError, match="unknown executor 'nowhere'") as caught:
        unknown()
    assert str(caught.value).endswith("valid: in-process, isolated, ray")


def test_ray_is_built_through_the_registry_with_its_options():
    pool = executors.executor_for("ray", cluster="the cluster", cpus_per_worker=2)
    built = pool(MEASURE, 1, True)
    assert isinstance(built, RayPool) and built.pooled
    assert (built.cluster, built.cpus_per_worker, built.threads) == ("the cluster", 2, 1)
