import torch

from attnbench.kernels.target import as_array, kernel_target


def test_cpu_target_without_simulator():
    assert kernel_target(torch.zeros(1)) == "cpu"


def test_as_array_is_a_zero_copy_view():
    t = torch.zeros(4)
    as_array(t)[2] = 5.0
    assert t[2].item() == 5.0
