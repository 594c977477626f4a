"""YOSO's CUDA kernels, run by the simulator, agree with the torch oracle (reference.py).

Shapes stay tiny (the simulator runs one OS thread per CUDA thread) but include row counts
that are not multiples of the block size, d = 1, n_r != n_w, d_v != d, several hash chunks,
tau = 1 and tau = 8. Outputs and tables start as NaN, proving the wrappers overwrite them.
"""

import numpy as np
import pytest
import torch

from attnbench.kernels.lsh import core, reference
from attnbench.kernels.lsh import cuda as lsh_cuda


def _nan(*shape):
    return np.full(shape, np.nan, dtype=np.float32)


def _codes(gen, groups, n, m, tau):
    return torch.randint(0, 2**tau, (groups, n, m), generator=gen, dtype=torch.int32)


def test_small_blocks_under_the_simulator():
    assert lsh_cuda.THREADS_PER_BLOCK == lsh_cuda.SIM_THREADS_PER_BLOCK < 37


# --- hashing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "groups, n, d, m, tau",
    [
        (1, 1, 1, 1, 1),  # d_pad = 1: no butterflies at all
        (2, 5, 5, 3, 8),  # one code per transform, three transforms
        (2, 37, 20, 12, 3),  # d_pad = 32: ten codes per transform, the second one cut
        (1, 5, 8, 7, 1),  # eight codes per transform, the last one dropped
    ],
)
def test_fast_codes_equal_reference(groups, n, d, m, tau):
    x = torch.randn(groups, n, d, generator=torch.Generator().manual_seed(n + d))
    diags = reference.fast_diagonals(groups, d, m, tau, seed=7)
    out = np.full((groups, n, m), -1, dtype=np.int32)
    lsh_cuda.fast_codes(x.numpy(), diags.numpy(), tau, out)
    np.testing.assert_array_equal(out, reference.fast_codes(x, diags, tau, m).numpy())


def test_fast_codes_reject_bad_diagonals():
    x = np.zeros((1, 2, 5), np.float32)
    out = np.zeros((1, 2, 4), np.int32)
    with pytest.raises(ValueError, match="power of two"):
        lsh_cuda.fast_codes(x, np.ones((1, 1, 3, 6), np.float32), 2, out)
    with pytest.raises(ValueError, match="power of two"):
        big = 2 * core.MAX_PADDED_DIM
        lsh_cuda.fast_codes(x, np.ones((1, 1, 3, big), np.float32), 2, out)
    with pytest.raises(ValueError, match="codes"):  # one transform of 8 gives 2 codes of 3
        lsh_cuda.fast_codes(x, np.ones((1, 1, 3, 8), np.float32), 3, out)


@pytest.mark.parametrize(
    "groups, n, d, m, tau",
    [(1, 1, 1, 1, 1), (2, 5, 5, 3, 8), (2, 37, 20, 3, 3)],
)
def test_gaussian_codes_equal_reference(groups, n, d, m, tau):
    x = torch.randn(groups, n, d, generator=torch.Generator().manual_seed(n + d))
    proj = reference.gaussian_projections(groups, d, m, tau, seed=3)
    out = np.full((groups, n, m), -1, dtype=np.int32)
    lsh_cuda.gaussian_codes(x.numpy(), proj.numpy(), tau, out)

    # Same fp32 sums in the same order as core.gaussian_code on the CPU: bit-equal.
    xs, ps = x.numpy(), proj.numpy()
    looped = np.array(
        [
            [[core.gaussian_code(xs[g, i], ps[g], f, tau) for f in range(m)] for i in range(n)]
            for g in range(groups)
        ],
        dtype=np.int32,
    )
    np.testing.assert_array_equal(out, looped)

    # torch sums in another order: codes may differ only where a dot product is ~0.
    dots = (x.double() @ proj.double()).reshape(groups, n, m, tau)
    clear = (dots.abs() > 1e-5).all(-1).numpy()
    assert clear.mean() > 0.95
    expected = reference.gaussian_codes(x, proj, tau).numpy()
    np.testing.assert_array_equal(out[clear], expected[clear])


def test_gaussian_codes_reject_too_few_projections():
    with pytest.raises(ValueError, match="columns"):
        lsh_cuda.gaussian_codes(
            np.zeros((1, 2, 3), np.float32),
            np.zeros((1, 3, 5), np.float32),
            2,
            np.zeros((1, 2, 3), np.int32),
        )


# --- cumulation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "groups, n_r, n_w, d_v, m, tau, chunk",
    [
        (1, 1, 1, 1, 1, 1, 1),
        (2, 5, 37, 3, 3, 3, 2),  # chunks of 2 + 1 hashes
        (1, 37, 5, 7, 3, 1, 3),  # all hashes in one chunk
        (2, 5, 6, 2, 2, 8, 1),  # 256 buckets, one hash at a time
    ],
)
def test_cumulation_matches_reference(groups, n_r, n_w, d_v, m, tau, chunk):
    gen = torch.Generator().manual_seed(n_r * n_w + tau)
    read, write = _codes(gen, groups, n_r, m, tau), _codes(gen, groups, n_w, m, tau)
    values = torch.randn(groups, n_w, d_v, generator=gen)
    out = _nan(groups, n_r, d_v)
    table = _nan(*lsh_cuda.table_shape(groups, m, tau, d_v, chunk))
    assert table.shape[1] == chunk

    lsh_cuda.cumulation(read.numpy(), write.numpy(), values.numpy(), tau, out, table)
    expected = reference.cumulation(read, write, values, tau).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


@pytest.fixture
def gpu_blocks(monkeypatch):
    """The launch shape a GPU gets: several rows of 32 lanes in a block, some rows idle."""
    monkeypatch.setattr(lsh_cuda, "THREADS_PER_BLOCK", lsh_cuda.GPU_THREADS_PER_BLOCK)
    monkeypatch.setattr(lsh_cuda, "ROW_LANES", 32)
    monkeypatch.setattr(lsh_cuda, "ROWS_PER_BLOCK", lsh_cuda.GPU_THREADS_PER_BLOCK // 32)


def test_cumulation_with_gpu_blocks(gpu_blocks):
    test_cumulation_matches_reference(2, 5, 37, 3, 3, 3, 2)
    test_cumulation_matches_reference(1, 3, 6, 40, 2, 2, 2)  # 40 columns: lanes loop twice


def test_fast_codes_with_gpu_blocks(gpu_blocks):
    """Rows of one block end at different items, and d_pad = 128 gives each lane two
    butterflies a stage."""
    test_fast_codes_equal_reference(2, 7, 20, 12, 3)
    test_fast_codes_equal_reference(1, 3, 100, 9, 8)


def test_cumulation_with_no_collisions_is_zero():
    read = np.zeros((1, 3, 2), np.int32)
    write = np.ones((1, 4, 2), np.int32)
    out = _nan(1, 3, 5)
    table = _nan(*lsh_cuda.table_shape(1, 2, 1, 5, 2))
    lsh_cuda.cumulation(read, write, np.ones((1, 4, 5), np.float32), 1, out, table)
    np.testing.assert_array_equal(out, 0)


def test_cumulation_rejects_a_table_of_the_wrong_shape():
    codes = np.zeros((1, 3, 2), np.int32)
    values = np.zeros((1, 3, 4), np.float32)
    with pytest.raises(ValueError, match="table"):
        lsh_cuda.cumulation(codes, codes, values, 2, _nan(1, 3, 4), _nan(1, 1, 8, 4))


@pytest.mark.parametrize(
    "groups, n_r, n_w, columns, width, m, tau, chunk",
    [
        (1, 1, 1, 1, 1, 1, 1, 1),
        (2, 5, 37, 3, 4, 3, 3, 2),  # chunks of 2 + 1 hashes, three weight columns
        (1, 37, 5, 2, 6, 3, 8, 3),  # 256 buckets, all hashes in one chunk
    ],
)
def test_weighted_cumulation_matches_reference(groups, n_r, n_w, columns, width, m, tau, chunk):
    gen = torch.Generator().manual_seed(n_r + n_w + columns)
    read, write = _codes(gen, groups, n_r, m, tau), _codes(gen, groups, n_w, m, tau)
    weights = torch.randn(groups, n_w, columns, generator=gen)
    vectors = torch.randn(groups, n_w, width, generator=gen)
    read_weights = torch.randn(groups, n_r, columns, generator=gen)
    out = _nan(groups, n_r, width)
    table = _nan(*lsh_cuda.table_shape(groups, m, tau, width, chunk))

    lsh_cuda.weighted_cumulation(
        read.numpy(),
        write.numpy(),
        weights.numpy(),
        vectors.numpy(),
        read_weights.numpy(),
        tau,
        out,
        table,
    )
    expected = reference.weighted_cumulation(read, write, weights, vectors, read_weights, tau)
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-5, atol=1e-5)
