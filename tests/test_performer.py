"""Performer FAVOR+ against the softmax kernel and softmax attention, written plainly."""

import math

import pytest
import torch
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench import get_backend
from attnbench.backends.performer import favor_features, orthogonal_gaussian


def qkv(b=1, h=2, n=24, d=16, dv=5, scale=1.0, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, n, d, generator=gen, dtype=dtype) * scale for _ in range(2))
    v = torch.randn(b, h, n, dv, generator=gen, dtype=dtype)
    return q, k, v


def dense_softmax(q, k, v, mask=None):
    """float64 softmax(q k^T / sqrt(d)) v, masked keys excluded, masked rows zero."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    out = torch.softmax(scores, -1).nan_to_num(0.0) @ v
    return out if mask is None else out * mask[:, None, :, None]


def kernel_error(features: int, seed: int) -> float:
    """Relative Frobenius error of phi(q').phi(k') against exp(q.k / sqrt(d))."""
    q, k, _ = qkv(n=40, scale=0.5, seed=3)
    d = q.shape[-1]
    qs, ks = q * d**-0.25, k * d**-0.25
    exact = torch.exp(qs @ ks.transpose(-1, -2))
    w = orthogonal_gaussian(features, d, seed)
    estimate = favor_features(qs, w) @ favor_features(ks, w).transpose(-1, -2)
    return ((estimate - exact).norm() / exact.norm()).item()


def test_kernel_estimate_converges_to_the_softmax_kernel():
    small = sum(kernel_error(16, seed) for seed in range(4)) / 4
    large = sum(kernel_error(4096, seed) for seed in range(4)) / 4
    # Monte Carlo error falls as 1/sqrt(r): 256x the features, about 16x less error
    assert large < small / 6
    assert large < 0.1


def test_kernel_estimate_is_unbiased():
    """Every pair's mean estimate over independent draws is within 5 standard errors of
    the exact kernel."""
    q, k, _ = qkv(n=6, scale=0.5, seed=5)
    d = q.shape[-1]
    qs, ks = q * d**-0.25, k * d**-0.25
    exact = torch.exp(qs @ ks.transpose(-1, -2))
    draws = []
    for seed in range(64):
        w = orthogonal_gaussian(256, d, seed)
        draws.append(favor_features(qs, w) @ favor_features(ks, w).transpose(-1, -2))
    draws = torch.stack(draws)
    stderr = draws.std(0) / math.sqrt(len(draws))
    assert ((draws.mean(0) - exact).abs() <= 5 * stderr).all()
    assert (stderr / exact).max() < 0.05  # the check has teeth


def test_stabilisers_leave_the_ratio_unchanged():
    q, k, v = qkv(scale=3.0)
    d = q.shape[-1]
    w = orthogonal_gaussian(64, d, 0)
    qs, ks = q * d**-0.25, k * d**-0.25

    def ratio(phi_q, phi_k):
        kernel = phi_q @ phi_k.transpose(-1, -2)
        return kernel / kernel.sum(-1, keepdim=True)

    raw = ratio(favor_features(qs, w), favor_features(ks, w))
    stable = ratio(favor_features(qs, w, "query"), favor_features(ks, w, "key"))
    assert torch.allclose(raw, stable, atol=1e-10)


def test_output_close_to_softmax_with_many_features():
    q, k, v = qkv(scale=0.5)
    out = get_backend("performer:features=8192,seed=1")(q, k, v)
    expected = dense_softmax(q, k, v)
    assert ((out - expected).norm() / expected.norm()) < 0.05


def test_map_is_the_normalised_kernel_and_explains_the_output():
    q, k, v = qkv(scale=0.5)
    backend = get_backend("performer:features=32,seed=2")
    out = backend(q, k, v)
    amap = backend.attention_map(q, k)
    assert amap.shape == (1, 2, 24, 24) and (amap >= 0).all()
    assert torch.allclose(amap.sum(-1), torch.ones(1, 2, 24, dtype=amap.dtype))
    assert torch.allclose(amap @ v, out, atol=1e-10)


@pytest.mark.parametrize("features,d", [(16, 16), (40, 16), (7, 8), (256, 64)])
def test_blocks_are_orthogonal_with_chi_norms(features, d):
    unit = orthogonal_gaussian(features, d, seed=4, scale=False)
    assert unit.shape == (features, d)
    for start in range(0, features, d):
        block = unit[start : start + d]
        gram = block @ block.T
        assert torch.allclose(gram, torch.eye(block.shape[0], dtype=gram.dtype), atol=1e-10)
    scaled = orthogonal_gaussian(features, d, seed=4)
    # the same directions, lengths drawn from chi(d)
    norms = scaled.norm(dim=-1)
    assert torch.allclose(scaled / norms[:, None], unit, atol=1e-10)
    big = orthogonal_gaussian(4096, d, seed=5).norm(dim=-1) ** 2
    assert abs(big.mean().item() - d) < 5 * math.sqrt(2 * d / 4096)  # E|w|^2 = d


def test_reproducible_and_resampled_per_call():
    q, k, v = qkv()
    a = get_backend("performer:features=16,seed=1")
    first, second = a(q, k, v), a(q, k, v)
    b = get_backend("performer:features=16,seed=1")
    assert torch.equal(first, b(q, k, v)) and torch.equal(second, b(q, k, v))
    assert not torch.equal(first, second)
    assert not torch.equal(first, get_backend("performer:features=16,seed=2")(q, k, v))
    fixed = get_backend("performer:features=16,seed=1,resample=fixed")
    assert torch.equal(fixed(q, k, v), first) and torch.equal(fixed(q, k, v), first)


def test_masks_follow_the_shared_rule():
    q, k, v = qkv(b=2, n=12, scale=0.5)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[0, 7:] = False
    mask[1] = False
    spec = "performer:features=64,seed=3"
    out = get_backend(spec)(q, k, v, mask)
    assert torch.isfinite(out).all()
    assert (out[1] == 0).all() and (out[0, :, 7:] == 0).all()
    keep = mask[0]
    alone = get_backend(spec)(q[:1, :, keep], k[:1, :, keep], v[:1, :, keep])
    assert torch.allclose(out[:1, :, keep], alone, atol=1e-10)


def test_gradients_finite_and_flowing():
    q, k, v = (t.float().requires_grad_(True) for t in qkv(b=2, n=16, scale=2.0))
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[1, 4:] = False
    get_backend("performer:features=32")(q, k, v, mask).square().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0


def test_gradients_match_softmax_with_many_features():
    q, k, v = (t.requires_grad_(True) for t in qkv(n=10, d=8, scale=0.4))
    weight = torch.randn(1, 2, 10, 5, generator=torch.Generator().manual_seed(9), dtype=q.dtype)
    (get_backend("performer:features=16384,seed=0")(q, k, v) * weight).sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    (dense_softmax(q, k, v) * weight).sum().backward()
    for g, t in zip(got, (q, k, v), strict=True):
        assert ((g - t.grad).norm() / t.grad.norm()) < 0.1


@pytest.mark.parametrize("spec", ["performer:features=0", "performer:resample=often"])
def test_bad_parameters_exit_2_with_one_line(spec):
    result = CliRunner().invoke(cli.app, ["time", "--seq", "64", "--backends", spec])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "performer" in lines[0]
