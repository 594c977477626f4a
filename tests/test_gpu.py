"""The numba.cuda kernels on a real GPU (skipped without one; the simulator tests in
tests/cudasim cover the same kernels everywhere): YOSO against its torch reference, SCRAM
exact when its windows cover every key, PatchMatch finding the argmax on smooth images, and
the window softmax equal to the CPU kernel's for the same matches."""

import pytest
import torch

from attnbench import get_backend
from attnbench.inputs import grid_qkv
from attnbench.kernels.patchmatch import dispatch, reference
from attnbench.measure.metrics import argmax_hit_rate

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _qkv(shape_qk, dv, seed, device="cuda", dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    b, h, n, d = shape_qk
    q, k = (torch.randn(b, h, n, d, generator=gen) for _ in range(2))
    v = torch.randn(b, h, n, dv, generator=gen)
    return [t.to(device=device, dtype=dtype) for t in (q, k, v)]


@pytest.mark.parametrize("n,d,dv", [(1, 8, 8), (37, 8, 8), (20, 5, 3), (9, 64, 70)])
@pytest.mark.parametrize("hash_", ["fast", "gaussian"])
def test_yoso_cuda_kernels_match_torch_reference(n, d, dv, hash_):
    q, k, v = _qkv((1, 2, n, d), dv, seed=0)
    spec = f"yoso:m=7,tau=4,seed=3,hash={hash_}"
    kernels, torch_ref = get_backend(spec), get_backend(spec + ",impl=torch")
    assert kernels.impl("cuda") == "numba-cuda"
    for a, b in zip(kernels.codes(q, k), torch_ref.codes(q, k), strict=True):
        assert torch.equal(torch.as_tensor(a).cpu(), torch.as_tensor(b).cpu())
    out = kernels(q, k, v)
    assert out.is_cuda
    torch.testing.assert_close(out, torch_ref(q, k, v), rtol=1e-5, atol=1e-6)


def test_scram_cuda_covering_every_key_equals_dense_softmax():
    q, k, v = (t.cuda() for t in grid_qkv("blobs", 4, 5, d=3))
    out = get_backend("scram:kappa=20,b=0")(q, k, v, grid=(4, 5))
    assert out.is_cuda
    torch.testing.assert_close(out, get_backend("softmax")(q, k, v), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("source", ["blobs", "image:camera"])
def test_patchmatch_cuda_finds_the_argmax_on_smooth_images(source):
    q, k, _ = (t.cuda() for t in grid_qkv(source, 32, 32, d=3))
    found, scores = get_backend("scram:kappa=4,T=8").matches(q, k, (32, 32))
    assert found.is_cuda
    exact = reference.scores(q[:, 0].cpu(), k[:, 0].cpu())
    assert argmax_hit_rate(scores[..., 0].cpu(), exact.amax(-1)) >= 0.95
    listed = exact.gather(-1, found.cpu().long().clamp(min=0).reshape(exact.shape[:-1] + (-1,)))
    torch.testing.assert_close(
        scores.cpu().reshape(listed.shape).double(), listed, atol=1e-5, rtol=0
    )


def test_window_softmax_cuda_equals_cpu_for_the_same_matches():
    H, W = 13, 11
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, H * W, 3, generator=gen) for _ in range(3))
    matches, _ = dispatch.patchmatch(q, k, H, W, 3, T=2)
    matches[0, :5, 2] = -1  # lists with an empty slot
    out, counts = dispatch.window_softmax(q, k, v, matches, H, W, 1)
    gpu = [t.cuda() for t in (q, k, v, matches)]
    out_gpu, counts_gpu = dispatch.window_softmax(*gpu, H, W, 1)
    assert torch.equal(counts_gpu.cpu(), counts)
    torch.testing.assert_close(out_gpu.cpu(), out, rtol=1e-5, atol=1e-6)


# --- YOSO on a real GPU: what the simulator cannot show --------------------------------


def _grads(spec, leaves, grad_out, mask=None):
    tensors = [t.clone().requires_grad_(True) for t in leaves]
    out = get_backend(spec)(*tensors, mask)
    out.backward(grad_out)
    return out.detach(), [t.grad for t in tensors]


@pytest.mark.parametrize("backward", ["proj", "pairs", "star", "lsh"])
def test_yoso_cuda_backward_with_a_mask_matches_torch_reference(backward):
    """Forward and every linear backward through the backend on the GPU (normalisations,
    masks, device-drawn signs) equal impl=torch there, masked keys get zero gradients."""
    leaves = _qkv((2, 2, 300, 64), 32, seed=4)
    mask = torch.ones(2, 300, dtype=torch.bool, device="cuda")
    mask[1, 250:] = False
    grad_out = torch.randn(2, 2, 300, 32, device="cuda")
    spec = f"yoso:m=16,tau=6,seed=2,backward={backward}"
    out, grads = _grads(spec, leaves, grad_out, mask)
    ref_out, ref_grads = _grads(spec + ",impl=torch", leaves, grad_out, mask)
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
        assert (got[1, :, 250:] == 0).all()


@pytest.mark.parametrize("backward", ["proj", "pairs"])
def test_yoso_cuda_heavy_bucket_contention(backward):
    """tau = 1: every key lands in one of two buckets, so thousands of threads add into the
    same table cell at once; pairs with a bound of 64 samples those buckets."""
    leaves = _qkv((1, 2, 4096, 64), 64, seed=5)
    grad_out = torch.randn(1, 2, 4096, 64, device="cuda")
    spec = f"yoso:m=8,tau=1,seed=1,backward={backward},bound=64"
    out, grads = _grads(spec, leaves, grad_out)
    ref_out, ref_grads = _grads(spec + ",impl=torch", leaves, grad_out)
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)


def test_yoso_cuda_clustered_keys_share_one_bucket():
    """Near-identical keys all collide in every hash: each query's output is the mean of
    the values of the keys in its bucket, the torch reference's answer."""
    gen = torch.Generator().manual_seed(6)
    centre = torch.randn(64, generator=gen)
    k = (centre + 1e-4 * torch.randn(1, 1, 2048, 64, generator=gen)).cuda()
    q = (centre + 1e-4 * torch.randn(1, 1, 2048, 64, generator=gen)).cuda()
    v = torch.randn(1, 1, 2048, 16, generator=gen).cuda()
    spec = "yoso:m=32,tau=8,seed=0"
    backend = get_backend(spec)
    out = backend(q, k, v)
    q_codes, k_codes, _ = backend.codes(q, k)
    assert (k_codes == k_codes[:, :1]).float().mean() > 0.99
    torch.testing.assert_close(
        out, get_backend(spec + ",impl=torch")(q, k, v), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("n,heads", [(65536, 2), (262144, 8)])
def test_yoso_cuda_long_sequences(n, heads):
    """n = 64k and 256k: at 256k, 8 heads and m = 32 the scatter launches 2^32 threads, past
    a 32-bit thread index."""
    q, k, v = _qkv((1, heads, n, 64), 64, seed=7)
    spec = "yoso:m=32,tau=8,seed=1"
    out = get_backend(spec)(q, k, v)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(
        out, get_backend(spec + ",impl=torch")(q, k, v), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_yoso_cuda_half_inputs_compute_in_fp32(dtype):
    """Half inputs: the kernels see their fp32 upcast, so the output equals the reference
    on the upcast inputs to the half type's rounding, and comes back in the input's dtype."""
    q, k, v = _qkv((1, 2, 1000, 64), 64, seed=8, dtype=dtype)
    spec = "yoso:m=16,tau=8,seed=3"
    out = get_backend(spec)(q, k, v)
    assert out.dtype == dtype
    ref = get_backend(spec + ",impl=torch")(q.float(), k.float(), v.float())
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    get_backend(spec)(*leaves).float().sum().backward()
    assert all(t.grad.dtype == dtype and torch.isfinite(t.grad.float()).all() for t in leaves)


@pytest.mark.parametrize(("n", "d"), [(65536, 64), (8192, 100), (8192, 20)])
def test_fast_hash_codes_on_the_gpu_equal_the_cpu_kernels(n, d):
    """The fast hash multiplies only by +-1: GPU and CPU codes are identical, bit for bit
    (d_pad = 64, 128 and 32: one, two and half a butterfly per lane and stage)."""
    q, k, _ = _qkv((1, 4, n, d), 1, seed=9)
    backend = get_backend("yoso:m=32,tau=8,seed=4,hash=fast")
    for gpu, cpu in zip(backend.codes(q, k)[:2], backend.codes(q.cpu(), k.cpu())[:2], strict=True):
        assert torch.equal(gpu.cpu(), cpu)


def test_gaussian_hash_codes_on_the_gpu_differ_only_by_rare_fma_flips():
    """The GPU fuses the projection's multiply-adds, so a code whose dot product is within
    rounding of zero may flip: at most one code in 10^4 (4 x 64k rows x 32 hashes)."""
    q, k, _ = _qkv((1, 4, 65536, 64), 1, seed=10)
    backend = get_backend("yoso:m=32,tau=8,seed=4,hash=gaussian")
    gpu = torch.cat([c.cpu() for c in backend.codes(q, k)[:2]])
    cpu = torch.cat(backend.codes(q.cpu(), k.cpu())[:2])
    flipped = (gpu != cpu).sum().item()
    print(f"gaussian codes flipped on the GPU: {flipped} of {cpu.numel()}")
    assert flipped <= cpu.numel() // 10_000


@pytest.mark.parametrize("tau", [3, 8])
def test_every_lsh_cuda_kernel_matches_its_torch_oracle_on_the_gpu(tau):
    """Each dispatch call on CUDA tensors against reference.py run on the same GPU."""
    from attnbench.kernels.lsh import dispatch
    from attnbench.kernels.lsh import reference as ref

    gen = torch.Generator().manual_seed(tau)
    g, n_r, n_w, d, dv, m = 3, 700, 500, 64, 48, 12

    def rand(*shape):
        return torch.randn(*shape, generator=gen).cuda()

    rc = torch.randint(0, 2**tau, (g, n_r, m), generator=gen, dtype=torch.int32).cuda()
    wc = torch.randint(0, 2**tau, (g, n_w, m), generator=gen, dtype=torch.int32).cuda()
    x = rand(g, n_r, d)
    proj = ref.gaussian_projections(g, d, m, tau, seed=1).cuda()
    diags = ref.fast_diagonals(g, d, m, tau, seed=1).cuda()
    assert torch.equal(
        dispatch.hash_codes(x, diags, "fast", tau, m), ref.fast_codes(x, diags, tau, m)
    )
    gauss = dispatch.hash_codes(x, proj, "gaussian", tau, m)
    assert (gauss != ref.gaussian_codes(x, proj, tau)).float().mean() < 1e-3
    values, vectors = rand(g, n_w, dv), rand(g, n_w, d)
    close = dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(
        dispatch.cumulation(rc, wc, values, tau), ref.cumulation(rc, wc, values, tau), **close
    )
    weights, read_weights = rand(g, n_w, 5), rand(g, n_r, 5)
    torch.testing.assert_close(
        dispatch.weighted_cumulation(rc, wc, weights, vectors, read_weights, tau),
        ref.weighted_cumulation(rc, wc, weights, vectors, read_weights, tau),
        **close,
    )
    ws, rs = rand(g, n_w, m), rand(g, n_r, m)
    torch.testing.assert_close(
        dispatch.scaled_cumulation(rc, wc, vectors, ws, rs, tau),
        ref.scaled_cumulation(rc, wc, vectors, ws, rs, tau),
        **close,
    )
    ru, wu = (torch.nn.functional.normalize(rand(g, n, d), dim=-1) for n in (n_r, n_w))
    ra, wa = rand(g, n_r, dv), rand(g, n_w, dv)
    for weight in ("lower", "exact"):
        for bound in (4, 10**6):
            torch.testing.assert_close(
                dispatch.pair_cumulation(rc, wc, ru, wu, ra, wa, tau, weight, bound),
                ref.pair_cumulation(rc, wc, ru, wu, ra, wa, tau, weight, bound),
                **close,
            )
