"""The runner: every case ends as rows with a status, whatever the measurement or the inputs do.

Measurements here are fakes at module level (so isolated workers can unpickle them); they
fail on chosen cases and record which cases they saw.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time

import pytest
import torch
from typer.testing import CliRunner

from attnbench.backends import get_backend
from attnbench.backends.registry import Backend
from attnbench.case import Case, CaseInputs
from attnbench.cli import app
from attnbench.errors import UsageError
from attnbench.inputs import Inputs
from attnbench.inputs.generated import RandomInputs
from attnbench.measure import memory
from attnbench.results.schema import record
from attnbench.run import executors, runner, worker
from attnbench.run.executors import InProcess
from attnbench.run.study import Cases, Measure, case_row

SEEN: list[str] = []  # cases a measurement ran in this process


def make_case(backend="sdpa", n=16, grid=None, source="random", mode="fwd", **settings):
    backend = get_backend(backend) if isinstance(backend, str) else backend
    inputs = Inputs(source, 1, 1, 4)
    return Case("test", backend, inputs, n, grid, 1, 1, 4, "float32", "cpu", mode, 0, settings)


def ok_measure(case, inputs):
    """One row: the sum of the inputs, so rows show which inputs a case got."""
    q, k, v = inputs()
    SEEN.append(case.case_id)
    return [case_row(case, "total", value=float(q.sum() + k.sum() + v.sum()))]


def failing_measure(case, inputs):
    """Raises settings["raise"] (an exception instance) after building the inputs."""
    inputs()
    if case.settings.get("raise") is not None:
        SEEN.append(case.case_id)
        raise case.settings["raise"]
    return ok_measure(case, inputs)


def crashing_measure(case, inputs):
    """Kills its own process the way a faulty kernel or the OOM killer would."""
    how = case.settings.get("crash")
    if how == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif how == "exit":
        os._exit(3)
    return ok_measure(case, inputs)


OK = Measure(ok_measure, "total")
FAILING = Measure(failing_measure, "total", "things")
CRASHING = Measure(crashing_measure, "total")


@pytest.fixture(autouse=True)
def fresh_seen():
    SEEN.clear()


def rows_of(cases, measure, **kwargs):
    return [row for rows in runner.run(Cases(cases, measure), **kwargs) for row in rows]


# ------------------------------------------------------------------ classification


ALLOC = "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you "
ALLOC += "tried to allocate 2147483648 bytes. Error code 12 (Cannot allocate memory)"


@pytest.mark.parametrize(
    ("exc", "status", "reason"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8 GiB"), "oom", "CUDA out"),
        (MemoryError(), "oom", "MemoryError"),
        (RuntimeError(ALLOC), "oom", "DefaultCPUAllocator: can't allocate memory"),
        (RuntimeError("boom\nsecond line"), "error", "RuntimeError: boom"),
        (ValueError("bad shape"), "error", "ValueError: bad shape"),
        (UsageError("scram: kappa=9 exceeds the 4 keys"), "error", "UsageError: scram"),
    ],
)
def test_every_failure_is_a_status_row_and_the_sweep_goes_on(exc, status, reason):
    cases = [make_case(n=16, **{"raise": exc}), make_case(n=32)]
    rows = rows_of(cases, FAILING)
    assert [(r.seq, r.status) for r in rows] == [(16, status), (32, "ok")]
    failed = rows[0]
    assert reason in failed.reason and "\n" not in failed.reason
    assert (failed.metric, failed.unit, failed.value) == ("total", "things", None)
    assert (failed.backend, failed.dim, failed.inputs) == ("sdpa", 4, "random")
    assert len(SEEN) == 2  # the failing case did run, and so did the next


def test_a_failing_case_frees_its_inputs_and_the_next_case_rebuilds_them():
    cache = CaseInputs()
    case = make_case(n=16, **{"raise": MemoryError()})
    executors.run_case(case, FAILING, cache)
    assert cache._memo == {}


class UnbuildableInputs(RandomInputs):
    """Inputs whose generator fails as a large allocation would."""

    def make(self, n, seed, dtype, device, grid=None):
        if n > 16:
            raise RuntimeError(ALLOC)
        return super().make(n, seed, dtype, device, grid)


def test_inputs_that_cannot_be_built_give_a_status_row_not_a_traceback():
    source = UnbuildableInputs("random", 1, 1, 4)
    cases = [
        Case("test", get_backend("sdpa"), source, n, None, 1, 1, 4, "float32", "cpu")
        for n in (16, 32, 8)
    ]
    rows = rows_of(cases, OK)
    assert [(r.seq, r.status) for r in rows] == [(16, "ok"), (32, "oom"), (8, "ok")]
    assert "can't allocate memory" in rows[1].reason
    assert len(SEEN) == 2


# ------------------------------------------------------------------ skips and validation


class CpuOnlyForward(Backend):
    name = "test-cpu-forward"
    devices = ("cuda",)
    backward = False

    def forward(self, q, k, v, mask=None):
        return v


def test_unsupported_cases_are_skipped_with_every_reason_without_running():
    rows = rows_of([make_case(CpuOnlyForward(), mode="fwdbwd"), make_case()], OK)
    skipped, ran = rows
    assert skipped.status == "skipped" and skipped.value is None
    assert skipped.reason == (
        "test-cpu-forward does not run on cpu; test-cpu-forward has no backward pass"
    )
    assert ran.status == "ok" and SEEN == [make_case().case_id]


def test_a_case_predicted_not_to_fit_is_skipped_before_its_inputs_exist(monkeypatch):
    monkeypatch.setattr(worker, "available_bytes", lambda device: 10 * 2**30)
    softmax = get_backend("softmax")  # 3 n^2 floats: 12 GiB at n = 32768
    rows = rows_of([make_case(softmax, n=32768), make_case(softmax, n=1024)], OK)
    assert [r.status for r in rows] == ["skipped", "ok"]
    assert rows[0].reason == "needs ~12.0 GiB, 10.0 GiB free"
    assert len(SEEN) == 1


def test_every_case_is_validated_before_any_runs():
    scram = get_backend("scram")  # a 3x3 window
    cases = [make_case(scram, n=16, grid=(4, 4)), make_case(scram, n=1, grid=(1, 1))]
    with pytest.raises(UsageError, match="3x3 window .* 1x1 grid"):
        rows_of(cases, OK)
    assert SEEN == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--grid", "4x4,1x1", "--inputs", "blobs", "--backends", "scram"], "1x1 grid"),
        (["--grid", "2x2", "--inputs", "blobs", "--backends", "scram:kappa=5,b=0"], "kappa=5"),
        (["--seq", "8", "--backends", "sdpa", "--reference", "scram:kappa=9,b=0"], "kappa=9"),
        (["--seq", "8", "--backends", "sdpa", "--reference", "nosuch"], "--reference"),
    ],
)
def test_the_cli_refuses_a_case_that_can_never_run_before_any_work(tmp_path, args, needle):
    result = CliRunner().invoke(app, ["error", *args, "--csv", str(tmp_path / "e.csv")])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ inputs shared between cases


def test_backends_of_one_layout_share_inputs_and_a_new_layout_rebuilds_them():
    cache = CaseInputs()
    first = cache.bind(make_case("sdpa", n=16))()
    assert cache.bind(make_case("softmax", n=16))() is first
    other = cache.bind(make_case("softmax", n=32))()
    assert other[0].shape[-2] == 32
    again = cache.bind(make_case("sdpa", n=16))()
    assert again is not first and all(torch.equal(a, b) for a, b in zip(again, first, strict=True))


def test_a_picture_is_repeated_over_the_case_batch_and_heads():
    source = Inputs("blobs", 1, 1, 3)
    case = Case("time", get_backend("sdpa"), source, 30, (6, 5), 2, 3, 3, "float32", "cpu")
    picture = source.make(30, 0, torch.float32, "cpu", (6, 5))
    for got, want in zip(CaseInputs().bind(case)(), picture, strict=True):
        assert got.shape == (2, 3, 30, want.shape[-1]) and got.is_contiguous()
        assert torch.equal(got, want.expand_as(got))


# ------------------------------------------------------------------ cases


def test_case_id_is_stable_and_names_everything_that_changes_a_result():
    case = make_case("yoso-16", repeats=5)
    assert case.case_id == make_case("yoso-16", repeats=5).case_id
    assert len(case.case_id) == 12
    others = [
        make_case("yoso-16", repeats=6),
        make_case("yoso-16:seed=1", repeats=5),
        make_case("yoso-16", n=32, repeats=5),
        make_case("yoso-16", mode="bwd", repeats=5),
        make_case("yoso-16", source="clustered", repeats=5),
    ]
    assert len({case.case_id, *(c.case_id for c in others)}) == 6
    clone = pickle.loads(pickle.dumps(case))
    assert clone.case_id == case.case_id and clone.backend.spec == case.backend.spec


def test_rows_carry_the_case_id():
    (row,) = rows_of([make_case()], OK)
    assert row.case_id == make_case().case_id


# ------------------------------------------------------------------ isolation


def test_isolated_cases_give_the_same_rows_as_in_process():
    cases = [make_case(n=16), make_case("softmax", n=16)]
    here = rows_of(cases, OK)
    apart = rows_of(cases, OK, executor="isolated")
    assert [(r.backend, r.value, r.status) for r in apart] == [
        (r.backend, r.value, r.status) for r in here
    ]
    assert len(SEEN) == 2  # the isolated cases ran in their own processes


@pytest.mark.parametrize(
    ("crash", "reason"), [("segfault", "killed by SIGSEGV"), ("exit", "exited with code 3")]
)
def test_isolate_turns_a_crash_into_a_crashed_row_and_goes_on(crash, reason):
    cases = [make_case(n=16, crash=crash), make_case(n=32)]
    rows = rows_of(cases, CRASHING, executor="isolated")
    assert [(r.seq, r.status) for r in rows] == [(16, "crashed"), (32, "ok")]
    assert rows[0].reason.startswith(reason) and rows[0].value is None
    assert rows[1].value is not None


def test_isolated_failures_are_classified_in_the_worker():
    cases = [make_case(n=16, **{"raise": RuntimeError(ALLOC)})]
    (row,) = rows_of(cases, FAILING, executor="isolated")
    assert row.status == "oom"


def test_a_worker_dies_with_its_parent(tmp_path):
    """A run killed with SIGKILL left its isolated worker running (and writing)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT_OF_A_SLEEPING_WORKER], stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


PARENT_OF_A_SLEEPING_WORKER = """
import os, subprocess, sys
code = (f"from attnbench.run.worker import die_with_parent; die_with_parent({os.getpid()}); "
        "print('set', flush=True); import time; time.sleep(60)")
child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "set"
print(child.pid, flush=True)
child.wait()
"""


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_case_folders_of_dead_runs_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(executors.tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"{executors.CASE_FOLDER}{gone.pid}-abc"
    live = tmp_path / f"{executors.CASE_FOLDER}{os.getpid()}-def"
    other = tmp_path / "unrelated"
    for folder in (dead, live, other):
        folder.mkdir()
        (folder / "case.pkl").write_bytes(b"x")
    executors.Isolated(OK)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_the_executor_is_an_interface():
    class Recording(InProcess):
        def run(self, case):
            SEEN.append("executor")
            return super().run(case)

    rows_of([make_case()], OK, executor=Recording)
    assert SEEN[0] == "executor" and len(SEEN) == 2


# ------------------------------------------------------------------ sinks


class FakeSink:
    """A sink holding the records of `done_ids` as complete from an earlier run."""

    def __init__(self, done_ids=()):
        self.cases, self.done_ids = [], set(done_ids)

    def add_case(self, rows):
        self.cases.append(rows)

    def done(self, case_id):
        if case_id not in self.done_ids:
            return None
        row = case_row(make_case(n=32), "total", value=7.0)
        return [record(row)]


def test_rows_go_to_the_sink_a_case_at_a_time_and_done_cases_are_not_rerun():
    cases = [make_case(n=16), make_case(n=32), make_case(n=64)]
    sink = FakeSink(done_ids=[cases[1].case_id])
    yielded = list(runner.run(Cases(cases, OK), sink=sink))
    assert [[r.seq for r in rows] for rows in sink.cases] == [[16], [64]]
    assert SEEN == [cases[0].case_id, cases[2].case_id]
    resumed = yielded[1][0]  # the earlier run's row comes back, not written again
    assert (resumed.seq, resumed.value, resumed.case_id) == (32, 7.0, cases[1].case_id)


# ------------------------------------------------------------------ memory limits


def test_available_memory_respects_the_address_space_limit(monkeypatch):
    vm_size = memory._status_kib("VmSize") * 1024
    limit = vm_size + 3 * 2**20
    monkeypatch.setattr(memory.resource, "getrlimit", lambda which: (limit, limit))
    assert memory._address_space_headroom() <= 3 * 2**20
    assert memory.available_bytes("cpu") <= 3 * 2**20


def test_no_address_space_limit_leaves_free_memory(monkeypatch):
    inf = memory.resource.RLIM_INFINITY
    monkeypatch.setattr(memory.resource, "getrlimit", lambda which: (inf, inf))
    assert memory._address_space_headroom() is None
    assert memory.available_bytes("cpu") > 3 * 2**20


# ------------------------------------------------------------------ draw state


def draws_seen(case, inputs):
    """Which forward call the case's backend is at when the measurement starts, and its
    output after one call."""
    q, k, v = inputs()
    first = case.backend._calls
    out = case.backend(q, k, v)
    return [case_row(case, "calls", value=float(first), samples=[float(out.sum())])]


def test_every_case_draws_from_call_zero_on_its_own_copy_of_the_backend():
    """A stochastic backend's draw counter belongs to the case: the sweep's shared backend
    is never advanced, and the same case gives the same draws wherever it runs."""
    yoso = get_backend("yoso:m=4,tau=4,impl=torch")
    cases = [make_case(yoso, n=16), make_case(yoso, n=32), make_case(yoso, n=16, other=1)]
    rows = rows_of(cases, Measure(draws_seen, "calls"))
    assert [r.value for r in rows] == [0.0, 0.0, 0.0]
    assert yoso._calls == 0
    assert rows[0].samples == rows[2].samples  # same inputs, same first draw
