"""The yoso backend end to end on the simulated CUDA kernels: same codes and outputs as
the torch reference and as the dense definition, the linear backward equal to the dense
one, the target reported."""

import pytest
import torch

from attnbench import get_backend


def qkv(n=7, d=5, dv=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(1, 2, n, d), (1, 2, n, d), (1, 2, n, dv)]
    return [torch.randn(s, generator=gen) for s in shapes]


def test_backend_reports_the_simulator():
    assert get_backend("yoso").impl("cpu") == "numba-cuda-sim"
    assert get_backend("yoso:impl=torch").impl("cpu") == "torch"


def test_forward_matches_the_torch_reference():
    q, k, v = qkv()
    for hash_ in ("fast", "gaussian"):
        spec = f"yoso:m=3,tau=3,seed=1,hash={hash_}"
        sim, ref = get_backend(spec), get_backend(spec + ",impl=torch")
        for a, b in zip(sim.codes(q, k), ref.codes(q, k), strict=True):
            assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))
        torch.testing.assert_close(sim(q, k, v), ref(q, k, v), rtol=1e-5, atol=1e-6)


def test_linear_backward_equals_dense_on_the_simulator():
    leaves = [t.requires_grad_(True) for t in qkv(n=5, d=3, dv=2)]
    grad_out = torch.randn(1, 2, 5, 2, generator=torch.Generator().manual_seed(2))
    results = []
    for backward in ("lsh", "dense"):
        for t in leaves:
            t.grad = None
        get_backend(f"yoso:m=2,tau=2,backward={backward}")(*leaves).backward(grad_out)
        results.append([t.grad.clone() for t in leaves])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backward", ["proj", "pairs", "star"])
def test_linear_backwards_equal_the_torch_reference_on_the_simulator(backward):
    """Same codes and signs: the simulated kernels' gradients equal impl=torch's."""
    grad_out = torch.randn(1, 2, 5, 2, generator=torch.Generator().manual_seed(3))
    results = []
    for impl in ("numba", "torch"):
        leaves = [t.requires_grad_(True) for t in qkv(n=5, d=3, dv=2)]
        spec = f"yoso:m=2,tau=2,hash=gaussian,impl={impl},backward={backward},bound=2"
        get_backend(spec)(*leaves).backward(grad_out)
        results.append([t.grad for t in leaves])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_all_masked_rows_are_zero_not_nan():
    q, k, v = qkv(n=4)
    mask = torch.tensor([[True, True, False, False]])
    out = get_backend("yoso:m=2,tau=2")(q, k, v, mask)
    assert torch.isfinite(out).all() and (out[:, :, 2:] == 0).all()


@pytest.mark.parametrize("hash_", ["fast", "gaussian"])
def test_masked_forward_equals_the_definition(hash_):
    """normalize((collision frequency * key mask) @ v), zero rows for masked tokens, with
    collisions counted from the codes here (the torch reference shares YOSO.forward)."""
    q, k, v = qkv(n=6)
    mask = torch.tensor([[True, True, False, True, True, False]])
    backend = get_backend(f"yoso:m=4,tau=2,seed=4,hash={hash_}")
    q_codes, k_codes, _ = backend.codes(q, k)
    freq = (q_codes[:, :, None, :] == k_codes[:, None, :, :]).double().mean(-1).view(1, 2, 6, 6)
    y = (freq * mask[:, None, None, :]) @ v.double()
    expected = torch.nn.functional.normalize(y, dim=-1) * mask[:, None, :, None]
    assert (expected.norm(dim=-1)[:, :, mask[0]] > 0.5).all()
    torch.testing.assert_close(backend(q, k, v, mask).double(), expected, atol=2e-5, rtol=0)
