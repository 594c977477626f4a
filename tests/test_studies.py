"""The studies as a library: skip what cannot fit, record failures, stay reproducible."""

import torch

from attnbench import get_backend
from attnbench.backends import Backend
from attnbench.images import grid_qkv
from attnbench.inputs import Inputs
from attnbench.studies import time as time_study
from attnbench.studies.error import ErrorSpec, run_error
from attnbench.studies.time import TimeSpec, run_time

TINY = dict(batch=1, heads=1, dim=8, repeats=2, warmup=1)


def rows_of(study):
    return [row for batch in study for row in batch]


class OutOfMemory(Backend):
    name = "test-oom"

    def forward(self, q, k, v, mask=None):
        raise torch.OutOfMemoryError("tried to allocate 1 TiB")


def test_case_predicted_not_to_fit_is_skipped_without_running():
    spec = TimeSpec(seqs=[1 << 22], backends=[get_backend("softmax")], **TINY)
    (row,) = rows_of(run_time(spec))
    assert row.status == "skipped" and row.reason.startswith("needs ~")
    assert row.value is None


def test_out_of_memory_is_recorded_and_the_sweep_goes_on():
    spec = TimeSpec(seqs=[16, 32], backends=[OutOfMemory(), get_backend("sdpa")], **TINY)
    rows = rows_of(run_time(spec))
    oom = [r for r in rows if r.backend == "test-oom"]
    assert [r.status for r in oom] == ["oom", "oom"]
    assert "1 TiB" in oom[0].reason
    measured = [r for r in rows if r.backend == "sdpa" and r.metric == "time_ms"]
    assert [r.seq for r in measured if r.status == "ok"] == [16, 32]


def test_time_rows_keep_every_sample():
    spec = TimeSpec(seqs=[16], backends=[get_backend("sdpa")], **{**TINY, "repeats": 5})
    row = next(r for r in rows_of(run_time(spec)) if r.metric == "time_ms")
    samples = [float(x) for x in row.samples.split()]
    assert row.count == len(samples) == 5
    assert row.p10 <= row.value <= row.p90


def test_error_study_is_reproducible_and_complete():
    def run():
        spec = ErrorSpec(
            seqs=[16, 32],
            hashes=[4, 16],
            trials=2,
            inputs=Inputs("clustered", 1, 2, 8),
            backends=[get_backend("sdpa")],
        )
        return rows_of(run_error(spec))

    first, second = run(), run()
    assert [(r.backend, r.seq, r.metric, r.value) for r in first] == [
        (r.backend, r.seq, r.metric, r.value) for r in second
    ]
    yoso = [r for r in first if r.metric == "radian_vs_yoso_e"]
    assert sorted((r.seq, r.backend.split(",")[0]) for r in yoso) == [
        (16, "yoso:m=16"),
        (16, "yoso:m=4"),
        (32, "yoso:m=16"),
        (32, "yoso:m=4"),
    ]
    assert all(r.count == 2 and len(r.samples.split()) == 2 for r in yoso)
    sdpa = {r.metric: r.value for r in first if r.backend == "sdpa" and r.seq == 32}
    assert sdpa["radian_vs_softmax"] < 1e-5 and sdpa["rel_frobenius_vs_softmax"] < 1e-5


def test_time_repeats_a_picture_over_batch_and_heads():
    spec = TimeSpec(
        seqs=[], grids=[(6, 5)], backends=[], batch=2, heads=3, dim=3,
        inputs=Inputs("blobs", 2, 3, 3),
    )  # fmt: skip
    picture = grid_qkv("blobs", 6, 5, 3, spec.seed)
    for got, want in zip(time_study._make_inputs(spec, 30, (6, 5)), picture, strict=True):
        assert got.shape == (2, 3, 30, want.shape[-1]) and got.is_contiguous()
        assert torch.equal(got, want.expand_as(got))
