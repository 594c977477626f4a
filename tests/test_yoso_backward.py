"""YOSO's linear-in-d backwards (proj, pairs, star): each against a dense pairwise formula
written from its definition with the same codes (and signs), and the stochastic ones
against YOSO-E's gradients in expectation over seeded draws."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnbench import get_backend
from attnbench.backends.yoso_e import collision_probability
from attnbench.kernels.lsh import dispatch
from attnbench.kernels.lsh import reference as ref
from attnbench.kernels.lsh.autograd import Gradient, LSHCumulation, NormalisedLSH
from attnbench.kernels.lsh.core import STAR_CLIP

OPS = {"torch": ref, "numba": dispatch.Kernels()}


def unit(*shape, gen):
    return F.normalize(torch.randn(*shape, generator=gen, dtype=torch.float64), dim=-1)


def star(x, tau):
    """eq. (3)'s derivative over the collision probability, cosine clamped."""
    x = x.clamp(-STAR_CLIP, STAR_CLIP)
    return tau / ((math.pi - torch.arccos(x)) * torch.sqrt(1 - x * x))


def codes(shape, tau, gen, spread=None):
    return torch.randint(spread or 2**tau, shape, generator=gen, dtype=torch.int32)


def formula(kind, q, k, v, dy, qc, kc, tau, signs=None):
    """dQ, dK pair by pair, in float64, from the backward's definition (no bound)."""
    g, n_q, m = qc.shape
    n_k = kc.shape[1]
    dq, dk = torch.zeros_like(q), torch.zeros_like(k)
    for b in range(g):
        for i in range(n_q):
            for j in range(n_k):
                for f in range(m):
                    if qc[b, i, f] != kc[b, j, f]:
                        continue
                    if kind == "proj":
                        s = signs[b, :, f].double()
                        w = tau / 2 * (dy[b, i] @ s) * (v[b, j] @ s)
                    elif kind == "pairs":
                        w = tau / 2 * (dy[b, i] @ v[b, j])
                    else:
                        w = star(q[b, i] @ k[b, j], tau) * (dy[b, i] @ v[b, j])
                    dq[b, i] += w / m * k[b, j]
                    dk[b, j] += w / m * q[b, i]
    return dq, dk


@pytest.mark.parametrize("impl", sorted(OPS))
@pytest.mark.parametrize("kind", ["proj", "pairs", "star"])
@pytest.mark.parametrize("tau", [1, 3, 24])
def test_backward_equals_its_pairwise_formula(impl, kind, tau):
    """Same codes (and signs): dQ, dK equal the formula; dV is C^T dY. tau = 24 has far
    more buckets than rows (the CPU kernels then sort by code instead of filling tables)."""
    gen = torch.Generator().manual_seed(tau)
    g, n_q, n_k, d, dv, m = 2, 7, 9, 4, 3, 5
    q, k = unit(g, n_q, d, gen=gen), unit(g, n_k, d, gen=gen)
    v, dy = (torch.randn(g, n, dv, generator=gen, dtype=torch.float64) for n in (n_k, n_q))
    qc, kc = (codes((g, n, m), tau, gen, spread=min(4, 2**tau)) for n in (n_q, n_k))
    signs = (2 * torch.randint(0, 2, (g, dv, m), generator=gen) - 1).float()
    leaves = [t.float().requires_grad_(True) for t in (q, k, v)]
    how = Gradient(kind, bound=10**6, signs=lambda: signs)
    y = LSHCumulation.apply(*leaves, qc, kc, tau, OPS[impl], how)
    y.backward(dy.float())
    want_q, want_k = formula(kind, q, k, v, dy, qc, kc, tau, signs)
    want_v = ref.collision_frequency(qc, kc).double().transpose(1, 2) @ dy
    for got, want in zip(leaves, (want_q, want_k, want_v), strict=True):
        assert torch.allclose(got.grad.double(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("impl", sorted(OPS))
@pytest.mark.parametrize("kind", ["pairs", "star"])
def test_a_bound_subsamples_large_buckets_and_keeps_their_weight(impl, kind):
    """All rows in one bucket: bound = 2 takes every ceil(s/2)-th row (offset by row and
    hash) and scales it by s / taken, as core.bound_stride says; with bound >= s nothing
    changes. The kernels equal the reference in both cases."""
    gen = torch.Generator().manual_seed(5)
    g, n, d, m, tau = 1, 7, 4, 3, 2
    q, k = (unit(g, n, d, gen=gen).float() for _ in range(2))
    v, dy = (torch.randn(g, n, d, generator=gen) for _ in range(2))
    same = torch.zeros(g, n, m, dtype=torch.int32)
    weight = "lower" if kind == "pairs" else "exact"
    full = ref.pair_cumulation(same, same, q, k, dy, v, tau, weight, n)
    thinned = ref.pair_cumulation(same, same, q, k, dy, v, tau, weight, 2)
    for bound, want in ((n, full), (2, thinned)):
        got = OPS[impl].pair_cumulation(same, same, q, k, dy, v, tau, weight, bound)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
    # Row 0, hash 0: stride ceil(7/2) = 4, offset 0: rows 0 and 4, each scaled by 7/2.
    x = q[0, 0] @ k[0].T
    phi = torch.full_like(x, tau / 2) if kind == "pairs" else star(x.double(), tau).float()
    base = phi * (dy[0, 0] @ v[0].T)
    hash0 = 3.5 * (base[0] * k[0, 0] + base[4] * k[0, 4])
    hash1 = 3.5 * (base[1] * k[0, 1] + base[5] * k[0, 5])  # offset (0 + 1) % 4 = 1
    hash2 = 3.5 * (base[2] * k[0, 2] + base[6] * k[0, 6])
    assert torch.allclose(thinned[0, 0], (hash0 + hash1 + hash2) / m, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(thinned, full)


@pytest.mark.parametrize("kind", ["proj", "pairs", "star"])
def test_backend_backward_with_a_mask_equals_the_reference_impl(kind):
    """Through the backend (normalisations, masks): numba kernels equal impl=torch, masked
    tokens get zero gradients, and everything is finite."""
    gen = torch.Generator().manual_seed(8)
    leaves = [torch.randn(2, 2, 11, 8, generator=gen) for _ in range(3)]
    mask = torch.ones(2, 11, dtype=torch.bool)
    mask[0, 7:] = False
    grad_out = torch.randn(2, 2, 11, 8, generator=gen)
    got = {}
    for impl in OPS:
        tensors = [t.clone().requires_grad_(True) for t in leaves]
        backend = get_backend(f"yoso:m=6,tau=3,hash=gaussian,impl={impl},backward={kind}")
        backend(*tensors, mask).backward(grad_out)
        got[impl] = [t.grad for t in tensors]
    for a, b in zip(got["numba"], got["torch"], strict=True):
        assert torch.isfinite(a).all()
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)
        assert (a[0, :, 7:] == 0).all()


def _draws(kind, draws, tau, m, ops):
    """Gradients of <Y, G> w.r.t. q, k, v (before normalisation) over `draws` seeded
    Gaussian hashes (and signs), stacked."""
    gen = torch.Generator().manual_seed(11)
    g, n, d, dv = 1, 6, 4, 3
    q, k, v = (torch.randn(g, n, w, generator=gen) for w in (d, d, dv))
    grad_out = torch.randn(g, n, dv, generator=gen)
    samples = []
    for seed in range(draws):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        qn, kn = F.normalize(leaves[0], dim=-1), F.normalize(leaves[1], dim=-1)
        proj = ref.gaussian_projections(g, d, m, tau, seed)
        qc, kc = (
            ref.gaussian_codes(qn.detach(), proj, tau),
            ref.gaussian_codes(kn.detach(), proj, tau),
        )
        sign_gen = torch.Generator().manual_seed(10_000 + seed)
        signs = (2 * torch.randint(0, 2, (g, dv, m), generator=sign_gen) - 1).float()
        how = Gradient(kind, bound=10**6, signs=lambda signs=signs: signs)
        y = LSHCumulation.apply(qn, kn, leaves[2], qc, kc, tau, ops, how)
        y.backward(grad_out)
        samples.append(torch.cat([t.grad.flatten() for t in leaves]))
    return torch.stack(samples), (q, k, v, grad_out)


def _yoso_e_grads(tensors, tau, backward):
    q, k, v, grad_out = (t.clone().requires_grad_(i < 3) for i, t in enumerate(tensors))
    e = collision_probability(q, k, tau, backward=backward)
    ((e @ v) * grad_out).sum().backward()
    return torch.cat([t.grad.flatten() for t in (q, k, v)]), F.normalize(q, dim=-1) @ F.normalize(
        k, dim=-1
    ).transpose(-1, -2)


@pytest.mark.parametrize(("kind", "expected"), [("proj", "lower"), ("star", "exact")])
def test_estimators_average_to_yoso_e_gradients(kind, expected):
    """Over 240 seeded draws, the mean of dQ, dK, dV is within 4 standard errors of YOSO-E's
    gradient: eq. (4) (backward=lower) for proj, eq. (3) (backward=exact) for *YOSO, whose
    cosines here all lie inside the clamp."""
    tau, m, draws = 2, 4, 240
    samples, tensors = _draws(kind, draws, tau, m, OPS["numba"])
    want, cos = _yoso_e_grads(tensors, tau, expected)
    assert cos.abs().max() < STAR_CLIP  # the clamp is inactive for these inputs
    mean, se = samples.mean(0), samples.std(0) / math.sqrt(draws)
    assert ((mean - want).abs() <= 4 * se + 1e-6).all()
    # and not trivially: the estimator does vary and the expectation is not zero
    assert (se > 0).any() and want.abs().max() > 0.1


def test_proj_is_reproducible_and_changes_with_the_call():
    """The signs follow (seed, call): two backends with one seed give identical gradients
    call after call; consecutive calls differ."""
    gen = torch.Generator().manual_seed(2)
    leaves = [torch.randn(1, 2, 9, 8, generator=gen) for _ in range(3)]
    runs = []
    for _ in range(2):
        backend = get_backend("yoso:m=4,tau=2,seed=3")
        grads = []
        for _ in range(2):
            tensors = [t.clone().requires_grad_(True) for t in leaves]
            backend(*tensors).sum().backward()
            grads.append(tensors[0].grad)
        runs.append(grads)
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    assert not torch.equal(runs[0][0], runs[0][1])


@pytest.mark.parametrize("impl", sorted(OPS))
@pytest.mark.parametrize("kind", ["proj", "pairs", "star", "lsh", "dense", "expected"])
def test_normalised_op_equals_the_normalisations_around_the_cumulation(impl, kind):
    """NormalisedLSH on rows of any length (one zero row among them) is l2(C V) with C from
    F.normalize-d rows: output and dQ, dK, dV equal autograd through F.normalize, then
    LSHCumulation, then F.normalize, with the same codes and signs."""
    gen = torch.Generator().manual_seed(3)
    g, n_q, n_k, d, dv, m, tau = 2, 7, 9, 5, 4, 6, 2
    q, k = (3 * torch.randn(g, n, d, generator=gen) for n in (n_q, n_k))
    k[1, 4] = 0.0
    v = torch.randn(g, n_k, dv, generator=gen)
    grad_out = torch.randn(g, n_q, dv, generator=gen)
    qc, kc = (codes((g, n, m), tau, gen) for n in (n_q, n_k))
    signs = (2 * torch.randint(0, 2, (g, dv, m), generator=gen) - 1).float()
    how = Gradient(kind, bound=10**6, signs=lambda: signs)
    got, want = ([t.clone().requires_grad_(True) for t in (q, k, v)] for _ in range(2))
    out = NormalisedLSH.apply(*got, qc, kc, tau, OPS[impl], how)
    qn, kn = (F.normalize(t, dim=-1) for t in want[:2])
    plain = F.normalize(LSHCumulation.apply(qn, kn, want[2], qc, kc, tau, OPS[impl], how), dim=-1)
    assert torch.allclose(out, plain, rtol=1e-5, atol=1e-6)
    out.backward(grad_out)
    plain.backward(grad_out)
    for a, b in zip(got, want, strict=True):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-5), (a.grad - b.grad).abs().max()
        assert b.grad.abs().max() > 0
