"""SCRAM's CUDA kernels, run by the simulator, agree with the CPU kernels: PatchMatch bit
for bit for the same seed (shared `core` math and counter-based RNG), the window softmax to
1e-5. Both share `core`, so the simulated results are also checked against brute force in
torch: scores recomputed from the returned indices, bounds by the true top-kappa, the
argmax found on coherent inputs, the window softmax against the dense masked softmax.
Grids stay tiny (one OS thread per CUDA thread) with odd sizes that are not multiples of
the block size; outputs start as garbage, proving the kernels overwrite them.
"""

import math

import numpy as np
import pytest
import torch

from attnbench.inputs import grid_qkv
from attnbench.kernels.patchmatch import cpu, reference
from attnbench.kernels.patchmatch import cuda as pm_cuda


def _inputs(B, n, d, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, n, d, generator=g).numpy() for _ in range(3)]


def _run(module, q, k, H, W, kappa, variant, L, T, jumps, seed, valid=None):
    B, n = q.shape[:2]
    fields = [np.full((B, n, kappa), -7, np.int32), np.full((B, n, kappa), np.nan, np.float32)]
    fields += [np.full((B, n, kappa), -7, np.int32), np.full((B, n, kappa), np.nan, np.float32)]
    changed = np.zeros((2, B * n), np.int32)
    module.patchmatch(q, k, H, W, kappa, variant, L, T, jumps, seed, *fields, changed, valid)
    return fields[0], fields[1]


def _valid(B, n, seed):
    """A key mask as the kernels take it: uint8 [B, n], about a third of the keys 0."""
    return (np.random.default_rng(seed).random((B, n)) > 0.33).astype(np.uint8)


def _brute_force_checks(q, k, ids, scores, variant, L, W, valid=None):
    """What any correct PatchMatch result satisfies, from dense torch scores: each returned
    score is q . k / sqrt(d) of the returned key, -inf for a missing one; lists are sorted,
    of distinct allowed keys (mode: at least L apart); the e-th entry scores at most the
    e-th best allowed key. Returns the dense scores."""
    q, k = torch.from_numpy(q).double(), torch.from_numpy(k).double()
    ids, scores = torch.from_numpy(ids).long(), torch.from_numpy(scores).double()
    dense = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if valid is not None:
        dense = dense.masked_fill(~torch.from_numpy(valid).bool()[:, None, :], -math.inf)
    listed = ids >= 0
    assert listed[..., 0].all() or valid is not None  # the init may draw only masked keys
    at = dense.gather(-1, ids.clamp(min=0))
    torch.testing.assert_close(scores[listed], at[listed], atol=1e-5, rtol=1e-5)
    assert (scores[~listed] == -math.inf).all()
    assert (scores[..., :-1] >= scores[..., 1:]).all()
    kappa = ids.shape[-1]
    for e in range(kappa):
        for f in range(e + 1, kappa):
            both = listed[..., e] & listed[..., f]
            if variant == "max":
                assert (ids[..., e] != ids[..., f])[both].all()
            else:
                dy = (ids[..., e] // W - ids[..., f] // W).abs()
                dx = (ids[..., e] % W - ids[..., f] % W).abs()
                assert (torch.maximum(dy, dx) >= L)[both].all()
    best = dense.topk(kappa, dim=-1).values
    assert (scores[listed] <= best[listed] + 1e-5).all()
    return dense


def test_small_blocks_under_the_simulator():
    assert pm_cuda.THREADS_PER_BLOCK == pm_cuda.SIM_THREADS_PER_BLOCK


@pytest.mark.parametrize(
    "B, H, W, kappa, variant, L, T, jumps",
    [
        (1, 5, 6, 3, "max", 1, 2, (2, 1)),
        (2, 1, 9, 2, "max", 1, 1, (2, 1)),
        (1, 4, 4, 3, "mode", 2, 2, (2, 1)),
        (1, 3, 5, 1, "max", 1, 1, (1,)),  # odd number of passes: result in the 2nd buffer
        (1, 5, 7, 2, "mode", 1, 0, ()),  # init only
        (2, 7, 9, 4, "mode", 3, 2, (4, 2, 1)),  # many NMS drops
        (1, 6, 7, 2, "max", 1, 3, (2, 1)),  # later iterations skip unchanged neighbours
    ],
)
@pytest.mark.parametrize("masked", [False, True])
def test_patchmatch_identical_to_cpu(B, H, W, kappa, variant, L, T, jumps, masked):
    q, k, _ = _inputs(B, H * W, 3, seed=H * W + kappa)
    valid = _valid(B, H * W, seed=kappa) if masked else None
    args = (q, k, H, W, kappa, variant, L, T, jumps, 5, valid)
    sim_ids, sim_sc = _run(pm_cuda, *args)
    cpu_ids, cpu_sc = _run(cpu, *args)
    _brute_force_checks(q, k, sim_ids, sim_sc, variant, L, W, valid)
    np.testing.assert_array_equal(sim_ids, cpu_ids)
    np.testing.assert_array_equal(sim_sc, cpu_sc)


@pytest.mark.parametrize("kappa, least", [(1, 0.78), (2, 0.93)])
def test_patchmatch_finds_the_argmax_on_blobs(kappa, least):
    """On two smooth 16 x 16 fields one iteration of jumps 8/4/2/1 finds most queries' best
    key (brute force, mean over four seeds); a propagation direction or the coherent shift
    lost finds far fewer."""
    H, W = 16, 16
    fields = [grid_qkv("blobs", H, W, 3, seed=seed) for seed in (0, 1)]
    q = torch.cat([f[0][0] for f in fields]).numpy()
    k = torch.cat([f[1][0] for f in fields]).numpy()
    hit_rates = []
    for seed in range(4):
        ids, sc = _run(pm_cuda, q, k, H, W, kappa, "max", 1, 1, (8, 4, 2, 1), seed)
        dense = _brute_force_checks(q, k, ids, sc, "max", 1, W)
        found = torch.from_numpy(sc[..., 0]).double() >= dense.amax(-1) - 1e-5
        hit_rates.append(found.double().mean().item())
    assert sum(hit_rates) / len(hit_rates) >= least


def test_bad_kappa_raises():
    q, k, _ = _inputs(1, 12, 3, seed=0)
    with pytest.raises(ValueError, match="kappa"):
        _run(pm_cuda, q, k, 3, 4, 40, "max", 1, 1, (1,), 0)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("H, W, kappa, b", [(5, 6, 2, 1), (1, 9, 2, 2), (4, 4, 3, 0)])
def test_window_softmax_matches_cpu(H, W, kappa, b, masked):
    n = H * W
    q, k, v = _inputs(2, n, 4, seed=n + b)
    matches = np.random.default_rng(b).integers(0, n, (2, n, kappa)).astype(np.int32)
    matches[0, 0, -1] = -1  # a missing match is skipped
    valid = _valid(2, n, seed=b) if masked else None
    outs, counts = [], []
    for module in (pm_cuda, cpu):
        out = np.full((2, n, 4), np.nan, np.float32)
        count = np.full((2, n), -7, np.int32)
        module.window_softmax(q, k, v, matches, H, W, b, out, count, valid)
        outs.append(out)
        counts.append(count)
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-5, rtol=0)
    np.testing.assert_array_equal(counts[0], counts[1])
    mask = reference.window_candidates(torch.from_numpy(matches), H, W, b)
    if masked:
        mask &= torch.from_numpy(valid).bool()[:, None, :]
    expected = reference.sparse_softmax_reference(*map(torch.from_numpy, (q, k, v)), mask)
    np.testing.assert_allclose(outs[0], expected.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(counts[0], mask.sum(-1).numpy())


def test_dispatch_uses_the_simulated_kernels():
    from attnbench.kernels.patchmatch import dispatch
    from attnbench.kernels.target import kernel_target

    q, k, v = (torch.from_numpy(a) for a in _inputs(1, 20, 3, seed=3))
    assert kernel_target(q) == "cuda-sim"
    matches, scores = dispatch.patchmatch(q, k, 4, 5, kappa=2, T=1, jumps=(1,), seed=4)
    cpu_ids, cpu_sc = _run(cpu, q.numpy(), k.numpy(), 4, 5, 2, "max", 1, 1, (1,), 4)
    np.testing.assert_array_equal(matches.numpy(), cpu_ids)
    np.testing.assert_array_equal(scores.numpy(), cpu_sc)
    _brute_force_checks(q.numpy(), k.numpy(), matches.numpy(), scores.numpy(), "max", 1, 5)
    out, counts = dispatch.window_softmax(q, k, v, matches, 4, 5, 1)
    mask = reference.window_candidates(matches, 4, 5, 1)
    assert torch.equal(counts.long(), mask.sum(-1))
    expected = reference.sparse_softmax_reference(q, k, v, mask)
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0)
