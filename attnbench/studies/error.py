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
from attnbench.measure.memory import available_bytes
from attnbench.metrics import (
    VS_SOFTMAX,
    argmax_hit_rate,
    captured_mass,
    map_summary,
    mean_radian,
    recall_at_k,
    total_variation,
)
from attnbench.results import Row
from attnbench.studies.exact import by_rows, exact_softmax, planes_of, row_blocks
from attnbench.studies.time import HEADROOM

# Bytes per entry of a backend's whole dense map while it is built (weights, scores and a
# mask or two), for backends that cannot give it a block of rows at a time.
DENSE_MAP_BYTES = 16


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


def run_error(
    spec: ErrorSpec, on_step: Callable[[str], None] = lambda _: None
) -> Iterator[list[Row]]:
    """Yield, for each length, the rows of every backend once all its trials are done.

    Trial t draws inputs with seed `seed + t` (generated inputs) and hashes with the same
    seed, so each trial is an independent, reproducible draw. The dense references go a
    block of query rows at a time (`exact`); a backend, or a dense attention map, that is
    predicted not to fit in memory is recorded as skipped instead of run.
    """
    yoso_e, yoso = spec.yoso_e, spec.yoso
    for n, grid in spec.layouts():
        errors: dict[tuple[str, str], list[float]] = {}
        skipped: dict[tuple[str, str], str] = {}
        impl: dict[str, str] = {}
        for trial in range(spec.trials):
            on_step(f"n={n} trial {trial + 1}/{spec.trials}")
            seed = spec.seed + trial
            q, k, v = spec.inputs.make(n, seed, spec.dtype, spec.device, grid)
            with torch.no_grad():
                expected = by_rows(yoso_e, q, k, v)
                for backend in yoso:
                    trial_backend = backend.with_values(seed=seed)
                    errors.setdefault((backend.spec, "radian_vs_yoso_e"), []).append(
                        mean_radian(trial_backend(q, k, v), expected)
                    )
                    impl[backend.spec] = trial_backend.impl(spec.device)
                if spec.backends:
                    reference = exact_softmax(q, k, v)
                for backend in spec.backends:
                    trial_backend = (
                        backend.with_values(seed=seed) if backend.stochastic else backend
                    )
                    impl[backend.spec] = trial_backend.impl(spec.device)
                    if trial == 0:  # decided once, so every trial of a case does the same
                        _decide_skips(backend, q, spec.device, skipped)
                    if (backend.spec, "rel_frobenius_vs_softmax") in skipped:
                        continue
                    out = trial_backend(q, k, v, grid=grid)
                    found = {metric: fn(out, reference) for metric, fn in VS_SOFTMAX.items()}
                    found |= _sampler_metrics(trial_backend)
                    if (backend.spec, "captured_mass_vs_softmax") not in skipped:
                        found |= _map_metrics(trial_backend, q, k, grid)
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
        ] + [
            _row(spec, n, grid, name, impl[name], metric, [], skip_reason=reason)
            for (name, metric), reason in skipped.items()
        ]


def _decide_skips(backend: Backend, q, device: str, skipped: dict) -> None:
    """Record in `skipped` what of `backend` would not fit in memory on inputs like q: its
    forward (by `predicted_bytes`), or else a dense map it cannot give in row blocks."""
    free = available_bytes(device)

    def no_room(need: int) -> str:
        return f"needs ~{need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"

    forward = backend.predicted_bytes(*q.shape, q.element_size())
    if forward > HEADROOM * free:
        skipped[(backend.spec, "rel_frobenius_vs_softmax")] = no_room(forward)
        return
    dense_map = DENSE_MAP_BYTES * planes_of(q) * q.shape[-2] ** 2
    if not backend.map_in_blocks and dense_map > HEADROOM * free:
        skipped[(backend.spec, "captured_mass_vs_softmax")] = "attention map " + no_room(dense_map)


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


def _map_metrics(backend: Backend, q, k, grid) -> dict[str, float]:
    """Captured mass and TV distance, for backends that can show their attention map,
    reduced a block of query rows at a time against the same rows of softmax's map."""
    n, planes = q.shape[-2], planes_of(q)
    k64 = k.double()
    # per-row results go straight into preallocated rows (see `exact.by_rows` for why)
    mass = torch.empty(q.shape[:-1], dtype=torch.float64, device=q.device)
    tv = torch.empty_like(mass)
    try:
        for rows, weights in backend.map_blocks(q, k, row_blocks(n, n, planes), grid):
            # a dense map comes as one block: reduce it in blocks all the same
            for sub in row_blocks(rows.stop - rows.start, n, planes):
                at = slice(rows.start + sub.start, rows.start + sub.stop)
                exact = softmax_weights(q[..., at, :].double(), k64)
                mass[..., at] = captured_mass(exact, weights[..., sub, :] > 0)
                tv[..., at] = total_variation(exact, weights[..., sub, :])
    except NotImplementedError:
        return {}
    return map_summary(mass, tv)


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
        L = backend.values["L"]
        truth = by_rows(lambda q, k: reference.topk_mode(q, k, height, width, kappa, L)[0], qf, kf)
    else:
        truth = by_rows(lambda q, k: reference.topk_max(q, k, kappa)[0], qf, kf)
    best = by_rows(lambda q, k: reference.scores(q, k).amax(-1, keepdim=True), qf, kf)
    return {
        "argmax_hit_rate": argmax_hit_rate(scores[..., 0], best[..., 0]),
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


def _row(
    spec: ErrorSpec, n: int, grid, backend: str, impl: str, metric: str, values,
    skip_reason: str = "",
):  # fmt: skip
    """The row of one (backend, metric) case: mean, std and spread over trials, or, with a
    `skip_reason`, a skipped row without values."""
    vals = np.asarray(values, dtype=np.float64)
    case = dict(
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
        unit=UNITS[metric.partition("_vs_")[0]],
    )
    if skip_reason:
        return Row(**case, status="skipped", reason=skip_reason)
    return Row(
        **case,
        value=float(vals.mean()),
        std=float(vals.std(ddof=1)) if len(vals) > 1 else 0.0,
        count=len(vals),
        p10=float(np.percentile(vals, 10)),
        p90=float(np.percentile(vals, 90)),
        samples=" ".join(f"{x:.6g}" for x in vals),
        reason=f"trials use seeds {spec.seed}..{spec.seed + len(vals) - 1}"
        if len(vals) > 1
        else "",
    )
