"""The approximation-error study: every backend against a reference backend.

A case is one backend at one length; its rows give, for each metric, the mean +- std over
`trials` (trial t draws inputs and the backend's seed with seed + t). Metrics are named
`<metric>_vs_<reference>`: the output's angle, relative and largest error against the
reference's output; against exact softmax also the captured mass and TV distance of the
backend's attention map; for a stochastic backend the Monte Carlo bias and spread over
`mc_seeds` seeds on the same inputs; and whatever the backend reports of its own work
(`Backend.diagnostics`: a search's hit rate, a sampler's ESS or acceptance).

YOSO Fig. 8 is the sweep of `yoso:m=...` backends against `yoso-e` (radian_vs_yoso_e).
Fig. 8's claim, an error that grows only logarithmically in n, is measured by one more row
per yoso backend (one per m), written with its last length: `radian_slope_log2n_vs_*`,
the least-squares slope of every trial's angle against log2 n (radians per doubling of n),
with the slope's standard error as its std.

`mode="fwdbwd"` adds gradient rows to the forward rows of each case (which stay as in
`fwd`, so every view of an error file reads both): dQ, dK, dV of the backend for one
upstream gradient dY drawn from the trial's seed, the same for every backend, against the
reference's in float64 (exact softmax's by autograd, or the reference backend's own
backward). Per gradient g in dq, dk, dv: `grad_rel_<g>` (relative Frobenius error of one
call) and `grad_cos_<g>` (cosine), mean +- std over trials; for a stochastic backend, from
its `mc_seeds` draws on the same inputs and dY, `grad_bias_<g>` and `grad_noise_<g>`
(`measure.gradients`: both relative to the reference's norm, bias without the draws' own
noise, so that bias^2 + noise^2 is the mean squared one-call error), with their Monte Carlo
standard errors (jackknife over draws) as std. Every compared backend and the reference
must have a backward (UsageError otherwise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from attnbench.backends import Backend, get_backend
from attnbench.backends.rowblocks import by_rows, planes_of, row_blocks
from attnbench.backends.softmax import softmax_weights
from attnbench.case import Case, CaseInputs
from attnbench.errors import UsageError
from attnbench.inputs import Inputs, Source
from attnbench.measure.gradients import DrawStats, draw_statistics
from attnbench.measure.memory import available_bytes
from attnbench.measure.metrics import (
    SLOPE,
    captured_mass,
    map_summary,
    max_abs,
    mean_radian,
    rel_frobenius,
    total_variation,
)
from attnbench.results.schema import Row
from attnbench.run.study import Measure, Study, case_row
from attnbench.run.worker import HEADROOM, no_room
from attnbench.studies import gradients
from attnbench.studies.exact import exact_softmax
from attnbench.studies.gradients import GRADIENTS

# Bytes per entry of a backend's whole dense map while it is built (weights, scores and a
# mask or two), for backends that cannot give it a block of rows at a time.
DENSE_MAP_BYTES = 16
EXACT = ("softmax", "sdpa")  # references computing exact softmax attention
OUTPUT_METRICS = {"radian": mean_radian, "rel_frobenius": rel_frobenius, "max_abs": max_abs}
MODES = ("fwd", "fwdbwd")  # the outputs' error; also the gradients' (module docstring)


@dataclass
class ErrorStudy(Study):
    """The study: every compared backend at every length against the reference; each yoso
    backend's last length also gets the fitted slope rows in `finish`."""

    seqs: list[int]
    hashes: list[int] = field(default_factory=list)  # adds a yoso:m=... backend per entry
    tau: int | str = 8
    trials: int = 3
    mc_seeds: int = 8  # seeds per input for a stochastic backend's bias and std
    inputs: Source = field(default_factory=lambda: Inputs("clustered", 1, 4, 64))
    backends: list[Backend] = field(default_factory=list)
    dtype: torch.dtype = torch.float32
    device: str = "cpu"
    seed: int = 0
    grids: list[tuple[int, int]] | None = None  # images H x W instead of 1-D sequences
    # the backend every other is compared with; None: yoso-e with `tau` when only hashes are
    # swept (YOSO Fig. 8), exact softmax otherwise
    reference: str | None = None
    mode: str = "fwd"

    def __post_init__(self):
        if self.grids:
            self.seqs = [h * w for h, w in self.grids]
        # built here so that a bad m, tau or reference fails before any work starts
        yoso = [get_backend(f"yoso:m={m},tau={self.tau},seed={self.seed}") for m in self.hashes]
        # a backend named twice (by --hashes and --backends) is run once
        self.compared = list({b.spec: b for b in yoso + list(self.backends)}.values())
        if self.reference is None:
            only_hashes = self.hashes and not self.backends
            self.reference = f"yoso-e:tau={self.tau}" if only_hashes else "softmax"
        self.reference_backend = get_backend(self.reference)
        if self.mode not in MODES:
            raise UsageError(f"--mode: unknown mode {self.mode!r}; valid: {', '.join(MODES)}")
        if self.mode == "fwdbwd":
            self._check_backwards()
        self._slopes = _Slopes(self)

    def _check_backwards(self) -> None:
        """UsageError unless the reference and every compared backend have a backward."""
        if not self.reference_backend.backward:
            raise UsageError(
                f"--reference {self.reference_backend.label} has no backward pass, so "
                "--mode fwdbwd has no gradient to compare with; pick one that has "
                "(`attnbench backends`)"
            )
        without = [b.label for b in self.compared if not b.backward]
        if without:
            raise UsageError(
                f"--mode fwdbwd: {', '.join(without)} {'has' if len(without) == 1 else 'have'} "
                "no backward pass; compare backends that have one (`attnbench backends`)"
            )

    def layouts(self) -> list[tuple[int, tuple[int, int] | None]]:
        """(n, grid) of every case: grid None for a 1-D sequence."""
        return list(zip(self.seqs, self.grids or [None] * len(self.seqs), strict=True))

    @property
    def cases(self) -> list[Case]:
        settings = {
            "trials": self.trials,
            "mc_seeds": self.mc_seeds,
            "reference": self.reference_backend.spec,
        }
        source, dtype = self.inputs, str(self.dtype).removeprefix("torch.")
        shared = dict(
            study="error", inputs=source, batch=source.batch, heads=source.heads,
            dim=source.dim, dtype=dtype, device=self.device, seed=self.seed, settings=settings,
        )  # fmt: skip
        return [
            Case(backend=backend, n=n, grid=grid, mode=self.mode, **shared)
            for n, grid in self.layouts()
            for backend in self.compared
        ]

    def validate(self, cases: list[Case]) -> None:
        """UsageError before any work if a backend, or the reference, can never run a case."""
        super().validate(cases)
        for case in cases:
            self.reference_backend.validate(case)

    def comparison_key(self, case: Case) -> object:
        """A backend's lengths are related: `finish` fits its slope over all of them."""
        return case.backend.spec

    def finish(self, case: Case, rows: list[Row]) -> list[Row]:
        return self._slopes(case, rows)

    @property
    def measure(self) -> Measure:
        return Measure(measure, "radian" + suffix(self.reference_backend), "rad")


def suffix(reference: Backend) -> str:
    """What metric names end with: `_vs_softmax`, `_vs_yoso_e`."""
    return "_vs_" + reference.name.replace("-", "_")


class _Slopes:
    """`finish` hook: collects each yoso backend's angle samples per length and, with the
    rows of its last length, adds the slope of angle against log2 n (two lengths or more)."""

    def __init__(self, spec: ErrorStudy):
        self.last = {c.backend.spec: c.n for c in spec.cases if c.backend.name == "yoso"}
        self.points: dict[tuple[str, str], dict[int, list[float]]] = {}

    def __call__(self, case: Case, rows: list) -> list:
        backend = case.backend.spec
        if backend not in self.last:
            return rows
        for r in rows:
            if r.status == "ok" and r.metric.startswith("radian_vs_"):
                per_n = self.points.setdefault((backend, r.metric), {})
                per_n[case.n] = list(r.samples) or [r.value]
        resumed = any(r.metric.startswith(SLOPE) for r in rows)
        if case.n != self.last[backend] or resumed:
            return rows
        fits = [
            _slope_row(case, metric, per_n)
            for (b, metric), per_n in self.points.items()
            if b == backend and len(per_n) >= 2
        ]
        return rows + fits


def fit_slope(xs, ys) -> tuple[float, float]:
    """Least-squares slope of ys on xs and its standard error (0 with two points or fewer)."""
    x, y = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    dx = x - x.mean()
    sxx = float(dx @ dx)
    slope = float(dx @ (y - y.mean())) / sxx
    if len(x) <= 2:
        return slope, 0.0
    resid = y - y.mean() - slope * dx
    return slope, float(np.sqrt(resid @ resid / (len(x) - 2) / sxx))


def _slope_row(case: Case, metric: str, per_n: dict[int, list[float]]) -> Row:
    xs = [np.log2(n) for n, vals in per_n.items() for _ in vals]
    ys = [v for vals in per_n.values() for v in vals]
    slope, stderr = fit_slope(xs, ys)
    lengths = sorted(per_n)
    name = SLOPE + "_vs_" + metric.partition("_vs_")[2]
    return case_row(
        case,
        name,
        unit=_unit(name),
        value=slope,
        std=stderr,
        count=case.settings["trials"],
        method=(
            f"least squares of {metric} (every trial) on log2 n over n = "
            f"{', '.join(map(str, lengths))}; std: the slope's standard error"
        ),
    )


def measure(case: Case, inputs: CaseInputs) -> list[Row]:
    reference = get_backend(case.settings["reference"])
    vs = suffix(reference)
    exact = reference.name in EXACT
    backward = case.mode == "fwdbwd"
    trials, mc_seeds = case.settings["trials"], case.settings["mc_seeds"]
    skipped = {} if not exact else _map_skips(case, vs)
    found: dict[str, list[float]] = {}
    drawn: dict[str, list[DrawStats]] = {}  # grad_<g>: each trial's draws against the reference
    finite = True  # every output of the backend: else no metric of the case means anything
    for trial in range(trials):
        seed = case.seed + trial
        q, k, v = inputs(seed)
        backend = _seeded(case.backend, seed)
        dy = gradients.upstream(q, v, seed) if backward else None
        if backward:
            out, grads = gradients.call_grads(backend, q, k, v, dy, case.grid)
        with torch.no_grad():
            make = partial(_reference, reference, q, k, v, case)
            expected = inputs.memo(("reference", reference.spec, seed), make)
            if not backward:
                out = backend(q, k, v, grid=case.grid)
            finite = finite and bool(torch.isfinite(out).all())
            metrics = {name + vs: fn(out, expected) for name, fn in OUTPUT_METRICS.items()}
            if exact and not skipped:
                metrics |= _map_metrics(backend, q, k, case.grid, vs)
            metrics |= backend.diagnostics(q, k, v, case.grid)
        if backward:
            make = partial(gradients.reference_grads, reference, q, k, v, dy, case.grid)
            expected_grads = inputs.memo(("reference grads", reference.spec, seed), make)
            metrics |= gradients.one_call_metrics(grads, expected_grads, vs)
        if backend.stochastic and mc_seeds > 1:
            seeds = range(seed * mc_seeds, (seed + 1) * mc_seeds)
            if backward:
                outs, stacks = gradients.draws(case.backend, q, k, v, dy, case.grid, seeds)
                for name, stack, ref in zip(GRADIENTS, stacks, expected_grads, strict=True):
                    drawn.setdefault(name, []).append(draw_statistics(stack, ref))
            else:
                outs = _outputs(case.backend, q, k, v, case.grid, seeds)
            metrics |= _monte_carlo(outs, expected, vs)
        for metric, value in metrics.items():
            found.setdefault(metric, []).append(value)
    rows = [_row(case, metric, values) for metric, values in found.items()]
    rows += [
        row for name, stats in drawn.items() for row in gradients.draw_rows(case, name, stats, vs)
    ]
    rows = [_mark_non_finite(row, finite) for row in rows]
    return rows + [
        case_row(case, metric, unit=_unit(metric), status="skipped", reason=reason)
        for metric, reason in skipped.items()
    ]


def _mark_non_finite(row: Row, output_finite: bool = True) -> Row:
    """A row whose value, spread or samples hold NaN or inf, or any row of a backend whose
    output did (a map of NaN weights captures "0" mass), is an `error`, not `ok`: it
    measured nothing (inputs near float32's limit overflow), and result files keep no
    infinity, so its numbers are left out."""
    numbers = [row.value, row.std, row.p10, row.p90, *row.samples]
    finite = all(x is None or math.isfinite(x) for x in numbers)
    if row.status != "ok" or (finite and output_finite):
        return row
    what = f"{row.metric} is" if not finite else "the backend's output has"
    row.status = "error"
    row.reason = f"non-finite: {what} NaN or inf (inputs near float32's limit?)"
    row.value = row.std = row.p10 = row.p90 = None
    row.samples = []
    return row


def _seeded(backend: Backend, seed: int) -> Backend:
    """A stochastic backend with the trial's seed, so each trial is an independent draw."""
    if backend.stochastic and "seed" in backend.params:
        return backend.with_values(seed=seed)
    return backend


def _reference(reference: Backend, q, k, v, case: Case) -> torch.Tensor:
    """The reference output in float64 a block of query rows at a time where its rows depend
    on their own query alone (a non-spatial backend with row-block maps), else whole."""
    if reference.name in EXACT:
        return exact_softmax(q, k, v)
    if reference.map_in_blocks and not reference.spatial:
        return by_rows(reference, q.double(), k.double(), v.double())
    return reference(q, k, v, grid=case.grid).double()


def _map_skips(case: Case, vs: str) -> dict[str, str]:
    """The map metrics skipped, with the reason, when the backend's whole dense map (it has
    no row blocks) would not fit in memory."""
    if case.backend.map_in_blocks:
        return {}
    need = DENSE_MAP_BYTES * case.batch * case.heads * case.n**2
    free = available_bytes(case.device)
    if need <= HEADROOM * free:
        return {}
    return {"captured_mass" + vs: "attention map " + no_room(need, free)}


def _outputs(backend: Backend, q, k, v, grid, seeds) -> torch.Tensor:
    """Outputs [S, ...] in float64 of one call per seed on fixed inputs."""
    with torch.no_grad():
        return torch.stack(
            [backend.with_values(seed=s)(q, k, v, grid=grid).double() for s in seeds]
        )


def _monte_carlo(outs: torch.Tensor, expected, vs: str) -> dict[str, float]:
    """Bias and spread of a stochastic backend's outputs [S, ...] over seeds on fixed
    inputs, relative to the reference output: |mean_s o_s - o| / |o| and
    sqrt(sum of per-entry variances) / |o|."""
    norm = expected.norm()
    return {
        "mc_bias" + vs: float((outs.mean(0) - expected).norm() / norm),
        "mc_std" + vs: float(outs.var(0, unbiased=True).sum().sqrt() / norm),
    }


def _map_metrics(backend: Backend, q, k, grid, vs: str = "_vs_softmax") -> dict[str, float]:
    """Captured mass and TV distance, for backends that can show their attention map,
    reduced a block of query rows at a time against the same rows of softmax's map."""
    n, planes = q.shape[-2], planes_of(q)
    k64 = k.double()
    # per-row results go straight into preallocated rows (see `rowblocks.by_rows` for why)
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
    return {m.removesuffix("_vs_softmax") + vs: x for m, x in map_summary(mass, tv).items()}


UNITS = {"radian": "rad", "max_abs": "abs", "ess": "samples", SLOPE: "rad per doubling of n"}


def _unit(metric: str) -> str:
    return UNITS.get(metric.partition("_vs_")[0], "")


def _row(case: Case, metric: str, values: list[float]) -> Row:
    """Mean, std and spread of one metric over the trials."""
    vals = np.asarray(values, dtype=np.float64)
    first = case.seed
    return case_row(
        case,
        metric,
        unit=_unit(metric),
        value=float(vals.mean()),
        std=float(vals.std(ddof=1)) if len(vals) > 1 else 0.0,
        count=len(vals),
        p10=float(np.percentile(vals, 10)),
        p90=float(np.percentile(vals, 90)),
        samples=[float(x) for x in vals],
        method=f"vs {case.settings['reference']}, trial seeds {first}..{first + len(vals) - 1}",
    )
