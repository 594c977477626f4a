"""Measurement helpers: sample counts, warm-up and blocking logic, peak memory, env record.

No assertions on absolute times: shared machines are too noisy for that.
"""

import json
import time

import pytest
import torch

from attnbench.measure import memory
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
    t = time_call(lambda: sum(range(1000)), "cpu", repeats=7, warmup=3)
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
    assert len(calls) == 1 + t.warmup_calls + 5 * t.loops


def test_warmup_zero_means_first_call_only():
    t = time_call(lambda: sum(range(1000)), "cpu", repeats=2, warmup=0)
    assert t.warmup_calls == 0
    assert t.stable is False


def test_short_calls_are_timed_in_blocks():
    t = time_call(lambda: None, "cpu", repeats=3, warmup=10)
    assert t.loops > 1
    assert len(t.samples_ms) == 3


def test_long_calls_are_not_blocked():
    t = time_call(lambda: time.sleep(0.003), "cpu", repeats=2, warmup=2)
    assert t.loops == 1


@pytest.mark.parametrize("kwargs", [{"repeats": 0}, {"repeats": -1}, {"warmup": -1}])
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        time_call(lambda: None, "cpu", **kwargs)


def _allocate(mib: int):
    def fn():
        x = torch.ones(mib * MIB // 4)  # float32, every page written
        del x

    return fn


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
    assert readings == pytest.approx([mib * MIB] * 3, rel=0.10)


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
    assert readings == pytest.approx([mib * MIB] * 3, rel=0.10)


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
