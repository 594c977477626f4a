"""Host conditions around a case: readers on fake /sys and /proc files, and the cause named."""

import pytest

from attnbench.measure import conditions
from attnbench.measure.conditions import UNKNOWN, case_conditions, likely_cause, snapshot


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A fake host with no cpufreq and no cpuinfo until a test writes them."""
    cpu_dir = tmp_path / "cpu"
    cpu_dir.mkdir()
    monkeypatch.setattr(conditions, "CPU_DIR", cpu_dir)
    monkeypatch.setattr(conditions, "CPUINFO", tmp_path / "cpuinfo")
    monkeypatch.setattr(conditions, "TASKS", tmp_path / "task")
    monkeypatch.setattr(conditions.os, "getloadavg", lambda: (3.14159, 2.0, 1.0))
    return tmp_path


def _schedstat(host, threads: dict[int, str]) -> None:
    for tid, text in threads.items():
        folder = host / "task" / str(tid)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "schedstat").write_text(text + "\n")


def _cpufreq(host, khz: dict[int, str]) -> None:
    for cpu, value in khz.items():
        folder = host / "cpu" / f"cpu{cpu}" / "cpufreq"
        folder.mkdir(parents=True)
        (folder / "scaling_cur_freq").write_text(value + "\n")


def test_snapshot_reads_the_one_minute_load_and_sysfs_frequency(host):
    _cpufreq(host, {0: "2400000", 1: "1800000"})
    (host / "cpuinfo").write_text("cpu MHz\t\t: 999.0\n")  # sysfs wins over cpuinfo
    assert snapshot("cpu") == {"load": 3.14, "cpu_mhz": 2100.0, "sched": None}


def test_snapshot_sums_run_and_wait_over_the_threads(host):
    _schedstat(host, {101: "4000 1000 7", 102: "6000 500 3", 103: "garbage"})
    assert snapshot("cpu")["sched"] == (10000, 1500)


@pytest.mark.skipif(not conditions.TASKS.exists(), reason="no /proc schedstat here")
def test_snapshot_reads_this_process_on_linux():
    run, wait = snapshot("cpu")["sched"]
    assert run > 0 and wait >= 0


def test_snapshot_falls_back_to_cpuinfo(host):
    _cpufreq(host, {0: "not a number"})
    (host / "cpuinfo").write_text(
        "processor\t: 0\ncpu MHz\t\t: 2596.136\nprocessor\t: 1\ncpu MHz\t\t: 2000.000\n"
    )
    assert snapshot("cpu")["cpu_mhz"] == pytest.approx(2298.1)


def test_snapshot_without_any_reading(host, monkeypatch):
    def no_loadavg():
        raise OSError("load average unobtainable")

    monkeypatch.setattr(conditions.os, "getloadavg", no_loadavg)
    (host / "cpuinfo").write_text("processor\t: 0\n")
    assert snapshot("cpu") == {"load": None, "cpu_mhz": None, "sched": None}


def test_snapshot_on_this_machine_gives_numbers_or_none():
    reading = snapshot("cpu")
    assert set(reading) == {"load", "cpu_mhz", "sched"}
    assert all(reading[key] is None or reading[key] >= 0 for key in ("load", "cpu_mhz"))


def test_case_conditions_pair_before_and_after():
    before = {"load": 0.5, "cpu_mhz": 2400.0, "sched": (1000, 100)}
    after = {"load": 1.5, "cpu_mhz": 1800.0, "sched": (4000, 1100)}
    assert case_conditions(before, after) == {
        "cpu_wait": 0.25,  # waited 1000 ns of 3000 + 1000 runnable
        "load_before": 0.5,
        "load_after": 1.5,
        "cpu_mhz_before": 2400.0,
        "cpu_mhz_after": 1800.0,
    }


@pytest.mark.parametrize(
    ("before", "after"),
    [(None, (10, 0)), ((10, 0), None), ((10, 0), (10, 5)), ((10, 8), (20, 4))],
)
def test_no_cpu_wait_without_two_consistent_readings(before, after):
    """Unreadable, no time run, or a thread gone between the readings: no share is made up."""
    cpu = {"load": 0.1, "cpu_mhz": 2400.0}
    assert case_conditions(cpu | {"sched": before}, cpu | {"sched": after})["cpu_wait"] is None


def _case(load_before, load_after, mhz_before=2400.0, mhz_after=2400.0, wait=None) -> dict:
    return case_conditions(
        {"load": load_before, "cpu_mhz": mhz_before, "sched": (0, 0)},
        {
            "load": load_after,
            "cpu_mhz": mhz_after,
            "sched": None if wait is None else (1000 - int(wait * 1000), int(wait * 1000)),
        },
    )


@pytest.mark.parametrize(
    ("wait", "expected"), [(None, False), (0.0, False), (0.05, False), (0.06, True), (0.5, True)]
)
def test_a_case_is_contended_when_its_threads_waited_for_a_cpu(wait, expected):
    assert conditions.contended(_case(0.1, 0.1, wait=wait)) is expected


@pytest.mark.parametrize(
    ("cases", "cpus", "cause"),
    [
        ([_case(0.4, 3.1)], 2, "load average 3.1 on 2 CPUs (other processes competing)"),
        ([_case(0.4, 1.9), _case(1.9, 2.6)], 2, "load average 2.6 on 2 CPUs"),
        ([_case(3.5, 3.9)], 4, UNKNOWN),  # a busy machine with a CPU to spare
        ([_case(0.1, 0.2, 2400, 2390)], 2, UNKNOWN),  # frequency jitter is no cause
        ([_case(0.1, 0.2, 2400, 2400), _case(0.2, 0.2, 2400, 1800)], 2, "2400 -> 1800 MHz"),
        ([_case(None, None, None, None)], 2, UNKNOWN),
        ([_case(0.3, 0.4, wait=0.02)], 2, UNKNOWN),  # an idle host's scheduling noise
        ([_case(0.3, 0.4, wait=0.01), _case(0.4, 0.9, wait=0.42)], 2, "waited for a CPU up to 42%"),
        ([], 2, UNKNOWN),
    ],
)
def test_likely_cause(cases, cpus, cause):
    assert cause in likely_cause(cases, cpus=cpus)


def test_likely_cause_names_load_and_frequency_together():
    cause = likely_cause([_case(5.0, 5.2, 3000, 2000)], cpus=2)
    assert cause == (
        "load average 5.2 on 2 CPUs (other processes competing); "
        "CPU frequency changed 3000 -> 2000 MHz"
    )


def test_likely_cause_counts_this_machines_cpus_by_default(monkeypatch):
    monkeypatch.setattr(conditions.os, "cpu_count", lambda: 8)
    assert likely_cause([_case(6.0, 7.0)]) == UNKNOWN
    assert "on 8 CPUs" in likely_cause([_case(6.0, 9.0)])
