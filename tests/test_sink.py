"""The result sink survives faults: outputs locked against a second run, each case committed
to CSV and JSON in one step that SIGINT/SIGTERM wait for, a full disk reported in one line
with the committed cases intact, SIGKILL survived and resumed. Output paths are probed
before any work. Subprocesses are given generous deadlines; nothing asserts on timings."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import attnbench.cli.core as cli
import attnbench.results.formats as formats
import attnbench.results.sink as results
from attnbench.api.probes import HIDDEN_NAME_ROOM, writable_file
from attnbench.errors import UsageError
from attnbench.results.interrupts import Terminated, deferred_interrupts, sigterm_as_interrupt
from attnbench.results.paths import env_sidecar
from attnbench.results.read import read_rows
from attnbench.results.schema import Row, fingerprint
from attnbench.results.sink import ResultSink
from attnbench.run import procedure

ROOT = Path(__file__).resolve().parent.parent
METRICS = ("time_ms", "first_call_ms", "peak_mib")
TIME = ["time", "--seq", "32,64", "--repeats", "1", "--warmup", "0", "--heads", "1", "--dim", "8"]
TIME += ["--backends", "sdpa"]
DEADLINE_S = 120


@pytest.fixture(autouse=True)
def no_ceilings(monkeypatch):
    """These tests count the lines a run prints: the machine's ceilings, measured once per
    test session by whichever run comes first, would add theirs."""
    monkeypatch.setattr(procedure, "_ceilings", lambda *args, **kwargs: None)


ENV = {
    "attnbench": "0.1",
    "git_revision": "abc123",
    "torch": "2.13.0",
    "numba": "0.62",
    "device_name": "Test CPU",
    "torch_threads": 2,
    "threads": 2,
    "platform": "Linux",
    "seed": 0,
    "command": "attnbench time --seq 64",
}

# Tiny fake cases, three rows each, for the scripts below.
CASE_ROWS = """
from attnbench.results.schema import Row


def case_rows(i, status="ok"):
    return [
        Row(study="time", backend="sdpa", impl="torch", device="cpu", dtype="float32",
            mode="fwd", inputs="random", batch=1, heads=1, seq=i + 1, dim=8, metric=m,
            value=float(i), samples=[float(i)] * 3, status=status, case_id=f"case-{i}")
        for m in ("time_ms", "first_call_ms", "peak_mib")
    ]
"""

# A sweep of those cases; `--cli` runs it as an attnbench command so that the command
# line's handling of signals is the one tested.
SWEEP = (
    """
import sys
from pathlib import Path

from attnbench.results.sink import ResultSink
"""
    + CASE_ROWS
    + """

def sweep(csv: Path, json: Path, cases: int = 10**9, resume: bool = False):
    env = {"command": "attnbench sweep", "torch": "t"}
    with ResultSink(env, csv, json, resume=resume) as sink:
        for i in range(cases):
            if sink.done(f"case-{i}") is None:
                sink.add_case(case_rows(i))
            print(i, flush=True)


if sys.argv[1] == "--cli":
    import attnbench.cli as cli

    cli.app.command("sweep")(sweep)
    sys.argv[1:2] = ["sweep"]
    cli.main()
else:
    sweep(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "resume")
"""
)

# Commits two cases, then dies by SIGKILL halfway through the write number argv[4] (0: the
# CSV, 1: the JSON) of the third, after copying that file's bytes to argv[3].
TORN = (
    """
import os
import signal
import sys
from pathlib import Path

import attnbench.results.formats as formats
from attnbench.results.sink import ResultSink
"""
    + CASE_ROWS
    + """

class Dying:
    def __init__(self, tear_at):
        self.tear_at, self.writes = tear_at, 0

    def __getattr__(self, name):
        return getattr(os, name)

    def pwrite(self, fd, data, offset):
        self.writes += 1
        if self.writes <= self.tear_at:
            return os.pwrite(fd, data, offset)
        os.pwrite(fd, bytes(data[: len(data) // 2]), offset)
        os.kill(os.getpid(), signal.SIGKILL)


csv, js, before, tear_at = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
with ResultSink({"command": "attnbench sweep", "torch": "t"}, csv, js) as sink:
    sink.add_case(case_rows(0))
    sink.add_case(case_rows(1))
    before.write_bytes((csv, js)[tear_at].read_bytes())
    formats.os = Dying(tear_at)
    sink.add_case(case_rows(2))
"""
)

# Holds the sink on one CSV until its stdin closes.
HOLD = (
    """
import sys
from pathlib import Path

from attnbench.results.sink import ResultSink
"""
    + CASE_ROWS
    + """
with ResultSink({"command": "attnbench time --holder"}, Path(sys.argv[1])) as sink:
    sink.add_case(case_rows(0))
    print("ready", flush=True)
    sys.stdin.read()
"""
)


def make_row(seq=64, metric="time_ms", case_id="", status="ok", **fields) -> Row:
    return Row(
        study="time", backend="sdpa", impl="torch", device="cpu", dtype="float32", mode="fwd",
        inputs="random", batch=1, heads=1, seq=seq, dim=8, metric=metric, value=1.0 + seq,
        samples=[1.0, 2.0], status=status, case_id=case_id, **fields,
    )  # fmt: skip


def case_rows(case_id: str, seq: int = 64, status: str = "ok") -> list[Row]:
    return [make_row(seq, m, case_id, status) for m in METRICS]


def hidden_files(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def start(path: Path, *args, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's attnbench
    return subprocess.Popen(
        [sys.executable, str(path), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kwargs,
    )


def wait_for_lines(proc: subprocess.Popen, count: int) -> None:
    for _ in range(count):
        line = proc.stdout.readline()
        assert line, proc.stderr.read()


def terminate_after(proc: subprocess.Popen, lines: int) -> str:
    """SIGTERM `proc` once it has printed `lines` lines; its stderr once it has ended."""
    try:
        wait_for_lines(proc, lines)
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=DEADLINE_S)[1]
    finally:
        proc.kill()


def case_ids(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["case_id"]))


def assert_complete_and_agreeing(csv: Path, js: Path) -> pd.DataFrame:
    frame = read_rows(csv)
    rows = json.loads(js.read_text())["rows"]
    assert [(r["case_id"], r["metric"]) for r in rows] == list(
        zip(frame["case_id"], frame["metric"], strict=True)
    )
    for _, metrics in frame.groupby("case_id")["metric"]:
        assert sorted(metrics) == sorted(METRICS)
    return frame


# ------------------------------------------------------------------- rows and records


def test_sink_fills_run_and_environment_columns(tmp_path):
    csv = tmp_path / "r.csv"
    with ResultSink(ENV, csv) as sink:
        sink.add_case(case_rows("a"))
        sink.add_case(case_rows("b", 128))
    frame = read_rows(csv)
    assert frame["run_id"].nunique() == 1 and len(frame["run_id"][0]) == 32
    assert frame["fingerprint"].eq(sink.fingerprint).all()
    assert frame["device_name"].eq("Test CPU").all() and frame["threads"].eq(2).all()
    assert frame["git_revision"].eq("abc123").all()
    assert [r.run_id for r in sink.rows] == list(frame["run_id"])
    assert len(sink.records) == 6


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc/self/fd")
def test_every_file_reaches_the_disk_before_it_is_relied_on(tmp_path, monkeypatch):
    """A whole file is fsynced before it is renamed over its output: a machine stopping in
    between keeps the old file, and after the rename the new one is whole. An appended case
    is fsynced before its commit returns, in every output."""
    events = []
    real_fsync, real_replace, real_pwrite = os.fsync, os.replace, os.pwrite

    def name(fd):
        return Path(os.readlink(f"/proc/self/fd/{fd}")).name

    def fsync(fd):
        events.append(("fsync", name(fd)))
        real_fsync(fd)

    def replace(src, dst):
        synced = ("fsync", Path(src).name) in events
        events.append(("replace", Path(dst).name, synced))
        real_replace(src, dst)

    def pwrite(fd, data, offset):
        events.append(("write", name(fd)))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "pwrite", pwrite)
    outputs = ("r.csv", "r.json")
    with ResultSink(ENV, tmp_path / "r.csv", tmp_path / "r.json") as sink:
        assert not [e for e in events if e[0] == "replace"]  # nothing before the first case
        sink.add_case(case_rows("a"))  # which writes every file whole
        replaced = [e for e in events if e[0] == "replace"]
        assert {dst for _, dst, _ in replaced} == {"r.csv", "r.json", "r.env.json"}
        assert all(synced for _, _, synced in replaced), replaced
        for case in ("b", "c"):  # appended
            events.clear()
            sink.add_case(case_rows(case))
            on_output = [e for e in events if e[1] in outputs]
            for out in outputs:  # written, then on the disk, before the commit returns
                assert [e[0] for e in on_output if e[1] == out][-2:] == ["write", "fsync"], events
            assert [e[1] for e in on_output] == sorted([e[1] for e in on_output])  # CSV first


def test_fingerprint_follows_what_decides_comparability():
    base = fingerprint(ENV)
    assert fingerprint({**ENV, "seed": 5, "command": "other", "timestamp": "now"}) == base
    for key, value in [("torch", "2.14"), ("git_revision", "def"), ("torch_threads", 4),
                       ("device_name", "Other CPU"), ("numba", "0.63"), ("platform", "Mac"),
                       ("attnbench", "0.2")]:  # fmt: skip
        assert fingerprint({**ENV, key: value}) != base, key


def test_add_case_outside_with_is_a_bug():
    with pytest.raises(RuntimeError, match="with ResultSink"):
        ResultSink({}).add_case(case_rows("a"))


# ------------------------------------------------------------------------------ locks


def test_outputs_are_locked_while_the_sink_is_open(tmp_path):
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    with ResultSink(ENV, csv, js):
        assert hidden_files(tmp_path) == [".r.csv.lock", ".r.env.json.lock", ".r.json.lock"]
        lock = (tmp_path / ".r.csv.lock").read_text()
        assert lock == f"{os.getpid()} attnbench time --seq 64\n"
        with pytest.raises(UsageError) as caught:
            ResultSink(ENV, None, js).__enter__()
        assert str(caught.value) == (
            f"{js} is being written by another attnbench run "
            f"(pid {os.getpid()}: attnbench time --seq 64)"
        )
        with pytest.raises(UsageError, match="r.env.json is being written"):
            ResultSink(ENV, None, tmp_path / "r.env.json").__enter__()
    assert hidden_files(tmp_path) == []
    with ResultSink(ENV, csv, js):  # free again
        pass


def test_a_failed_lock_releases_the_ones_taken_and_writes_nothing(tmp_path):
    js = tmp_path / "r.json"
    with ResultSink(ENV, None, js):
        before = sorted(p.name for p in tmp_path.iterdir())
        with pytest.raises(UsageError, match="being written"):
            ResultSink(ENV, tmp_path / "new.csv", js).__enter__()
        assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_second_process_on_the_same_csv_is_refused_then_the_stale_lock_taken_over(tmp_path):
    csv = tmp_path / "r.csv"
    holder = start(script(tmp_path, "hold.py", HOLD), csv, stdin=subprocess.PIPE)
    try:
        wait_for_lines(holder, 1)
        with pytest.raises(UsageError) as caught:
            ResultSink(ENV, csv).__enter__()
        assert str(caught.value) == (
            f"{csv} is being written by another attnbench run "
            f"(pid {holder.pid}: attnbench time --holder)"
        )

        before = csv.read_bytes()
        result = CliRunner().invoke(cli.app, [*TIME, "--csv", str(csv)])
        assert result.exit_code == 2, result.output
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ")
        assert f"pid {holder.pid}" in lines[0]
        assert csv.read_bytes() == before
    finally:
        holder.kill()
        holder.wait(DEADLINE_S)
    assert (tmp_path / ".r.csv.lock").read_text().startswith(f"{holder.pid} ")  # left by the kill
    with ResultSink(ENV, csv) as sink:
        sink.add_case(case_rows("a"))
    assert len(read_rows(csv)) == 3
    assert hidden_files(tmp_path) == []


def test_leftover_temp_files_of_a_killed_run_are_removed(tmp_path):
    csv = tmp_path / "r.csv"
    leftovers = [".r.csv.ab12cd_z.tmp", ".r.env.json.0a1b2c3d.tmp"]
    others = [".r.csv.notours.tmp", ".r.csvx.ab12cd34.tmp", "r.csv.ab12cd34.tmp"]
    for name in leftovers + others:
        (tmp_path / name).write_text("half a row")
    with ResultSink(ENV, csv):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["r.csv", "r.env.json", *others])


# ------------------------------------------------------------------- atomic commits


class _OsFailingWrites:
    """`os` as seen by attnbench.results.formats: the output write number `fail_at` (0: the
    CSV, 1: the JSON of a commit) writes half its data, then fails with OSError `code`."""

    def __init__(self, code: int, fail_at: int):
        self.code, self.fail_at, self.writes = code, fail_at, 0

    def __getattr__(self, name):
        return getattr(os, name)

    def pwrite(self, fd, data, offset):
        self.writes += 1
        if self.writes - 1 != self.fail_at:
            return os.pwrite(fd, data, offset)
        os.pwrite(fd, bytes(data[: len(data) // 2]), offset)
        raise OSError(self.code, os.strerror(self.code))


@pytest.mark.parametrize(
    ("code", "failing"),
    [(errno.ENOSPC, 0), (errno.EFBIG, 1), (errno.EDQUOT, 0), (errno.EROFS, 1), (errno.EACCES, 0)],
)
def test_a_failed_write_is_one_error_and_keeps_the_committed_cases(
    tmp_path, monkeypatch, code, failing
):
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    with ResultSink(ENV, csv, js) as sink:
        sink.add_case(case_rows("a"))
        sink.add_case(case_rows("b", 128))
        before = {p: p.read_bytes() for p in (csv, js, tmp_path / "r.env.json")}
        monkeypatch.setattr(formats, "os", _OsFailingWrites(code, failing))
        with pytest.raises(UsageError) as caught:
            sink.add_case(case_rows("c", 256))
        monkeypatch.undo()
        assert hidden_files(tmp_path) == [".r.csv.lock", ".r.env.json.lock", ".r.json.lock"]
    failed = (csv, js)[failing]
    assert str(caught.value) == (
        f"cannot write {failed}: {os.strerror(code)}; the 2 completed cases are kept"
    )
    assert {p: p.read_bytes() for p in before} == before  # both files as before the case
    assert len(sink.records) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "r.env.json", "r.json"]


def test_full_disk_in_a_run_is_one_error_line(tmp_path, monkeypatch):
    writes = []

    def failing_second_csv_write(write):  # the first case (the whole file), then the second
        def wrapped(path, *args):
            writes.append(path)
            if path.suffix == ".csv" and len([p for p in writes if p.suffix == ".csv"]) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return write(path, *args)

        return wrapped

    # a case is written whole (a temp file) or appended, whichever the sink needs
    monkeypatch.setattr(results, "write_temp", failing_second_csv_write(results.write_temp))
    monkeypatch.setattr(results, "write_at", failing_second_csv_write(results.write_at))
    csv = tmp_path / "r.csv"
    result = CliRunner().invoke(cli.app, [*TIME, "--csv", str(csv)])
    assert result.exit_code == 2, result.output
    # off a terminal the progress is a line per case on stderr, before the error
    assert [line for line in result.stderr.splitlines() if line] == [
        "[1/2] sdpa n=32",
        "[2/2] sdpa n=64",
        f"error: cannot write {csv}: No space left on device; the 1 completed cases are kept",
    ]
    frame = read_rows(csv)
    assert sorted(frame["metric"]) == sorted(METRICS) and frame["seq"].eq(32).all()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "r.env.json"]


def test_deferred_interrupts_deliver_after_the_block():
    """The signal reaches the handler installed before the block, after the block's end.
    The test installs that handler itself, so what earlier tests left installed is moot."""

    def interrupted(signum, frame):
        reached.append("handler")
        raise KeyboardInterrupt

    reached = []
    outer = signal.signal(signal.SIGINT, interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            with deferred_interrupts():
                signal.raise_signal(signal.SIGINT)
                reached.append("end of block")
        assert reached == ["end of block", "handler"]
        assert signal.getsignal(signal.SIGINT) is interrupted
    finally:
        signal.signal(signal.SIGINT, outer)


def test_sigterm_as_interrupt_raises_terminated_and_restores_the_handler():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), sigterm_as_interrupt() as sigterm:
        signal.raise_signal(signal.SIGTERM)
    assert sigterm.received and isinstance(Terminated(), KeyboardInterrupt)
    assert signal.getsignal(signal.SIGTERM) == before


class _SignallingWrites:
    """`write_at` as the sink calls it: SIGTERM arrives during the first write of a commit."""

    def __init__(self, write_at):
        self.write_at, self.written = write_at, []

    def __call__(self, path, offset, data):
        if not self.written:
            os.kill(os.getpid(), signal.SIGTERM)
        self.write_at(path, offset, data)
        self.written.append(path.name)


def test_sigterm_during_a_commit_waits_until_every_file_holds_the_case(tmp_path, monkeypatch):
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    writes = _SignallingWrites(results.write_at)
    with sigterm_as_interrupt(), ResultSink(ENV, csv, js) as sink:
        sink.add_case(case_rows("a"))
        monkeypatch.setattr(results, "write_at", writes)
        with pytest.raises(Terminated):
            sink.add_case(case_rows("b", 128))
        monkeypatch.undo()
    assert writes.written == ["r.csv", "r.json"]
    assert case_ids(assert_complete_and_agreeing(csv, js)) == ["a", "b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "r.env.json", "r.json"]


def test_sigterm_ends_a_run_with_143_and_complete_agreeing_files(tmp_path):
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    proc = start(script(tmp_path, "sweep.py", SWEEP), "--cli", csv, js)
    err = terminate_after(proc, 30)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err
    frame = assert_complete_and_agreeing(csv, js)
    assert len(case_ids(frame)) >= 30
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "r.csv",
        "r.env.json",
        "r.json",
        "sweep.py",
    ]


# Opens a sink on argv[2:4] as an attnbench command, says so, and waits on stdin before its
# first case.
BEFORE_FIRST_CASE = (
    """
import sys
from pathlib import Path

from attnbench.results.sink import ResultSink
"""
    + CASE_ROWS
    + """

def slow(csv: Path, json: Path):
    with ResultSink({"command": "attnbench slow", "torch": "t"}, csv, json) as sink:
        print("open", flush=True)
        sys.stdin.read()
        sink.add_case(case_rows(99))


import attnbench.cli as cli

cli.app.command("slow")(slow)
sys.argv[1:1] = ["slow"]
cli.main()
"""
)


def test_sigterm_before_the_first_case_leaves_the_older_files_whole(tmp_path):
    """An existing result file is not emptied by a run into it that is stopped before its
    first case finishes."""
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    first = start(script(tmp_path, "sweep.py", SWEEP), csv, js, 4, "new")
    assert first.wait(DEADLINE_S) == 0, first.stderr.read()
    before = {p: p.read_bytes() for p in (csv, js, results.env_sidecar(csv))}
    proc = start(script(tmp_path, "slow.py", BEFORE_FIRST_CASE), csv, js, stdin=subprocess.PIPE)
    err = terminate_after(proc, 1)
    assert proc.returncode == 143, err
    assert {p: p.read_bytes() for p in before} == before
    assert len(case_ids(read_rows(csv))) == 4


# ----------------------------------------------------------------------------- resume


def test_resume_skips_finished_cases_of_the_same_environment(tmp_path):
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    with ResultSink(ENV, csv, js) as first:
        first.add_case(case_rows("a", 64))
        first.add_case(case_rows("b", 128, status="error"))
        first.add_case(case_rows("c", 256, status="oom"))
        first.add_case(case_rows("d", 512, status="crashed"))
    with ResultSink(ENV, csv, js, resume=True) as sink:
        assert len(sink.records) == 12
        done = sink.done("a")
        assert [r["metric"] for r in done] == list(METRICS)
        assert done[0]["samples"] == [1.0, 2.0] and done[0]["run_id"] == first.run_id
        assert sink.done("c") is not None  # oom is an answer
        assert sink.done("b") is None and sink.done("d") is None and sink.done("e") is None
        sink.add_case(case_rows("b", 128))
        sink.add_case(case_rows("d", 512))
    frame = assert_complete_and_agreeing(csv, js)
    assert case_ids(frame) == ["a", "c", "b", "d"] and len(frame) == 12
    assert frame["status"].tolist() == ["ok"] * 3 + ["oom"] * 3 + ["ok"] * 6
    assert frame["run_id"].tolist() == [first.run_id] * 6 + [sink.run_id] * 6
    assert frame["samples"].map(len).eq(2).all()

    with ResultSink({**ENV, "torch": "2.14.0"}, csv, js, resume=True) as other:
        assert other.done("a") is None  # measured with another torch
    with ResultSink(ENV, csv, js) as fresh:  # no resume: a new file
        assert fresh.done("a") is None and fresh.records == []
    assert len(read_rows(csv)) == 0 and json.loads(js.read_text())["rows"] == []


def test_resume_from_the_json_alone(tmp_path):
    js = tmp_path / "r.json"
    with ResultSink(ENV, None, js) as first:
        first.add_case(case_rows("a"))
    with ResultSink(ENV, None, js, resume=True) as sink:
        assert len(sink.done("a")) == 3


def test_resume_of_a_truncated_csv_is_one_error(tmp_path):
    csv = tmp_path / "r.csv"
    with ResultSink(ENV, csv) as first:
        first.add_case(case_rows("a"))
    csv.write_text(csv.read_text()[:-10])
    with pytest.raises(UsageError, match="--resume: cannot read .* truncated at line 4"):
        ResultSink(ENV, csv, resume=True).__enter__()
    assert hidden_files(tmp_path) == []


def test_sigkill_then_resume_gives_the_rows_of_an_uninterrupted_run(tmp_path):
    sweep = script(tmp_path, "sweep.py", SWEEP)
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    killed.mkdir()
    whole.mkdir()
    csv, js = killed / "r.csv", killed / "r.json"
    proc = start(sweep, csv, js, 10**9, "fresh")
    try:
        wait_for_lines(proc, 12)
        proc.kill()
        proc.wait(DEADLINE_S)
    finally:
        proc.kill()
    in_csv = case_ids(read_rows(csv))  # complete, though it may be one case ahead
    in_json = [r["case_id"] for r in json.loads(js.read_text())["rows"]][::3]
    assert len(in_csv) >= 12 and in_csv[: len(in_json)] == in_json
    assert len(in_csv) - len(in_json) in (0, 1)

    cases = len(in_csv) + 5
    for out, mode in ((killed, "resume"), (whole, "fresh")):
        done = start(sweep, out / "r.csv", out / "r.json", cases, mode)
        _, err = done.communicate(timeout=DEADLINE_S)
        assert done.returncode == 0, err
    resumed = assert_complete_and_agreeing(csv, js)
    uninterrupted = assert_complete_and_agreeing(whole / "r.csv", whole / "r.json")
    keys = ["case_id", "metric", "seq", "value", "status"]
    assert resumed[keys].equals(uninterrupted[keys])
    assert resumed["samples"].tolist() == uninterrupted["samples"].tolist()
    assert resumed["run_id"].nunique() == 2  # the killed run's cases were kept, not rerun
    assert hidden_files(killed) == []


@pytest.mark.parametrize("torn", ["r.csv", "r.json"])
def test_a_torn_append_is_cut_back_when_the_next_run_takes_the_lock(tmp_path, torn):
    """SIGKILL in the middle of an append leaves a torn file and the dead run's lock file,
    which holds the file's committed length: the next run reads the file as cut back to it,
    resumes from whole cases, and replaces the file whole."""
    csv, js, before = tmp_path / "r.csv", tmp_path / "r.json", tmp_path / "before"
    tear_at = ["r.csv", "r.json"].index(torn)
    proc = start(script(tmp_path, "torn.py", TORN), csv, js, before, tear_at)
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == -signal.SIGKILL, err
    path, tail = tmp_path / torn, [b"", formats.JSON_TAIL.encode()][tear_at]
    assert path.stat().st_size > before.stat().st_size
    with pytest.raises(ValueError):  # torn: refused by readers
        read_rows(path)
    holder, committed = (tmp_path / f".{torn}.lock").read_text().splitlines()
    assert holder.startswith(f"{proc.pid} ")
    end, run_id, digest = committed.split()
    assert int(end) == before.stat().st_size - len(tail) and len(run_id) == 32
    assert digest == hashlib.sha256(before.read_bytes()[: int(end)]).hexdigest()

    alone = (path, None) if torn == "r.csv" else (None, path)
    with ResultSink(ENV, *alone, resume=True) as sink:
        assert case_ids(pd.DataFrame(sink.records)) == ["case-0", "case-1"]
    with ResultSink(ENV, csv, js, resume=True):  # the CSV may be a case ahead
        pass
    frame = assert_complete_and_agreeing(csv, js)
    assert case_ids(frame) == [f"case-{i}" for i in range(2 + tear_at)]
    assert hidden_files(tmp_path) == []


# ---------------------------------------------------------------------------- cost


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io")
def test_a_sweep_writes_each_byte_about_once(tmp_path, monkeypatch):
    """A commit writes its case, not the whole file again: a sweep of 2,000 cases writes at
    most 3x the final files' size (rewriting every file at each commit writes ~1,000x)."""

    def written() -> int:  # every byte this process has handed to write(2) and its kin
        return int(re.search(r"^wchar: (\d+)$", Path("/proc/self/io").read_text(), re.M)[1])

    monkeypatch.setattr(os, "fsync", lambda fd: None)  # bytes are counted here, not syncs
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    before = written()
    with ResultSink(ENV, csv, js) as sink:
        for i in range(2000):
            sink.add_case(case_rows(f"case-{i}", seq=i))
    total = written() - before
    final = csv.stat().st_size + js.stat().st_size
    assert final <= total <= 3 * final, f"{total} bytes written for {final} bytes of results"


# ------------------------------------------------------------- output paths, up front


def one_error_line(args: list[str], needle: str) -> str:
    result = CliRunner().invoke(cli.app, [str(a) for a in args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert "Traceback" not in result.output
    return lines[0]


@pytest.fixture
def good_csv(tmp_path):
    path = tmp_path / "good.csv"
    with ResultSink(ENV, path) as sink:
        sink.add_case(case_rows("a"))
    return path


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--csv", "/proc/x.csv"], "/proc"),
        (["--csv", "/sys/x.csv"], "/sys"),
        (["--csv", "x" * 296 + ".csv"], "300 bytes"),
        (["--csv", "r.csv"], "r.env.json is a directory"),
        (["--json", "/proc/e.json"], "--json"),
        (["--plot", "/proc/x.png"], "--plot"),
    ],
)
def test_bad_output_paths_fail_before_any_work(tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.env.json").mkdir()
    monkeypatch.setattr("attnbench.results.sink.ResultSink", None)  # any work would fail otherwise
    one_error_line([*TIME, *args], needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.env.json"]


def test_maps_and_plot_outputs_are_probed(good_csv):
    one_error_line(["maps", "--plot", "/proc/m.png"], "--plot")
    one_error_line(["plot", good_csv, "--plot", "/proc/p.png"], "--plot")


def test_the_probe_catches_what_os_access_allows(tmp_path, monkeypatch):
    monkeypatch.setattr("attnbench.api.probes.os.access", lambda *args, **kwargs: True)  # as root
    line = one_error_line([*TIME, "--csv", "/proc/x.csv"], "--csv")
    assert "cannot create files in /proc" in line


def test_file_names_keep_room_for_their_temp_files(tmp_path):
    limit = os.pathconf(tmp_path, "PC_NAME_MAX") - HIDDEN_NAME_ROOM
    longest = tmp_path / ("x" * (limit - 4) + ".csv")
    assert writable_file(longest, "--csv") == longest
    with ResultSink(ENV, longest) as sink:  # its temp and lock files fit
        sink.add_case(case_rows("a"))
    with pytest.raises(UsageError, match=f"{limit + 1} bytes"):
        writable_file(tmp_path / ("y" * (limit - 3) + ".csv"), "--csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [longest.name, longest.with_suffix(".env.json").name]
    )


@pytest.mark.parametrize("outputs", ["csv", "json", "both"])
def test_an_older_file_stays_whole_until_the_first_case_replaces_it(tmp_path, outputs):
    """Without --resume, a run interrupted before its first case leaves the older files as
    they were; its first case replaces them whole; a run that ends with no case leaves
    empty files."""
    csv = tmp_path / "r.csv" if outputs != "json" else None
    js = tmp_path / "r.json" if outputs != "csv" else None
    with ResultSink(ENV, csv, js) as sink:
        sink.add_case(case_rows("old-1"))
        sink.add_case(case_rows("old-2"))
    files = [p for p in (csv, js, csv and results.env_sidecar(csv)) if p is not None]
    before = {p: p.read_bytes() for p in files}
    with pytest.raises(KeyboardInterrupt), ResultSink(ENV, csv, js):
        raise KeyboardInterrupt
    assert {p: p.read_bytes() for p in files} == before
    with pytest.raises(KeyboardInterrupt), ResultSink(ENV, csv, js) as sink:
        sink.add_case(case_rows("new"))
        raise KeyboardInterrupt
    for path in (p for p in (csv, js) if p is not None):
        assert set(read_rows(path)["case_id"]) == {"new"}
    with ResultSink(ENV, csv, js):
        pass
    assert csv is None or read_rows(csv).empty
    assert js is None or json.loads(js.read_text())["rows"] == []


def test_a_symlink_and_its_target_share_one_lock_and_the_link_stays_a_link(tmp_path):
    """Locks were by name: --csv c.csv and --csv link.csv ran at once, and the link was
    replaced by a regular file."""
    csv, link = tmp_path / "c.csv", tmp_path / "link.csv"
    link.symlink_to(csv.name)
    with ResultSink(ENV, csv):
        with pytest.raises(UsageError, match="c.csv is being written by another attnbench run"):
            ResultSink(ENV, link).__enter__()
    with ResultSink(ENV, link) as sink:
        sink.add_case(case_rows("a"))
    assert link.is_symlink() and os.readlink(link) == csv.name
    assert len(pd.read_csv(csv)) == len(METRICS)
    assert env_sidecar(link) == tmp_path / "c.env.json" and env_sidecar(link).is_file()


def test_a_lock_that_cannot_be_written_is_one_error_and_leaves_no_lock_file(tmp_path, monkeypatch):
    """A run started on a full disk ended in a traceback from the lock file's write and left
    an empty lock file behind."""

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(results.os, "pwrite", full)
    csv = tmp_path / "r.csv"
    with pytest.raises(UsageError, match=f"cannot lock {csv}: No space left on device"):
        ResultSink(ENV, csv).__enter__()
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    with ResultSink(ENV, csv) as sink:  # nothing left that stops the next run
        sink.add_case(case_rows("a"))
    assert len(read_rows(csv)) == len(METRICS)


def test_sigterm_while_probing_an_output_directory_leaves_no_probe_file(tmp_path, monkeypatch):
    """A SIGTERM between creating and removing the probe left `.attnbench-probe-*`."""
    import attnbench.api.probes as parse

    real_close = parse.os.close

    def close_then_terminated(fd):
        real_close(fd)
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the probe exists

    monkeypatch.setattr(parse.os, "close", close_then_terminated)
    with sigterm_as_interrupt(), pytest.raises(Terminated):
        writable_file(tmp_path / "r.csv", "--csv")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
