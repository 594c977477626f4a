"""Linformer against its definition and plain dense-torch references."""

import math

import pytest
import torch
from helpers import assert_one_line_error, invoke

import attnbench.backends.linformer as lin
from attnbench import get_backend


def qkv(b=2, h=2, n=12, d=8, dv=3, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, n, d, generator=gen, dtype=dtype) for _ in range(2))
    v = torch.randn(b, h, n, dv, generator=gen, dtype=dtype)
    return q, k, v


def dense_softmax(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1) @ v


def dense_linformer(q, k, v, e, f, mask=None):
    """softmax(Q (E K)^T / sqrt d) (F V), per head, written out with loops over heads."""
    if mask is not None:
        k = k * mask[:, None, :, None]
        v = v * mask[:, None, :, None]
    out = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for h in range(q.shape[1]):
        eh = e if e.dim() == 2 else e[h]
        fh = f if f.dim() == 2 else f[h]
        scores = q[:, h] @ (eh @ k[:, h]).transpose(-1, -2) / math.sqrt(q.shape[-1])
        out[:, h] = torch.softmax(scores, -1) @ (fh @ v[:, h])
    if mask is not None:
        out = out * mask[:, None, :, None]
    return out


def identity_backend(n):
    backend = get_backend(f"linformer:k={n}")
    eye = torch.eye(n, dtype=torch.float64)
    backend.projections = lambda n_, heads, device, dtype: (eye.to(dtype), eye.to(dtype))
    return backend


def test_identity_projections_with_k_equal_n_give_softmax():
    q, k, v = qkv(n=12)
    out = identity_backend(12)(q, k, v)
    assert torch.allclose(out, dense_softmax(q, k, v), atol=1e-12)
    amap = identity_backend(12).effective_map(q, k)
    assert torch.allclose(amap, torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), -1))


@pytest.mark.parametrize("share", ["heads", "kv", "none"])
def test_forward_and_map_equal_the_dense_definition(share):
    q, k, v = qkv(n=13, h=3)
    backend = get_backend(f"linformer:k=5,share={share},seed=4")
    e, f = lin.random_projections(5, 13, 3, share, 4)
    assert e.shape == ((3, 5, 13) if share == "none" else (5, 13))
    assert (e is f) == (share == "kv")
    out = backend(q, k, v)
    expected = dense_linformer(q, k, v, e, f)
    assert torch.allclose(out, expected, atol=1e-12)
    assert torch.allclose(backend.effective_map(q, k) @ v, expected, atol=1e-12)


def test_projection_entries_have_variance_one_over_k():
    e, f = lin.random_projections(64, 512, 1, "heads", 0)
    for p in (e, f):
        assert abs(p.var().item() * 64 - 1) < 0.03 and abs(p.mean().item()) < 0.01
    assert not torch.equal(e, f)


def test_projections_are_built_for_the_case_length():
    backend = get_backend("linformer:k=4")
    for n in (7, 20):
        q, k, v = qkv(n=n)
        assert backend(q, k, v).shape == (2, 2, n, 3)
        e, _ = backend.projections(n, 2, "cpu", torch.float64)
        assert e.shape == (4, n)


def test_no_attention_map_over_keys():
    q, k, _ = qkv(n=8)
    with pytest.raises(NotImplementedError):
        get_backend("linformer:k=4").attention_map(q, k)


def test_seeded_and_reproducible():
    q, k, v = qkv(dtype=torch.float32)
    one = get_backend("linformer:k=4,seed=5")(q, k, v)
    assert torch.equal(one, get_backend("linformer:k=4,seed=5")(q, k, v))
    assert not torch.equal(one, get_backend("linformer:k=4,seed=6")(q, k, v))


@pytest.mark.parametrize("share", ["heads", "none"])
def test_masks_follow_the_shared_rule(share):
    q, k, v = qkv(n=12)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[0, 7:] = False
    mask[1] = False
    backend = get_backend(f"linformer:k=6,share={share},seed=1")
    out = backend(q, k, v, mask)
    assert torch.isfinite(out).all()
    assert (out[1] == 0).all() and (out[0, :, 7:] == 0).all()
    e, f = lin.random_projections(6, 12, 2, share, 1)
    assert torch.allclose(out, dense_linformer(q, k, v, e, f, mask), atol=1e-12)
    q2, k2, v2 = (t.clone() for t in (q, k, v))
    for t in (q2, k2, v2):
        t[0, :, 7:] = 100.0
    assert torch.allclose(backend(q2, k2, v2, mask), out, atol=1e-12)
    amap = backend.effective_map(q, k, mask)
    assert (amap[0, :, :, 7:] == 0).all()
    assert torch.allclose((amap @ v)[0, :, :7], out[0, :, :7], atol=1e-12)


def test_backward_matches_autograd_of_the_dense_reference():
    q, k, v = (t.requires_grad_(True) for t in qkv(n=10))
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[0, 6:] = False
    e, f = lin.random_projections(4, 10, 2, "none", 2)
    weight = torch.randn(2, 2, 10, 3, generator=torch.Generator().manual_seed(2), dtype=q.dtype)
    (get_backend("linformer:k=4,share=none,seed=2")(q, k, v, mask) * weight).sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    (dense_linformer(q, k, v, e, f, mask) * weight).sum().backward()
    for g, t in zip(got, (q, k, v), strict=True):
        assert torch.isfinite(g).all()
        assert torch.allclose(g, t.grad, atol=1e-10)


def test_float32_backward_is_finite_with_a_fully_masked_entry():
    q, k, v = (t.float().requires_grad_(True) for t in qkv(n=20))
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[1] = False
    get_backend("linformer:k=8")(q, k, v, mask).sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


@pytest.mark.parametrize("spec,needle", [("linformer:k=0", "k"), ("linformer:share=all", "share")])
def test_bad_parameters_exit_2_with_one_line(spec, needle):
    assert_one_line_error(invoke("time", "--seq", "64", "--backends", spec), needle)
