"""YOSO-m end to end against a dense oracle written from the definition:

    out_i = normalize(sum_j C_ij mask_j v_j),  C_ij = #{f : code_f(q_i) == code_f(k_j)} / m,

and zero rows for masked tokens. Only the hash codes come from the backend (hashing has its
own oracle in test_lsh_reference.py); counting collisions, masking keys and normalising are
recomputed here, because the numba and torch paths share `YOSO.forward` and a bug there
would pass any comparison of one path with the other. Small tau keeps collisions frequent,
so the outputs are far from zero.
"""

import pytest
import torch

from attnbench import get_backend


def oracle(backend, q, k, v, mask=None):
    """The definition above in float64: (output [B, H, n_q, d_v], C [B, H, n_q, n_k])."""
    b, h, n_q, _ = q.shape
    n_k = k.shape[2]
    q_codes, k_codes, _ = backend.codes(q, k)
    qc = torch.as_tensor(q_codes).long().view(b, h, n_q, 1, -1)
    kc = torch.as_tensor(k_codes).long().view(b, h, 1, n_k, -1)
    freq = (qc == kc).double().mean(-1)
    weights = freq if mask is None else freq * mask[:, None, None, :].double()
    y = weights @ v.double()
    norm = y.norm(dim=-1, keepdim=True)
    out = torch.where(norm > 0, y / norm.clamp_min(1e-300), torch.zeros(()).double())
    if mask is not None:
        out = out * mask[:, None, :, None].double()
    return out, freq


def inputs(n, d, dv, n_k=None, seed=0):
    """q [2, 2, n, d], k and v [2, 2, n_k, .] Gaussian, two value rows zero."""
    gen = torch.Generator().manual_seed(seed)
    n_k = n_k or n
    q = torch.randn(2, 2, n, d, generator=gen)
    k = torch.randn(2, 2, n_k, d, generator=gen)
    v = torch.randn(2, 2, n_k, dv, generator=gen)
    v[:, :, [1, n_k - 2]] = 0.0
    return q, k, v


def token_mask(n, seed=1):
    """Batch entry 0 keeps about two thirds of its tokens, entry 1 none."""
    mask = torch.rand(2, n, generator=torch.Generator().manual_seed(seed)) > 0.35
    mask[0, :2] = True
    mask[0, -1] = False
    mask[1] = False
    return mask


SHAPES = [dict(n=13, d=6, dv=3), dict(n=16, d=1, dv=2), dict(n=9, d=40, dv=70)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
@pytest.mark.parametrize("tau", [1, 2, 3])
@pytest.mark.parametrize("hash_", ["fast", "gaussian"])
@pytest.mark.parametrize("impl", ["numba", "torch"])
def test_forward_equals_the_dense_oracle(impl, hash_, tau, masked, shape):
    q, k, v = inputs(**shape)
    mask = token_mask(shape["n"]) if masked else None
    backend = get_backend(f"yoso:m=11,tau={tau},seed=5,hash={hash_},impl={impl}")
    expected, freq = oracle(backend, q, k, v, mask)
    assert (freq > 0).any() and (freq < 1).any()
    if shape["d"] > 1:  # unit vectors of d = 1 are +-1: they collide in all hashes or none
        assert ((freq > 0) & (freq < 1)).any()  # hashes disagree: the counting is exercised
    kept = slice(None) if mask is None else mask[:, None, :].expand(-1, 2, -1)
    assert (expected.norm(dim=-1)[kept] > 0.5).double().mean() > 0.8  # unit rows, not zeros
    out = backend(q, k, v, mask)
    assert out.shape == expected.shape
    torch.testing.assert_close(out.double(), expected, atol=2e-5, rtol=0)


@pytest.mark.parametrize("impl", ["numba", "torch"])
def test_cross_attention_equals_the_dense_oracle(impl):
    """Fewer queries than keys: each query reads the keys' tables."""
    q, k, v = inputs(n=5, d=4, dv=3, n_k=12, seed=2)
    backend = get_backend(f"yoso:m=9,tau=2,seed=1,impl={impl}")
    expected, _ = oracle(backend, q, k, v)
    assert (expected.norm(dim=-1) > 0.5).all()
    torch.testing.assert_close(backend(q, k, v).double(), expected, atol=2e-5, rtol=0)


def near_duplicates(n, d, dv, seed=0):
    """Keys that are queries scaled by 2 (the same codes) or nudged by a small angle (the
    same code in most hashes), so even long codes collide: q, k [1, 2, n, d], v."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, n, d, generator=gen)
    k = q.clone()
    k[..., ::2, :] *= 2.0
    k[..., 1::2, :] += 0.02 * torch.randn(1, 2, n // 2, d, generator=gen)
    k = k[..., torch.randperm(n, generator=gen), :]
    return q, k, torch.randn(1, 2, n, dv, generator=gen)


@pytest.mark.parametrize("tau", [6, 16, 20])
@pytest.mark.parametrize("hash_", ["fast", "gaussian"])
@pytest.mark.parametrize("impl", ["numba", "torch"])
def test_long_codes_equal_the_dense_oracle(impl, hash_, tau):
    """With 2^tau buckets per key the CPU cumulation sorts rows by code instead of filling
    tables; every query still has a colliding key, so no output row is zero."""
    q, k, v = near_duplicates(n=10, d=6, dv=3)
    backend = get_backend(f"yoso:m=7,tau={tau},seed=2,hash={hash_},impl={impl}")
    expected, freq = oracle(backend, q, k, v)
    assert (freq.amax(-1) > 0).all() and ((freq > 0) & (freq < 1)).any()
    torch.testing.assert_close(backend(q, k, v).double(), expected, atol=2e-5, rtol=0)
