"""The yoso backend on the numba CPU kernels against the torch reference, end to end:
same codes, same outputs, edge-case shapes, masks, large tau and its memory guard."""

import pytest
import torch

from attnbench import get_backend
from attnbench.backends import yoso as yoso_backend
from attnbench.kernels.lsh import dispatch


def qkv(b=1, h=2, n=13, d=8, dv=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(b, h, n, d), (b, h, n, d), (b, h, n, dv or d)]
    return [torch.randn(s, generator=gen) for s in shapes]


SHAPES = [
    dict(n=1, d=8),
    dict(n=37, d=8),  # n not a power of two
    dict(n=16, d=1),
    dict(n=20, d=5, dv=3),  # d not a power of two, d_v != d
    dict(n=9, d=64, dv=70),  # d_v wider than a column block
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.parametrize("hash_", ["fast", "gaussian"])
def test_numba_matches_torch_reference(shape, hash_):
    q, k, v = qkv(**shape)
    spec = f"yoso:m=7,tau=4,seed=3,hash={hash_}"
    kernels, reference = get_backend(spec), get_backend(spec + ",impl=torch")
    for a, b in zip(kernels.codes(q, k), reference.codes(q, k), strict=True):
        assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))
    out = kernels(q, k, v)
    assert out.shape == (1, 2, shape["n"], shape.get("dv") or shape["d"])
    torch.testing.assert_close(out, reference(q, k, v), rtol=1e-5, atol=1e-6)


def test_backend_reports_its_kernel_target():
    assert get_backend("yoso").impl("cpu") == "numba-cpu"
    assert get_backend("yoso").impl("cuda:0") == "numba-cuda"
    assert get_backend("yoso:impl=torch").impl("cpu") == "torch"


def test_mask_matches_reference_and_zeroes_masked_rows():
    q, k, v = qkv(b=2, n=11)
    mask = torch.ones(2, 11, dtype=torch.bool)
    mask[0, 6:] = False
    mask[1] = False
    out = get_backend("yoso:m=5,tau=2")(q, k, v, mask)
    ref = get_backend("yoso:m=5,tau=2,impl=torch")(q, k, v, mask)
    assert torch.isfinite(out).all() and (out[1] == 0).all() and (out[0, :, 6:] == 0).all()
    assert (out[0, :, :6].norm(dim=-1) > 0.5).all()  # kept rows are unit vectors
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tau", [16, 20])
def test_large_tau_runs_and_matches_reference(tau):
    """Random keys almost never share a 16-bit code with a query, so every key here is a
    query scaled by 2 (the same codes) or nudged by a small angle (the same code in most
    hashes): every output row is a real sum of values, not a zero row."""
    q, _, v = qkv(b=1, h=1, n=24, d=6, dv=2)
    gen = torch.Generator().manual_seed(1)
    k = q.clone()
    k[..., ::2, :] *= 2.0
    k[..., 1::2, :] += 0.01 * torch.randn(1, 1, 12, 6, generator=gen)
    k = k[..., torch.randperm(24, generator=gen), :]
    spec = f"yoso:m=3,tau={tau},hash=gaussian"
    out = get_backend(spec)(q, k, v)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(1, 1, 24))
    torch.testing.assert_close(out, get_backend(spec + ",impl=torch")(q, k, v))


def test_tables_too_large_for_memory_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(yoso_backend, "available_bytes", lambda device: 1024)
    monkeypatch.setattr(dispatch, "SMALL_TABLES", 0)  # as if these tables were large
    q, k, v = qkv(n=64)
    with pytest.raises(dispatch.TableTooLarge, match=r"tau=6 needs .* GiB .*lower tau"):
        get_backend("yoso:m=4,tau=6")(q, k, v)


def test_tau_above_the_limit_is_refused_by_name():
    from attnbench.errors import UsageError

    with pytest.raises(UsageError, match="tau"):
        get_backend("yoso:tau=25")


def test_half_precision_inputs_run_in_fp32_and_come_back_in_their_dtype():
    q, k, v = (t.to(torch.bfloat16) for t in qkv())
    out = get_backend("yoso:m=4,tau=3")(q, k, v)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()
