"""YOSO-C: YOSO-m plus a depthwise convolution of V, checked against plain torch parts."""

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

import attnbench.cli.core as cli
from attnbench import get_backend
from attnbench.backends.yoso_c import conv_weights
from attnbench.errors import UsageError


def qkv(b=2, h=3, n=37, d=8, seed=0, grad=False):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=gen) for _ in range(3))
    return tuple(t.requires_grad_(grad) for t in (q, k, v))


def plain_conv(v, weight):
    """Head h's kernel over the token axis of each feature column, one column at a time,
    with torch's conv1d and symmetric zero padding (odd widths)."""
    b, h, n, dv = v.shape
    width = weight.shape[-1]
    out = torch.zeros_like(v)
    for i in range(b):
        for head in range(h):
            for col in range(dv):
                x = v[i, head, :, col].view(1, 1, n)
                kernel = weight[head].to(v.dtype).view(1, 1, width)
                out[i, head, :, col] = F.conv1d(x, kernel, padding=width // 2).view(n)
    return out


@pytest.mark.parametrize("width", [1, 3, 33])
@pytest.mark.parametrize("impl", ["numba", "torch"])
def test_yoso_c_is_yoso_plus_the_convolution(width, impl):
    q, k, v = qkv()
    opts = f"resample=fixed,seed=5,impl={impl}"
    yoso_c = get_backend(f"yoso-c-16:{opts},conv={width}")
    yoso = get_backend(f"yoso-16:{opts}")
    weight = conv_weights(3, width, 5).float()
    expected = yoso(q, k, v) + plain_conv(v, weight)
    torch.testing.assert_close(yoso_c(q, k, v), expected)


def test_same_draws_call_by_call_with_resampling():
    q, k, v = qkv()
    yoso_c, yoso = get_backend("yoso-c:m=8,conv=5"), get_backend("yoso:m=8")
    weight = conv_weights(3, 5, 0).float()
    for _ in range(3):  # resample=call: both advance through the same draws
        torch.testing.assert_close(yoso_c(q, k, v), yoso(q, k, v) + plain_conv(v, weight))


def test_masks_zero_values_before_the_convolution_and_rows_after():
    q, k, v = qkv(n=20)
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[0, [0, 5, 6, 19]] = False
    mask[1] = False
    yoso_c = get_backend("yoso-c-8:resample=fixed,conv=5")
    yoso = get_backend("yoso-8:resample=fixed")
    out = yoso_c(q, k, v, mask)
    conv = plain_conv(v * mask[:, None, :, None], conv_weights(3, 5, 0).float())
    expected = (yoso(q, k, v, mask) + conv) * mask[:, None, :, None]
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, expected)
    assert torch.all(out.transpose(1, 2)[~mask] == 0)


def test_gradient_to_v_carries_the_convolution():
    q, k, v = qkv(n=24, grad=True)
    yoso_c = get_backend("yoso-c-8:resample=fixed,conv=3,impl=torch")
    yoso = get_backend("yoso-8:resample=fixed,impl=torch")
    upstream = torch.randn(2, 3, 24, 8)
    got = torch.autograd.grad((yoso_c(q, k, v) * upstream).sum(), (q, k, v))
    ref = yoso(q, k, v) + plain_conv(v, conv_weights(3, 3, 0).float())
    want = torch.autograd.grad((ref * upstream).sum(), (q, k, v))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


def test_weights_are_seeded_and_yoso_is_unchanged():
    assert torch.equal(conv_weights(4, 33, 1), conv_weights(4, 33, 1))
    assert not torch.equal(conv_weights(4, 33, 1), conv_weights(4, 33, 2))
    assert conv_weights(4, 33, 0).abs().max() <= 1 / 33**0.5
    backend = get_backend("yoso-c")
    assert backend.values["conv"] == 33 and backend.values["m"] == 32
    assert backend.spec.startswith("yoso-c:m=32,") and backend.spec.endswith(",conv=33")
    assert get_backend("yoso-c-16").values["m"] == 16
    assert "conv" not in get_backend("yoso").values
    assert backend.predicted_bytes(1, 4, 4096, 64, 4) > get_backend("yoso").predicted_bytes(
        1, 4, 4096, 64, 4
    )


@pytest.mark.parametrize("spec", ["yoso-c:conv=0", "yoso-c:m=0"])
def test_bad_parameters(spec):
    with pytest.raises(UsageError):
        get_backend(spec)
    result = CliRunner().invoke(cli.app, ["time", "--seq", "64", "--backends", spec])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
