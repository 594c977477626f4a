"""YOSO's backward CUDA kernels (scaled and pair cumulation), run by the simulator, agree
with the dense torch oracles in reference.py.

Shapes stay tiny but cover n_r != n_w, d != d_a, several hash chunks, both pair weights,
a bound that samples buckets and one that keeps them whole, and block sizes that make a
block take several pairs per tile, stride its lanes over columns, or leave threads idle.
Outputs and tables start as NaN, proving the wrappers overwrite them.
"""

import numpy as np
import pytest
import torch

from attnbench.kernels.lsh import cuda as lsh_cuda
from attnbench.kernels.lsh import reference


def _nan(*shape):
    return np.full(shape, np.nan, dtype=np.float32)


def _codes(gen, groups, n, m, tau):
    return torch.randint(0, 2**tau, (groups, n, m), generator=gen, dtype=torch.int32)


def _unit(gen, groups, n, d):
    x = torch.randn(groups, n, d, generator=gen)
    return x / x.norm(dim=-1, keepdim=True)


# --- scaled cumulation ---------------------------------------------------------------


@pytest.mark.parametrize(
    "groups, n_r, n_w, width, m, tau, chunk",
    [
        (1, 1, 1, 1, 1, 1, 1),
        (2, 5, 12, 3, 3, 3, 2),  # chunks of 2 + 1 hashes
        (1, 11, 4, 7, 3, 1, 3),  # all hashes in one chunk
        (2, 6, 5, 2, 2, 2, 1),  # one hash at a time
    ],
)
def test_scaled_cumulation_matches_reference(groups, n_r, n_w, width, m, tau, chunk):
    gen = torch.Generator().manual_seed(n_r * n_w + tau)
    read, write = _codes(gen, groups, n_r, m, tau), _codes(gen, groups, n_w, m, tau)
    values = torch.randn(groups, n_w, width, generator=gen)
    write_scale = torch.randn(groups, n_w, m, generator=gen)
    read_scale = torch.randn(groups, n_r, m, generator=gen)
    out = _nan(groups, n_r, width)
    table = _nan(*lsh_cuda.table_shape(groups, m, tau, width, chunk))

    lsh_cuda.scaled_cumulation(
        read.numpy(),
        write.numpy(),
        values.numpy(),
        write_scale.numpy(),
        read_scale.numpy(),
        tau,
        out,
        table,
    )
    expected = reference.scaled_cumulation(read, write, values, write_scale, read_scale, tau)
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-5, atol=1e-5)


def test_scaled_cumulation_with_unit_scales_is_cumulation():
    gen = torch.Generator().manual_seed(3)
    groups, n_r, n_w, width, m, tau = 2, 5, 7, 3, 3, 2
    read, write = _codes(gen, groups, n_r, m, tau), _codes(gen, groups, n_w, m, tau)
    values = torch.randn(groups, n_w, width, generator=gen).numpy()
    table = _nan(*lsh_cuda.table_shape(groups, m, tau, width, 2))
    scaled, plain = _nan(groups, n_r, width), _nan(groups, n_r, width)
    ones_w, ones_r = np.ones((groups, n_w, m), np.float32), np.ones((groups, n_r, m), np.float32)
    lsh_cuda.scaled_cumulation(
        read.numpy(), write.numpy(), values, ones_w, ones_r, tau, scaled, table
    )
    lsh_cuda.cumulation(read.numpy(), write.numpy(), values, tau, plain, table)
    np.testing.assert_array_equal(scaled, plain)


def test_scaled_cumulation_rejects_scales_of_the_wrong_shape():
    codes = np.zeros((1, 3, 2), np.int32)
    values = np.zeros((1, 3, 4), np.float32)
    table = _nan(1, 1, 4, 4)
    good, bad = np.ones((1, 3, 2), np.float32), np.ones((1, 3, 1), np.float32)
    with pytest.raises(ValueError, match="write_scale"):
        lsh_cuda.scaled_cumulation(codes, codes, values, bad, good, 2, _nan(1, 3, 4), table)
    with pytest.raises(ValueError, match="read_scale"):
        lsh_cuda.scaled_cumulation(codes, codes, values, good, bad, 2, _nan(1, 3, 4), table)


# --- pair cumulation -----------------------------------------------------------------


def _pair_case(groups, n_r, n_w, d, d_a, m, tau, seed):
    gen = torch.Generator().manual_seed(seed)
    read, write = _codes(gen, groups, n_r, m, tau), _codes(gen, groups, n_w, m, tau)
    read_unit, write_unit = _unit(gen, groups, n_r, d), _unit(gen, groups, n_w, d)
    read_a = torch.randn(groups, n_r, d_a, generator=gen)
    write_a = torch.randn(groups, n_w, d_a, generator=gen)
    return read, write, read_unit, write_unit, read_a, write_a


def _largest_bucket(write, tau):
    return max(int((write == c).sum(1).max()) for c in range(2**tau))


@pytest.mark.parametrize("weight", ["lower", "exact"])
@pytest.mark.parametrize(
    "groups, n_r, n_w, d, d_a, m, tau, bound, sampled",
    [
        (1, 1, 1, 1, 1, 1, 1, 1, False),
        (2, 5, 12, 8, 3, 3, 1, 2, True),  # buckets of ~6 rows, every 3rd taken
        (1, 12, 9, 5, 6, 2, 2, 1, True),  # one row per bucket, d_a > d
        (1, 6, 11, 4, 2, 3, 3, 12, False),  # a bound no bucket reaches
    ],
)
def test_pair_cumulation_matches_reference(
    groups, n_r, n_w, d, d_a, m, tau, bound, sampled, weight
):
    read, write, read_unit, write_unit, read_a, write_a = _pair_case(
        groups, n_r, n_w, d, d_a, m, tau, seed=n_r * n_w + d + bound
    )
    assert (_largest_bucket(write, tau) > bound) == sampled
    sorted_codes, order = torch.sort(write.transpose(1, 2).contiguous(), dim=-1, stable=True)
    out = _nan(groups, n_r, d)

    lsh_cuda.pair_cumulation(
        read.numpy(),
        sorted_codes.numpy(),
        order.to(torch.int32).numpy(),
        read_unit.numpy(),
        write_unit.numpy(),
        read_a.numpy(),
        write_a.numpy(),
        tau,
        1 if weight == "exact" else 0,
        bound,
        out,
    )
    expected = reference.pair_cumulation(
        read, write, read_unit, write_unit, read_a, write_a, tau, weight, bound
    )
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "threads, weight",
    [
        (128, "exact"),  # the GPU's block: lanes of 8, sixteen pairs per tile
        (4, "lower"),  # fewer threads than columns: each thread strides over out's columns
        (6, "exact"),  # not a multiple of the lanes: two threads stay idle
    ],
)
def test_pair_cumulation_with_other_blocks(monkeypatch, threads, weight):
    monkeypatch.setattr(lsh_cuda, "THREADS_PER_BLOCK", threads)
    test_pair_cumulation_matches_reference(1, 5, 12, 8, 3, 3, 1, 2, True, weight)


def test_pair_cumulation_with_lanes_striding_over_columns(monkeypatch):
    monkeypatch.setattr(lsh_cuda, "MAX_PAIR_LANES", 2)
    assert lsh_cuda.pair_lanes(lsh_cuda.THREADS_PER_BLOCK, 8, 3) == 2
    test_pair_cumulation_matches_reference(1, 5, 12, 8, 3, 3, 1, 2, True, "exact")


def test_pair_lanes_fit_the_block():
    assert lsh_cuda.pair_lanes(128, 64, 64) == lsh_cuda.MAX_PAIR_LANES
    assert lsh_cuda.pair_lanes(128, 5, 3) == 8
    assert lsh_cuda.pair_lanes(6, 8, 8) == 4
    assert lsh_cuda.pair_lanes(32, 1, 1) == 1


def test_pair_cumulation_rejects_bad_arguments():
    codes = np.zeros((1, 3, 2), np.int32)
    sorted_codes, order = np.zeros((1, 2, 4), np.int32), np.zeros((1, 2, 4), np.int32)
    unit_r, unit_w = np.ones((1, 3, 5), np.float32), np.ones((1, 4, 5), np.float32)
    a_r, a_w = np.ones((1, 3, 2), np.float32), np.ones((1, 4, 2), np.float32)

    def call(weight=0, bound=1, sorted_codes=sorted_codes):
        args = (codes, sorted_codes, order, unit_r, unit_w, a_r, a_w)
        lsh_cuda.pair_cumulation(*args, 2, weight, bound, _nan(1, 3, 5))

    call()
    with pytest.raises(ValueError, match="bound"):
        call(bound=0)
    with pytest.raises(ValueError, match="weight"):
        call(weight=2)
    with pytest.raises(ValueError, match="sorted_codes"):
        call(sorted_codes=np.zeros((1, 4, 2), np.int32))
