"""Longformer (sliding window + global tokens) against a plainly written dense reference."""

import math

import pytest
import torch
from references import masked_softmax_attention
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench import get_backend
from attnbench.errors import UsageError


def qkv(b=2, h=2, n=17, d=6, dv=3, seed=0, dtype=torch.float64, grad=False):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, n, d, generator=gen, dtype=dtype) for _ in range(2))
    v = torch.randn(b, h, n, dv, generator=gen, dtype=dtype)
    return tuple(t.requires_grad_(grad) for t in (q, k, v))


def allowed_pairs(n, window, n_global):
    """The pattern pair by pair: |i - j| <= window // 2, or i or j among the first g."""
    allowed = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(n):
            allowed[i, j] = abs(i - j) <= window // 2 or i < n_global or j < n_global
    return allowed


dense_reference = masked_softmax_attention


def softmax_attention(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1) @ v


@pytest.mark.parametrize("n", [1, 7, 16, 33])
def test_window_at_least_2n_is_softmax(n):
    q, k, v = qkv(n=n)
    for window in (2 * n, 2 * n + 1, 512):
        out = get_backend(f"longformer:window={window}")(q, k, v)
        torch.testing.assert_close(out, softmax_attention(q, k, v))


@pytest.mark.parametrize("n", [5, 16, 17, 31])  # 17, 31: not a multiple of the chunk
@pytest.mark.parametrize("window", [1, 2, 3, 4, 7, 8, 12])
@pytest.mark.parametrize("n_global", [0, 1, 3])
def test_band_and_globals_equal_dense_reference(n, window, n_global):
    q, k, v = qkv(n=n, seed=n + window)
    backend = get_backend(f"longformer:window={window},global={n_global}")
    expected = dense_reference(q, k, v, allowed_pairs(n, window, n_global))
    torch.testing.assert_close(backend(q, k, v), expected)
    weights = backend.attention_map(q, k)
    torch.testing.assert_close(weights @ v, expected)
    assert torch.all(weights[..., ~allowed_pairs(n, window, n_global)] == 0)


@pytest.mark.parametrize("spec", ["longformer:window=4", "longformer:window=6,global=2"])
def test_masks_follow_the_shared_rule(spec):
    n = 19
    q, k, v = qkv(n=n)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[0, [0, 3, 4, 5, 11]] = False
    mask[1] = False  # every key masked: zeros, not NaN
    backend = get_backend(spec)
    values = backend.values
    expected = dense_reference(q, k, v, allowed_pairs(n, values["window"], values["global"]), mask)
    out = backend(q, k, v, mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, expected)
    assert torch.all(out.transpose(1, 2)[~mask] == 0)


@pytest.mark.parametrize("spec", ["longformer:window=5", "longformer:window=4,global=2"])
def test_gradients_equal_autograd_of_dense_reference(spec):
    n = 23
    q, k, v = qkv(n=n, grad=True)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, [1, 2, 20]] = False
    backend = get_backend(spec)
    pattern = allowed_pairs(n, backend.values["window"], backend.values["global"])
    upstream = torch.randn(2, 2, n, 3, dtype=torch.float64)
    got = torch.autograd.grad((backend(q, k, v, mask) * upstream).sum(), (q, k, v))
    ref = dense_reference(q, k, v, pattern, mask)
    want = torch.autograd.grad((ref * upstream).sum(), (q, k, v))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


def test_float32_matches_and_gradients_are_finite_with_masks():
    q, k, v = qkv(n=40, dtype=torch.float32, grad=True)
    mask = torch.ones(2, 40, dtype=torch.bool)
    mask[1] = False
    out = get_backend("longformer:window=8,global=2")(q, k, v, mask)
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_map_blocks_are_rows_of_the_whole_map():
    q, k, _ = qkv(n=21)
    backend = get_backend("longformer:window=6,global=1")
    whole = backend.attention_map(q, k)
    for rows, weights in backend.map_blocks(q, k, [slice(0, 5), slice(5, 21)]):
        torch.testing.assert_close(weights, whole[..., rows, :])


def test_spec_defaults_and_cost_prediction():
    backend = get_backend("longformer")
    assert backend.spec == "longformer:window=512,global=0"
    assert get_backend("longformer-256").values["window"] == 256
    assert backend.backward and backend.predicted_bytes(1, 4, 4096, 64, 4) > 0
    # banded: memory grows linearly in n at a fixed window
    small, large = (backend.predicted_bytes(1, 4, n, 64, 4) for n in (8192, 16384))
    assert large <= 2.01 * small


@pytest.mark.parametrize("spec", ["longformer:window=0", "longformer:global=-1"])
def test_bad_parameters_are_usage_errors(spec):
    with pytest.raises(UsageError):
        get_backend(spec)


@pytest.mark.parametrize("spec", ["longformer:window=0", "longformer:global=-1"])
def test_bad_parameters_exit_2_through_the_cli(spec):
    result = CliRunner().invoke(cli.app, ["time", "--seq", "64", "--backends", spec])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
