"""The 32-bit and 64-bit flat kernels (chosen per launch by size) give the same codes and
zeroed tables as the torch reference, on tiny shapes."""

import numpy as np
import pytest
import torch

from attnbench.kernels.lsh import cuda, reference


@pytest.mark.parametrize("bits", [32, 64])
def test_both_index_widths_give_the_reference_codes(bits):
    groups, n, d, m, tau = 2, 5, 4, 3, 2
    x = torch.randn(groups, n, d, generator=torch.Generator().manual_seed(1))
    proj = reference.gaussian_projections(groups, d, m, tau, seed=2)
    out = np.full((groups, n, m), -1, dtype=np.int32)
    cuda._launch(cuda._GAUSSIAN_CODES[bits], groups * n * m, x.numpy(), proj.numpy(), tau, out)
    assert torch.equal(torch.from_numpy(out), reference.gaussian_codes(x, proj, tau))


@pytest.mark.parametrize("bits", [32, 64])
def test_both_index_widths_zero_exactly_the_first_size_elements(bits):
    flat = np.ones((2, 40), dtype=np.float32)
    cuda._launch(cuda._ZERO_TABLES[bits], 2 * 33, flat, 33)
    assert (flat[:, :33] == 0).all() and (flat[:, 33:] == 1).all()
