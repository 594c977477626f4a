"""The ceilings cache under attack and under load: a poisoned file is measured again with one
notice and never a traceback; ceilings measured on a busy host are provisional and say so;
a stage above 100 % of its bound is marked with its likely cause; cache levels come from
where the bandwidth drops. Measuring is replaced by an instant stand-in throughout."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import time

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench.measure import busy, ceilings, conditions, limits, sweep
from attnbench.measure.ceilings import Ceilings, Level, cache_path
from attnbench.measure.roofline import call_throughput
from attnbench.measure.threads import set_threads
from attnbench.results.schema import Row, rows_frame
from attnbench.views.ceilings import ceilings_table, provisional_note
from attnbench.views.tables import stage_table, time_table

KIB, MIB = 2**10, 2**20
HOST_CPU = busy.host_cpu  # the real reading, before the fixture pins it
runner = CliRunner()


def fake(device: str = "cpu", threads: int = 1, **provenance) -> Ceilings:
    return Ceilings(
        device=device,
        device_name="test CPU",
        threads=threads,
        fingerprint=limits._fingerprint(device, threads),
        measured_at="2030-01-01T00:00:00+00:00",
        gemm_gflops={"float32": 80.0, "float64": 40.0, "bfloat16": 2.0, "float16": 2.0},
        levels=[
            Level("L1", 64 * KIB, 32 * KIB, 100.0, 120.0),
            Level("L2", 1 * MIB, 512 * KIB, 60.0, 70.0),
            Level("DRAM", math.inf, 256 * MIB, 10.0, 11.0),
        ],
        computed={"gflops_fp32": 100.0},
        add_gflops={"float32": 50.0},
        provenance=provenance,
    )


@pytest.fixture(autouse=True)
def instant(monkeypatch, tmp_path):
    """A cache of our own, a quiet host, and a measurement that takes no time (its
    provenance still comes from the real `busy.provenance`)."""
    monkeypatch.setenv(ceilings.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(conditions, "_sched_ns", lambda: None)
    monkeypatch.setattr(conditions, "_cpu_mhz", lambda: None)
    monkeypatch.setattr(busy.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(busy, "host_cpu", lambda: None)  # judged by the pinned load average
    monkeypatch.setattr(limits, "host_cpu", lambda: None)
    calls = []

    def measure_cpu(threads, step):
        calls.append(threads)
        good = fake(threads=threads)
        return good.gemm_gflops, {}, good.levels, {"computed": good.computed}

    monkeypatch.setattr(limits, "_measure_cpu", measure_cpu)
    threads = torch.get_num_threads()
    yield calls
    set_threads(threads)


def _poison(path, text: str) -> None:
    path.write_text(text)


def _edit(doc: dict, *keys, value) -> str:
    target = doc
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    return json.dumps(doc)


DEEP = "[" * 100_000 + "]" * 100_000
POISONS = {
    "gemm 1e-9": lambda d: _edit(d, "gemm_gflops", "float32", value=1e-9),
    "gemm negative": lambda d: _edit(d, "gemm_gflops", "float32", value=-80.0),
    "gemm NaN": lambda d: _edit(d, "gemm_gflops", "float32", value=math.nan),
    "gemm Infinity": lambda d: _edit(d, "gemm_gflops", "float64", value=math.inf),
    "gemm 1e30": lambda d: _edit(d, "gemm_gflops", "float32", value=1e30),
    "gemm as text": lambda d: _edit(d, "gemm_gflops", "float32", value="fast"),
    "gemm true": lambda d: _edit(d, "gemm_gflops", "float32", value=True),
    "gemm empty": lambda d: _edit(d, "gemm_gflops", value={}),
    "gemm a list": lambda d: _edit(d, "gemm_gflops", value=[1, 2]),
    "adds zero": lambda d: _edit(d, "add_gflops", "float32", value=0),
    "empty file": lambda d: "",
    "not JSON": lambda d: "{not json",
    "null": lambda d: "null",
    "[]": lambda d: "[]",
    "a number": lambda d: "3",
    "deep nesting": lambda d: DEEP,
    "deep inside": lambda d: _edit(d, "levels", value=json.loads("[" * 200 + "]" * 200)),
    "threads as text": lambda d: _edit(d, "threads", value="two"),
    "levels a dict": lambda d: _edit(d, "levels", value={"L1": 1}),
    "levels empty": lambda d: _edit(d, "levels", value=[]),
    "level null": lambda d: _edit(d, "levels", 0, value=None),
    "zero bandwidth": lambda d: _zero_bandwidth(d),
    "bandwidth text": lambda d: _edit(d, "levels", 1, "copy_gbs", value="1e3"),
    "capacity shrinks": lambda d: _edit(d, "levels", 1, "capacity", value=1024),
    "capacity unbounded early": lambda d: _edit(d, "levels", 0, "capacity", value=None),
    "level faster than the one before": lambda d: _edit(d, "levels", -1, "copy_gbs", value=1000.0),
    "missing levels": lambda d: json.dumps({k: v for k, v in d.items() if k != "levels"}),
    "provenance a list": lambda d: _edit(d, "provenance", value=[]),
    "provenance load as text": lambda d: _edit(d, "provenance", "load_before", value="high"),
    "provenance swept levels": lambda d: _edit(d, "provenance", "swept_levels", value=5),
    "provisional as text": lambda d: _edit(d, "provenance", "provisional", value="yes"),
    "other version": lambda d: _edit(d, "version", value=2),
    "other fingerprint": lambda d: _edit(d, "fingerprint", value="0123456789ab"),
}


def _zero_bandwidth(doc: dict) -> str:
    for level in doc["levels"]:
        level["copy_gbs"] = level["triad_gbs"] = 0.0
    return json.dumps(doc)


@pytest.mark.parametrize("poison", sorted(POISONS))
def test_poisoned_cache_is_measured_again_with_one_notice(instant, poison):
    first = limits.load_or_measure("cpu", threads=1, notify=lambda text: None)
    path = cache_path(first.fingerprint)
    _poison(path, POISONS[poison](json.loads(path.read_text())))
    notes: list[str] = []
    again = limits.load_or_measure("cpu", threads=1, notify=notes.append)
    assert len(instant) == 2 and (again.gemm_gflops, again.levels) == (
        first.gemm_gflops,
        first.levels,
    )
    bad = [n for n in notes if n.startswith("ceilings cache")]
    assert len(bad) == 1 and "\n" not in bad[0] and "measuring again" in bad[0], notes
    assert ceilings.load(first.fingerprint) == again  # the file is sound again


@pytest.mark.parametrize("poison", ["gemm 1e-9", "null", "deep nesting", "zero bandwidth"])
def test_machine_command_survives_a_poisoned_cache(poison):
    first = limits.load_or_measure("cpu", threads=1, notify=lambda text: None)
    path = cache_path(first.fingerprint)
    _poison(path, POISONS[poison](json.loads(path.read_text())))
    result = runner.invoke(cli.app, ["machine", "--device", "cpu", "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("ceilings cache")]
    assert len(lines) == 1 and "measuring again" in lines[0]
    assert "GEMM float32" in result.stdout


def test_measuring_says_so_and_records_the_host(instant):
    notes: list[str] = []
    found = limits.load_or_measure("cpu", threads=1, notify=notes.append)
    assert notes[0].startswith("measuring this machine's ceilings") and len(notes) == 2
    assert "measured the ceilings" in notes[1] and "provisional" not in notes[1]
    record = found.provenance
    assert record["cpus"] == busy.cpus() and record["load_before"] == 0.0
    assert record["provisional"] is False and not found.provisional
    assert json.loads(cache_path(found.fingerprint).read_text())["provenance"] == record


def test_busy_host_gives_provisional_ceilings_measured_again_when_quiet(instant, monkeypatch):
    load = [4.0 * busy.cpus()]
    monkeypatch.setattr(busy.os, "getloadavg", lambda: (load[0],) * 3)
    notes: list[str] = []
    found = limits.load_or_measure("cpu", threads=1, notify=notes.append)
    assert found.provisional and "load average" in found.provenance["busy"]
    assert "provisional" in notes[-1] and "busy" in notes[-1]
    assert ceilings.load(found.fingerprint).provisional  # cached, flagged
    notes.clear()
    assert limits.load_or_measure("cpu", threads=1, notify=notes.append).provisional
    assert len(instant) == 1 and not notes  # still busy: used as it is, the tables say so
    load[0] = 0.0
    notes.clear()
    final = limits.load_or_measure("cpu", threads=1, notify=notes.append)
    assert len(instant) == 2 and not final.provisional and "quiet now" in notes[0]
    notes.clear()
    assert limits.load_or_measure("cpu", threads=1, notify=notes.append) == final
    assert len(instant) == 2 and not notes  # final ceilings: read silently


def test_threads_waiting_for_a_cpu_make_ceilings_provisional():
    quiet = {"load": 0.0, "cpu_mhz": None}
    record = busy.provenance({**quiet, "sched": (0, 0)}, {**quiet, "sched": (10, 30)}, 1.0)
    assert record["provisional"] and record["cpu_wait"] == 0.75
    assert "waited for a CPU 75%" in record["busy"]
    record = busy.provenance({**quiet, "sched": (0, 0)}, {**quiet, "sched": (99, 1)}, 1.0)
    assert not record["provisional"] and record["busy"] == ""


def test_tables_say_the_ceilings_are_provisional():
    busy_one = fake(provisional=True, busy="load average 8.00 on 2 CPUs", load_before=8.0)
    note = provisional_note(busy_one)
    assert "provisional" in note and "load average 8.00" in note
    assert provisional_note(fake(provisional=False)) is None and provisional_note(None) is None
    text = _render(stage_table(rows_frame([_row(50.0)]), note))
    assert "ceilings provisional" in text
    text = _render(ceilings_table(busy_one))
    assert "ceilings provisional" in text and "measured under" in text


def test_over_100_percent_is_marked_with_its_likely_cause():
    stages = [(0.0, 1e6, 1 * MIB, 0.0)]  # 1 MB in the L2-sized working set: 60 GB/s
    under = call_throughput(1.0, stages, None, fake(), "float32")
    assert under["bound"] == "L2" and under["bound_pct"] < 100 and under["over_bound"] == ""
    over = call_throughput(1e-3, stages, None, fake(), "float32")
    assert over["bound_pct"] > 100
    assert "faster level than L2 (L1)" in over["over_bound"]
    assert "cost model overcounts" in over["over_bound"]
    loaded = call_throughput(1e-3, stages, None, fake(provisional=True), "float32")
    assert loaded["over_bound"].split(": ", 1)[1].startswith("ceilings measured under load")
    compute = call_throughput(1e-6, [(1e6, 0.0, 0.0, 0.0)], None, fake(), "float32")
    assert compute["bound"] == "compute" and "faster level" not in compute["over_bound"]


def test_zero_or_missing_ceilings_give_no_share_rather_than_an_error():
    zero = fake()
    zero = Ceilings(**{**zero.__dict__, "levels": [Level("DRAM", math.inf, 1.0, 0.0, 0.0)]})
    fields = call_throughput(1.0, [(0.0, 1e6, 1e6, 0.0)], None, zero, "float32")
    assert "bound_pct" not in fields and fields["gbs_alg"] > 0


def test_tables_mark_rows_above_their_bound():
    over = _row(130.0, over_bound="130% of L2: cost model overcounts the work")
    text = _render(stage_table(rows_frame([_row(50.0), over])))
    assert "130 % L2 !" in text and "50 % L2" in text and "50 % L2 !" not in text
    assert "above 100 % of its roofline bound" in text and "cost model overcounts" in text
    whole = _row(329.0, metric="time_ms", stage="", over_bound="329% of compute: ceilings")
    text = _render(time_table(rows_frame([whole]), "sdpa", 0.1))
    assert "329 % L2 !" in text and "329% of compute" in text


def _row(pct: float, metric: str = "stage_ms", stage: str = "hash", **fields) -> Row:
    return Row(
        study="profile", backend="yoso", impl="numba", device="cpu", dtype="float32",
        mode="fwd", inputs="random", batch=1, heads=1, seq=1024, dim=64, metric=metric,
        value=1.0, unit="ms", p10=1.0, p90=1.0, samples=[1.0], stage=stage, bound="L2",
        bound_pct=pct,
        **fields,
    )  # fmt: skip


def _render(table) -> str:
    console = Console(width=250, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


# ----------------------------------------------------------------- cache levels


def _points(rates: list[float], first: float = 16 * KIB) -> list[tuple[float, float]]:
    return [(first * 2**i, rate) for i, rate in enumerate(rates)]


def test_a_vm_l3_the_sweep_does_not_see_is_left_out():
    """2 vCPUs, sysfs: 48 KiB L1 and 2 MiB L2 each, a 300 MiB L3; the sweep drops past
    the L2s and is flat from there to 512 MiB: the "L3" is DRAM."""
    caches = [(1, 48 * KIB, 1), (2, 2 * MIB, 1), (3, 300 * MIB, 2)]
    planned = limits.cpu_levels(2, caches, 2)
    assert planned[2] == ("L3", 300 * MIB, 150 * MIB)
    rates = [100.0] * 8 + [45.0] + [6.0, 6.5, 9.0, 6.0, 4.5, 4.8, 6.3]  # 16 KiB .. 512 MiB
    found = sweep.levels(planned, _points(rates))
    assert [name for name, _, _ in found] == ["L1", "L2", "DRAM"]
    assert 2 * MIB < found[1][1] < 8 * MIB  # where it dropped, not sysfs's 4 MiB exactly
    assert limits.dram_working_set(found[:-1]) == limits.DRAM_MIN_BYTES  # not 8 x 300 MiB


def test_sweep_edges_need_a_lasting_drop_and_keep_levels_it_confirms():
    one_blip = _points([100, 100, 40, 100, 100, 100])
    assert sweep.edges(one_blip) == []
    two_levels = _points([100, 100, 100, 50, 50, 50, 10, 10])
    found = sweep.edges(two_levels)
    assert len(found) == 2 and 64 * KIB < found[0] < 128 * KIB
    planned = [("L1", 48 * KIB, 24 * KIB), ("L2", 512 * KIB, 256 * KIB), ("DRAM", math.inf, 1)]
    assert [n for n, _, _ in sweep.levels(planned, two_levels)] == ["L1", "L2", "DRAM"]
    assert sweep.levels(planned, _points([100] * 8)) == planned  # no edge: sysfs as is
    beyond = [("L1", 48 * KIB, 24 * KIB), ("L3", 1024 * MIB, 512 * MIB), ("DRAM", math.inf, 1)]
    kept = sweep.levels(beyond, _points([100, 100, 100, 20, 20]))
    assert [n for n, _, _ in kept] == ["L1", "L3", "DRAM"]  # the sweep never reached 1 GiB


def test_a_level_no_faster_than_the_next_is_merged_into_it():
    levels = [Level("L1", 64, 32, 50.0, 50.0), Level("L2", 128, 64, 80.0, 80.0)]
    levels.append(Level("DRAM", math.inf, 1024, 10.0, 10.0))
    assert [level.name for level in limits.faster_first(levels)] == ["L2", "DRAM"]


def test_real_sweep_gives_a_rate_per_size():
    sizes = sweep.sweep_sizes(64 * KIB, scale=1 / 1024)  # 16, 32, 64 KiB
    assert sizes[0] == sweep.SWEEP_FROM
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:], strict=False))
    points = sweep.sweep(sizes[:3], 1, scale=1 / 4096)
    assert len(points) == 3 and all(rate > 0 and math.isfinite(rate) for _, rate in points)


def test_first_time_table_on_a_busy_host_says_the_ceilings_are_provisional(
    instant, monkeypatch, tmp_path
):
    """A fresh cache measured under load: the first `time` table a user reads says so."""
    monkeypatch.setattr(busy.os, "getloadavg", lambda: (4.0 * busy.cpus(),) * 3)
    args = ["time", "--seq", "16", "--backends", "softmax", "--heads", "1", "--dim", "4"]
    args += ["--repeats", "2", "--warmup", "0", "--csv", str(tmp_path / "t.csv")]
    result = runner.invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "ceilings provisional: measured on a busy host (load average" in text
    assert len(instant) == 1


def test_other_processes_cpu_time_judges_the_host_not_the_lagging_load_average():
    """The load average still counted the user's own `pip install` a minute on, so a quiet
    host was called busy; what other processes used during the measurement decides."""
    quiet = {"load": 4.0 * busy.cpus(), "cpu_mhz": None, "sched": None}
    calm = ({**quiet, "host": (0.0, 0.0, 0.0)}, {**quiet, "host": (1.0, 0.5, 0.45)})
    record = busy.provenance(*calm, 1.0)
    assert not record["provisional"] and record["others_share"] < busy.BUSY_OTHERS
    cpus = busy.cpus()
    loaded = ({**quiet, "host": (0.0, 0.0, 0.0)}, {**quiet, "host": (1.0, cpus * 0.9, 0.1)})
    record = busy.provenance(*loaded, 1.0)
    assert record["provisional"] and "other processes used" in record["busy"]


def test_the_other_processes_share_is_read_from_proc_stat():
    if HOST_CPU() is None:
        pytest.skip("no /proc/stat here")
    spin = [sys.executable, "-c", "while True: pass"]
    procs = [subprocess.Popen(spin) for _ in range(busy.cpus() * 2)]
    try:
        time.sleep(0.2)
        start = HOST_CPU()
        time.sleep(1.0)
        share = busy.others_share(start, HOST_CPU())
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert share > 0.5  # the spinners hold the CPUs, and they are not this process
