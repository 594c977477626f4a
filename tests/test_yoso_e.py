"""YOSO-E's two backward passes against autograd of dense torch formulas, and half
precision: computed in fp32, finite gradients even where a query equals a key."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnbench import get_backend


def dense(q, k, v, tau, backward):
    """l2(E V), E = (1 - arccos(q^.k^)/pi)^tau; for `lower` E is written so that autograd's
    dE/dcos is (tau/2) E: E = E0 * exp((tau/2) (cos - cos.detach())) with E0 detached."""
    qn, kn = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    cos = qn @ kn.transpose(-1, -2)
    if backward == "exact":
        e = (1 - torch.arccos(cos) / math.pi) ** tau
    else:
        e0 = ((1 - torch.arccos(cos.clamp(-1, 1)) / math.pi) ** tau).detach()
        e = e0 * torch.exp((tau / 2) * (cos - cos.detach()))
    return F.normalize(e @ v, dim=-1)


def leaves(seed=0, n=7, d=5, dv=3, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    shapes = ((2, 2, n, d), (2, 2, n, d), (2, 2, n, dv))
    return [torch.randn(*s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]


@pytest.mark.parametrize("backward", ["lower", "exact"])
def test_gradients_equal_autograd_of_the_dense_formula(backward):
    tau = 6
    q, k, v = leaves()
    weight = torch.randn(2, 2, 7, 3, generator=torch.Generator().manual_seed(9), dtype=q.dtype)
    out = get_backend(f"yoso-e:tau={tau},backward={backward}")(q, k, v)
    got = torch.autograd.grad((out * weight).sum(), (q, k, v))
    q2, k2, v2 = (x.detach().clone().requires_grad_() for x in (q, k, v))
    ref = dense(q2, k2, v2, tau, backward)
    torch.testing.assert_close(out, ref)
    want = torch.autograd.grad((ref * weight).sum(), (q2, k2, v2))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-7, atol=1e-9)


def test_lower_and_exact_differ_only_in_the_query_and_key_gradients():
    grads = {}
    for backward in ("lower", "exact"):
        q, k, v = leaves(seed=3)
        get_backend(f"yoso-e:tau=4,backward={backward}")(q, k, v).sum().backward()
        grads[backward] = (q.grad, k.grad, v.grad)
    torch.testing.assert_close(grads["lower"][2], grads["exact"][2])
    assert not torch.allclose(grads["lower"][0], grads["exact"][0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("backward", ["lower", "exact"])
def test_half_precision_with_queries_equal_to_keys_has_finite_grads(backward, dtype):
    q, _, v = leaves(seed=1, dtype=dtype)
    out = get_backend(f"yoso-e:tau=8,backward={backward}")(q, q, v)
    assert out.dtype == dtype
    out.float().square().sum().backward()
    assert torch.isfinite(q.grad.float()).all() and torch.isfinite(v.grad.float()).all()
    assert q.grad.abs().sum() > 0
    # the forward agrees with the fp32 computation to the output's precision
    q32, v32 = q.detach().float(), v.detach().float()
    expected = get_backend("yoso-e:tau=8")(q32, q32, v32)
    torch.testing.assert_close(out.float(), expected, atol=1e-2, rtol=0)
