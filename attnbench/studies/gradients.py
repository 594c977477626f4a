"""dQ, dK, dV for the error study's fwdbwd mode: a backend's, one call or a stack of seeded
draws, and the reference's in float64, all for the same upstream gradient dY.

dY is drawn from the trial's seed alone (a stream apart from the inputs'), so every backend
and the reference are differentiated along the same direction: gradients differ only by
what the backends compute.
"""

from __future__ import annotations

import numpy as np
import torch

from attnbench.backends import Backend
from attnbench.backends.rowblocks import planes_of, row_blocks
from attnbench.case import Case
from attnbench.measure.gradients import DrawStats, cosine, pooled_bias, pooled_noise
from attnbench.measure.metrics import rel_frobenius
from attnbench.results.schema import Row
from attnbench.run.study import case_row
from attnbench.studies.exact import softmax_attention

GRADIENTS = ("dq", "dk", "dv")
UPSTREAM_STREAM = 0x6459  # "dY": the upstream gradient's stream beside the inputs' seed


def upstream(q: torch.Tensor, v: torch.Tensor, seed: int) -> torch.Tensor:
    """dY [..., n, d_v], standard normal in float64 on q's device, from `seed` alone."""
    state = np.random.SeedSequence([seed, UPSTREAM_STREAM]).generate_state(1, np.uint32)
    gen = torch.Generator().manual_seed(int(state[0]))
    shape = (*q.shape[:-1], v.shape[-1])
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(q.device)


def call_grads(backend: Backend, q, k, v, dy, grid=None):
    """One call's output (detached) and its dQ, dK, dV for dY, in the inputs' dtype; an
    input the output does not depend on (reformer's k) gets a zero gradient."""
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    with torch.enable_grad():
        out = backend(*leaves, grid=grid)
        out.backward(dy.to(out.dtype))
    grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves]
    return out.detach(), grads


def draws(backend: Backend, q, k, v, dy, grid, seeds):
    """Outputs [S, ...] and the stacks [S, ...] of dQ, dK, dV in float64 of one call per
    seed: a stochastic backend's draws on fixed inputs and dY."""
    outs, grads = [], []
    for s in seeds:
        out, g = call_grads(backend.with_values(seed=s), q, k, v, dy, grid)
        outs.append(out.double())
        grads.append([x.double() for x in g])
    return torch.stack(outs), [torch.stack(stack) for stack in zip(*grads, strict=True)]


def reference_grads(reference: Backend, q, k, v, dy, grid=None) -> list[torch.Tensor]:
    """The reference's dQ, dK, dV in float64: exact softmax attention's by autograd, and a
    block of query rows at a time (row i of the output depends on query i alone, so dK and
    dV sum over blocks) for softmax and any deterministic reference whose rows do; whole
    otherwise (a stochastic reference would draw anew for every block)."""
    if reference.name in ("softmax", "sdpa"):
        return grads_by_rows(softmax_attention, q, k, v, dy)
    if reference.map_in_blocks and not reference.spatial and not reference.stochastic:
        return grads_by_rows(reference, q, k, v, dy)
    _, grads = call_grads(reference, q.double(), k.double(), v.double(), dy, grid)
    return grads


def grads_by_rows(fn, q, k, v, dy, budget: int | None = None) -> list[torch.Tensor]:
    """dQ, dK, dV in float64 of fn(q, k, v), whose output row i depends on query i alone,
    over blocks of query rows (O(rows x n) memory, as `rowblocks.by_rows`; `budget` as
    `row_blocks`)."""
    k, v = (t.detach().double().requires_grad_(True) for t in (k, v))
    dq = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    with torch.enable_grad():
        for rows in row_blocks(q.shape[-2], k.shape[-2], planes_of(q), budget):
            block = q[..., rows, :].detach().double().requires_grad_(True)
            fn(block, k, v).backward(dy[..., rows, :])
            dq[..., rows, :] = block.grad
    return [dq, k.grad, v.grad]


def one_call_metrics(grads, expected, vs: str) -> dict[str, float]:
    """grad_rel_<g> (relative Frobenius error) and grad_cos_<g> (cosine) of one call's
    gradients against the reference's."""
    metrics = {}
    for name, g, ref in zip(GRADIENTS, grads, expected, strict=True):
        metrics[f"grad_rel_{name}{vs}"] = rel_frobenius(g, ref)
        metrics[f"grad_cos_{name}{vs}"] = cosine(g, ref)
    return metrics


def draw_rows(case: Case, name: str, stats: list[DrawStats], vs: str) -> list[Row]:
    """grad_bias_<g> and grad_noise_<g> over the trials' draws (`measure.gradients`), their
    Monte Carlo standard errors as std; samples: each trial's own value."""
    first, draws = case.seed, case.settings["mc_seeds"]
    where = f"vs {case.settings['reference']}, trial seeds {first}..{first + len(stats) - 1}, "
    where += f"{draws} draws each"
    bias, bias_se = pooled_bias(stats)
    noise, noise_se = pooled_noise(stats)
    rows = []
    for metric, value, std, samples, how in (
        (
            f"grad_bias_{name}{vs}", bias, bias_se, [max(s.bias2, 0.0) ** 0.5 for s in stats],
            "sqrt of the mean over trials of (|mean of draws - ref|^2 - tr cov / draws) "
            "/ |ref|^2; std: half the width of sqrt(mean +- se), se by the jackknife "
            "over draws",
        ),
        (
            f"grad_noise_{name}{vs}", noise, noise_se, [s.noise for s in stats],
            "sqrt of the sum of per-entry variances over draws / |ref|, mean over trials; "
            "std: its standard error by the jackknife over draws",
        ),
    ):  # fmt: skip
        rows.append(
            case_row(
                case,
                metric,
                unit="",
                value=value,
                std=std,
                count=len(stats),
                p10=float(np.percentile(samples, 10)),
                p90=float(np.percentile(samples, 90)),
                samples=[float(x) for x in samples],
                method=f"{where}; {how}",
            )  # fmt: skip
        )
    return rows
