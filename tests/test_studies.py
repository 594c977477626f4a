"""The studies as a library: skip what cannot fit, record failures, stay reproducible."""

import contextlib

import pytest
import torch

from attnbench import get_backend
from attnbench.backends import Backend
from attnbench.inputs import Inputs
from attnbench.measure.metrics import mean_radian
from attnbench.run import runner
from attnbench.studies.error import ErrorStudy
from attnbench.studies.time import TimeStudy

TINY = dict(batch=1, heads=1, dim=8, repeats=2, warmup=1, min_time=0)


def rows_of(study):
    return [row for batch in study for row in batch]


class OutOfMemory(Backend):
    name = "test-oom"

    def forward(self, q, k, v, mask=None):
        raise torch.OutOfMemoryError("tried to allocate 1 TiB")


def test_case_predicted_not_to_fit_is_skipped_without_running():
    spec = TimeStudy(seqs=[1 << 22], backends=[get_backend("softmax")], **TINY)
    (row,) = rows_of(runner.run(spec))
    assert row.status == "skipped" and row.reason.startswith("needs ~")
    assert row.value is None


def test_out_of_memory_is_recorded_and_the_sweep_goes_on():
    spec = TimeStudy(seqs=[16, 32], backends=[OutOfMemory(), get_backend("sdpa")], **TINY)
    rows = rows_of(runner.run(spec))
    oom = [r for r in rows if r.backend == "test-oom"]
    assert [r.status for r in oom] == ["oom", "oom"]
    assert "1 TiB" in oom[0].reason
    measured = [r for r in rows if r.backend == "sdpa" and r.metric == "time_ms"]
    assert [r.seq for r in measured if r.status == "ok"] == [16, 32]


def test_time_rows_keep_every_sample():
    spec = TimeStudy(seqs=[16], backends=[get_backend("sdpa")], **{**TINY, "repeats": 5})
    row = next(r for r in rows_of(runner.run(spec)) if r.metric == "time_ms")
    assert row.count == len(row.samples) == 5
    assert row.p10 <= row.value <= row.p90


def test_error_study_is_reproducible_and_complete():
    def run(**options):
        spec = ErrorStudy(seqs=[16, 32], trials=2, inputs=Inputs("clustered", 1, 2, 8), **options)
        return rows_of(runner.run(spec))

    first, second = run(hashes=[4, 16]), run(hashes=[4, 16])
    assert [(r.backend, r.seq, r.metric, r.value) for r in first] == [
        (r.backend, r.seq, r.metric, r.value) for r in second
    ]
    # only hashes swept: YOSO Fig. 8, every yoso-m against yoso-e
    yoso = [r for r in first if r.metric == "radian_vs_yoso_e"]
    assert sorted((r.seq, r.backend.split(",")[0]) for r in yoso) == [
        (16, "yoso:m=16"),
        (16, "yoso:m=4"),
        (32, "yoso:m=16"),
        (32, "yoso:m=4"),
    ]
    assert all(r.count == 2 and len(r.samples) == 2 for r in yoso)
    assert {r.metric.partition("_vs_")[2] for r in first} == {"yoso_e"}

    exact = run(backends=[get_backend("sdpa")])  # backends: against exact softmax
    sdpa = {r.metric: r.value for r in exact if r.backend == "sdpa" and r.seq == 32}
    assert sdpa["radian_vs_softmax"] < 1e-5 and sdpa["rel_frobenius_vs_softmax"] < 1e-5


@pytest.mark.parametrize(
    ("options", "reference"),
    [
        (dict(hashes=[4]), "yoso-e:tau=8"),
        (dict(hashes=[4], tau=5), "yoso-e:tau=5"),
        (dict(hashes=[4], backends=["sdpa"]), "softmax"),
        (dict(backends=["sdpa"]), "softmax"),
        (dict(hashes=[4], reference="yoso-e:tau=4"), "yoso-e:tau=4"),
        (dict(backends=["yoso-e"], reference="sdpa"), "sdpa"),
    ],
)
def test_the_reference_is_yoso_e_for_a_hash_sweep_and_else_softmax(options, reference):
    options["backends"] = [get_backend(b) for b in options.get("backends", [])]
    spec = ErrorStudy(seqs=[16], trials=1, mc_seeds=1, inputs=Inputs("random", 1, 1, 4), **options)
    assert spec.reference == reference
    name = reference.partition(":")[0].replace("-", "_")
    rows = rows_of(runner.run(spec))
    assert rows and all(r.metric.endswith("_vs_" + name) for r in rows)


def test_an_explicit_reference_is_what_every_backend_is_compared_with():
    q, k, v = Inputs("random", 1, 2, 8).make(32, 0, torch.float32, "cpu")
    spec = ErrorStudy(
        seqs=[32], trials=1, mc_seeds=1, inputs=Inputs("random", 1, 2, 8),
        backends=[get_backend("softmax")], reference="yoso-e:tau=3",
    )  # fmt: skip
    (row,) = [r for r in rows_of(runner.run(spec)) if r.metric == "radian_vs_yoso_e"]
    expected = mean_radian(get_backend("softmax")(q, k, v), get_backend("yoso-e:tau=3")(q, k, v))
    assert row.value == pytest.approx(expected, abs=1e-6)


class FailsAt32(Backend):
    name = "test-fails-at-32"

    def forward(self, q, k, v, mask=None):
        if q.shape[-2] == 32:
            raise RuntimeError(ALLOC if q.shape[-1] == 8 else "boom")
        return v


ALLOC = "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"


@pytest.mark.parametrize(("dim", "status"), [(8, "oom"), (4, "error")])
def test_a_backend_failing_in_the_error_study_gets_a_status_row_and_the_study_goes_on(dim, status):
    spec = ErrorStudy(
        seqs=[16, 32, 64], trials=2, mc_seeds=1, inputs=Inputs("random", 1, 1, dim),
        backends=[FailsAt32(), get_backend("sdpa")],
    )  # fmt: skip
    rows = rows_of(runner.run(spec))
    failing = [r for r in rows if r.backend == "test-fails-at-32"]
    assert [(r.seq, r.status) for r in failing if r.metric == "radian_vs_softmax"] == [
        (16, "ok"), (32, status), (64, "ok"),
    ]  # fmt: skip
    assert all(r.status == "ok" for r in rows if r.backend == "sdpa")
    assert {r.seq for r in rows if r.backend == "sdpa"} == {16, 32, 64}


def test_time_rows_carry_the_speedup_against_the_baseline():
    spec = TimeStudy(
        seqs=[16, 32], backends=[get_backend("softmax"), get_backend("sdpa")],
        baseline=get_backend("sdpa"), **TINY,
    )  # fmt: skip
    rows = rows_of(runner.run(spec))
    times = [r for r in rows if r.metric == "time_ms"]
    assert [r.backend for r in times] == ["sdpa", "softmax"] * 2  # the baseline first
    medians = {(r.backend, r.seq): r.value for r in times}
    for r in times:
        assert r.baseline == "sdpa"
        assert r.speedup == pytest.approx(medians[("sdpa", r.seq)] / r.value)


def test_fit_slope_recovers_a_line_and_its_error():
    from attnbench.studies.error import fit_slope

    assert fit_slope([1, 2, 3], [1.0, 1.5, 2.0]) == pytest.approx((0.5, 0.0), abs=1e-12)
    slope, stderr = fit_slope([1, 2, 3, 4], [0.0, 1.0, 1.0, 2.0])
    assert slope == pytest.approx(0.6) and stderr == pytest.approx(0.02**0.5)  # residuals 0.2/2/5


def test_error_study_fits_the_slope_against_log2_n_per_m():
    import numpy as np

    from attnbench.studies.error import fit_slope

    spec = ErrorStudy(
        seqs=[16, 32, 64], hashes=[4, 16], trials=2, inputs=Inputs("clustered", 1, 2, 8)
    )
    rows = rows_of(runner.run(spec))
    slopes = [r for r in rows if r.metric == "radian_slope_log2n_vs_yoso_e"]
    assert sorted(r.backend.split(",")[0] for r in slopes) == ["yoso:m=16", "yoso:m=4"]
    for s in slopes:
        assert s.seq == 64 and s.count == 2 and s.unit == "rad per doubling of n"
        points = [r for r in rows if r.backend == s.backend and r.metric == "radian_vs_yoso_e"]
        xs = [np.log2(r.seq) for r in points for _ in r.samples]
        ys = [x for r in points for x in r.samples]
        assert (s.value, s.std) == pytest.approx(fit_slope(xs, ys))
        assert s.std > 0 and "16, 32, 64" in s.method
    # the reference and backends compared with softmax get no slope
    exact = ErrorStudy(seqs=[16, 32], trials=1, backends=[get_backend("sdpa")])
    assert not [r for r in rows_of(runner.run(exact)) if "slope" in r.metric]


@pytest.mark.parametrize("mode", ["fwdbwd", "bwd"])
def test_a_training_call_starts_without_the_last_calls_gradients(mode):
    """Each call leaves no gradients behind, so its measured peak (above what exists before
    it) is that of the same work on leaves without gradients, not less what it frees of
    the last call's gradients on entry."""
    from attnbench.measure.memory import peak_memory
    from attnbench.studies.time import _timed_call

    backend = get_backend("softmax")
    qkv = [torch.randn(1, 1, 256, 4096) for _ in range(3)]  # 4 MiB each
    grad_out = torch.randn(1, 1, 256, 4096)
    call = _timed_call(backend, qkv, mode, contextlib.nullcontext)
    for _ in range(2):
        call()

    def plain():
        """The same work on fresh leaves, prepared outside the measured call."""
        leaves = [t.detach().requires_grad_(True) for t in qkv]
        out = backend(*leaves) if mode == "bwd" else None

        def run():
            y = backend(*leaves) if out is None else out
            y.backward(grad_out, retain_graph=True)
            return leaves

        return run

    want = min(peak_memory(plain(), "cpu").bytes for _ in range(2))
    got = [peak_memory(call, "cpu").bytes for _ in range(2)]
    assert want >= 3 * qkv[0].numel() * 4
    assert all(reading == pytest.approx(want, rel=0.1) for reading in got), (want, got)
