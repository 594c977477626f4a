"""Attention maps (YOSO Fig. 6, SCRAM Figs. 2-3): what each method does to the map.

Every backend draws its dense map on the same inputs: the full n x n map of a short
sequence (or image laid out row-major), or one query's map over the key image. A case is
one backend, whose row holds its map in `array`; one that fails gets a status row and the
other maps are still drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnbench.backends import Backend
from attnbench.case import Case, CaseInputs
from attnbench.errors import UsageError
from attnbench.inputs import Inputs, Source
from attnbench.results.schema import Row
from attnbench.run.study import Measure, Study, case_row

MAX_TOKENS = 4096  # dense maps are n x n


@dataclass
class MapsStudy(Study):
    """The study: each backend's dense map of the same inputs, one case per backend."""

    backends: list[Backend]
    inputs: Source | None = None  # None: image:camera; a source's own d is the maps' d
    grid: tuple[int, int] = (1, 128)
    dim: int = 4  # d of the default inputs
    query: tuple[int, int] | None = None  # (y, x): one query's map over the key image
    seed: int = 0

    def __post_init__(self):
        height, width = self.grid
        if height * width > MAX_TOKENS:
            raise UsageError(f"--grid: maps are dense, at most {MAX_TOKENS} tokens")
        if self.query is not None:
            y, x = self.query
            if not (0 <= y < height and 0 <= x < width):
                raise UsageError(f"--query {y},{x} is outside the {height}x{width} grid")
        if self.inputs is None:
            self.inputs = Inputs("image:camera", 1, 1, self.dim)
        self.dim = self.inputs.dim

    @property
    def cases(self) -> list[Case]:
        height, width = self.grid
        settings = {"query": list(self.query) if self.query else None}
        shared = dict(
            study="maps", inputs=self.inputs, n=height * width, grid=self.grid, batch=1,
            heads=1, dim=self.dim, dtype="float32", device="cpu", seed=self.seed,
            settings=settings,
        )  # fmt: skip
        return [Case(backend=backend, **shared) for backend in self.backends]

    @property
    def measure(self) -> Measure:
        return MAPS


def measure(case: Case, inputs: CaseInputs) -> list[Row]:
    """One row whose `array` is the map: [n, n] (no query) or [H, W] (the query's row of
    the map laid over the key image), float64."""
    q, k, _ = inputs()
    with torch.no_grad():
        amap = case.backend.map_of(q, k, grid=case.grid)[0, 0].double()
    if case.settings["query"] is not None:
        y, x = case.settings["query"]
        height, width = case.grid
        amap = amap[y * width + x].view(height, width)
    return [case_row(case, MAPS.metric, array=amap)]


MAPS = Measure(measure, "attention_map")
