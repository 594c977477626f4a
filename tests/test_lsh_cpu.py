"""The CPU numba kernels of YOSO against the plain-torch reference, on small seeded inputs."""

import numba
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnbench.kernels.lsh import core, cpu, reference


def unit_rows(groups, n, d, seed):
    gen = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(groups, n, d, generator=gen), dim=-1)


def garbage_codes(groups, n, m):
    return np.full((groups, n, m), -12345, np.int32)


def colliding_codes(groups, n_r, n_w, m, tau, gen, distinct=3):
    """Read and write codes drawn from a few random tau-bit values, so that rows share
    buckets even for tau = 20 (uniform codes would almost never collide)."""
    pool = torch.randint(0, 2**tau, (distinct,), generator=gen)
    read, write = (
        pool[torch.randint(0, distinct, (groups, n, m), generator=gen)].to(torch.int32)
        for n in (n_r, n_w)
    )
    write[:, 0] = read[:, 0]  # at least one collision per group
    return read, write


def relative_error(out, expected):
    expected = expected.numpy()
    assert np.abs(expected).max() > 0, "degenerate case: no collisions"
    return np.abs(out - expected).max() / np.abs(expected).max()


@numba.njit
def rowwise_gaussian_codes(x, proj, tau, out):
    """The CUDA kernel's arithmetic: core.gaussian_code per row and hash."""
    for g in range(x.shape[0]):
        for i in range(x.shape[1]):
            for f in range(out.shape[2]):
                out[g, i, f] = core.gaussian_code(x[g, i], proj[g], f, tau)


HASH_SHAPES = [  # groups, n, d, m, tau (fast hash: d_pad 1, 8, 64, 32, 16, 2, 4, 128)
    (1, 1, 1, 1, 1),
    (3, 37, 5, 7, 8),
    (1, 70, 64, 33, 8),
    (2, 9, 6, 3, 20),
    (1, 130, 9, 40, 3),
    (1, 5, 2, 3, 2),
    (2, 7, 3, 5, 1),
    (1, 10, 100, 20, 8),
]


@pytest.mark.parametrize("groups,n,d,m,tau", HASH_SHAPES)
def test_gaussian_codes_match_reference(groups, n, d, m, tau):
    x = unit_rows(groups, n, d, seed=n + d)
    proj = reference.gaussian_projections(groups, d, m, tau, seed=m)
    out = garbage_codes(groups, n, m)
    cpu.gaussian_codes(x.numpy(), proj.numpy(), tau, out)

    rowwise = garbage_codes(groups, n, m)
    rowwise_gaussian_codes(x.numpy(), proj.numpy(), tau, rowwise)
    np.testing.assert_array_equal(out, rowwise)

    # The reference's codes come from a different summation order: they may differ only
    # where a dot product is within rounding of zero, and such rows are rare.
    expected = reference.gaussian_codes(x, proj, tau).numpy()
    dots = (x.double() @ proj.double()).reshape(groups, n, m, tau)
    clear = (dots.abs() > 1e-5).all(-1).numpy()
    np.testing.assert_array_equal(out[clear], expected[clear])
    assert (~clear).mean() < 0.01


@pytest.mark.parametrize("groups,n,d,m,tau", HASH_SHAPES + [(2, 65, 33, 20, 8)])
def test_fast_codes_equal_reference(groups, n, d, m, tau):
    x = unit_rows(groups, n, d, seed=n * d)
    diags = reference.fast_diagonals(groups, d, m, tau, seed=tau)
    out = garbage_codes(groups, n, m)
    cpu.fast_codes(x.numpy(), diags.numpy(), tau, out)
    np.testing.assert_array_equal(out, reference.fast_codes(x, diags, tau, m).numpy())


CUMULATION_SHAPES = [  # groups, n_r, n_w, dv, m, tau
    (1, 1, 1, 1, 1, 1),
    (3, 37, 20, 5, 7, 8),
    (1, 16, 37, 70, 33, 8),
    (2, 5, 9, 3, 33, 20),
    (3, 50, 40, 64, 12, 4),
]


@pytest.mark.parametrize("path", ["tables", "sorted"])
@pytest.mark.parametrize("groups,n_r,n_w,dv,m,tau", CUMULATION_SHAPES)
def test_cumulation_matches_reference(groups, n_r, n_w, dv, m, tau, path, monkeypatch):
    # Both strategies on every shape: hash tables, or rows sorted by code (sparse tables).
    monkeypatch.setattr(cpu, "SPARSE_BUCKETS", 2**30 if path == "tables" else 0)
    gen = torch.Generator().manual_seed(n_r + 7 * dv)
    read, write = colliding_codes(groups, n_r, n_w, m, tau, gen)
    values = torch.randn(groups, n_w, dv, generator=gen)
    out = np.full((groups, n_r, dv), np.nan, np.float32)
    cpu.cumulation(read.numpy(), write.numpy(), values.numpy(), tau, out)
    assert relative_error(out, reference.cumulation(read, write, values, tau)) <= 1e-5


WEIGHTED_SHAPES = [  # groups, n_r, n_w, A, D, m, tau
    (1, 1, 1, 1, 1, 1, 1),
    (3, 37, 20, 6, 5, 7, 8),
    (1, 16, 37, 9, 70, 33, 8),
    (2, 5, 9, 4, 3, 33, 20),
    (2, 40, 30, 64, 64, 5, 6),
]


@pytest.mark.parametrize("groups,n_r,n_w,n_a,dv,m,tau", WEIGHTED_SHAPES)
def test_weighted_cumulation_matches_reference(groups, n_r, n_w, n_a, dv, m, tau):
    gen = torch.Generator().manual_seed(n_w + 5 * n_a)
    read, write = colliding_codes(groups, n_r, n_w, m, tau, gen)
    weights = torch.randn(groups, n_w, n_a, generator=gen)
    vectors = torch.randn(groups, n_w, dv, generator=gen)
    read_weights = torch.randn(groups, n_r, n_a, generator=gen)
    out = np.full((groups, n_r, dv), np.nan, np.float32)
    cpu.weighted_cumulation(
        read.numpy(),
        write.numpy(),
        weights.numpy(),
        vectors.numpy(),
        read_weights.numpy(),
        tau,
        out,
    )
    expected = reference.weighted_cumulation(read, write, weights, vectors, read_weights, tau)
    assert relative_error(out, expected) <= 1e-5


def test_cumulations_do_not_depend_on_the_thread_count():
    """Work units change with the threads (columns split finer when G is small)."""
    tau = 5  # 2^tau <= SPARSE_BUCKETS * n_w: cumulation uses its tables
    gen = torch.Generator().manual_seed(3)
    read, write = colliding_codes(1, 33, 33, 9, tau, gen, distinct=5)
    values = torch.randn(1, 33, 40, generator=gen)
    outs = []
    threads = numba.get_num_threads()
    try:
        for count in sorted({1, threads}):
            numba.set_num_threads(count)
            out = np.full((1, 33, 40), np.nan, np.float32)
            cpu.cumulation(read.numpy(), write.numpy(), values.numpy(), tau, out)
            weighted = np.full((1, 33, 40), np.nan, np.float32)
            cpu.weighted_cumulation(
                read.numpy(),
                write.numpy(),
                values.numpy(),
                values.numpy(),
                values.numpy(),
                tau,
                weighted,
            )
            outs.append((out, weighted))
    finally:
        numba.set_num_threads(threads)
    for out, weighted in outs:
        np.testing.assert_allclose(out, outs[0][0], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(weighted, outs[0][1], rtol=1e-5, atol=1e-5)
    assert relative_error(outs[0][0], reference.cumulation(read, write, values, tau)) <= 1e-5


@pytest.mark.parametrize("path", ["tables", "sorted"])
def test_rows_without_collisions_get_zero(path, monkeypatch):
    """Read rows whose buckets no write row reached (dead buckets) get exactly 0."""
    monkeypatch.setattr(cpu, "SPARSE_BUCKETS", 2**30 if path == "tables" else 0)
    tau, m = 12, 5
    read = np.zeros((2, 7, m), np.int32)
    write = np.full((2, 4, m), 2**tau - 1, np.int32)
    values = np.ones((2, 4, 3), np.float32)
    out = np.full((2, 7, 3), np.nan, np.float32)
    cpu.cumulation(read, write, values, tau, out)
    assert (out == 0).all()
    out[:] = np.nan
    cpu.weighted_cumulation(read, write, values, values, np.ones((2, 7, 3), np.float32), tau, out)
    assert (out == 0).all()


PRECONDITION_SCRIPT = """
import numpy as np
from attnbench.kernels.lsh import cpu

codes = np.zeros((1, 4, 2), np.int32)
values = np.zeros((1, 3, 8), np.float32)  # 3 rows of values for 4 write codes
try:
    cpu.cumulation(codes, codes, values, 4, np.zeros((1, 4, 8), np.float32))
except ValueError as exc:
    print("ValueError:", exc)
"""


def test_kernel_preconditions_are_checks_that_python_O_keeps():
    """A broken precondition is a clear ValueError, also under `python -O`, which strips
    asserts and would let the compiled loops read out of bounds instead."""
    import subprocess
    import sys

    codes = np.zeros((1, 4, 2), np.int32)
    with pytest.raises(ValueError, match="do not match codes"):
        cpu.cumulation(
            codes, codes, np.zeros((1, 3, 8), np.float32), 4, np.zeros((1, 4, 8), np.float32)
        )
    with pytest.raises(ValueError, match="tau must be in 1..30"):
        cpu.cumulation(
            codes, codes, np.zeros((1, 4, 8), np.float32), 31, np.zeros((1, 4, 8), np.float32)
        )
    done = subprocess.run(
        [sys.executable, "-O", "-c", PRECONDITION_SCRIPT], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ValueError: values (1, 3, 8) do not match codes")


@pytest.mark.parametrize("cols", [1, 7, 64, 100])
def test_normalise_rows_divides_each_row_by_its_norm_in_place(cols):
    """One pass a row: the rows of F.normalize (a zero row stays zero, its norm eps) and
    the norms, written into the array given."""
    gen = torch.Generator().manual_seed(cols)
    y = torch.randn(3, 5, cols, generator=gen) * torch.tensor([1e-3, 1.0, 1e3]).view(3, 1, 1)
    y[1, 2] = 0.0
    want_rows = F.normalize(y, dim=-1, eps=1e-12)
    want_norms = torch.linalg.vector_norm(y, dim=-1).clamp_min(1e-12)
    got = y.clone()
    norms = np.empty(15, np.float32)
    cpu.normalise_rows(got.numpy().reshape(15, cols), 1e-12, norms)
    torch.testing.assert_close(got, want_rows, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(norms.reshape(3, 5), want_norms.numpy(), rtol=1e-6)
    assert norms.reshape(3, 5)[1, 2] == np.float32(1e-12)


def test_dispatch_normalise_rows_matches_the_reference_and_returns_norms():
    from attnbench.kernels.lsh import dispatch

    y = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(0))
    ours, theirs = y.clone(), y.clone()
    norms = dispatch.normalise_rows(ours, 1e-12)
    want = reference.normalise_rows(theirs, 1e-12)
    assert norms.shape == want.shape == (2, 9, 1)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(norms, want)


@pytest.mark.parametrize("cols", [1, 7, 64, 100])
@pytest.mark.parametrize("unit,divide", [(True, True), (False, False), (False, True)])
def test_off_the_row_removes_each_rows_component_along_x(cols, unit, divide):
    """(g - x <x, g> / |x|^2) / s per row in one pass, in place too: the derivative of
    x / |x| applied to g, written from its definition in float64."""
    gen = torch.Generator().manual_seed(cols)
    g = torch.randn(12, cols, generator=gen)
    x = torch.randn(12, cols, generator=gen) * 3.0
    if unit:
        x = F.normalize(x, dim=-1)
    norms = torch.linalg.vector_norm(x, dim=-1)
    divisors = torch.rand(12, generator=gen) + 0.5
    g64, x64 = g.double(), x.double()
    along = (g64 * x64).sum(-1, keepdim=True) / (1.0 if unit else norms.double()[:, None] ** 2)
    want = g64 - along * x64
    if divide:
        want = want / divisors.double()[:, None]
    empty = np.empty(0, np.float32)
    x_norms = empty if unit else norms.numpy()
    scale = divisors.numpy() if divide else empty
    out = np.empty_like(g.numpy())
    cpu.off_the_row(g.numpy(), x.numpy(), x_norms, scale, out)
    np.testing.assert_allclose(out, want.float().numpy(), rtol=1e-5, atol=1e-5)
    inplace = g.numpy().copy()
    cpu.off_the_row(inplace, x.numpy(), x_norms, scale, inplace)
    np.testing.assert_array_equal(inplace, out)


@pytest.mark.parametrize("contiguous", [True, False])
def test_dispatch_off_the_row_matches_the_reference(contiguous):
    """The numba pass (fp32, contiguous) and torch's fallback (here for strided rows) give
    the reference's rows for [G, n, d] gradients with [G, n, 1] norms and divisors."""
    from attnbench.kernels.lsh import dispatch

    gen = torch.Generator().manual_seed(5)
    g = torch.randn(3, 10, 16, generator=gen)
    x = torch.randn(3, 10, 16, generator=gen)
    if not contiguous:
        g, x = g.transpose(0, 1), x.transpose(0, 1)
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    divisor = torch.rand(*x.shape[:-1], 1, generator=gen) + 0.5
    want = reference.off_the_row(g.clone(), x, norm, divisor)
    torch.testing.assert_close(dispatch.off_the_row(g, x, norm, divisor), want)
    into = g.clone()
    assert dispatch.off_the_row(into, x, norm, divisor, out=into) is into
    torch.testing.assert_close(into, want)
    unit = F.normalize(x, dim=-1)
    torch.testing.assert_close(
        dispatch.off_the_row(g, unit), reference.off_the_row(g.clone(), unit)
    )
