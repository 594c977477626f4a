"""The parts of `--executor ray` that need no cluster: planning workers from Ray's node
records, the errors given before any work, the GPU's identity through a fake NVML, the
placement every executor records, and the comparison groups a pool is handed.

The sweeps themselves, on a real Ray cluster, are in test_ray.py.
"""

from __future__ import annotations

import os
import sys
import types
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.backends import get_backend
from attnbench.case import Case
from attnbench.cli import app
from attnbench.cli.run import profile_argv
from attnbench.errors import UsageError
from attnbench.inputs import Inputs
from attnbench.measure import hardware
from attnbench.run import runner
from attnbench.run.ray_cluster import plan_workers
from attnbench.run.ray_worker import own_ceilings, runs
from attnbench.run.study import Cases, Measure, case_row
from attnbench.studies.error import ErrorStudy

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--seq", "16", "--heads", "1", "--dim", "8"]


def node(node_id: str, cpus: float, gpus: float = 0, alive: bool = True) -> dict:
    """A node record as `ray.nodes()` gives it."""
    resources = {"CPU": cpus, "memory": 1e9} | ({"GPU": gpus} if gpus else {})
    return {"NodeID": node_id, "NodeManagerHostname": f"host-{node_id}", "Alive": alive,
            "Resources": resources}  # fmt: skip


# ------------------------------------------------------------------ planning workers


def test_a_gpu_worker_holds_one_whole_gpu_and_its_share_of_the_node():
    plans = plan_workers([node("a", 8, 2), node("b", 4, 0.5)], "cuda", None, None)
    assert [(p.node_id, p.gpus, p.cpus, p.threads) for p in plans] == [("a", 1, 4, 4)] * 2


def test_a_cpu_node_is_one_worker_or_one_per_block_of_cpus_nodes_taking_turns():
    nodes = [node("a", 4), node("b", 2)]
    assert [(p.node_id, p.cpus) for p in plan_workers(nodes, "cpu", None, None)] == [
        ("a", 4),
        ("b", 2),
    ]
    blocks = plan_workers(nodes, "cpu", 1, None)
    assert [p.node_id for p in blocks] == ["a", "b", "a", "b", "a", "a"]
    assert {(p.cpus, p.threads, p.gpus) for p in blocks} == {(1, 1, 0)}


def test_threads_are_pinned_to_what_a_worker_holds():
    assert {p.threads for p in plan_workers([node("a", 4)], "cpu", 2, 1)} == {1}
    with pytest.raises(UsageError, match="--threads: 3 is more than the 2 CPU"):
        plan_workers([node("a", 4)], "cpu", 2, 3)


@pytest.mark.parametrize(
    ("nodes", "device", "cpus", "need"),
    [([node("a", 4)], "cuda", None, "a whole GPU"), ([node("a", 2)], "cpu", 4, "4 CPU")],
)
def test_a_cluster_without_room_for_a_worker_is_one_error(nodes, device, cpus, need):
    with pytest.raises(UsageError, match=need):
        plan_workers(nodes, device, cpus, None)


# ------------------------------------------------------------------ errors before any work


def test_without_ray_installed_the_executor_is_one_error_line(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    out = tmp_path / "r.csv"
    result = CliRunner().invoke(app, ["time", *TINY, "--executor", "ray", "--csv", str(out)])
    assert result.exit_code == 2
    assert result.output.startswith("error: --executor ray: Ray is not installed")
    assert "attnbench[ray]" in result.output and not out.exists()


@pytest.mark.parametrize(
    ("address", "fragment"),
    [("127.0.0.1:1", "no Ray cluster answers at 127.0.0.1:1"), (":x", "is not host:port")],
)
def test_an_address_that_does_not_answer_is_one_error_line(monkeypatch, address, fragment):
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh `attnbench`
    monkeypatch.setattr(ray, "init", lambda **_: pytest.fail("ray.init was called"))
    args = ["error", *TINY, "--executor", "ray", "--ray-address", address]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and fragment in result.output
    assert result.output.startswith("error:") and len(result.output.splitlines()) == 1


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--executor", "dask"], "unknown executor 'dask'"),
        (["--ray-address", "h:1"], "--ray-address is an option of --executor ray"),
        (["--cpus-per-worker", "2"], "--cpus-per-worker is an option of --executor ray"),
        (["--executor", "ray", "--isolate"], "--isolate runs cases here"),
        (["--executor", "ray", "--cpus-per-worker", "0"], "--cpus-per-worker"),
    ],
)
def test_bad_executor_options_are_one_error_line(extra, fragment):
    result = CliRunner().invoke(app, ["time", *TINY, *extra])
    assert result.exit_code == 2 and fragment in result.output


@pytest.mark.parametrize("command", ["time", "error", "model", "profile"])
def test_every_sweeping_study_documents_the_executor(command):
    result = CliRunner().invoke(app, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0
    for option in ("--executor", "--ray-address", "--cpus-per-worker"):
        assert option in result.output


def test_a_profile_can_choose_the_ray_executor(tmp_path):
    profile = tmp_path / "p.toml"
    options = 'executor = "ray"\nray_address = "head:6379"\ncpus_per_worker = 4\n'
    profile.write_text(f'command = "time"\n[options]\n{options}')
    argv = profile_argv(profile)
    assert argv == ["time", "--executor", "ray", "--ray-address", "head:6379",
                    "--cpus-per-worker", "4"]  # fmt: skip


def test_ci_installs_the_ray_extra_before_the_readme_command():
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    readme = next(i for i, line in enumerate(lines) if "pytest tests/cudasim" in line)
    assert any("[ray" in line or ",ray]" in line for line in lines[:readme])


# ------------------------------------------------------------------ the GPU's identity


class FakeNvml(types.ModuleType):
    """pynvml with eight GPUs whose UUIDs name their NVML index."""

    class NVMLError(Exception):
        pass

    def __init__(self):
        super().__init__("pynvml")
        self.handles = {f"GPU-fake-{i}": i for i in range(8)}

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return self.handles[uuid]

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-fake-{handle}".encode()


@pytest.mark.parametrize(
    ("visible", "index", "uuid"),
    [
        (None, 1, "GPU-fake-1"),  # every GPU visible: torch's index is NVML's
        ("6", 0, "GPU-fake-6"),  # a Ray worker given the node's GPU 6 calls it cuda:0
        ("2,5", 1, "GPU-fake-5"),
        ("GPU-fake-3", 0, "GPU-fake-3"),
        ("MIG-0/1/2", 0, None),  # no safe mapping: no UUID rather than another GPU's
    ],
)
def test_the_gpu_is_named_by_its_physical_uuid_through_nvml(monkeypatch, visible, index, uuid):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert hardware.gpu_uuid(index) == uuid


def test_a_cuda_row_names_the_gpu_this_process_sees_as_its_first(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4")
    assert hardware.hardware("cuda") == "GPU-fake-4"
    assert hardware.hardware("cpu") == hardware.model_name()


# ------------------------------------------------------------------ placement, groups


def counted(case, inputs):
    return [case_row(case, "total", value=float(case.n))]


def make_case(backend: str, n: int) -> Case:
    return Case("test", get_backend(backend), Inputs("random", 1, 1, 4), n, None, 1, 1, 4,
                "float32", "cpu")  # fmt: skip


@pytest.mark.parametrize("executor", ["in-process", "isolated"])
def test_a_local_run_records_where_its_cases_ran(executor):
    cases = [make_case("sdpa", 16), make_case("softmax", 16)]
    rows = [r for rs in runner.run(Cases(cases, Measure(counted, "total")), executor=executor)
            for r in rs]  # fmt: skip
    assert {r.node for r in rows} == {hardware.node_name()}
    assert {r.hardware for r in rows} == {hardware.model_name()}
    assert {r.co_tenancy for r in rows} == {1}
    for row in rows:  # an isolated case runs in a process of its own
        kind_seen, _, pid = row.worker.partition("/")
        assert kind_seen == executor and (int(pid) == os.getpid()) == (executor == "in-process")


def test_the_error_study_compares_a_backend_over_its_lengths():
    spec = ErrorStudy(seqs=[16, 32], backends=[get_backend("yoso-8"), get_backend("sdpa")],
                     inputs=Inputs("random", 1, 1, 8), trials=1, mc_seeds=1)  # fmt: skip
    groups = runner.comparison_groups(spec, spec.cases)
    assert [[(c.backend.name, c.n) for c in g] for g in groups] == [
        [("yoso", 16), ("yoso", 32)],
        [("sdpa", 16), ("sdpa", 32)],
    ]


def test_cases_measured_together_stay_together_in_a_worker():
    assert runs([None, None, (16,), (16,), (32,), None]) == [[0], [1], [2, 3], [4], [5]]


def test_a_worker_sets_its_rows_against_its_own_machines_ceilings(monkeypatch):
    from attnbench.measure import limits

    monkeypatch.setattr(limits, "load_or_measure", lambda device, threads: ("here", threads))
    measure = Measure(partial(counted, ceilings="driver's"), "total",
                      group=partial(counted, ceilings="driver's"))  # fmt: skip
    own = own_ceilings(measure, "cpu", 3)
    assert own.fn.keywords["ceilings"] == own.group.keywords["ceilings"] == ("here", 3)
    plain = Measure(counted, "total")
    assert own_ceilings(plain, "cpu", 3) is plain


def test_the_device_is_resolved_against_the_clusters_gpus():
    from attnbench.api.parse import check_threads
    from attnbench.api.probes import resolve_device

    assert resolve_device("auto", cluster_gpus=True) == "cuda"
    assert resolve_device("auto", cluster_gpus=False) == "cpu"
    with pytest.raises(UsageError, match="no CUDA GPU is available to PyTorch on the Ray cluster"):
        resolve_device("cuda", cluster_gpus=False)
    # a worker's threads are held against its own CPUs, not this machine's numba pool
    assert check_threads(4096, pooled=True) == 4096
    with pytest.raises(UsageError, match="--threads"):
        check_threads(4096)
