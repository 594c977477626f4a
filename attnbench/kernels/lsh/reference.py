"""Plain-torch YOSO kernels: the readable oracle every numba kernel is tested against.

Shapes: a "group" is one batch*head. Codes are int32 [G, n, m] (hash f of row i), values
are [G, n, d_v]. Everything here is dense or loops over hashes in torch, and is meant to
be obviously right rather than fast.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnbench.kernels.lsh.core import STAR_CLIP

HASH_CHUNK = 8  # hashes whose tables the torch cumulation keeps in memory at once
SIGN_STREAM = 1  # the backward's sign vectors' stream, apart from the hash draws' (seed alone)


# --- hashing -------------------------------------------------------------------------


def gaussian_projections(
    groups: int, d: int, m: int, tau: int, seed: int, device="cpu"
) -> torch.Tensor:
    """R ~ N(0, 1) of shape [G, d, m*tau], one per batch*head, shared by Q and K.

    Drawn on `device` from a generator seeded there, so a GPU call copies nothing from the
    host: the same seed gives the same draws on one device, not across devices.
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(groups, d, m * tau, generator=gen, device=device)


def backward_signs(groups: int, d_v: int, m: int, seed: int, device) -> torch.Tensor:
    """backward=proj's random +-1 vectors, float32 [G, d_v, m], drawn on `device` (no host
    copy on a GPU) from a stream apart from the hash draws of the same seed: reproducible on
    one device, not across devices."""
    state = np.random.SeedSequence([seed, SIGN_STREAM]).generate_state(1, np.uint32)
    gen = torch.Generator(device=device).manual_seed(int(state[0]))
    bits = torch.randint(0, 2, (groups, d_v, m), generator=gen, device=device)
    return (2 * bits - 1).to(torch.float32)


def gaussian_codes(x: torch.Tensor, proj: torch.Tensor, tau: int) -> torch.Tensor:
    """Codes [G, n, m] of x [G, n, d]: code_f = sum_t [x . R[:, f*tau + t] > 0] 2^t."""
    return _pack_bits((x @ proj.to(x.dtype)) > 0, tau)


def padded_dim(d: int, tau: int) -> int:
    """The Hadamard length: the smallest power of two >= d and >= tau (one code fits)."""
    return 1 << max(0, math.ceil(math.log2(max(d, tau))))


def fast_transforms(m: int, tau: int, d: int) -> int:
    """Independent transforms ("parts") needed: each yields floor(d_pad / tau) codes."""
    return math.ceil(m / (padded_dim(d, tau) // tau))


def fast_diagonals(groups: int, d: int, m: int, tau: int, seed: int, device="cpu") -> torch.Tensor:
    """Random +-1 diagonals D1, D2, D3 of every transform: float32 [G, P, 3, d_pad], drawn
    on `device` as `gaussian_projections` draws."""
    gen = torch.Generator(device=device).manual_seed(seed)
    parts, dp = fast_transforms(m, tau, d), padded_dim(d, tau)
    bits = torch.randint(0, 2, (groups, parts, 3, dp), generator=gen, device=device)
    return (2 * bits - 1).to(torch.float32)


def hadamard(y: torch.Tensor) -> torch.Tensor:
    """Unnormalised Walsh-Hadamard transform along the last axis (a power of two).

    Butterflies in the kernels' order: span h = 1, 2, 4, ...; pair (j, j + h) becomes
    (a + b, a - b). The same float operations in the same order, so results are bit-equal.
    """
    dp = y.shape[-1]
    h = 1
    while h < dp:
        pairs = y.reshape(*y.shape[:-1], dp // (2 * h), 2, h)
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        y = torch.stack((a + b, a - b), dim=-2).reshape(y.shape)
        h *= 2
    return y


def fast_codes(x: torch.Tensor, diags: torch.Tensor, tau: int, m: int) -> torch.Tensor:
    """Codes [G, n, m] by the fast hash: y_p = H D3 H D2 H D1 x (x zero-padded to d_pad).

    Transform p gives codes p*c .. p*c + c - 1 with c = d_pad // tau; code j of it packs
    the signs of coordinates j*tau .. j*tau + tau - 1. The first m codes are kept.
    """
    g, n, d = x.shape
    parts, dp = diags.shape[1], diags.shape[-1]
    y = torch.zeros(g, parts, n, dp, dtype=torch.float32, device=x.device)
    y[..., :d] = x.to(torch.float32)[:, None]
    diags = diags.to(x.device)
    for step in range(3):
        y = hadamard(y * diags[:, :, step, None, :])
    per_part = dp // tau
    bits = y[..., : per_part * tau] > 0  # [G, P, n, per_part * tau]
    codes = _pack_bits(bits, tau)  # [G, P, n, per_part]
    return codes.permute(0, 2, 1, 3).reshape(g, n, parts * per_part)[..., :m].contiguous()


def _pack_bits(bits: torch.Tensor, tau: int) -> torch.Tensor:
    """[..., k*tau] booleans -> [..., k] int32 codes, bit t of code j = bits[j*tau + t]."""
    bits = bits.reshape(*bits.shape[:-1], -1, tau).to(torch.int32)
    powers = 2 ** torch.arange(tau, device=bits.device, dtype=torch.int32)
    return (bits * powers).sum(-1, dtype=torch.int32)


def normalise_rows(y: torch.Tensor, eps: float) -> torch.Tensor:
    """y divided by its rows' l2 norms in place; the norms [..., 1], each at least eps."""
    norms = torch.linalg.vector_norm(y, dim=-1, keepdim=True).clamp_min_(eps)
    y.div_(norms)
    return norms


def off_the_row(g, x, x_norm=None, divisor=None, out=None):
    """(g - x <x, g> / |x|^2) / divisor per row (|x| = `x_norm`, or 1 when x is a unit row;
    no division without `divisor`): g less its component along x, the derivative of
    x / |x| applied to g (times |x|); into `out` if given (it may be g)."""
    along = (g.unsqueeze(-2) @ x.unsqueeze(-1)).squeeze(-1)  # <x, g> per row
    if x_norm is not None:
        along.div_(x_norm).div_(x_norm)
    if out is None:
        out = torch.addcmul(g, x, along, value=-1.0)
    else:
        out.addcmul_(x, along, value=-1.0)
    return out if divisor is None else out.div_(divisor)


# --- cumulation ----------------------------------------------------------------------


def cumulation(read_codes, write_codes, values, tau: int) -> torch.Tensor:
    """out_r = (1/m) sum_f sum_w [code_f(r) == code_f(w)] values_w, in O(n m d_v).

    Per hash: a table of 2^tau buckets, each write row adds its values to its bucket, each
    read row takes its bucket. Forward: read = queries, write = keys, values = V.
    """
    groups, n_w, m = write_codes.shape
    n_r, d_v = read_codes.shape[1], values.shape[-1]
    buckets = 2**tau
    out = torch.zeros(groups, n_r, d_v, dtype=values.dtype, device=values.device)
    for start in range(0, m, HASH_CHUNK):
        wc = write_codes[..., start : start + HASH_CHUNK].long()
        rc = read_codes[..., start : start + HASH_CHUNK].long()
        c = wc.shape[-1]
        table_of = torch.arange(groups * c, device=values.device).view(groups, 1, c) * buckets
        table = torch.zeros(groups * c * buckets, d_v, dtype=values.dtype, device=values.device)
        rows = values[:, :, None, :].expand(-1, -1, c, -1).reshape(-1, d_v)
        table.index_add_(0, (wc + table_of).reshape(-1), rows)
        out += table[(rc + table_of).reshape(-1)].view(groups, n_r, c, d_v).sum(2)
    return out / m


def weighted_cumulation(read_codes, write_codes, weights, vectors, read_weights, tau: int):
    """out_r = (1/m) sum_f sum_w [code_f(r) == code_f(w)] <read_weights_r, weights_w> vectors_w.

    The lower-bound gradients of YOSO (seed eq. 4), factorised over the value column a:
    one cumulation of weights[:, a] * vectors per column, scaled by read_weights[:, a].
    dQ = tau/2 * weighted(q_codes, k_codes, V, K, dY); dK = tau/2 * weighted(k, q, dY, Q, V).
    """
    out = torch.zeros(
        *read_codes.shape[:2], vectors.shape[-1], dtype=vectors.dtype, device=vectors.device
    )
    for a in range(weights.shape[-1]):
        column = cumulation(read_codes, write_codes, weights[..., a, None] * vectors, tau)
        out += read_weights[..., a, None] * column
    return out


def collision_frequency(read_codes, write_codes) -> torch.Tensor:
    """Dense C [G, n_r, n_w]: fraction of the m hashes in which r and w share a bucket."""
    freq = torch.zeros(*read_codes.shape[:2], write_codes.shape[1], device=read_codes.device)
    for f in range(read_codes.shape[-1]):
        freq += read_codes[:, :, f, None] == write_codes[:, None, :, f]
    return freq / read_codes.shape[-1]


def scaled_cumulation(read_codes, write_codes, values, write_scale, read_scale, tau: int):
    """out_r = (1/m) sum_f read_scale_rf sum_w [code_f(r) == code_f(w)] write_scale_wf values_w.

    The random-projection backward (backward=proj): with a = dY s_f, b = V s_f for a random
    sign vector s_f per hash, dQ = tau/2 scaled(q, k, K, b, a) estimates eq. (4) in O(n m d).
    """
    m = write_codes.shape[-1]
    out = torch.zeros(
        *read_codes.shape[:2], values.shape[-1], dtype=values.dtype, device=values.device
    )
    for f in range(m):
        one = slice(f, f + 1)
        scaled = write_scale[..., f, None] * values
        out += read_scale[..., f, None] * cumulation(
            read_codes[..., one], write_codes[..., one], scaled, tau
        )
    return out / m


def pair_cumulation(
    read_codes, write_codes, read_unit, write_unit, read_a, write_a, tau: int, weight: str, bound
):
    """out_r = (1/m) sum_f sum_{w in B_f(r)} s_rf phi(x_rw) <read_a_r, write_a_w> write_unit_w,
    x_rw = <read_unit_r, write_unit_w>, dense over all pairs.

    phi = tau/2 for weight "lower" (eq. 4 with C, as backward=lsh) or core.star_ratio for
    "exact" (*YOSO, eq. 3). B_f(r): the write rows in r's bucket of hash f, all of them up to
    `bound`; above it every stride-th in row order with scale s_rf (core.bound_stride).
    """
    groups, n_r, m = read_codes.shape
    x = read_unit @ write_unit.transpose(-1, -2)
    if weight == "lower":
        phi = torch.full_like(x, tau / 2)
    else:
        c = x.double().clamp(-STAR_CLIP, STAR_CLIP)
        phi = (tau / ((math.pi - torch.arccos(c)) * torch.sqrt(1.0 - c * c))).to(x.dtype)
    base = phi * (read_a @ write_a.transpose(-1, -2))
    weights = torch.zeros_like(x)
    rows = torch.arange(n_r, device=x.device)[:, None]
    for f in range(m):
        same = read_codes[:, :, f, None] == write_codes[:, None, :, f]  # [G, n_r, n_w]
        w_same = write_codes[:, :, f, None] == write_codes[:, None, :, f]  # [G, n_w, n_w]
        rank = torch.tril(w_same, diagonal=-1).sum(-1)  # earlier rows in the same bucket
        size = same.sum(-1, keepdim=True)  # [G, n_r, 1]
        stride = torch.where(size > bound, -(-size // bound), torch.ones_like(size))
        offset = (rows + f) % stride
        taken = -(-(size - offset) // stride)
        picked = same & (rank[:, None, :] >= offset) & ((rank[:, None, :] - offset) % stride == 0)
        weights += picked * (size / taken.clamp_min(1))
    return ((weights * base) @ write_unit) / m
