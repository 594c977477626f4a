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


def random_qkv(n, d, dv, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(1, 2, n, d), (1, 2, n, d), (1, 2, n, dv)]
    return [torch.randn(s, generator=gen).cuda() for s in shapes]


@pytest.mark.parametrize("n,d,dv", [(1, 8, 8), (37, 8, 8), (20, 5, 3), (9, 64, 70)])
@pytest.mark.parametrize("hash_", ["fast", "gaussian"])
def test_yoso_cuda_kernels_match_torch_reference(n, d, dv, hash_):
    q, k, v = random_qkv(n, d, dv)
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
