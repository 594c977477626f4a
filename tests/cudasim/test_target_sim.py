"""Under the simulator, kernels see CPU tensors through zero-copy views and report cuda-sim."""

import torch
from numba import cuda

from attnbench.kernels.target import as_array, kernel_target, simulator_enabled


@cuda.jit
def _add_index(out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] += i


def test_simulator_is_on_and_reported():
    assert simulator_enabled()
    assert kernel_target(torch.zeros(1)) == "cuda-sim"


def test_kernel_writes_through_to_the_tensor():
    t = torch.ones(37)  # not a multiple of the block size
    _add_index[2, 32](as_array(t))
    assert torch.equal(t, 1 + torch.arange(37, dtype=torch.float32))
