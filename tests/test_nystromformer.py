"""Nyströmformer against its definition and plain dense-torch references."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_one_line_error, invoke

import attnbench.backends.nystromformer as nys
from attnbench import get_backend
from attnbench.cli import app


def qkv(b=2, h=2, n=16, d=8, dv=3, seed=0, dtype=torch.float64, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, n, d, generator=gen, dtype=dtype) * scale for _ in range(2))
    v = torch.randn(b, h, n, dv, generator=gen, dtype=dtype)
    return q, k, v


def dense_softmax(q, k, v, mask=None):
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    return torch.softmax(scores, -1) @ v


def test_landmarks_equal_to_n_give_softmax():
    """k near q, so A = softmax(QK^T / sqrt d) is diagonally dominant and well conditioned.
    m = n: Q~ = Q, K~ = K, so out = A A^+ A V = A V. In float64, with A's condition number
    checked small, 40 iterations take Z to pinv(A) to rounding (the iteration converges with
    order 7 once ||I - AZ|| < 1), so 1e-9 holds."""
    q, _, v = qkv(n=16, d=8, scale=2.0)
    k = q + 0.3 * torch.randn(q.shape, generator=torch.Generator().manual_seed(1), dtype=q.dtype)
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), -1)
    assert torch.linalg.cond(a).max() < 1e3
    out = get_backend("nystromformer:landmarks=16,conv=0,iterations=40")(q, k, v)
    assert torch.allclose(out, dense_softmax(q, k, v), atol=1e-9)
    # landmarks > n are clamped to n
    big = get_backend("nystromformer:landmarks=64,conv=0,iterations=40")(q, k, v)
    assert torch.allclose(big, out, atol=1e-12)


def test_pinv_iteration_converges_to_torch_pinv():
    gen = torch.Generator().manual_seed(3)
    a = torch.eye(6, dtype=torch.float64) + 0.2 * torch.rand(4, 6, 6, generator=gen)
    assert torch.linalg.cond(a).max() < 10
    z = nys.iterative_pinv(a, 20)
    assert torch.allclose(z, torch.linalg.pinv(a), atol=1e-10)
    # fewer iterations are further away (the iteration is doing the work)
    assert (nys.iterative_pinv(a, 1) - torch.linalg.pinv(a)).abs().max() > 1e-3
    # a singular matrix with a zero row and column: pinv over the rest, zeros kept
    s = a[0].clone()
    s[2], s[:, 2] = 0, 0
    assert torch.allclose(nys.iterative_pinv(s, 30), torch.linalg.pinv(s), atol=1e-10)


@pytest.mark.parametrize("n,m", [(16, 4), (17, 4), (10, 3), (5, 5)])
def test_segment_means_are_contiguous_with_sizes_differing_by_one(n, m):
    x = torch.randn(1, 1, n, 2, dtype=torch.float64)
    means, _ = nys.landmarks_of(x, m, None)
    size, big = divmod(n, m)
    start = 0
    for j in range(m):
        width = size + 1 if j < big else size
        assert torch.allclose(means[0, 0, j], x[0, 0, start : start + width].mean(0))
        start += width
    assert start == n


def test_forward_equals_the_three_factors_written_plainly():
    """n = 17, m = 4 (not divisible): the formula with landmarks and pinv written directly."""
    q, k, v = qkv(n=17)
    backend = get_backend("nystromformer:landmarks=4,conv=0,iterations=6")
    qs = q / 8**0.25
    ks = k / 8**0.25
    sizes = [5, 4, 4, 4]
    bounds = [0, 5, 9, 13, 17]
    ql = torch.stack([qs[..., bounds[j] : bounds[j + 1], :].mean(-2) for j in range(4)], -2)
    kl = torch.stack([ks[..., bounds[j] : bounds[j + 1], :].mean(-2) for j in range(4)], -2)
    assert sum(sizes) == 17
    a = torch.softmax(ql @ kl.transpose(-1, -2), -1)
    z0 = a.transpose(-1, -2) / (a.sum(-2).amax(-1) * a.sum(-1).amax(-1))[..., None, None]
    z, eye = z0, torch.eye(4, dtype=a.dtype)
    for _ in range(6):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    expected = torch.softmax(qs @ kl.transpose(-1, -2), -1) @ z
    expected = expected @ torch.softmax(ql @ ks.transpose(-1, -2), -1) @ v
    assert torch.allclose(backend(q, k, v), expected, atol=1e-10)
    assert torch.allclose(backend.attention_map(q, k) @ v, expected, atol=1e-10)


def test_conv_term_equals_plain_conv1d():
    q, k, v = qkv(b=2, h=3, n=20, dv=4)
    with_conv = get_backend("nystromformer:landmarks=5,conv=7,seed=3")
    without = get_backend("nystromformer:landmarks=5,conv=0")
    weight = nys.conv_weights(3, 7, 3)
    assert (weight.abs() <= 1 / math.sqrt(7)).all()
    # conv1d over [B, H*dv, n], one channel per (head, feature), the head's kernel repeated
    x = v.transpose(-1, -2).reshape(2, 3 * 4, 20)
    kernel = weight.repeat_interleave(4, 0)[:, None, :]
    ref = F.conv1d(x, kernel, padding=3, groups=12).reshape(2, 3, 4, 20).transpose(-1, -2)
    assert torch.allclose(with_conv(q, k, v) - without(q, k, v), ref, atol=1e-12)
    assert torch.allclose(nys.depthwise_conv(v, weight), ref, atol=1e-12)


def test_seeded_and_reproducible():
    q, k, v = qkv(dtype=torch.float32)
    one = get_backend("nystromformer:seed=5")(q, k, v)
    assert torch.equal(one, get_backend("nystromformer:seed=5")(q, k, v))
    assert not torch.equal(one, get_backend("nystromformer:seed=6")(q, k, v))


@pytest.mark.parametrize("spec", ["nystromformer:landmarks=4", "nystromformer:landmarks=3,conv=5"])
def test_masks_follow_the_shared_rule(spec):
    q, k, v = qkv(n=16)
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[0, 3:5] = False
    mask[1] = False
    backend = get_backend(spec)
    out = backend(q, k, v, mask)
    assert torch.isfinite(out).all()
    assert (out[1] == 0).all() and (out[0, :, 3:5] == 0).all()
    assert (out[0, :, mask[0]].norm(dim=-1) > 1e-3).all()
    # masked tokens' q, k, v change nothing
    q2, k2, v2 = (t.clone() for t in (q, k, v))
    for t in (q2, k2, v2):
        t[0, :, 3:5] = 100.0
    assert torch.allclose(backend(q2, k2, v2, mask), out, atol=1e-10)


def test_masking_whole_segments_equals_dropping_them():
    q, k, v = qkv(b=1, n=16)
    mask = torch.ones(1, 16, dtype=torch.bool)
    mask[0, 12:] = False  # the last of 4 segments of 4 tokens
    out = get_backend("nystromformer:landmarks=4,conv=5")(q, k, v, mask)
    alone = get_backend("nystromformer:landmarks=3,conv=5")(
        q[..., :12, :], k[..., :12, :], v[..., :12, :]
    )
    assert torch.allclose(out[..., :12, :], alone, atol=1e-10)
    # masked key weights in softmax(Q~ K^T) are zero: the map's masked columns are zero
    amap = get_backend("nystromformer:landmarks=4").attention_map(q, k, mask)
    assert (amap[..., 12:] == 0).all()


def test_backward_matches_autograd_of_the_dense_reference():
    """m = n, converged pinv: gradients equal those of softmax attention."""
    q, _, v = qkv(n=12, scale=2.0)
    k = q + 0.3 * torch.randn(q.shape, generator=torch.Generator().manual_seed(1), dtype=q.dtype)
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    weight = torch.randn(2, 2, 12, 3, generator=torch.Generator().manual_seed(2), dtype=q.dtype)
    (
        get_backend("nystromformer:landmarks=12,conv=0,iterations=40")(q, k, v) * weight
    ).sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    (dense_softmax(q, k, v) * weight).sum().backward()
    for g, t in zip(got, (q, k, v), strict=True):
        assert torch.allclose(g, t.grad, atol=1e-7)


def test_float32_backward_is_finite_with_masks():
    q, k, v = (t.requires_grad_(True) for t in qkv(n=20, dtype=torch.float32))
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[0, 5:11] = False
    mask[1] = False
    get_backend("nystromformer:landmarks=4")(q, k, v, mask).sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("nystromformer:landmarks=0", "landmarks"),
        ("nystromformer:conv=-1", "conv"),
        ("nystromformer:conv=4", "conv"),
        ("nystromformer:iterations=0", "iterations"),
    ],
)
def test_bad_parameters_exit_2_with_one_line(spec, needle):
    assert app is not None
    assert_one_line_error(invoke("time", "--seq", "64", "--backends", spec), needle)
