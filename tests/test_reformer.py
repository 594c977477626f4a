"""Reformer LSH attention against its dense definition and a plain bucketing reference."""

import math

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench import get_backend
from attnbench.backends.reformer import layout


def qkv(b=1, h=2, n=20, d=8, dv=5, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, n, d, generator=gen, dtype=dtype) for _ in range(2))
    v = torch.randn(b, h, n, dv, generator=gen, dtype=dtype)
    return q, k, v


def dense_definition(q, v, mask=None):
    """Softmax over the shared-QK scores q_i . q_j / |q_j| / sqrt(d), without the diagonal
    unless a row has no other valid key; masked keys excluded, masked rows zero."""
    q, v = q.double(), v.double()
    b, _, n, d = q.shape
    scores = q @ F.normalize(q, dim=-1).transpose(-1, -2) / math.sqrt(d)
    valid = torch.ones(b, n, dtype=torch.bool) if mask is None else mask
    eye = torch.eye(n, dtype=torch.bool)
    other = valid[:, None, None, :] & ~eye
    allowed = other | (eye & ~other.any(-1, keepdim=True))
    out = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v
    return out * valid[:, None, :, None]


def reference(q, v, codes, bucket, mask=None):
    """Token by token: per round, sort by (bucket, position), chunk, attend to own and
    previous chunk (cyclic), self only when alone; rounds mixed by log-sum-exp weights.
    Returns the output and, per round, each query's set of attended key positions."""
    q, v = q.double(), v.double()
    b_size, heads, n, d = q.shape
    n_pad, chunks, _ = layout(n, bucket)
    valid = torch.ones(b_size, n, dtype=torch.bool) if mask is None else mask
    out = torch.zeros(b_size, heads, n, v.shape[-1], dtype=torch.float64)
    sets = {}
    for b in range(b_size):
        for h in range(heads):
            per_round = []
            for r in range(codes.shape[2]):
                order = sorted(range(n_pad), key=lambda i: (int(codes[b, h, r, i]), i))
                chunk = [order[c * bucket : (c + 1) * bucket] for c in range(chunks)]
                results = {}
                for c in range(chunks):
                    window = chunk[c] + chunk[(c - 1) % chunks]
                    for i in chunk[c]:
                        if i >= n:
                            continue
                        keys = [j for j in window if j < n and valid[b, j] and j != i]
                        if not keys:
                            keys = [j for j in window if j == i]
                        sets[(b, h, r, i)] = set(keys)
                        s = torch.stack([q[b, h, i] @ F.normalize(q[b, h, j], dim=0) for j in keys])
                        s = s / math.sqrt(d)
                        lse = torch.logsumexp(s, 0)
                        o = sum(torch.exp(s[t] - lse) * v[b, h, j] for t, j in enumerate(keys))
                        results[i] = (o, lse)
                per_round.append(results)
            for i in range(n):
                lses = torch.stack([res[i][1] for res in per_round])
                mix = torch.softmax(lses, 0)
                out[b, h, i] = sum(mix[r] * per_round[r][i][0] for r in range(len(per_round)))
    return out * valid[:, None, :, None], sets


@pytest.mark.parametrize("n,bucket", [(20, 32), (20, 20), (30, 16), (7, 4)])
def test_one_chunk_region_equals_the_dense_definition(n, bucket):
    """n <= 2 * bucket: every query's window (own + previous chunk) is every token."""
    q, k, v = qkv(n=n)
    for spec in (f"reformer:bucket={bucket},hashes=1", f"reformer:bucket={bucket},hashes=3"):
        out = get_backend(spec)(q, k, v)
        assert torch.allclose(out, dense_definition(q, v), atol=1e-10)


def test_k_is_not_used():
    q, k, v = qkv(n=24)
    a = get_backend("reformer:bucket=4,seed=1")(q, k, v)
    assert torch.equal(a, get_backend("reformer:bucket=4,seed=1")(q, -3 * k, v))


@pytest.mark.parametrize("n,bucket,hashes", [(24, 4, 1), (22, 4, 3), (13, 2, 2), (16, 1, 2)])
def test_several_buckets_equal_the_plain_reference(n, bucket, hashes):
    q, k, v = qkv(b=2, n=n)
    backend = get_backend(f"reformer:bucket={bucket},hashes={hashes},seed=5")
    out = backend(q, k, v)
    codes = backend.buckets(q)
    _, chunks, n_buckets = layout(n, bucket)
    assert chunks > 2 and codes[..., :n].max() < n_buckets
    assert len(codes[..., :n].unique()) > 2  # several buckets in use
    expected, sets = reference(q, v, codes, bucket)
    assert torch.allclose(out, expected, atol=1e-10)
    if hashes == 1:  # the map's support is each query's attended set
        amap = backend.attention_map(q, k)
        assert torch.allclose(amap @ v, out, atol=1e-10)
        for (b, h, _, i), keys in sets.items():
            assert set(amap[b, h, i].nonzero().flatten().tolist()) == keys


def test_map_rows_sum_to_one_and_explain_the_output():
    q, k, v = qkv(n=40)
    backend = get_backend("reformer:bucket=8,hashes=2,seed=3")
    out = backend(q, k, v)
    amap = backend.attention_map(q, k)
    assert amap.shape == (1, 2, 40, 40) and (amap >= 0).all()
    assert torch.allclose(amap.sum(-1), torch.ones(1, 2, 40, dtype=amap.dtype))
    assert torch.allclose(amap @ v, out, atol=1e-10)
    assert (amap > 0).sum(-1).max() < 40  # sparse: not every key


def test_masks_follow_the_shared_rule():
    n, bucket = 21, 4
    q, k, v = qkv(b=3, n=n)
    mask = torch.ones(3, n, dtype=torch.bool)
    mask[0, 5:12] = False
    mask[1] = False
    mask[2, 1:] = False  # one valid token: it has only itself
    backend = get_backend(f"reformer:bucket={bucket},hashes=2,seed=7")
    out = backend(q, k, v, mask)
    assert torch.isfinite(out).all()
    assert (out[1] == 0).all() and (out[0, :, 5:12] == 0).all() and (out[2, :, 1:] == 0).all()
    assert torch.allclose(out[2, :, 0], v[2, :, 0])
    expected, sets = reference(q, v, backend.buckets(q, mask), bucket, mask)
    assert torch.allclose(out, expected, atol=1e-10)
    assert all(mask[b, list(keys)].all() or keys == {i} for (b, _, _, i), keys in sets.items())
    one_region = get_backend("reformer:bucket=32")(q, k, v, mask)
    assert torch.allclose(one_region, dense_definition(q, v, mask), atol=1e-10)


def test_reproducible_and_resampled_per_call():
    q, k, v = qkv(n=64)
    a = get_backend("reformer:bucket=4,seed=1")
    first, second = a(q, k, v), a(q, k, v)
    b = get_backend("reformer:bucket=4,seed=1")
    assert torch.equal(first, b(q, k, v)) and torch.equal(second, b(q, k, v))
    assert not torch.equal(first, second)
    assert not torch.equal(first, get_backend("reformer:bucket=4,seed=2")(q, k, v))
    fixed = get_backend("reformer:bucket=4,seed=1,resample=fixed")
    assert torch.equal(fixed(q, k, v), first) and torch.equal(fixed(q, k, v), first)


def test_gradients_finite_and_flowing():
    q, k, v = (t.float().requires_grad_(True) for t in qkv(b=2, n=30))
    mask = torch.ones(2, 30, dtype=torch.bool)
    mask[1, 3:] = False
    get_backend("reformer:bucket=4")(q, k, v, mask).square().sum().backward()
    assert k.grad is None  # shared QK: k is not an input
    for t in (q, v):
        assert torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0


def test_gradients_equal_the_dense_definition_in_one_region():
    q, k, v = (t.requires_grad_(True) for t in qkv(n=12))
    weight = torch.randn(1, 2, 12, 5, generator=torch.Generator().manual_seed(1), dtype=q.dtype)
    (get_backend("reformer:bucket=8")(q, k, v) * weight).sum().backward()
    got = [q.grad.clone(), v.grad.clone()]
    q.grad = v.grad = None
    (dense_definition(q, v) * weight).sum().backward()
    assert torch.allclose(got[0], q.grad, atol=1e-8) and torch.allclose(got[1], v.grad, atol=1e-8)


def test_layout_rule():
    assert layout(4096, 64) == (4096, 64, 64)
    assert layout(100, 64) == (128, 2, 2)
    assert layout(10, 64) == (64, 1, 2)
    assert layout(15, 5) == (15, 3, 4)  # odd chunk count: one more bucket


@pytest.mark.parametrize("spec", ["reformer:bucket=0", "reformer:hashes=0", "reformer:seed=-1"])
def test_bad_parameters_exit_2_with_one_line(spec):
    result = CliRunner().invoke(cli.app, ["time", "--seq", "64", "--backends", spec])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "reformer" in lines[0]


def test_buckets_are_angular_lsh_of_the_rotations():
    """bucket = argmax([x R ; -x R]) under each head's and round's rotation R."""
    q, _, _ = qkv(b=2, n=40, d=6)
    backend = get_backend("reformer:bucket=4,hashes=3,seed=2")
    _, _, n_buckets = layout(40, 4)
    rot = backend.rotations(2, 6, n_buckets, q.device).double()
    codes = backend.buckets(q)
    for b in range(2):
        for h in range(2):
            for r in range(3):
                proj = q[b, h] @ rot[h, r]
                expected = torch.cat([proj, -proj], -1).argmax(-1)
                assert torch.equal(codes[b, h, r, :40], expected)
    assert (codes[..., 40:] == n_buckets).all()  # no padding here, but the shape holds
    masked = backend.buckets(q, torch.arange(40)[None].expand(2, 40) < 30)
    assert (masked[..., 30:] == n_buckets).all() and torch.equal(masked[..., :30], codes[..., :30])
