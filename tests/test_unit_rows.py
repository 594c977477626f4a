"""unit_rows: the l2 normalisation YOSO uses, equal to F.normalize in value and gradient."""

import torch
import torch.nn.functional as F

from attnbench.backends.unit_rows import unit_rows, unit_rows_pair


def test_values_and_gradients_equal_f_normalize_zero_rows_included():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 6, 5, generator=gen, dtype=torch.float64)
    x[0, 1, 2] = 0.0  # a zero row: divided by the epsilon, as F.normalize does
    grad = torch.randn(x.shape, generator=gen, dtype=torch.float64)
    ours, theirs = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    out_ours, out_theirs = unit_rows(ours), F.normalize(theirs, dim=-1)
    assert torch.equal(out_ours, out_theirs)
    out_ours.backward(grad)
    out_theirs.backward(grad)
    assert torch.allclose(ours.grad, theirs.grad, rtol=1e-12, atol=1e-12)


def test_gradcheck_and_no_graph_without_grad():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(unit_rows, (x,))
    with torch.no_grad():
        assert unit_rows(x).grad_fn is None


def test_the_pair_equals_two_normalisations_with_their_gradients():
    gen = torch.Generator().manual_seed(1)
    q, k = (torch.randn(2, 5, 3, generator=gen, dtype=torch.float64) for _ in range(2))
    grad = torch.randn(2, 2, 5, 3, generator=gen, dtype=torch.float64)
    pair_leaves = [t.clone().requires_grad_(True) for t in (q, k)]
    plain_leaves = [t.clone().requires_grad_(True) for t in (q, k)]
    both = unit_rows_pair(*pair_leaves)
    plain = torch.stack([F.normalize(t, dim=-1) for t in plain_leaves])
    assert both.is_contiguous() and torch.equal(both, plain)
    both.backward(grad)
    plain.backward(grad)
    for a, b in zip(pair_leaves, plain_leaves, strict=True):
        assert torch.allclose(a.grad, b.grad, rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        assert torch.equal(unit_rows_pair(q, k), plain.detach())
