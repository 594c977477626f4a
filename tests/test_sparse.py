"""Sparse Transformer backends (strided, fixed) against their definitions and a dense oracle."""

import math

import pytest
import torch
from references import masked_softmax_attention

import attnbench.backends.sparse as sparse  # registers sparse-strided and sparse-fixed
from attnbench import get_backend
from attnbench.errors import UsageError


def qkv(b=2, h=2, n=17, d=6, dv=3, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, n, d, generator=gen, dtype=dtype) for _ in range(2))
    v = torch.randn(b, h, n, dv, generator=gen, dtype=dtype)
    return q, k, v


def loop_strided(n, l):  # noqa: E741
    """A1_i = {j : |i - j| < l}, A2_i = {j : (i - j) mod l = 0}, pair by pair."""
    return {(i, j) for i in range(n) for j in range(n) if abs(i - j) < l or (i - j) % l == 0}


def loop_fixed(n, l, c):  # noqa: E741
    """A1_i = {j : j // l = i // l}, A2_i = {j : j mod l in l-c..l-1}, pair by pair."""
    return {
        (i, j) for i in range(n) for j in range(n) if j // l == i // l or j % l in range(l - c, l)
    }


def pairs(pattern):
    return {tuple(p) for p in pattern.nonzero().tolist()}


def dense_oracle(q, k, v, allowed, mask=None):
    """float64 softmax over the allowed pairs, built without the backend's code."""
    return masked_softmax_attention(q.double(), k.double(), v.double(), allowed, mask)


def oracle_pattern(spec, n, grid):
    """The allowed set from the loop definitions, with l and c resolved as documented."""
    height, width = grid or (1, n)
    values = get_backend(spec).values
    l = values["l"] or (width if height > 1 else round(math.sqrt(n)))  # noqa: E741
    if spec.startswith("sparse-strided"):
        chosen = loop_strided(n, l)
    else:
        chosen = loop_fixed(n, l, min(values["c"], l))
    allowed = torch.zeros(n, n, dtype=torch.bool)
    for i, j in chosen:
        allowed[i, j] = True
    return allowed


@pytest.mark.parametrize("n,l", [(12, 3), (12, 4), (12, 5), (7, 1), (5, 9)])
def test_strided_pattern_is_the_definition(n, l):  # noqa: E741
    got = pairs(sparse.strided_pattern(n, l))
    assert got == loop_strided(n, l)
    assert all((i, i) in got for i in range(n))


@pytest.mark.parametrize("n,l,c", [(12, 3, 1), (12, 4, 2), (12, 5, 5), (10, 4, 3), (3, 4, 1)])
def test_fixed_pattern_is_the_definition(n, l, c):  # noqa: E741
    got = pairs(sparse.fixed_pattern(n, l, c))
    assert got == loop_fixed(n, l, c)
    assert all((i, i) in got for i in range(n))


def test_grid_pattern_uses_the_width_by_default():
    grid = (4, 5)  # l = W = 5: A2 of strided is the same image column
    strided = get_backend("sparse-strided").pattern(20, grid)
    assert pairs(strided) == loop_strided(20, 5)
    column = {(i, j) for i in range(20) for j in range(20) if i % 5 == j % 5}
    assert column <= pairs(strided)
    fixed = get_backend("sparse-fixed:c=2").pattern(20, grid)
    assert pairs(fixed) == loop_fixed(20, 5, 2)
    assert pairs(get_backend("sparse-strided").pattern(12)) == loop_strided(12, 3)  # sqrt(12)


SPECS = ["sparse-strided", "sparse-strided:l=5", "sparse-fixed", "sparse-fixed:c=2"]
SHAPES = [(17, None), (64, None), (64, (8, 8)), (35, (5, 7))]


@pytest.mark.parametrize("spec", SPECS + ["sparse-fixed:l=4,c=4", "sparse-strided:l=40"])
@pytest.mark.parametrize("n,grid", SHAPES)
def test_forward_equals_dense_oracle(spec, n, grid):
    q, k, v = qkv(n=n, d=6, dv=3)
    backend = get_backend(spec)
    out = backend(q, k, v, grid=grid)
    assert out.shape == (2, 2, n, 3)
    expected = dense_oracle(q, k, v, oracle_pattern(spec, n, grid))
    assert torch.allclose(out.double(), expected, atol=1e-5)
    amap = backend.attention_map(q, k, grid=grid)
    assert torch.allclose(amap.double() @ v.double(), expected, atol=1e-5)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("n,grid", [(17, None), (35, (5, 7))])
def test_masks_follow_the_shared_rule(spec, n, grid):
    q, k, v = qkv(n=n)
    gen = torch.Generator().manual_seed(1)
    mask = torch.rand(2, n, generator=gen) > 0.4
    mask[0, :3] = True  # with l = 3..7 some rows keep only themselves: no NaN from a row
    mask[1] = False  # one batch entry entirely masked
    out = get_backend(spec)(q, k, v, mask, grid)
    assert torch.isfinite(out).all()
    assert (out[1] == 0).all() and (out[0][:, ~mask[0]] == 0).all()
    expected = dense_oracle(q, k, v, oracle_pattern(spec, n, grid), mask)
    assert torch.allclose(out.double(), expected, atol=1e-5)


@pytest.mark.parametrize("spec", ["sparse-strided:l=4", "sparse-fixed:l=4,c=2"])
def test_backward_equals_dense_oracle(spec):
    n = 14
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[0, 5:9] = False
    mask[1] = False
    q, k, v = (t.requires_grad_(True) for t in qkv(n=n, d=5, dv=3, dtype=torch.float64))
    weight = torch.randn(2, 2, n, 3, generator=torch.Generator().manual_seed(2), dtype=q.dtype)
    (get_backend(spec)(q, k, v, mask) * weight).sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    (dense_oracle(q, k, v, oracle_pattern(spec, n, None), mask) * weight).sum().backward()
    for g, t in zip(got, (q, k, v), strict=True):
        assert torch.isfinite(g).all()
        assert torch.allclose(g, t.grad, atol=1e-4)


def test_float32_backward_is_finite_with_masks():
    q, k, v = (t.requires_grad_(True) for t in qkv(n=20))
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[1] = False
    for spec in ("sparse-strided", "sparse-fixed"):
        get_backend(spec)(q, k, v, mask).sum().backward()
        assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


@pytest.mark.parametrize(
    "spec",
    ["sparse-strided:l=-1", "sparse-fixed:l=-2", "sparse-fixed:c=0", "sparse-fixed:l=4,c=5"],
)
def test_bad_parameters_are_usage_errors(spec):
    with pytest.raises(UsageError):
        get_backend(spec)


def test_registered_spatial_and_with_backward():
    for name in ("sparse-strided", "sparse-fixed"):
        backend = get_backend(name)
        assert backend.spatial and backend.backward
        assert backend.predicted_bytes(1, 4, 4096, 64, 4) > 0
    assert get_backend("sparse-fixed").spec == "sparse-fixed:l=0,c=1"


@pytest.mark.parametrize("spec", SPECS)
def test_pattern_rows_are_rows_of_the_whole_pattern(spec):
    """The error study builds a map a block of query rows at a time from these rows."""
    backend, grid = get_backend(spec), (5, 7)
    whole = backend.pattern(35, grid)
    for rows in (slice(0, 4), slice(4, 13), slice(30, 35)):
        assert torch.equal(backend.pattern(35, grid, rows), whole[rows])
