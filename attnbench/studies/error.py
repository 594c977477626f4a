"""The approximation-error study.

YOSO Fig. 8: mean radian angle between YOSO-E and YOSO-m outputs for each number of hashes
m and length n, mean +- std over trials (seeds). And for any other backend: its error
against exact softmax computed in float64; for stochastic ones also the Monte Carlo bias
and spread over `mc_seeds` seeds on the same inputs, and the sampler's own diagnostics
(SNIS effective sample size, Metropolis-Hastings acceptance rate).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from attnbench.backends import Backend, get_backend
from attnbench.backends.softmax import softmax_weights
from attnbench.inputs import Inputs
from attnbench.metrics import (
    VS_SOFTMAX,
    argmax_hit_rate,
    map_metrics,
    mean_radian,
    recall_at_k,
)
from attnbench.results import Row


@dataclass
class ErrorSpec:
    seqs: list[int]
    hashes: list[int]
    tau: int | str = 8
    trials: int = 3
    mc_seeds: int = 8  # seeds per input for a stochastic backend's bias and std
    inputs: Inputs = field(default_factory=lambda: Inputs("clustered", 1, 4, 64))
    backends: list[Backend] = field(default_factory=list)
    dtype: torch.dtype = torch.float32
    device: str = "cpu"
    seed: int = 0
    grids: list[tuple[int, int]] | None = None  # images H x W instead of 1-D sequences

    def layouts(self) -> list[tuple[int, tuple[int, int] | None]]:
        """(n, grid) of every case: grid None for a 1-D sequence."""
        return list(zip(self.seqs, self.grids or [None] * len(self.seqs), strict=True))

    def __post_init__(self):
        if self.grids:
            self.seqs = [h * w for h, w in self.grids]
        # built here so that a bad m or tau fails before any work starts
        self.yoso_e = get_backend(f"yoso-e:tau={self.tau}")
        self.yoso = [
            get_backend(f"yoso:m={m},tau={self.tau},seed={self.seed}") for m in self.hashes
        ]

    @property
    def steps(self) -> int:
        return len(self.seqs) * self.trials


def exact_softmax(q, k, v) -> torch.Tensor:
    """The float64 reference every backend is compared with."""
    q, k, v = q.double(), k.double(), v.double()
    return softmax_weights(q, k) @ v


def run_error(
    spec: ErrorSpec, on_step: Callable[[str], None] = lambda _: None
) -> Iterator[list[Row]]:
    """Yield, for each length, the rows of every backend once all its trials are done.

    Trial t draws inputs with seed `seed + t` (generated inputs) and hashes with the same
    seed, so each trial is an independent, reproducible draw.
    """
    yoso_e, yoso = spec.yoso_e, spec.yoso
    for n, grid in spec.layouts():
        errors: dict[tuple[str, str], list[float]] = {}
        impl: dict[str, str] = {}
        for trial in range(spec.trials):
            on_step(f"n={n} trial {trial + 1}/{spec.trials}")
            seed = spec.seed + trial
            q, k, v = spec.inputs.make(n, seed, spec.dtype, spec.device, grid)
            with torch.no_grad():
                expected = yoso_e(q, k, v)
                for backend in yoso:
                    trial_backend = backend.with_values(seed=seed)
                    errors.setdefault((backend.spec, "radian_vs_yoso_e"), []).append(
                        mean_radian(trial_backend(q, k, v), expected)
                    )
                    impl[backend.spec] = trial_backend.impl(spec.device)
                if spec.backends:
                    reference = exact_softmax(q, k, v)
                    weights = softmax_weights(q.double(), k.double())
                for backend in spec.backends:
                    trial_backend = (
                        backend.with_values(seed=seed) if backend.stochastic else backend
                    )
                    out = trial_backend(q, k, v, grid=grid)
                    impl[backend.spec] = trial_backend.impl(spec.device)
                    found = {metric: fn(out, reference) for metric, fn in VS_SOFTMAX.items()}
                    found |= _sampler_metrics(trial_backend)
                    found |= _map_metrics(trial_backend, q, k, weights, grid)
                    found |= _search_metrics(trial_backend, q, k, grid)
                    if backend.stochastic and spec.mc_seeds > 1:
                        first = seed * spec.mc_seeds
                        seeds = range(first, first + spec.mc_seeds)
                        found |= _monte_carlo_metrics(backend, q, k, v, reference, grid, seeds)
                    for metric, value in found.items():
                        errors.setdefault((backend.spec, metric), []).append(value)
        yield [
            _row(spec, n, grid, name, impl[name], metric, values)
            for (name, metric), values in errors.items()
        ]


def _sampler_metrics(backend: Backend) -> dict[str, float]:
    """The diagnostics a sampler recorded on its last call (SCRAM's SNIS and MH)."""
    found = {}
    for attr, metric in (("last_ess", "ess"), ("last_acceptance", "acceptance_rate")):
        value = getattr(backend, attr, None)
        if value is not None:
            found[metric] = float(value)
    return found


def _monte_carlo_metrics(backend: Backend, q, k, v, reference, grid, seeds) -> dict[str, float]:
    """Bias and spread of a stochastic backend over seeds on fixed inputs, relative to the
    exact output: |mean_s o_s - o| / |o| and sqrt(sum of per-entry variances) / |o|."""
    outs = torch.stack([backend.with_values(seed=s)(q, k, v, grid=grid).double() for s in seeds])
    norm = reference.norm()
    return {
        "mc_bias_vs_softmax": float((outs.mean(0) - reference).norm() / norm),
        "mc_std_vs_softmax": float(outs.var(0, unbiased=True).sum().sqrt() / norm),
    }


def _map_metrics(backend: Backend, q, k, weights, grid) -> dict[str, float]:
    """Captured mass and TV distance, for backends that can show their attention map."""
    try:
        amap = backend.map_of(q, k, grid=grid)
    except NotImplementedError:
        return {}
    return map_metrics(weights, amap)


def _search_metrics(backend: Backend, q, k, grid) -> dict[str, float]:
    """For backends that search keys (SCRAM's PatchMatch): argmax hit rate and recall@kappa
    against brute force (top-kappa, or greedy suppression with separation L for modes)."""
    if not hasattr(backend, "matches"):
        return {}
    from attnbench.backends.registry import token_grid
    from attnbench.kernels.patchmatch import reference

    b, h, n, d = q.shape
    height, width = token_grid(grid, n)
    found, scores = backend.matches(q, k, (height, width))
    qf, kf = q.reshape(b * h, n, d), k.reshape(b * h, n, d)
    kappa = found.shape[-1]
    if backend.values.get("variant") == "mode":
        truth, _ = reference.topk_mode(qf, kf, height, width, kappa, backend.values["L"])
    else:
        truth, _ = reference.topk_max(qf, kf, kappa)
    return {
        "argmax_hit_rate": argmax_hit_rate(scores[..., 0], reference.scores(qf, kf)),
        "recall_at_kappa": recall_at_k(found.long(), truth),
    }


UNITS = {
    "radian": "rad",
    "rel_frobenius": "",
    "max_abs": "abs",
    "captured_mass": "",
    "captured_mass_p5": "",
    "tv": "",
    "argmax_hit_rate": "",
    "recall_at_kappa": "",
    "mc_bias": "",
    "mc_std": "",
    "ess": "samples",
    "acceptance_rate": "",
}


def _row(spec: ErrorSpec, n: int, grid, backend: str, impl: str, metric: str, values):
    vals = np.asarray(values, dtype=np.float64)
    return Row(
        study="error",
        backend=backend,
        impl=impl,
        device=spec.device,
        dtype=str(spec.dtype).removeprefix("torch."),
        mode="fwd",
        inputs=spec.inputs.label if grid is None else f"{spec.inputs.label} {grid[0]}x{grid[1]}",
        batch=spec.inputs.batch,
        heads=spec.inputs.heads,
        seq=n,
        dim=spec.inputs.dim,
        metric=metric,
        value=float(vals.mean()),
        unit=UNITS[metric.partition("_vs_")[0]],
        std=float(vals.std(ddof=1)) if len(vals) > 1 else 0.0,
        count=len(vals),
        p10=float(np.percentile(vals, 10)),
        p90=float(np.percentile(vals, 90)),
        samples=" ".join(f"{x:.6g}" for x in vals),
        reason=f"trials use seeds {spec.seed}..{spec.seed + len(vals) - 1}"
        if len(vals) > 1
        else "",
    )
