"""YOSO's LSH cumulation as a trainable torch op (YOSO seed, Sec. 3.3).

Forward: Y = C V with C_ij the fraction of the m hashes where q_i and k_j collide.
Backward: dV = C^T dY (the cumulation with queries and keys swapped) always. dQ and dK
use the paper's lower bound of the collision probability's derivative,
(tau/2) (1 - theta/pi)^tau, estimated by the same collisions (eq. 4):
    dQ_i = tau/2 sum_j C_ij <dY_i, V_j> K_j,
    dK_j = tau/2 sum_i C_ij <dY_i, V_j> Q_i,
computed by one of:
- "proj": <dY_i, V_j> estimated by (s_f . dY_i)(s_f . V_j) with a random sign vector s_f
  per hash (E[s s^T] = I), so each of dQ, dK is one cumulation of width d weighted per row
  and hash: O(n m (d + d_v)). Its mean is eq. (4), as pairs' and lsh's; the noisiest.
- "pairs": eq. (4) exactly, over each hash's colliding pairs: O(d) per pair.
- "lsh": eq. (4) exactly, factorised over the value columns: O(n m d_v d). The reference.
- "star" (*YOSO): eq. (3), the exact derivative, over colliding pairs: each collision is
  weighted by core.star_ratio, dE/dx over the collision probability E, so the expectation
  is eq. (3) with the cosine clamped to +-core.STAR_CLIP.
- "dense": eq. (4) with C built as an n x n matrix from the same codes (O(n^2), a check);
  "expected": eq. (4) with E = (1 - theta/pi)^tau instead of C (O(n^2)), on the query
  rows that collide at least once (a row with none gets no gradient, as with "dense").
"pairs" and "star" visit at most `bound` write rows of a bucket per read row and hash;
larger buckets are subsampled with a stride and reweighted (core.bound_stride).
Those means are of this op's gradients, for a given dY; a YOSO backend's gradient also goes
through the l2 normalisation of the sampled output, which depends on the same hashes, so its
mean is off YOSO-E's gradient by a bias that shrinks as m grows.
`LSHCumulation` takes unit rows and leaves the normalisations of Q, K and the output to
autograd; `NormalisedLSH`, what the backend runs, takes rows of any length and does all
three inside, keeping neither the unit rows nor Y before its normalisation.

The caller may pass `stage(name)`, a context manager factory, to mark the backward's parts
in profiler traces: LSH_STAGES for "lsh", DENSE_STAGE otherwise. The names are this op's
own; the caller decides how a range is labelled.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnbench.kernels.lsh import reference

BACKWARDS = ("proj", "pairs", "star", "lsh", "dense", "expected")
LINEAR = ("proj", "pairs", "star", "lsh")  # the backwards that never build an n x n matrix
PAIR_WEIGHTS = {"pairs": "lower", "star": "exact"}
# The backward's marked parts: dV, dQ, dK of the linear estimators, in the order they run...
LSH_STAGES = ("backward_dv", "backward_dq", "backward_dk")
# ... or the one dense n x n computation of all three.
DENSE_STAGE = "backward_dense"
EPS = 1e-12  # rows shorter than this are divided by EPS instead (zero rows), as F.normalize


def no_stage(name: str) -> contextlib.AbstractContextManager:
    """The default marker: marks nothing."""
    return contextlib.nullcontext()


@dataclass(frozen=True)
class Gradient:
    """How the backward runs: `kind` (module docstring), the pair kernels' `bound`, and for
    "proj" `signs()`, the +-1 float sign vectors [G, d_v, m] (one per group and hash)."""

    kind: str = "lsh"
    bound: int = 256
    signs: Callable[[], torch.Tensor] | None = None


class LSHCumulation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, q_codes, k_codes, tau, ops, backward, stage=no_stage):
        """q, k unit rows [G, n, d]; v [G, n, d_v]; codes int32 [G, n, m]; ops: the kernels;
        backward: a Gradient or its kind; stage: the backward's marker (module docstring)."""
        ctx.save_for_backward(q, k, v, q_codes, k_codes)
        if isinstance(backward, str):
            backward = Gradient(backward)
        ctx.tau, ctx.ops, ctx.backward, ctx.stage = tau, ops, backward, stage
        return ops.cumulation(q_codes, k_codes, v, tau)

    @staticmethod
    def backward(ctx, dy):
        q, k, v, q_codes, k_codes = ctx.saved_tensors
        needs = ctx.needs_input_grad[:3]
        dq, dk, dv = _gradients(
            q, k, v, q_codes, k_codes, dy.contiguous(), ctx.tau, ctx.ops, ctx.backward, ctx.stage,
            needs,
        )  # fmt: skip
        # no gradient for the codes, tau, ops, the backward's kind or the marker
        return (dq, dk, dv) + (None,) * (len(ctx.needs_input_grad) - 3)


class NormalisedLSH(torch.autograd.Function):
    """N-YOSO's core as one op: out = l2(C V) for rows q, k of any length (codes do not
    depend on a row's length), so neither unit rows of Q and K nor Y before its
    normalisation are kept; the backward applies the normalisations' derivatives in place.

    For "proj" the unit rows are never formed: 1/|q_i| and 1/|k_j| are folded into its row
    scales, which gives dQ_unit / |q| and dK_unit / |k| directly. The other kinds build the
    unit rows in the backward and call LSHCumulation's gradients."""

    @staticmethod
    def forward(ctx, q, k, v, q_codes, k_codes, tau, ops, backward, stage=no_stage):
        """q, k [G, n, d] rows; v [G, n, d_v]; the rest as LSHCumulation.forward."""
        out = ops.cumulation(q_codes, k_codes, v, tau)
        with stage("output_normalise"):
            norm = ops.normalise_rows(out, EPS)  # in place: Y is not kept
        ctx.save_for_backward(q, k, v, q_codes, k_codes, out, norm)
        if isinstance(backward, str):
            backward = Gradient(backward)
        ctx.tau, ctx.ops, ctx.backward, ctx.stage = tau, ops, backward, stage
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, q_codes, k_codes, out, norm = ctx.saved_tensors
        tau, ops, how, stage = ctx.tau, ctx.ops, ctx.backward, ctx.stage
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        dy = ops.off_the_row(grad.contiguous(), out, divisor=norm)  # through out = y / |y|
        q_norm, k_norm = row_norms(q), row_norms(k)
        dq = dk = dv = None
        if how.kind == "proj":
            a = b = None
            if need_q or need_k:
                with stage(LSH_STAGES[1]):
                    a, b = _projections(dy, v, tau, how)
                    a.div_(q_norm)
                    b.div_(k_norm)
            if need_v:
                with stage(LSH_STAGES[0]):
                    dv = ops.cumulation(k_codes, q_codes, dy, tau)
            del dy  # the largest buffer the rest does not need
            dq, dk = _scaled(q, k, q_codes, k_codes, a, b, tau, ops, stage, need_q, need_k)
        else:
            q_unit, k_unit = q / q_norm, k / k_norm
            dq, dk, dv = _gradients(
                q_unit, k_unit, v, q_codes, k_codes, dy, tau, ops, how, stage,
                (need_q, need_k, need_v),
            )  # fmt: skip
            dq = None if dq is None else dq.div_(q_norm)
            dk = None if dk is None else dk.div_(k_norm)
        # dx = (g - u <u, g>) / |x| with g / |x| in hand: subtract its part along x
        dq = None if dq is None else ops.off_the_row(dq, q, q_norm, out=dq)
        dk = None if dk is None else ops.off_the_row(dk, k, k_norm, out=dk)
        return (dq, dk, dv) + (None,) * (len(ctx.needs_input_grad) - 3)


def row_norms(x: torch.Tensor) -> torch.Tensor:
    """|x| per row [..., 1], at least EPS (as F.normalize)."""
    return torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min_(EPS)


def _gradients(q, k, v, q_codes, k_codes, dy, tau, ops, how, stage, needs):
    """dQ, dK, dV of LSHCumulation (unit rows q, k) by the backward `how` names."""
    need_q, need_k, need_v = needs
    if how.kind in LINEAR:
        dq = dk = dv = None
        if need_v:
            with stage(LSH_STAGES[0]):
                dv = ops.cumulation(k_codes, q_codes, dy, tau)
        if need_q or need_k:
            grad = _LINEAR_GRADIENTS[how.kind]
            dq, dk = grad(q, k, v, q_codes, k_codes, dy, tau, ops, how, stage, need_q, need_k)
        return dq, dk, dv
    with stage(DENSE_STAGE):
        return dense_backward(q, k, v, q_codes, k_codes, dy, tau, how.kind)


def _lsh(q, k, v, q_codes, k_codes, dy, tau, ops, how, stage, need_q, need_k):
    """dQ, dK of eq. (4), factorised over the value columns."""
    dq = dk = None
    if need_q:
        with stage(LSH_STAGES[1]):
            dq = ops.weighted_cumulation(q_codes, k_codes, v, k, dy, tau).mul_(tau / 2)
    if need_k:
        with stage(LSH_STAGES[2]):
            dk = ops.weighted_cumulation(k_codes, q_codes, dy, q, v, tau).mul_(tau / 2)
    return dq, dk


def _projections(dy, v, tau, how):
    """[G, n, m] each: tau/2 s_f . dY_i and s_f . V_j, with the signs s_f of `how`
    (tau/2 here, so no gradient is copied to scale it)."""
    signs = how.signs().to(dy.device, dy.dtype)
    return (dy @ signs).mul_(tau / 2), v @ signs


def _proj(q, k, v, q_codes, k_codes, dy, tau, ops, how, stage, need_q, need_k):
    """dQ, dK of eq. (4) with <dY_i, V_j> estimated per hash by random sign projections."""
    with stage(LSH_STAGES[1]):
        a, b = _projections(dy, v, tau, how)
    return _scaled(q, k, q_codes, k_codes, a, b, tau, ops, stage, need_q, need_k)


def _scaled(q, k, q_codes, k_codes, a, b, tau, ops, stage, need_q, need_k):
    """proj's dQ and dK from its row scales a (query side) and b (key side)."""
    dq = dk = None
    if need_q:
        with stage(LSH_STAGES[1]):
            dq = ops.scaled_cumulation(q_codes, k_codes, k, b, a, tau)
    if need_k:
        with stage(LSH_STAGES[2]):
            dk = ops.scaled_cumulation(k_codes, q_codes, q, a, b, tau)
    return dq, dk


def _pairs(q, k, v, q_codes, k_codes, dy, tau, ops, how, stage, need_q, need_k):
    """dQ, dK over colliding pairs: eq. (4) ("pairs") or eq. (3) ("star")."""
    weight, dq, dk = PAIR_WEIGHTS[how.kind], None, None
    if need_q:
        with stage(LSH_STAGES[1]):
            dq = ops.pair_cumulation(q_codes, k_codes, q, k, dy, v, tau, weight, how.bound)
    if need_k:
        with stage(LSH_STAGES[2]):
            dk = ops.pair_cumulation(k_codes, q_codes, k, q, v, dy, tau, weight, how.bound)
    return dq, dk


_LINEAR_GRADIENTS = {"lsh": _lsh, "proj": _proj, "pairs": _pairs, "star": _pairs}


def dense_backward(q, k, v, q_codes, k_codes, dy, tau: int, kind: str = "dense"):
    """The lower-bound gradients with an explicit n x n weight matrix (O(n^2) memory).

    "expected" keeps E only on query rows that collide with some key in some hash: a row
    with no collision has Y_i = 0, whose normalisation divides dY_i by EPS, and "dense"
    (C_i = 0) sends nothing through it, so neither does "expected"."""
    if kind == "dense":
        c = reference.collision_frequency(q_codes, k_codes).to(dy.dtype)
    else:
        cos = (q @ k.transpose(-1, -2)).clamp(-1.0, 1.0)
        c = (1.0 - torch.arccos(cos) / math.pi) ** tau
        ones = torch.ones(*k_codes.shape[:2], 1, dtype=dy.dtype, device=dy.device)
        collides = reference.cumulation(q_codes, k_codes, ones, tau) > 0  # [G, n_q, 1]
        c = c * collides.to(c.dtype)
    dv = c.transpose(-1, -2) @ dy
    w = (tau / 2) * (dy @ v.transpose(-1, -2)) * c
    return w @ k, w.transpose(-1, -2) @ q, dv
