"""unit_rows: the l2 normalisation YOSO uses, equal to F.normalize in value and gradient."""

import torch
import torch.nn.functional as F

from attnbench.backends.unit_rows import unit_rows


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
