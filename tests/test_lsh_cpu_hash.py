"""The CPU hash kernels at the edges of their blocking, bit for bit against plain torch.

The kernels work on blocks of rows (cpu_hash.FAST_ROWS, GAUSS_ROWS), 8 x 8 transposed tiles,
tiles of 6 rows x 16 projection columns: the shapes below leave partial blocks and tiles
everywhere (odd n, n below a block, d and m not multiples of 8, m*tau not a multiple of 16,
tau not dividing d_pad, d_pad below 8 and large), for one and two threads.
"""

import numba
import numpy as np
import pytest
import torch

from attnbench.kernels.lsh import cpu_hash, reference


def rows(groups, n, d, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(groups, n, d, generator=gen)


def in_order_gaussian_codes(x, proj, tau):
    """core.gaussian_code in torch: fp32 sums over c = 0 .. d-1 in order, one product and
    one addition (each rounded) per step, so the codes must match bit for bit."""
    acc = torch.zeros(x.shape[0], x.shape[1], proj.shape[2])
    for c in range(x.shape[2]):
        acc = acc + x[:, :, c, None] * proj[:, None, c, :]
    bits = (acc > 0).reshape(*acc.shape[:2], -1, tau).to(torch.int64)
    return (bits << torch.arange(tau)).sum(-1).to(torch.int32)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    before = numba.get_num_threads()
    numba.set_num_threads(min(request.param, numba.config.NUMBA_NUM_THREADS))
    yield
    numba.set_num_threads(before)


SHAPES = [  # groups, n, d, m, tau
    (1, 1, 1, 1, 1),  # d_pad 1
    (1, 3, 2, 3, 2),  # d_pad 2, one row
    (2, 9, 4, 2, 3),  # d_pad 4, tau not dividing it
    (1, 63, 8, 8, 8),  # n one below a block of 64
    (1, 64, 16, 16, 4),  # exactly one block
    (3, 65, 24, 9, 5),  # one row past a block; d_pad 32 from d 24
    (1, 130, 64, 33, 8),  # partial 8-row tile at the end, m not a multiple of 8
    (2, 71, 100, 20, 7),  # d not a multiple of 8, d_pad 128
    (1, 40, 300, 10, 30),  # d_pad 512, tau 30
    (1, 127, 64, 128, 16),  # many codes, m*tau a multiple of 16
    (4, 61, 32, 7, 3),  # G = 4, n below 64 and not a multiple of 6 or 8
]


@pytest.mark.parametrize("groups,n,d,m,tau", SHAPES)
def test_fast_codes_equal_reference(groups, n, d, m, tau, threads):
    x = rows(groups, n, d, seed=n + d)
    diags = reference.fast_diagonals(groups, d, m, tau, seed=m)
    out = np.full((groups, n, m), -12345, np.int32)
    cpu_hash.fast_codes(x.numpy(), diags.numpy(), tau, out)
    np.testing.assert_array_equal(out, reference.fast_codes(x, diags, tau, m).numpy())


@pytest.mark.parametrize("groups,n,d,m,tau", SHAPES)
def test_gaussian_codes_equal_in_order_sums(groups, n, d, m, tau, threads):
    x = rows(groups, n, d, seed=n * d)
    proj = reference.gaussian_projections(groups, d, m, tau, seed=tau)
    out = np.full((groups, n, m), -12345, np.int32)
    cpu_hash.gaussian_codes(x.numpy(), proj.numpy(), tau, out)
    np.testing.assert_array_equal(out, in_order_gaussian_codes(x, proj, tau).numpy())


def test_signs_of_zero_and_nan_are_not_positive():
    """Rows of 0, -0 and NaN give all-zero codes (the compare is y > 0, NaN false); a row
    of +1 sets some bits, so the blocks around them are hashed as usual."""
    groups, n, d, m, tau = 1, 70, 16, 12, 4
    x = rows(groups, n, d, seed=3)
    x[0, 5] = 0.0
    x[0, 6] = -0.0
    x[0, 66] = float("nan")
    x[0, 67] = 1.0
    diags = reference.fast_diagonals(groups, d, m, tau, seed=1)
    proj = reference.gaussian_projections(groups, d, m, tau, seed=1)
    fast = np.empty((groups, n, m), np.int32)
    gauss = np.empty((groups, n, m), np.int32)
    cpu_hash.fast_codes(x.numpy(), diags.numpy(), tau, fast)
    cpu_hash.gaussian_codes(x.numpy(), proj.numpy(), tau, gauss)
    for codes in (fast, gauss):
        assert (codes[0, [5, 6, 66]] == 0).all()
        assert codes[0, 67].any()
    np.testing.assert_array_equal(fast, reference.fast_codes(x, diags, tau, m).numpy())
    np.testing.assert_array_equal(gauss, in_order_gaussian_codes(x, proj, tau).numpy())


def test_tau_outside_one_to_thirty_is_refused():
    x = np.zeros((1, 4, 8), np.float32)
    with pytest.raises(ValueError, match="tau"):
        cpu_hash.gaussian_codes(
            x, np.zeros((1, 8, 31), np.float32), 31, np.empty((1, 4, 1), np.int32)
        )
    with pytest.raises(ValueError, match="tau"):
        cpu_hash.fast_codes(
            x, np.ones((1, 1, 3, 32), np.float32), 31, np.empty((1, 4, 1), np.int32)
        )
