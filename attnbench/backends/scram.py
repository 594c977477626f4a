"""SCRAM (seed 002, Alg. 1-2): PatchMatch finds each query's kappa best keys on the image
grid in O(n log n); each is expanded into its (2b+1)^2 neighbourhood (2b+1 on a sequence),
and the softmax runs over just those keys, each counted once.

`variant=max` keeps the kappa best distinct keys; `variant=mode` keeps modes at least L
apart (Chebyshev distance on the grid). The numba kernels run on the CPU or CUDA by the
tensors' device; the same seed gives the same matches on both.
"""

from __future__ import annotations

import torch

from attnbench.backends.cost import Cost, Shape
from attnbench.backends.masking import zero_masked_rows
from attnbench.backends.registry import (
    MAX_SEED_PARAM,
    Backend,
    Param,
    int_param,
    parse_float,
    parse_int,
    register,
    token_grid,
)
from attnbench.backends.rowblocks import by_rows
from attnbench.errors import UsageError
from attnbench.kernels.patchmatch import dispatch, reference
from attnbench.kernels.patchmatch.core import MAX_KAPPA
from attnbench.kernels.target import device_target
from attnbench.measure.metrics import argmax_hit_rate, recall_at_k

MAX_ITERATIONS = 1024  # PatchMatch settles within a few; more is a typo, not a study
FLOAT, INDEX = 4, 4  # bytes of the kernels' float32 scores and vectors, int32 indices
# PatchMatch's stages: the CPU's passes, or CUDA's one launch (`patchmatch_cost`)
PATCHMATCH_STAGES = (*dispatch.CPU_STAGES, *dispatch.CUDA_STAGES)


def candidate_mask(matches: torch.Tensor, H: int, W: int, b: int) -> torch.Tensor:
    """bool [B, r, n]: the keys (n = H*W) in the (2b+1)^2 windows (clipped) around the
    matches [B, r, kappa] (-1 = none) of r queries, as `reference.window_candidates` gives
    them, but scattered from the r * kappa * (2b+1)^2 window pixels instead of testing every
    key against every match: the oracle's [B, n, kappa, n] temporaries take 8 GiB at 128x128."""
    B, r, _ = matches.shape
    n = H * W
    m = matches.long()
    offsets = torch.arange(-b, b + 1, device=m.device)
    y = (m // W)[..., None, None] + offsets[:, None]  # [B, n, kappa, 2b+1, 1]
    x = (m % W)[..., None, None] + offsets  # [B, n, kappa, 1, 2b+1]
    inside = (m >= 0)[..., None, None] & (y >= 0) & (y < H) & (x >= 0) & (x < W)
    # Pixels outside the grid (or of a missing match) go to a spare column n, dropped after.
    keys = torch.where(inside, y * W + x, n).reshape(B, r, -1)
    mask = torch.zeros(B, r, n + 1, dtype=torch.bool, device=m.device)
    mask.scatter_(-1, keys, True)
    return mask[..., :n]


def search_levels(height: int, width: int) -> int:
    """Radii the random search tries around a match: max(H, W) halved down to 1."""
    return max(height, width).bit_length()


def neighbours_inside(height: int, width: int, jump: int) -> int:
    """(query, neighbour) pairs of one propagation pass: the 4 neighbours at distance
    `jump` that lie inside the grid, summed over the queries."""
    return 2 * height * max(width - jump, 0) + 2 * width * max(height - jump, 0)


def mean_window(height: int, width: int, b: int) -> float:
    """Keys of a (2b+1)^2 window clipped to the grid, averaged over its centre's position."""

    def mean_span(size: int) -> float:
        # 2b + 1 less what each end cuts: centre c loses max(b - c, 0) below, as many above
        cut = min(b, size)
        return (size * (2 * b + 1) - 2 * (cut * b - cut * (cut - 1) // 2)) / size

    return mean_span(height) * mean_span(width)


def patchmatch_cost(shape: Shape, values: dict) -> dict[str, Cost]:
    """The work of PatchMatch with these parameters (kappa, variant, T, jumps) on `shape`,
    by the stages that `dispatch.patchmatch` marks on its device.

    Each candidate key tried costs a score (2d + 1 flops, d float32 key elements read) and
    a scan of the list (kappa comparisons; 2 kappa in the mode variant, whose suppression
    scans again). Per query: kappa candidates in `init`; in each `propagation` pass of jump
    j, 2 kappa per neighbour inside the grid (`neighbours_inside`: a neighbour's list
    entries and their coherent shifts); in each `random_search`, kappa `search_levels`.
    Counts are of full lists and every neighbour: the pruning of neighbours whose lists
    have not changed, the shifts that leave the grid and the mode variant's shorter lists
    all depend on the data. Each pass reads the queries and its lists once and writes its
    lists (propagation: into the second buffer, and `changed` [2, B n] besides); an odd
    number of propagation passes ends with a copy of the lists back. The working set is a
    plane's keys and both list buffers. On CUDA the whole search is one stage,
    `patchmatch`, the sum of these."""
    planes, n, d = shape.planes, shape.n, shape.dim
    height, width = token_grid(shape.grid, n)
    kappa, T, jumps = values["kappa"], values["T"], values["jumps"]
    per_key = 2 * d + 1 + kappa * (2 if values["variant"] == "mode" else 1)
    lists = n * kappa * (FLOAT + INDEX)  # one field of a plane's lists

    def tried(candidates: float, traffic: float) -> Cost:
        """`candidates` keys tried in a plane, and the pass's other traffic per plane."""
        return planes * Cost(
            other_flops=candidates * per_key,
            bytes=n * d * FLOAT + candidates * d * FLOAT + traffic,
            working_set=n * d * FLOAT + 2 * lists,
        )

    init = tried(n * kappa, lists + 2 * n * INDEX)
    if shape.itemsize != FLOAT:  # q and k copied to float32 for the kernels
        init = init + Cost(bytes=2 * shape.bytes(n, d) + 2 * shape.bytes(n, d, itemsize=FLOAT))
    propagation = Cost()
    for jump in jumps:
        pairs = neighbours_inside(height, width, jump)
        propagation = propagation + T * tried(2 * kappa * pairs, 2 * lists + 2 * n * INDEX)
    if T * len(jumps) % 2:
        propagation = propagation + Cost(bytes=planes * 2.0 * lists)
    search = T * tried(n * kappa * search_levels(height, width), 2 * lists + n * INDEX)
    if dispatch.patchmatch_stages(shape.device) == dispatch.CUDA_STAGES:
        return {"patchmatch": init + propagation + search}
    return {"init": init, "propagation": propagation, "random_search": search}


def _variant(text: str) -> str:
    if text not in ("max", "mode"):
        raise ValueError("one of max, mode")
    return text


def _jumps(text: str) -> tuple[int, ...]:
    jumps = tuple(parse_int(j) for j in str(text).replace(";", " ").replace("/", " ").split())
    if not jumps or any(j < 1 for j in jumps):
        raise ValueError("positive steps separated by '/', e.g. 8/4/2/1")
    return jumps


def _unit(text: str) -> float:
    value = parse_float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be in [0, 1]")
    return value


def _positive(text: str) -> float:
    value = parse_float(text)
    if not value > 0.0:
        raise ValueError("must be > 0")
    return value


def head_mask(mask: torch.Tensor | None, heads: int) -> torch.Tensor | None:
    """A [B, n] token mask repeated for every head: [B*heads, n], as the kernels see rows."""
    if mask is None:
        return None
    return mask.repeat_interleave(heads, dim=0)


@register
class SCRAM(Backend):
    name = "scram"
    params = {
        "kappa": int_param(4, 1, MAX_KAPPA, "PatchMatch matches (modes) per query"),
        "variant": Param("max", _variant, "max: best distinct keys; mode: L apart"),
        "L": int_param(1, 1, None, "least Chebyshev distance between modes"),
        "b": int_param(1, 0, None, "neighbourhood half-width around each match"),
        "T": int_param(8, 1, MAX_ITERATIONS, "PatchMatch iterations"),
        "jumps": Param((8, 4, 2, 1), _jumps, "propagation steps, e.g. 8/4/2/1"),
        "seed": int_param(0, 0, MAX_SEED_PARAM, "seed of the random init and search"),
    }
    shorthand = None
    complexity = "O(n (T log n + kappa (2b+1)^2) d)"
    backward = False
    stochastic = True
    spatial = True
    map_in_blocks = True
    summary = "SCRAM: PatchMatch top-kappa keys + (2b+1)^2 windows, sparse softmax"
    stages = (*PATCHMATCH_STAGES, "window_softmax")

    def impl(self, device: str) -> str:
        return "numba-" + device_target(device)

    def stages_in(self, mode: str, device: str = "cpu") -> tuple[str, ...]:
        """PatchMatch's stages on `device` (a range per pass on the CPU, one launch on
        CUDA), then the backend's own."""
        stages = super().stages_in(mode, device)
        passes = dispatch.patchmatch_stages(device)
        return tuple(s for s in stages if s not in PATCHMATCH_STAGES or s in passes)

    @property
    def spec(self) -> str:
        values = {**self.values, "jumps": "/".join(map(str, self.values["jumps"]))}
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in values.items())

    def _check(self, grid: tuple[int, int]) -> None:
        height, width = grid
        side = 2 * self.values["b"] + 1
        if side > width or (height > 1 and side > height):
            raise UsageError(
                f"scram: a {side}x{side} window (b={self.values['b']}) does not fit "
                f"the {height}x{width} grid"
            )
        if self.values["kappa"] > height * width:
            kappa = self.values["kappa"]
            raise UsageError(f"scram: kappa={kappa} exceeds the {height * width} keys")
        self.check_grid_distances(grid)

    def check_grid_distances(self, grid: tuple[int, int]) -> None:
        """Distances in pixels (L, and scram-mh's step) at most the grid's longer side,
        or their default: no two pixels of the grid are further apart."""
        for key in ("L", "step"):
            if key in self.values:
                limit = max(*grid, self.params[key].default)
                where = f"max(longer side, its default) of the {grid[0]}x{grid[1]} grid"
                self.check_at_most(key, limit, where)

    def validate(self, case) -> None:
        self._check(token_grid(case.grid, case.n))

    def diagnostics(self, q, k, v, grid=None) -> dict[str, float]:
        """PatchMatch against brute force on these inputs: the share of queries whose best
        match is the true argmax, and recall@kappa of the true top-kappa keys (for the mode
        variant, greedy suppression with separation L), a block of rows at a time."""
        b, h, n, d = q.shape
        height, width = token_grid(grid, n)
        found, scores = self.matches(q, k, (height, width))
        qf, kf = q.reshape(b * h, n, d), k.reshape(b * h, n, d)
        kappa = found.shape[-1]
        if self.values["variant"] == "mode":
            L = self.values["L"]

            def truth_rows(q, k):
                return reference.topk_mode(q, k, height, width, kappa, L)[0]
        else:

            def truth_rows(q, k):
                return reference.topk_max(q, k, kappa)[0]

        truth = by_rows(truth_rows, qf, kf)
        best = by_rows(lambda q, k: reference.scores(q, k).amax(-1, keepdim=True), qf, kf)
        return {
            "argmax_hit_rate": argmax_hit_rate(scores[..., 0], best[..., 0]),
            "recall_at_kappa": recall_at_k(found.long(), truth),
        }

    def matches(self, q, k, grid, mask=None):
        """PatchMatch's matches [B*H, n, kappa] and scores on the flattened heads; masked-out
        keys are never matched."""
        b, h, n, d = q.shape
        v = self.values
        stage = self.stage if self.marking() else None  # unmarked: all passes in one call
        return dispatch.patchmatch(
            q.reshape(b * h, n, d), k.reshape(b * h, n, d), grid[0], grid[1], v["kappa"],
            v["variant"], v["L"], v["T"], v["jumps"], v["seed"], head_mask(mask, h), stage,
        )  # fmt: skip

    def forward(self, q, k, v, mask=None, grid=None):
        self._check(grid)
        b, h, n, d = q.shape
        found, _ = self.matches(q, k, grid, mask)
        with self.stage("window_softmax"):
            out, _ = dispatch.window_softmax(
                q.reshape(b * h, n, d), k.reshape(b * h, n, d), v.reshape(b * h, n, -1), found,
                grid[0], grid[1], self.values["b"], head_mask(mask, h),
            )  # fmt: skip
            return zero_masked_rows(out.view(b, h, n, -1), mask).to(v.dtype)

    def cost(self, shape: Shape) -> dict[str, Cost]:
        """PatchMatch's stages (`patchmatch_cost`), then `window_softmax`: per query, kappa
        windows of `mean_window` keys each (the (2b+1)^2 window clipped to the grid, averaged
        over the centre's position), each key scored (2d + 1), its max, shifted exp and sum
        taken (4) and its value added in (2 dv), then dv divisions; it reads the query, the
        matches and each key's k and v rows (float32) and writes the output and the key
        count. Keys shared by two windows are scored once by the kernel, so on matches
        closer than 2b + 1 the count is an upper bound. Inputs of another dtype add their
        float32 copies. No backward: forward stages only."""
        if not shape.forward:
            return {}
        planes, n, d, dv = shape.planes, shape.n, shape.dim, shape.dv
        height, width = token_grid(shape.grid, n)
        kappa = self.values["kappa"]
        keys = n * kappa * mean_window(height, width, self.values["b"])
        window = planes * Cost(
            other_flops=keys * (2 * d + 2 * dv + 5) + n * dv,
            bytes=(n * d + keys * (d + dv) + n * dv) * FLOAT + n * (kappa + 1) * INDEX,
            working_set=n * (d + dv) * FLOAT,
        )
        if shape.itemsize != FLOAT:  # q, k, v copied to float32, the output back
            copies = shape.bytes(n, 2 * d + 2 * dv)
            window = window + Cost(bytes=copies + copies / shape.itemsize * FLOAT)
        return patchmatch_cost(shape, self.values) | {"window_softmax": window}

    def attention_map(self, q, k, mask=None, grid=None):
        """Softmax over each query's candidate keys, zero elsewhere (dense, small n only)."""
        self._check(grid)
        found, _ = self.matches(q, k, grid, mask)
        return self._window_weights(q, k, found, grid, mask)

    def map_blocks(self, q, k, blocks, grid=None):
        """`attention_map` a block of rows at a time: one PatchMatch, then each block's
        windows (a query's windows depend on its own matches only)."""
        grid = token_grid(grid, k.shape[-2])
        self._check(grid)
        found, _ = self.matches(q, k, grid)
        for rows in blocks:
            yield rows, self._window_weights(q[..., rows, :], k, found[:, rows], grid)

    def _window_weights(self, q, k, found, grid, mask=None):
        """Softmax of queries q [B, H, r, d] over the windows around their matches
        found [B*H, r, kappa] (without masked keys), zero elsewhere: [B, H, r, n]."""
        b, h, r, d = q.shape
        n = k.shape[-2]
        candidates = candidate_mask(found, grid[0], grid[1], self.values["b"])
        if mask is not None:
            candidates = candidates & head_mask(mask, h)[:, None, :]
        scores = reference.scores(q.reshape(b * h, r, d), k.reshape(b * h, n, d))
        weights = torch.softmax(scores.masked_fill(~candidates, float("-inf")), dim=-1)
        return weights.nan_to_num(0.0).view(b, h, r, n)

    def predicted_bytes(self, batch, heads, n, d, itemsize):
        return batch * heads * n * (4 * self.values["kappa"] * 4 + 2 * d * 4)
