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

The caller may pass `stage(name)`, a context manager factory, to mark the backward's parts
in profiler traces: LSH_STAGES for "lsh", DENSE_STAGE otherwise. The names are this op's
own; the caller decides how a range is labelled.
"""

from __future__ import annotations

import contextlib
import math

import torch

from attnbench.kernels.lsh import reference

BACKWARDS = ("lsh", "dense", "expected")
# The backward's marked parts: dV, dQ, dK of the linear estimator, in the order they run...
LSH_STAGES = ("backward_dv", "backward_dq", "backward_dk")
# ... or the one dense n x n computation of all three.
DENSE_STAGE = "backward_dense"


def no_stage(name: str) -> contextlib.AbstractContextManager:
    """The default marker: marks nothing."""
    return contextlib.nullcontext()


class LSHCumulation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, q_codes, k_codes, tau, ops, backward, stage=no_stage):
        """q, k unit rows [G, n, d]; v [G, n, d_v]; codes int32 [G, n, m]; ops: the kernels;
        stage: the backward's marker (module docstring)."""
        ctx.save_for_backward(q, k, v, q_codes, k_codes)
        ctx.tau, ctx.ops, ctx.backward, ctx.stage = tau, ops, backward, stage
        return ops.cumulation(q_codes, k_codes, v, tau)

    @staticmethod
    def backward(ctx, dy):
        q, k, v, q_codes, k_codes = ctx.saved_tensors
        tau, ops, stage = ctx.tau, ctx.ops, ctx.stage
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        dy = dy.contiguous()
        if ctx.backward == "lsh":
            dq = dk = dv = None
            if need_v:
                with stage(LSH_STAGES[0]):
                    dv = ops.cumulation(k_codes, q_codes, dy, tau)
            if need_q:
                with stage(LSH_STAGES[1]):
                    dq = (tau / 2) * ops.weighted_cumulation(q_codes, k_codes, v, k, dy, tau)
            if need_k:
                with stage(LSH_STAGES[2]):
                    dk = (tau / 2) * ops.weighted_cumulation(k_codes, q_codes, dy, q, v, tau)
        else:
            with stage(DENSE_STAGE):
                dq, dk, dv = dense_backward(q, k, v, q_codes, k_codes, dy, tau, ctx.backward)
        # no gradient for the codes, tau, ops, the backward's kind or the marker
        return (dq, dk, dv) + (None,) * (len(ctx.needs_input_grad) - 3)


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
