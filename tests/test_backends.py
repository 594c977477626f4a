"""Every backend against a plain dense reference on small inputs."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnbench import get_backend
from attnbench.inputs import clustered_qkv
from attnbench.measure.metrics import mean_radian


def qkv(b=2, h=3, n=17, d=8, seed=0, dv=None):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, n, d, generator=gen) for _ in range(2))
    v = torch.randn(b, h, n, dv or d, generator=gen)
    return q, k, v


def loop_softmax(q, k, v):
    """Row by row, in float64, straight from the definition."""
    q, k, v = q.double(), k.double(), v.double()
    out = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=torch.float64)
    for idx in torch.cartesian_prod(*(torch.arange(s) for s in q.shape[:3])):
        b, h, i = idx.tolist()
        scores = torch.tensor([q[b, h, i] @ k[b, h, j] for j in range(k.shape[2])])
        weights = torch.exp(scores / math.sqrt(q.shape[-1]) - scores.max() / math.sqrt(q.shape[-1]))
        out[b, h, i] = (weights / weights.sum()) @ v[b, h]
    return out


def test_softmax_matches_loop_reference():
    q, k, v = qkv(b=1, h=2, n=9, d=5, dv=3)
    assert torch.allclose(
        get_backend("softmax")(q, k, v).double(), loop_softmax(q, k, v), atol=1e-5
    )


@pytest.mark.parametrize("shape", [(1, 1, 1, 4), (2, 3, 17, 8), (1, 2, 64, 16)])
def test_sdpa_equals_softmax(shape):
    q, k, v = qkv(*shape)
    out = get_backend("sdpa")(q, k, v)
    assert torch.allclose(out, get_backend("softmax")(q, k, v), atol=1e-5)


def test_yoso_e_matches_definition():
    q, k, v = qkv(b=1, h=1, n=6, d=4)
    tau = 5
    expected = torch.zeros(6, 4, dtype=torch.float64)
    for i in range(6):
        for j in range(6):
            cos = F.cosine_similarity(q[0, 0, i].double(), k[0, 0, j].double(), dim=0).item()
            expected[i] += (1 - math.acos(max(-1.0, min(1.0, cos))) / math.pi) ** tau * v[0, 0, j]
    expected = expected / expected.norm(dim=-1, keepdim=True)
    out = get_backend(f"yoso-e:tau={tau}")(q, k, v)[0, 0]
    assert torch.allclose(out.double(), expected, atol=1e-5)


def test_yoso_output_is_normalised_collision_frequency_times_v():
    q, k, v = qkv(n=20, dv=5)
    yoso = get_backend("yoso:m=16,tau=4,seed=7")
    expected = F.normalize(yoso.attention_map(q, k) @ v, dim=-1)
    assert torch.allclose(yoso(q, k, v), expected, atol=1e-5)


def test_yoso_is_seeded_and_reproducible():
    """A fresh instance with the same seed gives the same output, another seed another."""
    q, k, v = qkv()
    first = get_backend("yoso:m=8,seed=1")(q, k, v)
    assert torch.equal(first, get_backend("yoso:m=8,seed=1")(q, k, v))
    assert not torch.equal(first, get_backend("yoso:m=8,seed=2")(q, k, v))


def test_yoso_collision_frequency_matches_theory():
    """(1 - theta/pi)^tau within 5 standard errors for every pair, with 4096 hashes."""
    q, k, _ = qkv(b=1, h=2, n=10, d=6, seed=1)
    m, tau = 4096, 3
    spec = f"yoso:m={m},tau={tau},seed=0,hash=gaussian"  # the fast hash is approximate
    freq = get_backend(spec).attention_map(q, k).double()
    p = get_backend(f"yoso-e:tau={tau}").attention_map(q, k).double()
    stderr = torch.sqrt(p * (1 - p) / m)
    assert ((freq - p).abs() <= 5 * stderr + 1e-3).all()


def test_yoso_m_converges_to_yoso_e():
    q, k, v = clustered_qkv(1, 2, 128, 16, seed=0)
    expected = get_backend("yoso-e")(q, k, v)
    errors = [
        mean_radian(get_backend(f"yoso:m={m},seed=0")(q, k, v), expected) for m in (8, 64, 512)
    ]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.1
    # Monte Carlo error falls as 1/sqrt(m): 64x more hashes, about 8x less error
    assert 4 < errors[0] / errors[2] < 16


def test_tau_auto_uses_log2_n():
    q, k, v = qkv(n=100)
    auto = get_backend("yoso:m=4,tau=auto")(q, k, v)
    assert torch.equal(auto, get_backend("yoso:m=4,tau=7")(q, k, v))
    assert torch.equal(
        get_backend("yoso-e:tau=auto")(q, k, v), get_backend("yoso-e:tau=7")(q, k, v)
    )


ALL = ["softmax", "sdpa", "yoso-e", "yoso:m=8,tau=2"]  # tau=2: plenty of collisions


@pytest.mark.parametrize("spec", ALL)
def test_mask_equals_dropping_the_masked_keys(spec):
    q, k, v = qkv(b=2, h=2, n=12, d=8)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[0, 7:] = False
    mask[1, :3] = False
    backend = get_backend(spec)
    out = backend(q, k, v, mask)
    # YOSO draws its projections per (batch, head), so only batch 0 sees the same draws alone
    for b in range(1 if backend.stochastic else 2):
        keep = mask[b]
        fresh = get_backend(spec)  # its first call: the draws `out` was made with
        alone = fresh(q[b : b + 1, :, keep], k[b : b + 1, :, keep], v[b : b + 1, :, keep])
        assert torch.allclose(out[b : b + 1, :, keep], alone, atol=1e-5)
        assert (alone.norm(dim=-1) > 0.1).all()  # not zeros compared with zeros
    assert (out[0, :, 7:] == 0).all() and (out[1, :, :3] == 0).all()


@pytest.mark.parametrize("spec", ALL)
def test_fully_masked_batch_gives_zeros_not_nan(spec):
    q, k, v = qkv(b=2, h=1, n=5, d=4)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1] = False
    out = get_backend(spec)(q, k, v, mask)
    assert torch.isfinite(out).all()
    assert (out[1] == 0).all() and (out[0].norm(dim=-1) > 0.1).all()


@pytest.mark.parametrize("spec", ALL)
def test_shapes_with_value_dim_other_than_d(spec):
    q, k, v = qkv(b=1, h=2, n=9, d=8, dv=3)
    assert get_backend(spec)(q, k, v).shape == (1, 2, 9, 3)


@pytest.mark.parametrize("spec", ALL)
def test_attention_map_is_dense_and_nonnegative(spec):
    q, k, _ = qkv(b=1, h=2, n=9, d=8)
    amap = get_backend(spec).attention_map(q, k)
    assert amap.shape == (1, 2, 9, 9)
    assert (amap >= 0).all()


@pytest.mark.parametrize("spec", ["softmax", "sdpa", "yoso-e"])
def test_backward_is_finite(spec):
    q, k, v = (t.requires_grad_(True) for t in qkv(b=1, h=1, n=8, d=4))
    k.data[0, 0, 0] = q.data[0, 0, 0]  # q.k = 1, where arccos' derivative is infinite
    get_backend(spec)(q, k, v).sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
