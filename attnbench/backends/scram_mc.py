"""SCRAM's Monte Carlo estimators (seed 002, Sec. 4.2.2): unbiased-in-the-limit alternatives
to the sparse softmax, seeded by the PatchMatch modes of the `scram` backend.

`scram-snis` draws keys from a mixture of discrete RBF bumps at the modes plus a uniform
floor (eq. 17) and self-normalises the importance weights (eqs. 13-14); `scram-mh` runs
kappa Metropolis-Hastings chains per query from the modes. Both are plain torch,
vectorised over queries, samples and chains; MH loops only over its sequential steps.

Stages: PatchMatch's, as in `scram` (device dependent), then SNIS's `proposal`, `weights`
and `estimate`, or MH's `chains` and `estimate`. Costs follow `scram`'s conventions: a
score is 2d + 1 `other_flops` (gathered dot products, no matrix product), each elementwise
op or reduction step on floats is 1, integer index arithmetic is not counted.
"""

from __future__ import annotations

import math

import torch

from attnbench.backends.cost import Cost, Shape
from attnbench.backends.masking import zero_masked_rows
from attnbench.backends.registry import MAX_SEED_PARAM, Param, int_param, register, token_grid
from attnbench.backends.scram import (
    FLOAT,
    MAX_ITERATIONS,
    PATCHMATCH_STAGES,
    SCRAM,
    _jumps,
    _positive,
    _unit,
    _variant,
    head_mask,
    patchmatch_cost,
)
from attnbench.errors import UsageError
from attnbench.kernels.patchmatch.core import MAX_KAPPA

# draws (or chain steps) per query: memory grows as n x samples x d (`predicted_bytes`)
MAX_SAMPLES = 1 << 16


_COMMON = {
    "kappa": int_param(4, 1, MAX_KAPPA, "PatchMatch modes per query"),
    "variant": Param("mode", _variant, "max: best distinct keys; mode: L apart"),
    "L": int_param(2, 1, None, "least Chebyshev distance between modes"),
    "T": int_param(8, 1, MAX_ITERATIONS, "PatchMatch iterations"),
    "jumps": Param((8, 4, 2, 1), _jumps, "propagation steps, e.g. 8/4/2/1"),
}


def _gather_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x [G, n, e] at idx [G, n, c] -> [G, n, c, e]: one gather, no loop over queries."""
    g, n, c = idx.shape
    flat = idx.reshape(g, n * c, 1).expand(-1, -1, x.shape[-1])
    return x.gather(1, flat).view(g, n, c, x.shape[-1])


def _scores_at(q: torch.Tensor, k: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """s = q_i . k_j / sqrt(d) only at the sampled keys j = idx[g, i, c]."""
    return (q.unsqueeze(2) * _gather_rows(k, idx)).sum(-1) / math.sqrt(q.shape[-1])


def _known(values: dict[str, float]) -> dict[str, float]:
    """The diagnostics that have a value (NaN before the first call)."""
    return {key: float(value) for key, value in values.items() if not math.isnan(value)}


def _key_ok(valid: torch.Tensor | None, keys: torch.Tensor) -> torch.Tensor:
    """Whether each key of keys [G, n, c] may be attended (all True without a mask)."""
    if valid is None:
        return torch.ones_like(keys, dtype=torch.bool)
    return valid.gather(1, keys.flatten(1)).view_as(keys)


class _SCRAMMonteCarlo(SCRAM):
    """Shared plumbing: flattening heads, the mode search, grid and mask checks."""

    backward = False
    stochastic = True
    spatial = True

    def impl(self, device: str) -> str:
        return "torch"

    def _check(self, grid: tuple[int, int]) -> None:
        height, width = grid
        if self.values["kappa"] > height * width:
            kappa = self.values["kappa"]
            raise UsageError(f"{self.name}: kappa={kappa} exceeds the {height * width} keys")
        self.check_grid_distances(grid)

    def _prepare(self, q, k, mask, grid):
        """Flattened q, k [B*H, n, d], the PatchMatch modes and the key validity [B*H, n]
        (None without a mask): masked keys are never modes and get no weight."""
        self._check(grid)
        b, h, n, d = q.shape
        found, _ = self.matches(q, k, grid, mask)
        qf = q.reshape(b * h, n, d).float()
        kf = k.reshape(b * h, n, d).float()
        return qf, kf, found.long(), head_mask(mask, h)

    def _weighted_keys(self, q, k, found, grid, valid):
        """Keys [G, n, S] drawn for each query and their weights, summing to 1 over S
        (0 for a row with no valid draw)."""
        raise NotImplementedError

    def forward(self, q, k, v, mask=None, grid=None):
        qf, kf, found, valid = self._prepare(q, k, mask, grid)
        b, h, n, _ = q.shape
        keys, w = self._weighted_keys(qf, kf, found, grid, valid)
        with self.stage("estimate"):
            values = _gather_rows(v.reshape(b * h, n, -1).float(), keys)
            out = (w.unsqueeze(-1) * values).sum(2)
            return zero_masked_rows(out.view(b, h, n, -1), mask).to(v.dtype)

    def draws(self) -> int:
        """Keys drawn per query (each weighted in the estimate)."""
        raise NotImplementedError

    def sampling_cost(self, shape: Shape) -> dict[str, Cost]:
        """The work of the stages between PatchMatch and the estimate, by stage."""
        raise NotImplementedError

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """PatchMatch's stages (`scram.patchmatch_cost`), the sampler's (`sampling_cost`),
        then `estimate`: per draw, its value row gathered (dv float32) and added in with
        its weight (2 dv flops), reading the draw's key index (int64) and weight; the output
        is written in the input's dtype (for another dtype, v's float32 copy and the float32
        output written and read back besides). No backward: forward stages only."""
        if not shape.forward:
            return {}
        planes, n, dv = shape.planes, shape.n, shape.dv
        drawn = planes * n * self.draws()
        estimate = Cost(
            other_flops=drawn * 2 * dv,
            bytes=drawn * (dv * FLOAT + 8 + FLOAT) + shape.bytes(n, dv),
            working_set=n * dv * FLOAT,
        )
        if shape.itemsize != FLOAT:
            estimate = estimate + Cost(bytes=shape.bytes(n, dv) + 3 * n * dv * FLOAT * planes)
        costs = patchmatch_cost(shape, self.values) | self.sampling_cost(shape)
        return costs | {"estimate": estimate}

    def attention_map(self, q, k, mask=None, grid=None):
        """Each draw's weight scattered onto its key: SNIS's normalised importance weights,
        MH's visit frequencies."""
        qf, kf, found, valid = self._prepare(q, k, mask, grid)
        b, h, n, _ = q.shape
        keys, w = self._weighted_keys(qf, kf, found, grid, valid)
        amap = torch.zeros(b * h, n, n, device=q.device).scatter_add_(2, keys, w)
        return amap.view(b, h, n, n)

    def map_blocks(self, q, k, blocks, grid=None):
        """`attention_map` a block of rows at a time, from one set of draws."""
        grid = token_grid(grid, k.shape[-2])
        qf, kf, found, valid = self._prepare(q, k, None, grid)
        b, h, n, _ = q.shape
        keys, w = self._weighted_keys(qf, kf, found, grid, valid)
        for rows in blocks:
            block = torch.zeros(b * h, rows.stop - rows.start, n, device=q.device)
            block.scatter_add_(2, keys[:, rows], w[:, rows])
            yield rows, block.view(b, h, -1, n)

    def _generator(self, device: torch.device) -> torch.Generator:
        return torch.Generator(device=device).manual_seed(int(self.values["seed"]))

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        per_query = self.values["kappa"] * 8 + self.values["samples"] * (d + 8) * 4
        return batch * heads * n * per_query


@register
class SCRAMSNIS(_SCRAMMonteCarlo):
    """Self-normalised importance sampling with the mode-mixture proposal (eq. 17)."""

    name = "scram-snis"
    params = {
        **_COMMON,
        "samples": int_param(64, 1, MAX_SAMPLES, "keys drawn per query"),
        "alpha": Param(0.9, _unit, "proposal mass on the mode bumps (rest uniform)"),
        "phi": Param(1.5, _positive, "RBF length-scale of each mode bump, pixels"),
        "seed": int_param(0, 0, MAX_SEED_PARAM, "seed of PatchMatch and of the draws"),
    }
    complexity = "O(n (T log n + samples) d)"
    summary = "SCRAM-SNIS: importance sampling from RBF bumps at PatchMatch modes + uniform"
    stages = (*PATCHMATCH_STAGES, "proposal", "weights", "estimate")
    last_ess: float = float("nan")

    def diagnostics(self, q, k, v, grid=None) -> dict[str, float]:
        """The search's quality, and the mean effective sample size of the last call."""
        return super().diagnostics(q, k, v, grid) | _known({"ess": self.last_ess})

    def _bump_tables(self, size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Per axis position c: CDF [size, 2R+1] of the clipped 1-D bump, and its norm.

        The bump exp(-(dy^2 + dx^2) / (2 phi^2)) on a square window clipped to the grid is
        a product of two clipped 1-D bumps, so each axis is drawn and normalised alone.
        """
        phi = self.values["phi"]
        radius = math.ceil(3 * phi)
        offsets = torch.arange(-radius, radius + 1, device=device)
        pos = torch.arange(size, device=device)[:, None] + offsets
        inside = (pos >= 0) & (pos < size)
        bump = torch.exp(-(offsets.double() ** 2) / (2 * phi**2)) * inside
        norm = bump.sum(-1)
        return (bump.cumsum(-1) / norm[:, None]).float(), norm.float()

    def _sample(self, found, grid, samples, gen):
        """Draw keys from r_i and return them with r_i at each draw, [G, n, samples]."""
        height, width = grid
        g, n, kappa = found.shape
        alpha, phi = self.values["alpha"], self.values["phi"]
        dev = found.device
        radius = math.ceil(3 * phi)
        valid = found >= 0
        cdf_y, norm_y = self._bump_tables(height, dev)
        cdf_x, norm_x = self._bump_tables(width, dev)

        # Component: mode m with probability alpha/kappa, else uniform; a missing mode's
        # share goes to the uniform part, as the brief's proposal says.
        u = torch.rand(g, n, samples, generator=gen, device=dev)
        pick = (u / alpha * kappa).long().clamp(max=kappa - 1) if alpha > 0 else None
        use_mode = u < alpha
        if pick is None:
            pick = torch.zeros_like(use_mode, dtype=torch.long)
        mode = found.gather(2, pick)
        use_mode &= mode >= 0
        mode = mode.clamp(min=0)
        my, mx = mode // width, mode % width
        uy = torch.rand(g, n, samples, 1, generator=gen, device=dev)
        ux = torch.rand(g, n, samples, 1, generator=gen, device=dev)
        dy = (uy > cdf_y[my]).sum(-1).clamp(max=2 * radius) - radius
        dx = (ux > cdf_x[mx]).sum(-1).clamp(max=2 * radius) - radius
        local = (my + dy) * width + (mx + dx)
        uniform = torch.randint(0, n, (g, n, samples), generator=gen, device=dev)
        keys = torch.where(use_mode, local, uniform)

        # r_i(j) = alpha/kappa sum_m g(j; mode_m) + (1 - alpha + alpha * missing/kappa) / n
        ky, kx = (keys // width).unsqueeze(-1), (keys % width).unsqueeze(-1)
        fy, fx = (found.clamp(min=0) // width)[:, :, None], (found.clamp(min=0) % width)[:, :, None]
        oy, ox = ky - fy, kx - fx
        near = (oy.abs() <= radius) & (ox.abs() <= radius) & valid[:, :, None]
        dens = torch.exp(-(oy**2 + ox**2).float() / (2 * phi**2))
        dens = dens / (norm_y[fy] * norm_x[fx])
        missing = (~valid).sum(-1, keepdim=True).float()
        floor = (1 - alpha + alpha * missing / kappa) / n
        r = alpha / kappa * (dens * near).sum(-1) + floor
        return keys, r

    def _weighted_keys(self, q, k, found, grid, valid):
        """Sampled keys and their self-normalised weights; records the mean ESS.

        A masked key's target density is 0, so its draws get weight 0; a row whose every
        draw is masked gets all-zero weights (zero output, not NaN)."""
        samples = self.values["samples"]
        with self.stage("proposal"):
            keys, r = self._sample(found, grid, samples, self._generator(q.device))
        with self.stage("weights"):
            s = _scores_at(q, k, keys)
            w = torch.exp(s - s.amax(-1, keepdim=True)) / r
            w = w * _key_ok(valid, keys)
            total = w.sum(-1, keepdim=True)
            drawn = total.squeeze(-1) > 0
            ess = total.squeeze(-1) ** 2 / (w**2).sum(-1)
            self.last_ess = float(ess[drawn].mean()) if drawn.any() else float("nan")
            return keys, w / total.clamp(min=torch.finfo(w.dtype).tiny)

    def draws(self) -> int:
        return self.values["samples"]

    def sampling_cost(self, shape: Shape) -> dict[str, Cost]:
        """`proposal`, per draw: the inverse CDF of the clipped bump on each axis (a
        comparison and a count per table entry, 2R + 1 entries, R = ceil(3 phi)), the
        mixture density at the draw (10 per mode: offsets, squares, sum, scale, exp,
        normalisation, window test, accumulation) and 5 for the component and the uniform
        floor; it reads the modes and writes each draw's key (int64) and density.
        `weights`, per draw: its score (2d + 1) and 9 more (max, shift, exp, division by
        the density, mask, sum, the ESS's square and sum, normalisation); it reads the
        query once, each draw's key row, index and density, and writes its weight."""
        planes, n, d = shape.planes, shape.n, shape.dim
        kappa, drawn = self.values["kappa"], planes * n * self.draws()
        span = 2 * math.ceil(3 * self.values["phi"]) + 1
        proposal = Cost(
            other_flops=drawn * (4 * span + 10 * kappa + 5),
            bytes=planes * n * kappa * 8 + drawn * (8 + FLOAT),
        )
        weights = Cost(
            other_flops=drawn * (2 * d + 10),
            bytes=planes * n * d * FLOAT + drawn * (d * FLOAT + 8 + 2 * FLOAT),
            working_set=n * d * FLOAT,
        )
        return {"proposal": proposal, "weights": weights}


@register
class SCRAMMH(_SCRAMMonteCarlo):
    """Metropolis-Hastings chains started at the PatchMatch modes, no burn-in."""

    name = "scram-mh"
    params = {
        **_COMMON,
        "samples": int_param(64, 1, MAX_SAMPLES, "steps per chain (kappa chains per query)"),
        "step": int_param(2, 1, None, "proposal half-width per axis, pixels"),
        "seed": int_param(0, 0, MAX_SEED_PARAM, "seed of PatchMatch and of the chains"),
    }
    complexity = "O(n (T log n + kappa samples) d)"
    summary = "SCRAM-MH: Metropolis-Hastings chains from PatchMatch modes, mean of visits"
    stages = (*PATCHMATCH_STAGES, "chains", "estimate")
    last_acceptance: float = float("nan")

    def diagnostics(self, q, k, v, grid=None) -> dict[str, float]:
        """The search's quality, and the chains' acceptance rate in the last call."""
        return super().diagnostics(q, k, v, grid) | _known(
            {"acceptance_rate": self.last_acceptance}
        )

    def _visits(self, q, k, found, grid, valid):
        """Every visited state [G, n, kappa * samples] of all chains and whether each is a
        valid key; records the acceptance rate.

        A masked key has target density 0: proposals to it are rejected, and a chain that
        starts on one (a query with no valid mode) accepts its first valid proposal."""
        height, width = grid
        g, n, kappa = found.shape
        steps, half = self.values["samples"], self.values["step"]
        gen = self._generator(q.device)
        dev = q.device
        first = found[..., :1]
        # A missing mode starts at the first mode (or at the query itself if none).
        first = torch.where(first >= 0, first, torch.arange(n, device=dev).view(1, n, 1))
        state = torch.where(found >= 0, found, first)
        score = _scores_at(q, k, state)
        ok = _key_ok(valid, state)
        visits = torch.empty(g, n, kappa, steps, dtype=torch.long, device=dev)
        visit_ok = torch.empty(g, n, kappa, steps, dtype=torch.bool, device=dev)
        accepted = 0
        shape = (g, n, kappa)
        for t in range(steps):
            dx = torch.randint(-half, half + 1, shape, generator=gen, device=dev)
            if height > 1:  # a sequence only moves along x
                dy = torch.randint(-half, half + 1, shape, generator=gen, device=dev)
            else:
                dy = torch.zeros_like(dx)
            y, x = state // width + dy, state % width + dx
            inside = (y >= 0) & (y < height) & (x >= 0) & (x < width)
            proposal = torch.where(inside, y * width + x, state)
            new_score = _scores_at(q, k, proposal)
            log_u = torch.log(torch.rand(shape, generator=gen, device=dev))
            new_ok = _key_ok(valid, proposal)
            accept = inside & new_ok & (~ok | (log_u < new_score - score))
            state = torch.where(accept, proposal, state)
            score = torch.where(accept, new_score, score)
            ok = ok | accept
            accepted += int(accept.sum())
            visits[..., t] = state
            visit_ok[..., t] = ok
        self.last_acceptance = accepted / (g * n * kappa * steps)
        return visits.view(g, n, kappa * steps), visit_ok.view(g, n, kappa * steps)

    def _weighted_keys(self, q, k, found, grid, valid):
        """Visited keys and each visit's share of the mean (visits of masked keys get 0)."""
        with self.stage("chains"):
            visits, ok = self._visits(q, k, found, grid, valid)
            counted = ok.float()
            return visits, counted / counted.sum(-1, keepdim=True).clamp(min=1.0)

    def draws(self) -> int:
        return self.values["kappa"] * self.values["samples"]

    def sampling_cost(self, shape: Shape) -> dict[str, Cost]:
        """`chains`, per chain (kappa a query): its start's score (2d + 1), then per step a
        score (2d + 1), the log of a uniform, the log ratio, its test and the score's
        update (4), and each visit's weight (3); it reads the query once and each state's
        key row, and writes each visit (int64 key, validity, float32 weight)."""
        planes, n, d = shape.planes, shape.n, shape.dim
        kappa, steps = self.values["kappa"], self.values["samples"]
        chains = planes * n * kappa
        return {
            "chains": Cost(
                other_flops=chains * (2 * d + 1 + steps * (2 * d + 8)),
                bytes=planes * n * d * FLOAT + chains * ((steps + 1) * d * FLOAT + steps * 13),
                working_set=n * d * FLOAT,
            )
        }
