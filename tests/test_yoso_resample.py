"""YOSO's hash draws: new on every call by default, reproducible from the seed; the map
and codes explain the last forward; `resample=fixed` keeps one draw for all calls."""

import pytest
import torch

from attnbench import get_backend


def inputs(seed=0, n=24, d=8):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 2, n, d, generator=gen) for _ in range(3))


@pytest.mark.parametrize("impl", ["numba", "torch"])
def test_calls_draw_new_hashes_and_a_fresh_instance_repeats_them(impl):
    q, k, v = inputs()
    spec = f"yoso:m=8,tau=3,seed=4,impl={impl}"
    first = get_backend(spec)
    outs = [first(q, k, v) for _ in range(3)]
    assert not torch.equal(outs[0], outs[1]) and not torch.equal(outs[1], outs[2])
    again = get_backend(spec)
    for out in outs:
        torch.testing.assert_close(again(q, k, v), out, rtol=0, atol=0)


@pytest.mark.parametrize("impl", ["numba", "torch"])
def test_fixed_draws_give_identical_calls_equal_to_the_first_resampled_call(impl):
    q, k, v = inputs()
    fixed = get_backend(f"yoso:m=8,tau=3,seed=4,impl={impl},resample=fixed")
    first = fixed(q, k, v)
    torch.testing.assert_close(fixed(q, k, v), first, rtol=0, atol=0)
    resampled = get_backend(f"yoso:m=8,tau=3,seed=4,impl={impl}")
    torch.testing.assert_close(resampled(q, k, v), first, rtol=0, atol=0)


def test_different_seeds_give_different_sequences():
    q, k, v = inputs()
    a, b = get_backend("yoso:m=8,tau=3,seed=1"), get_backend("yoso:m=8,tau=3,seed=2")
    for _ in range(2):
        assert not torch.equal(a(q, k, v), b(q, k, v))


def test_map_uses_the_draws_of_the_forward_it_explains():
    """After any number of calls the map's normalised rows times V give that call's output."""
    q, k, v = inputs(n=16)
    backend = get_backend("yoso:m=8,tau=2,seed=0,impl=torch")
    for _ in range(3):
        out = backend(q, k, v)
        amap = backend.attention_map(q, k)
        expected = torch.nn.functional.normalize(amap.double() @ v.double(), dim=-1)
        torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0)
    # before any forward, the map shows the draws the first forward will use
    fresh = get_backend("yoso:m=8,tau=2,seed=0,impl=torch")
    amap = fresh.attention_map(q, k)
    out = fresh(q, k, v)
    expected = torch.nn.functional.normalize(amap.double() @ v.double(), dim=-1)
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0)
