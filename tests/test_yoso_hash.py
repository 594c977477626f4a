"""The default hash (`hash=auto`) is unbiased at small head dims: its collision rate is
(1 - theta/pi)^tau within sampling error, and YOSO-m converges to YOSO-E as m grows. The
fast hash alone fails both at these dims, which is why auto does not pick it there."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnbench import get_backend
from attnbench.backends.yoso import FAST_MIN_DIM, hash_kind
from attnbench.inputs import clustered_qkv
from attnbench.measure.metrics import mean_radian


def pairs_at_angles(d, count, seed=0):
    """Unit queries q [1, 1, count, d] and keys at angles spread over 0 .. 0.6 pi."""
    gen = torch.Generator().manual_seed(seed)
    a = F.normalize(torch.randn(count, d, generator=gen, dtype=torch.float64), dim=-1)
    r = torch.randn(count, d, generator=gen, dtype=torch.float64)
    r = F.normalize(r - (r * a).sum(-1, keepdim=True) * a, dim=-1)
    theta = torch.linspace(0.05, 0.6 * math.pi, count, dtype=torch.float64)[:, None]
    b = torch.cos(theta) * a + torch.sin(theta) * r
    return a[None, None].float(), b[None, None].float(), theta[:, 0]


def collision_rate(spec, d, count=48, seed=0):
    """Per pair: collision frequency over the backend's m hashes, theory, standard error."""
    q, k, theta = pairs_at_angles(d, count, seed)
    backend = get_backend(spec)
    freq = backend.attention_map(q, k)[0, 0].diagonal().double()
    theory = (1 - theta / math.pi) ** 8
    m = backend.values["m"]
    return freq, theory, torch.sqrt(theory * (1 - theory) / m)


def test_auto_picks_gaussian_below_the_boundary_and_fast_from_it():
    assert hash_kind("auto", FAST_MIN_DIM - 1) == "gaussian"
    assert hash_kind("auto", FAST_MIN_DIM) == "fast"
    assert hash_kind("fast", 4) == "fast" and hash_kind("gaussian", 512) == "gaussian"
    assert "hash=auto" in get_backend("yoso").spec


@pytest.mark.parametrize("d", [4, 8])
def test_default_collision_rate_matches_theory(d):
    freq, theory, stderr = collision_rate("yoso:m=4096,tau=8,seed=0", d)
    assert ((freq - theory).abs() <= 5 * stderr + 1e-3).all()
    # the summed rate over all pairs, a much tighter check of bias
    total_se = stderr.square().sum().sqrt()
    assert abs(float((freq - theory).sum())) <= 4 * total_se
    # the fast hash at the same d departs from theory by far more than sampling error
    fast, _, _ = collision_rate("yoso:m=4096,tau=8,seed=0,hash=fast", d)
    assert abs(float((fast - theory).sum())) > 10 * total_se


@pytest.mark.parametrize("d", [4, 8])
def test_default_converges_to_yoso_e_as_m_grows(d):
    q, k, v = clustered_qkv(1, 2, 96, d, seed=0)
    expected = get_backend("yoso-e")(q, k, v)

    def error(spec):
        return float(mean_radian(get_backend(spec)(q, k, v), expected))

    small, large = error("yoso:m=8,seed=0"), error("yoso:m=2048,seed=0")
    assert large < small / 6  # 256x the hashes: about 16x less Monte Carlo error
    assert large < 0.08
    assert error("yoso:m=2048,seed=0,hash=fast") > 2 * large  # fast: a bias that stays
