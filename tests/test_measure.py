"""Measurement helpers: sample counts, warm-up and blocking logic, peak memory, env record.

No assertions on absolute times: shared machines are too noisy for that.
"""

import contextlib
import json
import math
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from attnbench.measure import memory, timing
from attnbench.measure.env import environment
from attnbench.measure.memory import PeakMemory, available_bytes, peak_memory
from attnbench.measure.threads import set_threads
from attnbench.measure.timing import Timing, time_call

MIB = 1024 * 1024
ENV_KEYS = (
    "schema_version attnbench python platform torch numpy numba numba_cuda torch_cuda device"
    " device_name nvidia_driver torch_threads torch_interop_threads threads seed command"
    " git_revision timestamp timer"
).split()


def _sleep_first_call_only(seconds: float):
    calls = []

    def fn():
        if not calls:
            time.sleep(seconds)
        calls.append(1)
        return sum(range(20_000))

    return fn, calls


def test_timing_returns_every_sample():
    t = time_call(lambda: sum(range(1000)), "cpu", repeats=7, warmup=3, min_time_s=0)
    assert isinstance(t, Timing)
    assert len(t.samples_ms) == 7
    assert all(s > 0 for s in t.samples_ms)
    assert t.p10 <= t.median <= t.p90
    assert t.timer == "perf_counter_ns"
    assert 0 <= t.warmup_calls <= 3


def test_first_call_is_reported_separately():
    fn, calls = _sleep_first_call_only(0.05)
    t = time_call(fn, "cpu", repeats=5, warmup=5)
    assert t.first_call_ms >= 50
    assert t.median < 50
    assert len(calls) == t.calls == 1 + t.warmup_calls + len(t.samples_ms) * t.loops


def test_warmup_zero_means_first_call_only():
    t = time_call(lambda: sum(range(1000)), "cpu", repeats=2, warmup=0, min_time_s=0)
    assert t.warmup_calls == 0
    assert t.settled is False


def test_short_calls_are_timed_in_blocks():
    t = time_call(lambda: None, "cpu", repeats=3, warmup=10, min_time_s=0)
    assert t.loops > 1
    assert len(t.samples_ms) == 3


def test_long_calls_are_not_blocked():
    t = time_call(lambda: time.sleep(0.003), "cpu", repeats=2, warmup=2)
    assert t.loops == 1


@pytest.mark.parametrize(
    "kwargs",
    [{"repeats": 0}, {"repeats": -1}, {"warmup": -1}, {"min_time_s": -1}, {"max_spread": -0.1}],
)
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        time_call(lambda: None, "cpu", **kwargs)


class FakeClock:
    """A clock that moves only when the timed function runs, by the next of `call_ms`.

    The last duration repeats once the list is used up, so a run of any length is defined.
    """

    def __init__(self, call_ms: list[float]):
        self.ns = 0
        self.call_ms = call_ms
        self.calls = 0

    def perf_counter_ns(self) -> int:
        return self.ns

    def advance(self, ms: float) -> None:
        self.ns += round(ms * 1e6)

    def call(self) -> None:
        self.advance(self.call_ms[min(self.calls, len(self.call_ms) - 1)])
        self.calls += 1


def _fake_cpu_clock(monkeypatch, call_ms: list[float]) -> FakeClock:
    clock = FakeClock(call_ms)
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter_ns=clock.perf_counter_ns))
    return clock


def test_reported_time_is_the_median_of_the_kept_samples(monkeypatch):
    # First call 50 ms, warm-up 30 then 30 (settled), then the five kept samples: the mean
    # (28.6) and a median over warm-up too (21) both differ from the kept samples' median.
    kept = [10.0, 12.0, 100.0, 11.0, 10.0]
    clock = _fake_cpu_clock(monkeypatch, [50.0, 30.0, 30.0, *kept])
    t = time_call(clock.call, "cpu", repeats=5, warmup=5, min_time_s=0)
    assert t.first_call_ms == 50.0
    assert (t.warmup_calls, t.settled, t.loops) == (2, True, 1)
    assert t.samples_ms == kept
    assert t.median == 11.0
    assert (t.iqr, t.spread) == (2.0, pytest.approx(2 / 11))
    assert t.stable is False


def test_min_time_gives_fast_calls_many_samples(monkeypatch):
    clock = _fake_cpu_clock(monkeypatch, [0.01])
    t = time_call(clock.call, "cpu", repeats=3, warmup=2, min_time_s=0.05)
    assert t.loops == 100  # blocked up to MIN_SAMPLE_MS per sample
    measured_ms = sum(t.samples_ms) * t.loops
    assert len(t.samples_ms) > 3
    assert 50 <= measured_ms < 50 + t.samples_ms[-1] * t.loops  # stops at the first sample past it


@pytest.mark.parametrize(
    ("repeats", "min_time_s", "expected"),
    [(5, 0.05, 5), (2, 0.1, 4), (3, 0, 3)],  # 30 ms calls: repeats is a floor, min-time tops up
)
def test_min_time_and_repeats_for_slow_calls(monkeypatch, repeats, min_time_s, expected):
    clock = _fake_cpu_clock(monkeypatch, [30.0])
    t = time_call(clock.call, "cpu", repeats=repeats, warmup=2, min_time_s=min_time_s)
    assert t.loops == 1
    assert len(t.samples_ms) == expected


@pytest.mark.parametrize(("repeats", "expected"), [(5, timing.MAX_SAMPLES), (1200, 1200)])
def test_sample_count_is_capped_unless_repeats_asks_for_more(monkeypatch, repeats, expected):
    # Calls that become far faster after warm-up would need a million samples to reach 1 s.
    clock = _fake_cpu_clock(monkeypatch, [1.0, 1.0, 1.0, 0.001])
    t = time_call(clock.call, "cpu", repeats=repeats, warmup=2, min_time_s=1.0)
    assert t.loops == 1
    assert len(t.samples_ms) == expected


def _timing(samples: list[float], max_spread: float = 0.10) -> Timing:
    return Timing(samples, 1.0, 0, 1, True, "perf_counter_ns", max_spread)


@pytest.mark.parametrize(
    ("samples", "max_spread", "stable"),
    [
        ([10.0] * 8 + [10.2, 9.8], 0.10, True),
        ([9.0, 10.0, 11.0], 0.10, True),  # spread exactly at the threshold
        ([9.0, 10.0, 11.0], 0.09, False),
        ([10.0] * 18 + [100.0, 200.0], 0.10, True),  # a few outliers leave the IQR alone
        ([10.0] * 10 + [20.0] * 10, 0.10, False),  # two modes: the machine changed mid-case
        ([0.0, 0.0, 0.0], 0.10, True),
    ],
)
def test_stability_verdict_from_the_spread(samples, max_spread, stable):
    t = _timing(samples, max_spread)
    assert t.stable is stable
    q25, q75 = np.percentile(samples, [25, 75])
    assert t.iqr == pytest.approx(q75 - q25)


def test_spread_of_a_zero_median_with_outliers_is_infinite():
    t = _timing([0.0, 0.0, 0.0, 5.0])  # IQR 1.25, median 0
    assert t.spread == math.inf
    assert t.stable is False


class FakeCuda:
    """Stands in for torch.cuda: records the order of flushes, syncs, events and calls.

    The GPU clock moves by FLUSH_MS for each flush and by `call_ms` for each call, so a
    flush inside the events would show in the timed values.
    """

    FLUSH_MS = 5.0

    def __init__(self, call_ms: float):
        self.log: list[str] = []
        self.now = 0.0
        self.call_ms = call_ms
        self.events = 0
        fake = self

        class Event:
            def __init__(self, enable_timing: bool = False):
                assert enable_timing
                self.name = "start" if fake.events % 2 == 0 else "end"
                fake.events += 1

            def record(self) -> None:
                self.t = fake.now
                fake.log.append(f"{self.name}.record")

            def elapsed_time(self, end) -> float:
                return end.t - self.t

        self.Event = Event

    def synchronize(self) -> None:
        self.log.append("sync")

    def flush(self) -> None:
        self.now += self.FLUSH_MS
        self.log.append("flush")

    def fn(self) -> None:
        self.now += self.call_ms
        self.log.append("fn")


def _fake_cuda(monkeypatch, call_ms: float) -> FakeCuda:
    fake = FakeCuda(call_ms)
    monkeypatch.setattr(torch.cuda, "Event", fake.Event)
    monkeypatch.setattr(torch.cuda, "synchronize", fake.synchronize)
    monkeypatch.setattr(torch.cuda, "device", lambda dev: contextlib.nullcontext())
    monkeypatch.setattr(timing, "_l2_flusher", lambda dev: fake.flush)
    return fake


@pytest.mark.parametrize(("call_ms", "loops"), [(2.0, 1), (0.25, 4)])
def test_cuda_flush_precedes_every_timed_call_outside_the_events(monkeypatch, call_ms, loops):
    fake = _fake_cuda(monkeypatch, call_ms)
    t = time_call(fake.fn, "cuda:0", repeats=3, warmup=2, min_time_s=0)
    assert t.timer == "cuda-event"
    assert t.loops == loops
    one_call = ["flush", "start.record", "fn", "end.record"]
    measures = [1] * (1 + t.warmup_calls) + [t.loops] * len(t.samples_ms)
    expected = [step for loops in measures for step in ["sync", *one_call * loops, "sync"]]
    assert fake.log == expected
    assert t.first_call_ms == call_ms  # the flush's time is never counted
    assert t.samples_ms == [call_ms] * 3


def test_cuda_without_flush(monkeypatch):
    fake = _fake_cuda(monkeypatch, 2.0)
    t = time_call(fake.fn, "cuda", repeats=3, warmup=2, min_time_s=0, flush_l2=False)
    assert "flush" not in fake.log
    assert fake.log.count("fn") == t.calls


def _allocate(mib: int):
    def fn():
        x = torch.ones(mib * MIB // 4)  # float32, every page written
        del x

    return fn


def _reads_as(reading: int, mib: int) -> bool:
    """A peak within 10 % of `mib`, plus up to 2 MiB of the process's other pages touched
    during the call (the interpreter's, library code paged back in after a reclaim), which
    matter for a small tensor depending on what ran before; a tensor counted twice exceeds it."""
    return 0.9 * mib * MIB <= reading <= 1.1 * mib * MIB + 2 * MIB


def test_peak_memory_of_a_256_mib_tensor():
    m = peak_memory(_allocate(256), "cpu")
    assert isinstance(m, PeakMemory)
    assert m.bytes == pytest.approx(256 * MIB, rel=0.10)


@pytest.mark.parametrize("mib", [256, 4])
def test_peak_memory_after_warmup_calls(mib):
    # Small blocks freed by warm-up stay in the heap and would be reused without RSS growth.
    fn = _allocate(mib)
    for _ in range(3):
        fn()
    readings = [peak_memory(fn, "cpu").bytes for _ in range(3)]
    assert all(_reads_as(reading, mib) for reading in readings), readings


def test_peak_memory_of_a_call_allocating_nothing():
    m = peak_memory(lambda: None, "cpu")
    assert 0 <= m.bytes < 16 * MIB


def test_peak_memory_counts_the_returned_result():
    m = peak_memory(lambda: torch.ones(64 * MIB // 4), "cpu")
    assert m.bytes == pytest.approx(64 * MIB, rel=0.10)


def test_peak_memory_falls_back_to_sampling(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "CLEAR_REFS", tmp_path / "missing" / "clear_refs")
    m = peak_memory(lambda: torch.ones(256 * MIB // 4), "cpu")
    assert m.method == "rss-sampled"
    assert 128 * MIB < m.bytes < 300 * MIB  # sampling may miss part of the peak, never adds


def test_available_bytes_is_positive():
    assert available_bytes("cpu") > 0


def test_environment_record():
    env = environment("cpu", threads=2, seed=0)
    assert set(ENV_KEYS) <= set(env)
    assert env["threads"] == 2 and env["seed"] == 0
    assert env["timer"] == "perf_counter_ns"
    revision = env["git_revision"]
    assert revision is None or len(revision.removesuffix("+dirty")) == 40
    json.loads(json.dumps(env))


def test_steady_allocator_is_applied_once_and_recorded():
    from attnbench.measure.allocator import allocator_setting, steady_allocator
    from attnbench.measure.env import environment

    setting = steady_allocator()
    assert steady_allocator() == setting == allocator_setting()
    assert "no mmap" in setting  # glibc, as on every Linux machine we run on
    assert environment("cpu", 1, 0)["allocator"] == setting


@pytest.mark.parametrize("mib", [256, 4])
def test_peak_memory_under_the_steady_allocator(mib):
    """Freed blocks stay in the heap for reuse, yet every call's peak still reads right."""
    from attnbench.measure.allocator import steady_allocator

    steady_allocator()
    fn = _allocate(mib)
    for _ in range(3):
        fn()
    readings = [peak_memory(fn, "cpu").bytes for _ in range(3)]
    assert all(_reads_as(reading, mib) for reading in readings), readings


def test_git_revision_marks_uncommitted_package_changes(tmp_path, monkeypatch):
    import subprocess

    from attnbench.measure import env

    package = tmp_path / "attnbench"
    (package / "measure").mkdir(parents=True)
    source = package / "measure" / "env.py"
    source.write_text("x = 1\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    monkeypatch.setattr(env, "__file__", str(source))
    clean = env._git_revision()
    assert clean is not None and len(clean) == 40
    source.write_text("x = 2\n")
    assert env._git_revision() == clean + "+dirty"


def test_set_threads_sets_torch_and_numba_alike():
    import numba

    before = torch.get_num_threads()
    try:
        assert set_threads(1) == 1
        assert torch.get_num_threads() == 1
        assert numba.get_num_threads() == 1
        # None keeps torch's count and brings numba in line with it.
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        assert set_threads(None) == 1
        assert numba.get_num_threads() == 1
    finally:
        set_threads(before)


def test_peak_memory_under_the_steady_allocator_counts_live_blocks_only():
    """A freed block the heap keeps resident is not counted again: b is taken while a is
    live, a is freed, and c (larger than a's hole) is taken; at most b and c are live at
    once (40 MiB), though a heap serving c past a's resident hole touches 56 MiB. Every
    reading is the same, however the calls before left the heap."""
    from attnbench.measure.allocator import steady_allocator

    steady_allocator()

    def fn():
        a = torch.ones(16 * MIB // 4)
        b = torch.ones(16 * MIB // 4)
        del a
        c = torch.ones(24 * MIB // 4)
        del b, c

    for _ in range(3):
        fn()
    readings = [peak_memory(fn, "cpu").bytes for _ in range(3)]
    assert all(_reads_as(reading, 40) for reading in readings), readings
