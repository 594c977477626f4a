"""YOSO's LSH cumulation as a trainable torch op (YOSO seed, Sec. 3.3).

Forward: Y = C V with C_ij the fraction of the m hashes where q_i and k_j collide.
Backward uses the paper's lower bound of the collision probability's derivative,
(tau/2) (1 - theta/pi)^tau, estimated by the same collisions (eq. 4):
    dV = C^T dY,
    dQ_i = tau/2 sum_j C_ij <dY_i, V_j> K_j,
    dK_j = tau/2 sum_i C_ij <dY_i, V_j> Q_i.
"lsh" computes these in linear cost (dV by the cumulation with queries and keys swapped,
dQ and dK by cumulations factorised over the value columns); "dense" builds C as an
n x n matrix from the same codes (O(n^2), for checking); "expected" uses the exact
expectation E = (1 - theta/pi)^tau instead of C (O(n^2)). Autograd handles the
normalisations of Q, K and the output around this op.
"""

from __future__ import annotations

import math

import torch

from attnbench.kernels.lsh import reference

BACKWARDS = ("lsh", "dense", "expected")


class LSHCumulation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, q_codes, k_codes, tau, ops, backward):
        """q, k unit rows [G, n, d]; v [G, n, d_v]; codes int32 [G, n, m]; ops: the kernels."""
        ctx.save_for_backward(q, k, v, q_codes, k_codes)
        ctx.tau, ctx.ops, ctx.backward = tau, ops, backward
        return ops.cumulation(q_codes, k_codes, v, tau)

    @staticmethod
    def backward(ctx, dy):
        q, k, v, q_codes, k_codes = ctx.saved_tensors
        tau, ops = ctx.tau, ctx.ops
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        dy = dy.contiguous()
        if ctx.backward == "lsh":
            dq = dk = dv = None
            if need_v:
                dv = ops.cumulation(k_codes, q_codes, dy, tau)
            if need_q:
                dq = (tau / 2) * ops.weighted_cumulation(q_codes, k_codes, v, k, dy, tau)
            if need_k:
                dk = (tau / 2) * ops.weighted_cumulation(k_codes, q_codes, dy, q, v, tau)
        else:
            dq, dk, dv = dense_backward(q, k, v, q_codes, k_codes, dy, tau, ctx.backward)
        return dq, dk, dv, None, None, None, None, None


def dense_backward(q, k, v, q_codes, k_codes, dy, tau: int, kind: str = "dense"):
    """The lower-bound gradients with an explicit n x n weight matrix (O(n^2) memory)."""
    if kind == "dense":
        c = reference.collision_frequency(q_codes, k_codes).to(dy.dtype)
    else:
        cos = (q @ k.transpose(-1, -2)).clamp(-1.0, 1.0)
        c = (1.0 - torch.arccos(cos) / math.pi) ** tau
    dv = c.transpose(-1, -2) @ dy
    w = (tau / 2) * (dy @ v.transpose(-1, -2)) * c
    return w @ k, w.transpose(-1, -2) @ q, dv
