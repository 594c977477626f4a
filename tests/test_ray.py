"""Sweeps through `--executor ray` on real Ray clusters: a local one the module starts once
(two CPUs, two workers of one CPU each) and a simulated two-node one.

What is asserted: the rows of a Ray run and of a local run agree in every column that is
not a timing or a placement; a comparison group never spans two workers; a worker killed
mid-group costs exactly the cases of its group that had not come back; an interrupted Ray
run leaves whole cases that `--resume` completes. Skipped when Ray is not installed.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

ray = pytest.importorskip("ray")

from ray import cloudpickle  # noqa: E402

from attnbench.backends import get_backend  # noqa: E402
from attnbench.case import Case  # noqa: E402
from attnbench.cli import app  # noqa: E402
from attnbench.errors import UsageError  # noqa: E402
from attnbench.inputs import Inputs  # noqa: E402
from attnbench.results import sink as result_sink  # noqa: E402
from attnbench.results.read import read_rows  # noqa: E402
from attnbench.run import runner  # noqa: E402
from attnbench.run.executors import executor_for  # noqa: E402
from attnbench.run.ray_cluster import Cluster  # noqa: E402
from attnbench.run.study import Cases, Measure, case_row  # noqa: E402

# the workers unpickle this module's measurements by value: they cannot import a test file
cloudpickle.register_pickle_by_value(sys.modules[__name__])

PLACEMENT = ["node", "worker", "hardware", "co_tenancy", "run_id"]
ERROR = ["error", "--seq", "64,128", "--heads", "1", "--dim", "8", "--backends", "sdpa,yoso-8",
         "--trials", "2", "--mc-seeds", "2", "--threads", "1", "--device", "cpu"]  # fmt: skip
RAY = ["--executor", "ray", "--cpus-per-worker", "1"]


@pytest.fixture(scope="module")
def ray_cluster(ceilings_cache):
    """One local Ray cluster for the module (its workers share the session's ceilings
    cache), gone once its tests are done."""
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def local_error_rows(tmp_path_factory) -> pd.DataFrame:
    """The error sweep run here, the reference every Ray run of it is held against."""
    out = tmp_path_factory.mktemp("local") / "local.csv"
    result = CliRunner().invoke(app, [*ERROR, "--csv", str(out)])
    assert result.exit_code == 0, result.output
    return read_rows(out)


def same_rows(ray_rows: pd.DataFrame, local_rows: pd.DataFrame, columns=None) -> None:
    """Equal in `columns` (default: every one but the placement and the run id), matched
    by case and metric."""
    columns = columns or [c for c in local_rows.columns if c not in PLACEMENT]
    key = ["case_id", "metric"]
    left = ray_rows.sort_values(key).reset_index(drop=True)[columns]
    right = local_rows.sort_values(key).reset_index(drop=True)[columns]
    pd.testing.assert_frame_equal(left, right, check_dtype=False)


def one_worker_per_group(rows: pd.DataFrame, group: str) -> None:
    """Every comparison group's rows name one worker, in one process."""
    assert rows.groupby(group)["worker"].nunique().eq(1).all()
    assert rows["worker"].str.fullmatch(r"ray-\d+/\d+").all()


def test_an_error_sweep_on_ray_gives_the_rows_of_a_local_run(
    ray_cluster, tmp_path, local_error_rows
):
    out = tmp_path / "ray.csv"
    result = CliRunner().invoke(app, [*ERROR, *RAY, "--csv", str(out)])
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    same_rows(rows, local_error_rows)  # the values too: the error study is seeded
    assert rows["metric"].str.contains("slope").any()  # a backend's lengths met in `finish`
    one_worker_per_group(rows, "backend")
    assert rows["co_tenancy"].between(1, 2).all()


def test_a_time_sweep_on_ray_times_each_length_on_one_worker(ray_cluster, tmp_path):
    args = ["time", "--seq", "64,128", "--heads", "1", "--dim", "8", "--threads", "1",
            "--backends", "softmax,sdpa,yoso-8", "--rounds", "2", "--repeats", "2",
            "--min-time", "0", "--warmup", "1", "--device", "cpu"]  # fmt: skip
    frames = {}
    for name, extra in (("local", []), ("ray", RAY)):
        out = tmp_path / f"{name}.csv"
        result = CliRunner().invoke(app, [*args, *extra, "--csv", str(out)])
        assert result.exit_code == 0, result.output
        frames[name] = read_rows(out)
    identity = ["study", "backend", "impl", "device", "dtype", "mode", "inputs", "batch",
                "heads", "seq", "dim", "metric", "unit", "status", "case_id", "baseline",
                "threads", "fingerprint", "schema_version", "m", "tau"]  # fmt: skip
    same_rows(frames["ray"], frames["local"], identity)
    rows = frames["ray"]
    one_worker_per_group(rows, "seq")
    times = rows[rows["metric"] == "time_ms"]
    assert times["speedup"].notna().all() and times["speedup_low"].notna().all()


# ------------------------------------------------------------------ a worker killed mid-group


def measured(case, inputs):
    return [case_row(case, "total", value=float(case.n))]


REPORT_S = 1.0  # what a case runs before its kernel crashes: time for the last rows to go


def killed_on(case, inputs):
    """Kills its own process, as a segfault in a kernel would, on the case marked so, after
    running a while as a kernel does: Ray reports a streamed result asynchronously, so a
    process killed within milliseconds of yielding the previous case's rows can take them
    with it, and the test would then judge Ray's timing rather than the executor."""
    if case.settings.get("kill"):
        time.sleep(REPORT_S)
        os.kill(os.getpid(), signal.SIGKILL)
    return measured(case, inputs)


def test_a_killed_worker_costs_only_the_unfinished_cases_of_its_group(ray_cluster):
    def case(backend, n):
        settings = {"kill": True} if (backend, n) == ("softmax", 32) else {}
        return Case("test", get_backend(backend), Inputs("random", 1, 1, 4), n, None, 1, 1, 4,
                    "float32", "cpu", settings=settings)  # fmt: skip

    cases = [case(b, n) for n in (16, 32, 48) for b in ("sdpa", "softmax", "yoso-e")]
    pool = executor_for("ray", cluster=Cluster(ray, None, started=False), cpus_per_worker=1)
    sweep = runner.run(Cases(cases, Measure(killed_on, "total")), executor=pool)
    rows = {(r.backend.split(":")[0], r.seq): r for case_rows in sweep for r in case_rows}
    crashed = {key for key, row in rows.items() if row.status == "crashed"}
    assert crashed == {("softmax", 32), ("yoso-e", 32)}  # the killed case and the one after it
    assert all(rows[key].status == "ok" for key in rows.keys() - crashed)
    assert all("Ray worker died" in rows[key].reason for key in crashed)
    assert rows["softmax", 32].worker == rows["sdpa", 32].worker  # the group's own worker
    ray_idle()


def test_a_killed_worker_is_restarted_and_takes_the_later_groups(ray_cluster):
    """One worker (two CPUs): the groups after the killed one are measured, by its restart."""

    def case(backend, n):
        settings = {"kill": True} if (backend, n) == ("sdpa", 32) else {}
        return Case("test", get_backend(backend), Inputs("random", 1, 1, 4), n, None, 1, 1, 4,
                    "float32", "cpu", settings=settings)  # fmt: skip

    cases = [case(b, n) for n in (16, 32, 48, 64) for b in ("sdpa", "softmax")]
    pool = executor_for("ray", cluster=Cluster(ray, None, started=False), cpus_per_worker=2)
    sweep = runner.run(Cases(cases, Measure(killed_on, "total")), executor=pool)
    rows = {(r.backend.split(":")[0], r.seq): r for case_rows in sweep for r in case_rows}
    crashed = {key for key, row in rows.items() if row.status == "crashed"}
    assert crashed == {("sdpa", 32), ("softmax", 32)}  # the cases that were running on it
    assert all(rows[key].status == "ok" for key in rows.keys() - crashed)
    before, after = rows["sdpa", 16].worker, rows["sdpa", 48].worker
    assert before.startswith("ray-0/") and after.startswith("ray-0/") and before != after
    ray_idle()


def ray_idle(timeout_s: float = 60.0) -> None:
    """Wait until the pool's workers are gone and their CPUs free again."""
    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0) < 2:
        assert time.monotonic() < deadline, "the pool's workers outlived the sweep"
        time.sleep(0.5)


# ------------------------------------------------------------------ interrupt and resume


def test_resume_completes_an_interrupted_ray_run(
    ray_cluster, tmp_path, monkeypatch, local_error_rows
):
    out = tmp_path / "ray.csv"
    commit = result_sink.ResultSink.add_case
    commits = []

    def interrupted_after_two(self, rows):
        if len(commits) == 2:
            raise KeyboardInterrupt
        commits.append(rows)
        commit(self, rows)

    monkeypatch.setattr(result_sink.ResultSink, "add_case", interrupted_after_two)
    result = CliRunner().invoke(app, [*ERROR, *RAY, "--csv", str(out)])
    assert result.exit_code == 130 and "interrupted" in result.output
    ray_idle()  # Ctrl-C ended the workers too
    kept = read_rows(out)
    assert kept["case_id"].nunique() == 2  # whole cases, as many as were committed
    monkeypatch.setattr(result_sink.ResultSink, "add_case", commit)
    result = CliRunner().invoke(app, [*ERROR, *RAY, "--csv", str(out), "--resume"])
    assert result.exit_code == 0, result.output
    resumed = read_rows(out)
    same_rows(resumed, local_error_rows)
    assert resumed["run_id"].nunique() == 2  # the two cases kept, the rest from the resume


# ------------------------------------------------------------------ a simulated two-node cluster

TWO_NODES = """
import json, os, sys, types, ray
from attnbench.cli import app
from typer.main import get_command

ray.init(address=sys.argv[1])

@ray.remote(num_gpus=1)
def gpu_seen():
    # a fake NVML on the worker's node: its GPUs' UUIDs name their NVML index
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = RuntimeError
    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetHandleByIndex = lambda index: index
    nvml.nvmlDeviceGetUUID = lambda handle: f"GPU-fake-{handle}"
    sys.modules["pynvml"] = nvml
    from attnbench.measure.hardware import hardware
    return os.environ.get("CUDA_VISIBLE_DEVICES"), hardware("cuda")

print(json.dumps(ray.get(gpu_seen.remote())))
code = get_command(app).main(args=sys.argv[2:], standalone_mode=False)
sys.exit(code or 0)
"""


def test_a_two_node_cluster_gives_the_rows_of_a_local_run(
    ray_cluster, tmp_path, monkeypatch, local_error_rows
):
    from ray.cluster_utils import Cluster as Simulated

    cluster = Simulated(
        initialize_head=True,
        connect=False,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    try:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6")  # the second node's one GPU is its 6th
        cluster.add_node(num_cpus=1, num_gpus=1)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
        cluster.wait_for_nodes()
        out = tmp_path / "ray.csv"
        args = [*ERROR, "--executor", "ray", "--ray-address", cluster.address, "--csv", str(out)]
        script = [sys.executable, "-c", textwrap.dedent(TWO_NODES), cluster.address, *args]
        done = subprocess.run(script, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        cluster.shutdown()
    # Ray gave the task the node's GPU 6 as cuda:0; the row would name GPU 6, not GPU 0
    assert json.loads(done.stdout.splitlines()[0]) == ["6", "GPU-fake-6"]
    rows = read_rows(out)
    same_rows(rows, local_error_rows)
    one_worker_per_group(rows, "backend")


def cannot_load():
    raise ModuleNotFoundError("No module named 'plugin_of_this_machine'")


class Unloadable:
    """A measurement no worker can unpickle, as one from a module a node lacks."""

    def __call__(self, case, inputs):
        return measured(case, inputs)

    def __reduce__(self):
        return cannot_load, ()


def test_workers_that_cannot_start_are_one_error_before_any_case(ray_cluster):
    cases = [Case("test", get_backend("sdpa"), Inputs("random", 1, 1, 4), 16, None, 1, 1, 4,
                  "float32", "cpu")]  # fmt: skip
    pool = executor_for("ray", cluster=Cluster(ray, None, started=False), cpus_per_worker=1)
    sweep = runner.run(Cases(cases, Measure(Unloadable(), "total")), executor=pool)
    with pytest.raises(UsageError, match="no worker could start.*plugin_of_this_machine"):
        next(iter(sweep))
    ray_idle()


# ------------------------------------------------------------------ the run's own local cluster

LONG = ["time", "--seq", "256,512,1024,2048", "--heads", "1", "--dim", "8", "--threads", "1",
        "--backends", "softmax,sdpa", "--rounds", "5", "--min-time", "1", "--device", "cpu",
        "--executor", "ray", "--cpus-per-worker", "1"]  # fmt: skip


def descendants(pid: int) -> set[int]:
    """The processes started by `pid`, its children's children included."""
    children: dict[int, list[int]] = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(stat[1]), []).append(int(name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def running(pids: set[int]) -> set[int]:
    """Those of `pids` still running (a zombie has ended)."""
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def cluster_started_by(proc: subprocess.Popen, timeout_s: float = 50.0) -> set[int]:
    """The processes of the run's cluster, once a Ray worker of the run measures."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = descendants(proc.pid)
        names = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in running(pids)]
        if any(name.startswith(b"ray::Worker") for name in names):
            return pids
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.2)
    pytest.fail("no Ray worker started")


def assert_gone(pids: set[int], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while running(pids):
        assert time.monotonic() < deadline, f"outlived the run: {sorted(running(pids))}"
        time.sleep(0.2)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_signalled_ray_run_leaves_no_ray_process(tmp_path, sig):
    """SIGTERM: exit 143 and one line; SIGKILL: nothing to say, but nothing left either."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    args = [sys.executable, "-m", "attnbench", *LONG, "--csv", str(tmp_path / "r.csv")]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        cluster = cluster_started_by(proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=50)
    finally:
        proc.kill()
    if sig == signal.SIGTERM:
        assert proc.returncode == 143, err[-2000:]
        assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
    assert_gone(cluster)
