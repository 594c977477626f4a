"""SCRAM's CPU kernels (PatchMatch, window softmax) against the brute-force torch oracle."""

import math

import numpy as np
import pytest
import torch
from numba import njit

from attnbench import get_backend
from attnbench.inputs import grid_qkv
from attnbench.kernels.patchmatch import core, reference
from attnbench.kernels.patchmatch.dispatch import patchmatch, window_softmax


def _random(B, n, d, dv=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, n, d, generator=g), torch.randn(B, n, d, generator=g)
    return q, k, torch.randn(B, n, dv or d, generator=g)


def _smooth(H, W, d=3, blobs=4, seed=0):
    """q, k [1, H*W, d] sampled from a smooth field: a few Gaussian blobs per channel."""
    g = torch.Generator().manual_seed(seed)
    ys, xs = torch.meshgrid(torch.arange(H) / H, torch.arange(W) / W, indexing="ij")

    def field():
        out = torch.zeros(H, W, d)
        for c in range(d):
            for _ in range(blobs):
                cy, cx, amp = torch.rand(3, generator=g)
                out[..., c] += (2 * amp - 1) * torch.exp(-((ys - cy) ** 2 + (xs - cx) ** 2) / 0.05)
        return 3 * out.reshape(1, H * W, d)

    return field(), field()


# --- window softmax ------------------------------------------------------------------


@pytest.mark.parametrize(
    "H, W, centres, b",
    [(3, 3, [4], 1), (5, 7, [17, 0], 3), (1, 9, [4], 4), (4, 4, [0, 3, 12, 15], 1)],
)
def test_exhaustive_windows_equal_dense_attention(H, W, centres, b):
    """kappa (2b+1)^2 windows that cover every key: the output is dense attention."""
    q, k, v = _random(2, H * W, 5, dv=3, seed=H * W)
    matches = torch.tensor(centres, dtype=torch.int32).expand(2, H * W, len(centres))
    out, counts = window_softmax(q, k, v, matches, H, W, b)
    assert (counts == H * W).all()
    torch.testing.assert_close(out.double(), reference.dense_attention(q, k, v), atol=1e-5, rtol=0)


@pytest.mark.parametrize("H, W", [(5, 7), (7, 5), (3, 3), (1, 11), (6, 4)])
@pytest.mark.parametrize("b", [0, 1, 2])
@pytest.mark.parametrize("kappa", [1, 3, 5])
def test_window_softmax_equals_reference(H, W, b, kappa):
    n = H * W
    q, k, v = _random(2, n, 4, dv=6, seed=n + b + kappa)
    g = torch.Generator().manual_seed(kappa)
    matches = torch.randint(0, n, (2, n, kappa), generator=g, dtype=torch.int32)
    matches[:, :, -1] = matches[:, :, 0]  # a repeated match: its window must count once
    matches[0, 0, 0] = 0  # corner: the window is clipped
    out, counts = window_softmax(q, k, v, matches, H, W, b)
    mask = reference.window_candidates(matches, H, W, b)
    expected = reference.sparse_softmax_reference(q, k, v, mask)
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0)
    assert torch.equal(counts.long(), mask.sum(-1))


def test_window_softmax_skips_missing_matches():
    q, k, v = _random(1, 12, 3)
    matches = torch.tensor([[[4, -1]] * 12], dtype=torch.int32)
    out, counts = window_softmax(q, k, v, matches, 3, 4, 1)
    mask = reference.window_candidates(matches, 3, 4, 1)
    assert torch.equal(counts.long(), mask.sum(-1))
    torch.testing.assert_close(
        out.double(), reference.sparse_softmax_reference(q, k, v, mask), atol=1e-5, rtol=0
    )


def test_window_softmax_is_stable_for_large_scores():
    q, k, v = _random(1, 16, 2)
    out, _ = window_softmax(300 * q, 300 * k, v, torch.zeros(1, 16, 1, dtype=torch.int32), 4, 4, 1)
    assert torch.isfinite(out).all()


@njit
def _exp_shifted(x, best):
    sc = x.reshape(1, -1).copy()
    bits = np.empty(sc.shape, np.int32)
    core.exp_shifted(sc, bits, bits.view(np.float32), 0, sc.shape[1], best)
    return sc[0]


@pytest.mark.parametrize("best", [0.0, 5.5])
def test_cpu_window_softmax_exp_is_within_a_few_ulps_of_exp(best):
    x = np.concatenate([np.linspace(-87, 0, 20001), [-1e-6, -87.5, -1e4]]).astype(np.float32)
    got = _exp_shifted(x + np.float32(best), np.float32(best))
    shifted = (x + np.float32(best)).astype(np.float64) - best  # the argument it was given
    want = np.exp(shifted)
    kept = shifted >= -87
    np.testing.assert_allclose(got[kept], want[kept], rtol=5e-7, atol=0)
    assert got[x == 0] == 1.0  # the best key weighs exactly 1
    assert ((got[~kept] > 0) & (got[~kept] < 2e-38)).all()


# --- PatchMatch ----------------------------------------------------------------------


def _hit_rate(q, k, matches):
    found = reference.scores(q, k).gather(-1, matches[..., :1].long()).squeeze(-1)
    return (found >= reference.scores(q, k).amax(-1) - 1e-5).double().mean().item()


def test_argmax_hit_rate_on_smooth_inputs():
    q, k = _smooth(32, 32)
    matches, scores = patchmatch(q, k, 32, 32, kappa=1, T=8, seed=1)
    assert _hit_rate(q, k, matches) >= 0.95
    expected = reference.scores(q, k).gather(-1, matches.long()).float()
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-5)


def _scores_at(q, k, matches):
    """q . k / sqrt(d) at the returned key indices, recomputed in float64 with plain torch
    (-inf where no key was returned)."""
    picked = k.double()[torch.arange(k.shape[0])[:, None, None], matches.long().clamp(min=0)]
    s = (q.double()[:, :, None, :] * picked).sum(-1) / math.sqrt(q.shape[-1])
    return s.masked_fill(matches < 0, -math.inf)


def _early_hit_rate(entry, kappa, T, **kwargs):
    """Mean over four seeds of the share of queries whose first match is their best key,
    on 32 x 32 blobs with every default but kappa, T and `kwargs`; the returned scores must
    be the recomputed scores of the returned keys, best first."""
    q, k, _ = grid_qkv("blobs", 32, 32, 8, seed=0)
    q, k = q[0], k[0]
    best = (q.double() @ k.double().transpose(1, 2)).amax(-1) / math.sqrt(8)
    rates = []
    for seed in range(4):
        if entry == "backend":
            spec = f"scram:kappa={kappa},T={T},seed={seed}"
            matches, scores = get_backend(spec).matches(q[None], k[None], (32, 32))
        else:
            matches, scores = patchmatch(q, k, 32, 32, kappa=kappa, T=T, seed=seed, **kwargs)
        recomputed = _scores_at(q, k, matches)
        torch.testing.assert_close(scores.double(), recomputed, atol=1e-5, rtol=1e-5)
        assert (recomputed[..., :-1] >= recomputed[..., 1:]).all()
        rates.append((recomputed[..., 0] >= best - 1e-5).double().mean().item())
    return sum(rates) / len(rates)


@pytest.mark.parametrize("entry", ["backend", "kernel"])
@pytest.mark.parametrize("kappa, T, least", [(1, 1, 0.6), (1, 2, 0.94), (4, 1, 0.93)])
def test_few_iterations_already_find_most_argmaxes(entry, kappa, T, least):
    """After one or two iterations the default jumps 8/4/2/1 have carried good matches
    across the grid: a schedule without its last step (8/4/2), or the kernel's last
    propagation pass lost, leaves far more queries without their best key."""
    assert _early_hit_rate(entry, kappa, T) >= least


def test_random_search_alone_finds_argmaxes():
    """Without propagation only the random search improves the random init, which hits
    almost no query's best key: after eight searches a good share of them must be found."""
    assert _early_hit_rate("kernel", 1, 8, jumps=()) >= 0.3


def test_max_variant_distinct_sorted_and_high_recall():
    q, k = _smooth(32, 32, seed=3)
    kappa = 4
    matches, scores = patchmatch(q, k, 32, 32, kappa=kappa, T=8, seed=2)
    m = matches[0].numpy()
    assert (m >= 0).all()
    assert all(len(set(row)) == kappa for row in m)
    assert (scores[..., :-1] >= scores[..., 1:]).all()
    true_idx, _ = reference.topk_max(q, k, kappa)
    recall = np.mean(
        [len(set(a) & set(b)) / kappa for a, b in zip(m, true_idx[0].numpy(), strict=True)]
    )
    print(f"recall@{kappa} = {recall:.3f}, hit rate = {_hit_rate(q, k, matches):.3f}")
    assert recall >= 0.9


@pytest.mark.parametrize("L", [1, 2, 4])
def test_mode_variant_keeps_separation(L):
    H, W = 12, 10
    q, k = _smooth(H, W, seed=5)
    matches, scores = patchmatch(q, k, H, W, kappa=4, variant="mode", L=L, T=4, seed=0)
    ys, xs = matches.long() // W, matches.long() % W
    valid = matches >= 0
    assert valid[..., 0].all()
    for e in range(4):
        for f in range(e + 1, 4):
            both = valid[..., e] & valid[..., f]
            dist = torch.maximum((ys[..., e] - ys[..., f]).abs(), (xs[..., e] - xs[..., f]).abs())
            assert (dist[both] >= L).all()
    assert (scores[..., :-1] >= scores[..., 1:]).all()  # -inf pads the missing modes
    if L == 1:
        same, _ = patchmatch(q, k, H, W, kappa=4, variant="max", T=4, seed=0)
        assert torch.equal(same, matches)


def test_mode_variant_finds_the_greedy_nms_modes():
    q, k = _smooth(16, 16, seed=7)
    matches, _ = patchmatch(q, k, 16, 16, kappa=2, variant="mode", L=3, T=8, seed=0)
    expected, _ = reference.topk_mode(q, k, 16, 16, 2, 3)
    agree = (matches.long()[..., 0] == expected[..., 0]).double().mean().item()
    assert agree >= 0.95


def test_same_seed_same_matches_other_seed_other_init():
    q, k, _ = _random(2, 30, 3)
    a = patchmatch(q, k, 5, 6, kappa=3, T=2, jumps=(2, 1), seed=11)
    b = patchmatch(q, k, 5, 6, kappa=3, T=2, jumps=(2, 1), seed=11)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    init_a, _ = patchmatch(q, k, 5, 6, kappa=3, T=0, seed=11)
    init_b, _ = patchmatch(q, k, 5, 6, kappa=3, T=0, seed=12)
    assert not torch.equal(init_a, init_b)


def test_odd_number_of_passes_returns_the_last_field():
    q, k, _ = _random(1, 20, 3)
    m, s = patchmatch(q, k, 4, 5, kappa=2, T=1, jumps=(1,), seed=0)
    expected = reference.scores(q, k).gather(-1, m.long()).float()
    torch.testing.assert_close(s, expected, atol=1e-5, rtol=1e-5)


def test_one_dimensional_sequence():
    q, k = _smooth(1, 64, seed=9)
    matches, _ = patchmatch(q, k, 1, 64, kappa=2, T=8, seed=0)
    assert _hit_rate(q, k, matches) >= 0.95
    _, v = _smooth(1, 64, seed=10)
    out, counts = window_softmax(q, k, v, matches, 1, 64, 2)
    mask = reference.window_candidates(matches, 1, 64, 2)
    assert torch.equal(counts.long(), mask.sum(-1))
    assert (counts <= 10).all()
    torch.testing.assert_close(
        out.double(), reference.sparse_softmax_reference(q, k, v, mask), atol=1e-5, rtol=0
    )


def test_rng_is_deterministic_and_spread():
    key = core.rng_key(5, 0, 3, 0)
    draws = [core.rand_below(key, i, 10) for i in range(2000)]
    assert draws == [core.rand_below(key, i, 10) for i in range(2000)]
    counts = np.bincount(draws, minlength=10)
    assert counts.min() > 150 and counts.max() < 250
    assert core.mix32(2**32 + 7) == core.mix32(7)
    assert core.mul32(0xFFFFFFFF, 0xFFFFFFFF) == (0xFFFFFFFF * 0xFFFFFFFF) % 2**32


def test_rand_pair_covers_the_window_uniformly():
    key = core.rng_key(5, 0, 3, 1)
    pairs = [core.rand_pair(key, i, 3, 4) for i in range(6000)]
    assert pairs == [core.rand_pair(key, i, 3, 4) for i in range(6000)]
    cells = np.bincount([a * 4 + b for a, b in pairs], minlength=12)
    assert len(cells) == 12 and cells.min() > 400 and cells.max() < 600  # 500 expected


@pytest.mark.parametrize("H, W, T, jumps", [(16, 16, 8, (8, 4, 2, 1)), (7, 13, 5, (4, 1, 1))])
@pytest.mark.parametrize("inputs", ["random", "smooth"])
def test_skipping_unchanged_neighbours_changes_nothing(H, W, T, jumps, inputs):
    """The max variant skips neighbours whose lists did not change since they were last
    tried: the matches must equal those of a run that retries every neighbour."""
    from attnbench.kernels.patchmatch import cpu

    q, k = _random(2, H * W, 3)[:2] if inputs == "random" else _smooth(H, W)
    q, k = q.numpy(), k.numpy()
    runs = []
    for prune in (True, False):
        out = [np.empty((q.shape[0], H * W, 3), dt) for dt in (np.int32, np.float32) * 2]
        changed = np.zeros((2, q.shape[0] * H * W), np.int32)
        cpu.patchmatch(q, k, H, W, 3, "max", 1, T, jumps, 4, *out, changed, prune=prune)
        runs.append(out[0].copy())
    assert np.array_equal(runs[0], runs[1])


@pytest.mark.parametrize("jumps", [(4, 2, 1), (4, 1)])
def test_marking_every_pass_changes_nothing(jumps):
    """The stage marker is entered around each pass in order (init, then per iteration a
    propagation pass per jump and a random search; an odd number of propagation passes
    ends with their copy back), and a marked run's matches, scores and pass stamps are an
    unmarked run's, whose passes run in one compiled call."""
    from contextlib import nullcontext

    from attnbench.kernels.patchmatch import cpu

    H, W, T = 9, 11, 3
    q, k = (t.numpy() for t in _random(2, H * W, 3, seed=5)[:2])
    marked = []

    def stage(name):
        marked.append(name)
        return nullcontext()

    runs = []
    for mark in (None, stage):
        out = [np.empty((2, H * W, 4), dt) for dt in (np.int32, np.float32) * 2]
        changed = np.zeros((2, 2 * H * W), np.int32)
        cpu.patchmatch(q, k, H, W, 4, "max", 1, T, jumps, 7, *out, changed, stage=mark)
        runs.append((out[0].copy(), out[1].copy(), changed.copy()))
    assert all(np.array_equal(a, b) for a, b in zip(*runs, strict=True))
    odd = ["propagation"] if T * len(jumps) % 2 else []
    iteration = ["propagation"] * len(jumps) + ["random_search"]
    assert marked == ["init", *iteration * T, *odd]
    assert set(marked) <= set(cpu.STAGES)


@njit
def _per_query_random_search(q, k, kappa, mode, L, H, W, T, scale, seed, ids, sc, valid, masked):
    """Init and T random searches one query at a time, with the per-query steps the CUDA
    kernels run: the CPU kernel's blocked random search must give the same lists."""
    B, n = q.shape[0], q.shape[1]
    for unit in range(B * n):
        b, p = unit // n, unit % n
        core.init_query(ids, sc, unit, q, k, b, p, kappa, mode, L, W, scale, seed, valid, masked)
        for t in range(T):
            core.random_search_query(
                ids, sc, unit, q, k, b, p, kappa, mode, L, H, W, scale, seed, t, valid, masked
            )


@pytest.mark.parametrize("variant, L", [("max", 1), ("mode", 3)])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("d", [3, 5])
def test_blocked_random_search_equals_per_query(variant, L, masked, d):
    """9 x 15 = 135 queries per batch entry: two full search blocks and a partial one."""
    from attnbench.kernels.patchmatch import cpu

    H, W, B, kappa, T, seed = 9, 15, 2, 3, 3, 11
    assert H * W > 2 * cpu.SEARCH_BLOCK and H * W % cpu.SEARCH_BLOCK
    q, k = (t.numpy() for t in _random(B, H * W, d, seed=2)[:2])
    valid = None
    if masked:
        valid = (np.random.default_rng(0).random((B, H * W)) < 0.7).astype(np.uint8)
    blocked = [np.empty((B, H * W, kappa), dt) for dt in (np.int32, np.float32) * 2]
    changed = np.zeros((2, B * H * W), np.int32)
    cpu.patchmatch(q, k, H, W, kappa, variant, L, T, (), seed, *blocked, changed, valid)
    ids = np.empty((B * H * W, kappa), np.int32)
    sc = np.empty((B * H * W, kappa), np.float32)
    scale = np.float32(1.0 / np.sqrt(d))
    flags, is_masked = core.key_validity(valid, q)
    _per_query_random_search(
        q, k, kappa, variant == "mode", L, H, W, T, scale, seed, ids, sc, flags, is_masked
    )
    assert np.array_equal(blocked[0].reshape(-1, kappa), ids)
    assert np.array_equal(blocked[1].reshape(-1, kappa), sc)
    assert (changed[0] == core.pass_number(T - 1, 0, 0)).any()  # the searches did change lists


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"kappa": core.MAX_KAPPA + 1}, "kappa"),
        ({"kappa": 0}, "kappa"),
        ({"variant": "mean"}, "variant"),
        ({"L": 0}, "L >= 1"),
        ({"jumps": (2, 0)}, "jumps"),
        ({"H": 5}, "H\\*W"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    q, k, _ = _random(1, 64, 3)
    args = {"H": 8, "W": 8, "kappa": 2} | kwargs
    with pytest.raises(ValueError, match=match):
        patchmatch(q, k, **args)


def test_bad_shapes_raise():
    q, k, v = _random(1, 12, 3)
    with pytest.raises(ValueError):
        patchmatch(q[0], k[0], 3, 4, kappa=1)
    with pytest.raises(ValueError):
        patchmatch(q, k[:, :6], 3, 4, kappa=1)
    matches = torch.zeros(1, 12, 1, dtype=torch.int32)
    with pytest.raises(ValueError):
        window_softmax(q, k, v[:, :6], matches, 3, 4, 1)
    with pytest.raises(ValueError):
        window_softmax(q, k, v, matches + 12, 3, 4, 1)
    with pytest.raises(ValueError):
        window_softmax(q, k, v, matches, 3, 4, -1)
    with pytest.raises(ValueError, match="kappa"):  # longer than a CUDA thread's scratch
        window_softmax(q, k, v, matches.expand(1, 12, core.MAX_KAPPA + 1), 3, 4, 1)
    assert math.isfinite(float(window_softmax(q, k, v, matches, 3, 4, 0)[0].sum()))
