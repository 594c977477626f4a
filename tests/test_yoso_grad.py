"""YOSO's trainable backward: the linear-cost lower-bound estimator (seed eq. 4) against
the same estimator computed densely from the same collisions, and YOSO-E's gradcheck."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnbench import get_backend
from attnbench.kernels.lsh import reference as ref
from attnbench.kernels.lsh.autograd import dense_backward

IMPLS = ["torch", "numba"]


def leaves(b=2, h=2, n=13, d=8, dv=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(b, h, n, d), (b, h, n, d), (b, h, n, dv)]
    return [torch.randn(s, generator=gen).requires_grad_(True) for s in shapes]


def grads(spec: str, tensors, grad_out, mask=None):
    for t in tensors:
        t.grad = None
    get_backend(spec)(*tensors, mask).backward(grad_out)
    return [t.grad.clone() for t in tensors]


def rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("hash_", ["fast", "gaussian"])
def test_linear_backward_equals_dense_lower_bound(impl, hash_):
    tensors = leaves()
    grad_out = torch.randn(2, 2, 13, 5, generator=torch.Generator().manual_seed(1))
    spec = f"yoso:m=12,tau=3,seed=2,hash={hash_},impl={impl}"
    linear = grads(spec + ",backward=lsh", tensors, grad_out)
    dense = grads(spec + ",backward=dense", tensors, grad_out)
    for a, b in zip(linear, dense, strict=True):
        assert torch.isfinite(a).all()
        assert rel_err(a, b) <= 1e-4


def test_dense_backward_matches_the_formula_loop():
    """dense_backward against eq. 4 written out pair by pair, in float64."""
    gen = torch.Generator().manual_seed(3)
    tau, n, d, dv, m = 4, 6, 3, 2, 9
    q = F.normalize(torch.randn(1, n, d, generator=gen, dtype=torch.float64), dim=-1)
    k = F.normalize(torch.randn(1, n, d, generator=gen, dtype=torch.float64), dim=-1)
    v, dy = (
        torch.randn(1, n, dv, generator=gen, dtype=torch.float64),
        torch.randn(1, n, dv, generator=gen, dtype=torch.float64),
    )
    qc = torch.randint(2**tau, (1, n, m), generator=gen, dtype=torch.int32)
    kc = torch.randint(2**tau, (1, n, m), generator=gen, dtype=torch.int32)
    dq, dk, dv_ = dense_backward(q, k, v, qc, kc, dy, tau)
    c = ref.collision_frequency(qc, kc).double()[0]
    for i in range(n):
        want_q = sum(tau / 2 * c[i, j] * (dy[0, i] @ v[0, j]) * k[0, j] for j in range(n))
        assert torch.allclose(dq[0, i], want_q)
    for j in range(n):
        want_k = sum(tau / 2 * c[i, j] * (dy[0, i] @ v[0, j]) * q[0, i] for i in range(n))
        assert torch.allclose(dk[0, j], want_k)
        assert torch.allclose(dv_[0, j], sum(c[i, j] * dy[0, i] for i in range(n)))


def test_expected_backward_uses_the_collision_probability():
    gen = torch.Generator().manual_seed(4)
    q = F.normalize(torch.randn(1, 5, 3, generator=gen, dtype=torch.float64), dim=-1)
    k = F.normalize(torch.randn(1, 5, 3, generator=gen, dtype=torch.float64), dim=-1)
    v = torch.randn(1, 5, 2, generator=gen, dtype=torch.float64)
    dy = torch.randn(1, 5, 2, generator=gen, dtype=torch.float64)
    codes = torch.zeros(1, 5, 1, dtype=torch.int32)
    _, _, dv = dense_backward(q, k, v, codes, codes, dy, tau=3, kind="expected")
    e = (1 - torch.arccos((q @ k.transpose(1, 2)).clamp(-1, 1)) / math.pi) ** 3
    assert torch.allclose(dv, e.transpose(1, 2) @ dy)


@pytest.mark.parametrize("impl", IMPLS)
def test_expected_backward_sends_nothing_through_rows_without_a_collision(impl):
    """A query row no hash collides in has Y_i = 0, and its normalisation divides dY_i by
    EPS: with E on that row, dQ reached ~1e11. Its dQ is zero, as with backward=dense."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 64, 16, generator=gen).requires_grad_(True) for _ in range(3))
    grad_out = torch.randn(1, 1, 64, 16, generator=gen)
    backend = get_backend(f"yoso:m=8,tau=8,seed=0,impl={impl},backward=expected")
    backend(q, k, v).backward(grad_out)
    q_codes, k_codes, _ = backend.codes(q, k)
    lonely = ref.collision_frequency(q_codes, k_codes).sum(-1)[0] == 0
    assert lonely.any()  # the seed draws rows with no collision
    assert (q.grad[0, 0, lonely] == 0).all()
    for t in (q, k, v):
        assert t.grad.abs().max() < 10


@pytest.mark.parametrize("impl", IMPLS)
def test_lower_bound_backward_approaches_the_expected_one(impl):
    """With many hashes, the collision-based estimate converges to the expectation."""
    tensors = leaves(b=1, h=1, n=9, d=4, dv=3, seed=5)
    grad_out = torch.randn(1, 1, 9, 3, generator=torch.Generator().manual_seed(6))
    spec = f"yoso:tau=3,seed=0,hash=gaussian,impl={impl}"
    errors = []
    for m in (16, 1024):  # same forward (same m), only the backward estimator differs
        lsh = grads(f"{spec},m={m},backward=lsh", tensors, grad_out)
        expected = grads(f"{spec},m={m},backward=expected", tensors, grad_out)
        errors.append(max(rel_err(a, b) for a, b in zip(lsh, expected, strict=True)))
    assert errors[1] < errors[0] and errors[1] < 0.1


@pytest.mark.parametrize("impl", IMPLS)
def test_masked_backward_is_finite_and_ignores_masked_tokens(impl):
    tensors = leaves(b=2, h=1, n=7, d=4, dv=4)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[0, 4:] = False
    mask[1] = False  # every token masked
    g = grads(f"yoso:m=8,tau=3,impl={impl}", tensors, torch.ones(2, 1, 7, 4), mask)
    for t in g:
        assert torch.isfinite(t).all()
        assert (t[1] == 0).all() and (t[0, :, 4:] == 0).all()


def test_yoso_e_gradcheck():
    gen = torch.Generator().manual_seed(7)
    q, k, v = (
        torch.randn(1, 2, 5, 3, generator=gen, dtype=torch.float64).requires_grad_(True)
        for _ in range(3)
    )
    yoso_e = get_backend("yoso-e:tau=4,backward=exact")
    assert torch.autograd.gradcheck(yoso_e, (q, k, v), eps=1e-6, atol=1e-5)
