"""Result files are safe from what is found beside them: a lock file that is a link or not
attnbench's is refused, not written through; a killed run's record cuts back only the file
that run wrote, and only once a run is under way; an older file that cannot be replaced
refuses the run with every file as it was; a resume writes whole numbers back as such."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench.errors import UsageError
from attnbench.results.paths import env_sidecar
from attnbench.results.read import read_rows
from attnbench.results.schema import Row
from attnbench.results.sink import ResultSink

ENV = {"torch": "2.13.0", "threads": 1, "command": "attnbench time --seq 64"}
TIME = ["time", "--seq", "16", "--backends", "softmax", "--repeats", "1", "--warmup", "0"]
TIME += ["--heads", "1", "--dim", "4"]


def case_rows(case_id: str, seq: int = 64, **params) -> list[Row]:
    return [
        Row(study="time", backend="yoso" if params else "sdpa", impl="torch", device="cpu",
            dtype="float32", mode="fwd", inputs="random", batch=1, heads=1, seq=seq, dim=8,
            metric=metric, value=1.5, samples=[1.0, 2.0], case_id=case_id, params=params)
        for metric in ("time_ms", "peak_mib")
    ]  # fmt: skip


def killed(sink: ResultSink) -> None:
    """End `sink` as SIGKILL would: its flocks dropped, its lock files (and records) left."""
    for lock in sink._locks:
        os.close(lock.fd)
    sink._locks.clear()


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def run_cli(args: list, monkeypatch) -> tuple[int, list[str]]:
    monkeypatch.setattr("attnbench.run.procedure._ceilings", lambda *args, **kwargs: None)
    result = CliRunner().invoke(cli.app, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result.exit_code, [line for line in result.stderr.splitlines() if line]


# ----------------------------------------------------------------------------- the lock file


def test_a_symlink_lock_is_refused_and_its_target_untouched(tmp_path, monkeypatch):
    """`ln -s ../victim .r.csv.lock` made the run write its lock line into ../victim."""
    folder = tmp_path / "results"
    folder.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (folder / ".r.csv.lock").symlink_to("../victim")
    monkeypatch.chdir(folder)
    code, lines = run_cli([*TIME, "--csv", "r.csv"], monkeypatch)
    assert code == 2 and lines[-1].startswith("error: cannot lock ")
    assert "is a symbolic link" in lines[-1]
    assert victim.read_text() == "precious\n"
    assert (folder / ".r.csv.lock").is_symlink() and not (folder / "r.csv").exists()


@pytest.mark.parametrize("planted", ["hard link", "other file"])
def test_a_lock_path_holding_another_file_is_refused_and_left_whole(tmp_path, planted):
    victim, csv = tmp_path / "victim", tmp_path / "r.csv"
    victim.write_text("precious\n")
    if planted == "hard link":
        os.link(victim, tmp_path / ".r.csv.lock")
    else:
        victim = tmp_path / ".r.csv.lock"
        victim.write_text("precious\n")
    with pytest.raises(UsageError, match="is not an attnbench lock file"):
        ResultSink(ENV, csv).__enter__()
    assert victim.read_text() == "precious\n" and not csv.exists()


def test_a_lock_file_is_the_owners_alone(tmp_path):
    with ResultSink(ENV, tmp_path / "r.csv"):
        mode = (tmp_path / ".r.csv.lock").stat().st_mode
    assert stat.S_IMODE(mode) == 0o600


# ------------------------------------------------------------------ a killed run's record


def test_a_restored_file_is_not_cut_to_a_stale_record(tmp_path, capsys):
    """After SIGKILL the lock kept the killed run's length, and the next run, even a refused
    one, cut a complete older file restored since (a `git checkout`) to that length."""
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    with ResultSink(ENV, csv, js) as older:
        for i in range(4):
            older.add_case(case_rows(f"old-{i}", seq=i + 1))
    restored = files(tmp_path)
    sink = ResultSink(ENV, csv, js).__enter__()
    for i in range(2):
        sink.add_case(case_rows(f"new-{i}"))
    killed(sink)
    for name in ("r.csv", "r.json", "r.env.json"):
        (tmp_path / name).write_bytes(restored[name])
    capsys.readouterr()

    with pytest.raises(UsageError), ResultSink(ENV, csv, js, resume=True):
        raise UsageError("refused")  # as the resume check refuses a run
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(line.startswith("warning: ") for line in lines)
    assert "r.csv" in lines[0] and "is not the one that run wrote" in lines[0]
    assert files(tmp_path) == restored  # and the records went with the stale locks
    with ResultSink(ENV, csv, js, resume=True) as sink:
        assert len(sink.records) == 8
    assert len(read_rows(csv)) == 8 and capsys.readouterr().err == ""


def test_a_planted_record_leaves_the_file_whole(tmp_path, capsys):
    csv = tmp_path / "r.csv"
    with ResultSink(ENV, csv) as sink:
        sink.add_case(case_rows("a"))
    before = csv.read_bytes()
    for record in (f"{20:20d}", f"{20:20d} {'a' * 32} {'b' * 64}"):
        (tmp_path / ".r.csv.lock").write_text(f"1 attnbench time\n{record}\n")
        with ResultSink(ENV, csv, resume=True):
            pass
        assert csv.read_bytes() == before
        assert capsys.readouterr().err.startswith("warning: .r.csv.lock says a killed run")


def test_a_torn_file_is_cut_back_only_by_a_run_under_way(tmp_path):
    """A trusted record is acted on at the run's first commit: a run refused before it leaves
    the torn file, and the record, for the next one."""
    csv = tmp_path / "r.csv"
    sink = ResultSink(ENV, csv).__enter__()
    sink.add_case(case_rows("a"))
    sink.add_case(case_rows("b"))
    whole = csv.read_bytes()
    with csv.open("ab") as f:
        f.write(b"time,sdpa,torch,cpu,flo")  # an append cut short by the kill
    killed(sink)
    torn, lock = csv.read_bytes(), (tmp_path / ".r.csv.lock").read_text()

    with pytest.raises(UsageError), ResultSink(ENV, csv, resume=True) as refused:
        assert {r["case_id"] for r in refused.records} == {"a", "b"}
        raise UsageError("refused")
    assert csv.read_bytes() == torn
    assert (tmp_path / ".r.csv.lock").read_text().splitlines()[1] == lock.splitlines()[1]
    with ResultSink(ENV, csv, resume=True):
        pass
    assert csv.read_bytes() == whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "r.env.json"]


# ---------------------------------------------------------- files that cannot be replaced


def test_an_immutable_sidecar_refuses_the_run_before_any_work(tmp_path, monkeypatch):
    """`chattr +i old.env.json`: `time --csv old.csv` replaced old.csv, then failed on the
    sidecar and left it, saying "0 completed cases are kept"."""
    csv = tmp_path / "old.csv"
    with ResultSink(ENV, csv) as sink:
        sink.add_case(case_rows("a"))
    before = files(tmp_path)
    sidecar, real_open = env_sidecar(csv), os.open

    def immutable(path, flags, *args, **kwargs):  # what the kernel says to a write open
        if Path(path) == sidecar and flags & (os.O_WRONLY | os.O_RDWR):
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", immutable)
    code, lines = run_cli([*TIME, "--csv", csv], monkeypatch)
    monkeypatch.undo()
    assert code == 2 and len(lines) == 1  # no "[1/1] softmax n=16": no case began
    assert lines[0].startswith(f"error: cannot replace {sidecar}: Operation not permitted")
    assert files(tmp_path) == before


def test_a_failed_rename_puts_back_the_files_renamed_before_it(tmp_path, monkeypatch):
    csv, js = tmp_path / "old.csv", tmp_path / "old.json"
    with ResultSink(ENV, csv, js) as sink:
        sink.add_case(case_rows("a"))
    before = files(tmp_path)
    sidecar, real_replace = env_sidecar(csv), os.replace

    def refusing(src, dst, *args, **kwargs):
        if Path(dst) == sidecar:
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", refusing)
    with pytest.raises(UsageError) as caught, ResultSink(ENV, csv, js) as sink:
        sink.add_case(case_rows("b"))
    monkeypatch.undo()
    assert str(caught.value) == (
        f"cannot write {sidecar}: Operation not permitted; the files are left as they were"
    )
    assert files(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before)


# ----------------------------------------------------------------------------- resume


def test_resume_keeps_whole_numbers_whole(tmp_path):
    """`--resume` rewrote integer parameter columns as floats (`m=8.0`, `seed=0.0`): a column
    empty on some rows reads back as floats."""
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    with ResultSink(ENV, csv, js) as sink:
        sink.add_case(case_rows("plain"))
        sink.add_case(case_rows("yoso", m=8, seed=0, tau=8.0))
    before = csv.read_bytes()
    for resumed in ((csv, js), (None, js)):  # from the CSV, then from the JSON
        with ResultSink(ENV, *resumed, resume=True):
            pass  # every case is done: the files are written again from what was read
        assert csv.read_bytes() == before
        assert csv.read_text().endswith(",8,0,8.0\n")
        assert read_rows(csv)["m"].dropna().tolist() == [8, 8]
        rows = json.loads(js.read_text())["rows"]
        assert [(r.get("m"), r.get("seed"), r.get("tau")) for r in rows[-2:]] == [(8, 0, 8.0)] * 2
        assert isinstance(rows[-1]["m"], int) and isinstance(rows[-1]["tau"], float)
